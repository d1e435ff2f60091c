//! The words outcomes carry about a lease: its handle's state, why it was lost, and how many
//! replicas hold its acquisition. [`LeaseState`] is the public face of the handle's state
//! machine (`HandleState`, `lease/state.rs`), which produces the outcomes and so names this
//! module, never the other way around.

use std::fmt;

use crate::backend::FailureDetail;

/// How many replicas hold an acquisition, as far as this process knows
/// ([`LeaseHandle::replication`](crate::LeaseHandle::replication); asked for with
/// [`LeaseRequestBuilder::wait_for_replicas`](crate::protocol::LeaseRequestBuilder::wait_for_replicas)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replication {
    /// The request asked for no replica acknowledgement.
    NotRequested,
    /// `WAIT` answered: `acked` replicas acknowledged the acquisition. Fewer than `wanted`
    /// means the wait ran out first; the lease is held all the same, but a failover to a
    /// replica that lacks it loses it.
    Acknowledged {
        /// Replicas that acknowledged it.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
    /// A replay: it wrote nothing, so there was nothing to wait for, and whether the
    /// original acquisition reached replicas is not known.
    NotWaited,
    /// The wait did not answer (timeout, connection lost): not known.
    Unknown {
        /// What failed.
        detail: FailureDetail,
    },
}

impl Replication {
    /// snake_case name for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotRequested => "not_requested",
            Self::Acknowledged { .. } => "acknowledged",
            Self::NotWaited => "not_waited",
            Self::Unknown { .. } => "unknown",
        }
    }
}

/// Why a handle is LOST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// Local validity reached zero before a renewal was confirmed.
    ValidityExpired,
    /// Redis had no lease key (it expired or was deleted).
    Absent,
    /// Someone else holds the lease now.
    NotOwner,
}

impl LostReason {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ValidityExpired => "validity_expired",
            Self::Absent => "absent",
            Self::NotOwner => "not_owner",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a [`LeaseHandle`](crate::LeaseHandle) (docs/design.md §7). Only `Active` can renew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// Held, with local validity left.
    Active,
    /// Gone, or no longer vouched for by this process's clock. Terminal for renewal and
    /// for the reason; a release that still finds the key this attempt's (local validity
    /// ends a drift budget before the server's TTL) deletes it and makes it `Released`.
    Lost(LostReason),
    /// A renewal or release may or may not have landed. Terminal for renewal; release is
    /// still allowed.
    Unknown,
    /// Released by this handle. Terminal.
    Released,
}

impl crate::telemetry::Label for LeaseState {
    fn label(&self) -> &'static str {
        self.as_str()
    }
}

impl LeaseState {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Lost(_) => "lost",
            Self::Unknown => "unknown",
            Self::Released => "released",
        }
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost(reason) => write!(f, "lost ({reason})"),
            other => f.write_str(other.as_str()),
        }
    }
}
