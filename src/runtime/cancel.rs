//! `LeaseCancelled`, why it was sent, and what happens if the worker ignores it.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::LostReason;
use crate::protocol::FencingToken;

/// Sent to the worker, exactly once per lease, the moment the lease can no longer be
/// vouched for.
///
/// A worker receives it through its own message type: the runtime requires
/// `W::Msg: From<LeaseCancelled>`, so a worker adds one variant:
///
/// ```
/// use leasehold::runtime::LeaseCancelled;
/// enum JobMsg {
///     Step,
///     Cancelled(LeaseCancelled),
/// }
/// impl From<LeaseCancelled> for JobMsg {
///     fn from(c: LeaseCancelled) -> Self {
///         JobMsg::Cancelled(c)
///     }
/// }
/// ```
///
/// A message waits behind a handler that is still running; code in the middle of a long
/// handler watches the context's cancellation token instead
/// ([`LeaseContext::cancelled`](crate::runtime::LeaseContext::cancelled)), which is cancelled
/// at the same moment.
///
/// Non-exhaustive: later versions may say more about the cancellation; match it with `..`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseCancelled {
    /// Why.
    pub reason: CancelReason,
    /// The fencing token of the lease that ended; writes with it should be refused from now.
    pub token: FencingToken,
    /// How long until the worker is stopped under [`CancelPolicy::Kill`]: the local validity
    /// left when the message was sent. Zero means "now".
    pub remaining_validity: Duration,
    /// The instant local validity ends, by which the work must have stopped (under
    /// [`CancelPolicy::Kill`] it is stopped then). Unlike `remaining_validity` it does not
    /// age while the message waits in a mailbox: compare it with `Instant::now()`.
    pub stop_by: Instant,
}

/// Why a lease was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelReason {
    /// The lease is gone (expired, deleted, taken) or local validity ran out.
    Lost(LostReason),
    /// Renewals may or may not have landed; the lease cannot be vouched for.
    Unknown,
    /// No renewal was confirmed, and the next one could not arrive before validity ends
    /// minus the safety margin.
    RenewalUnconfirmed,
    /// The owner of the lease asked for it to end (shutdown or explicit release).
    Shutdown,
}

impl crate::telemetry::Label for CancelReason {
    fn label(&self) -> &'static str {
        self.as_str()
    }
}

impl CancelReason {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lost(_) => "lost",
            Self::Unknown => "unknown",
            Self::RenewalUnconfirmed => "renewal_unconfirmed",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Words for people (`as_str` is the one for machines): "lost (absent)", "unknown",
/// "unconfirmed (no renewal confirmed in time)", "shut down".
impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost(reason) => write!(f, "lost ({reason})"),
            Self::Unknown => f.write_str("unknown"),
            Self::RenewalUnconfirmed => f.write_str("unconfirmed (no renewal confirmed in time)"),
            Self::Shutdown => f.write_str("shut down"),
        }
    }
}

/// What the runtime does when local validity ends and the worker is still running.
///
/// Non-exhaustive: a later version may add a policy; a `match` needs a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CancelPolicy {
    /// Stop the worker (`ActorRef::kill`; a `run_under_lease` future is dropped). Default:
    /// work must never continue past the lease unnoticed.
    #[default]
    Kill,
    /// Only send [`LeaseCancelled`] and cancel the token; the worker decides. Use when the
    /// effect target checks fencing tokens, so a stale write is refused anyway.
    NotifyOnly,
}
