//! The outcome of every lease operation (docs/design.md §5). Certainty is part of the type: only
//! `Unavailable` (and `QueueFull`, a local refusal) promise that nothing happened; anything
//! that may have reached Redis is `Indeterminate`.
//!
//! Outcome enums are exhaustive on purpose: a new certainty level must break callers'
//! matches. Reasons are `#[non_exhaustive]`.

use std::fmt;
use std::time::Duration;

use crate::backend::{FailureDetail, SendFailure};
use crate::protocol::{FencingToken, HolderLabel, ReleaseReply};

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

/// What `renew` achieved.
#[must_use = "a renewal can lose the lease; inspect the outcome"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// *When*: `RENEWED`, and the reply arrived while local validity was left.
    /// *What to do*: carry on; validity now runs a full TTL − drift from this renewal's send.
    Renewed {
        /// Validity left when the reply was read.
        remaining: Duration,
    },
    /// *When*: the lease is gone (`ABSENT`, `NOT_OWNER`) or local validity ran out; the
    /// handle is LOST. *What to do*: stop the work now; do not write.
    Lost {
        /// Why.
        reason: LostReason,
    },
    /// *When*: every attempt within the renew deadline may have reached Redis without a
    /// readable reply; the handle is UNKNOWN. *What to do*: stop the work; the lease may
    /// still be held (release it, or let it expire).
    Indeterminate {
        /// The last failure.
        detail: FailureDetail,
    },
    /// *When*: no attempt reached Redis; the handle stays ACTIVE with its old budget.
    /// *What to do*: try again before the budget runs out.
    Unavailable {
        /// The last failure.
        detail: FailureDetail,
        /// Validity still left on the old budget.
        remaining: Duration,
    },
    /// *When*: the handle is not ACTIVE; nothing was sent. *What to do*: nothing — a lease
    /// in a terminal state can never be renewed; acquire a new one.
    Refused {
        /// The handle's state.
        state: LeaseState,
    },
}

impl RenewOutcome {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Renewed { .. } => "renewed",
            Self::Lost { .. } => "lost",
            Self::Indeterminate { .. } => "indeterminate",
            Self::Unavailable { .. } => "unavailable",
            Self::Refused { .. } => "refused",
        }
    }
}

/// What `release` achieved.
#[must_use = "a release can fail; inspect the outcome"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// *When*: `RELEASED` — the key was ours and is deleted; waiters were notified. Also
    /// returned, without a call, by a handle already RELEASED. *What to do*: nothing.
    Released,
    /// *When*: `ABSENT` — the key had already expired or been deleted. *What to do*:
    /// nothing to release; but the lease ended before the release — if work ran until now,
    /// part of it ran unprotected (its writes are still fenced by the token).
    AlreadyAbsent,
    /// *When*: `NOT_OWNER` — someone else holds it now; it was not touched. *What to do*:
    /// as for `AlreadyAbsent`: the lease had ended, and another holder took over.
    NotOwner,
    /// *When*: the release may have reached Redis without a readable reply.
    /// *What to do*: call `release` again (it is owner-checked) or let the TTL expire it.
    Indeterminate {
        /// What failed.
        detail: FailureDetail,
    },
    /// *When*: the release provably did not run; the lease is still held.
    /// *What to do*: retry, or let the TTL expire it.
    Unavailable {
        /// What failed.
        detail: FailureDetail,
    },
}

impl ReleaseOutcome {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::AlreadyAbsent => "already_absent",
            Self::NotOwner => "not_owner",
            Self::Indeterminate { .. } => "indeterminate",
            Self::Unavailable { .. } => "unavailable",
        }
    }
}

/// The one mapping from a release script result to its outcome.
pub(crate) fn release_outcome(result: Result<ReleaseReply, SendFailure>) -> ReleaseOutcome {
    match result {
        Ok(ReleaseReply::Released) => ReleaseOutcome::Released,
        Ok(ReleaseReply::Absent) => ReleaseOutcome::AlreadyAbsent,
        Ok(ReleaseReply::NotOwner) => ReleaseOutcome::NotOwner,
        Err(SendFailure::MaybeSent(detail)) => ReleaseOutcome::Indeterminate { detail },
        Err(SendFailure::NotSent(detail)) => ReleaseOutcome::Unavailable { detail },
    }
}

/// What `inspect` found (read only).
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectOutcome {
    /// *When*: `HELD_BY_ATTEMPT` — the key holds exactly this attempt's ownership (a
    /// replay of it would succeed). *What to do*: the acquisition landed; acquire again
    /// with the same attempt to get its handle (a replay: same token, remaining TTL).
    HeldByAttempt {
        /// Server's remaining PTTL.
        remaining: Duration,
        /// The attempt's fencing token.
        token: FencingToken,
        /// The label its acquisition stored ([`LeaseRequestBuilder::holder`]), if any.
        ///
        /// [`LeaseRequestBuilder::holder`]: crate::protocol::LeaseRequestBuilder::holder
        holder: Option<HolderLabel>,
    },
    /// *When*: `HELD_BY_OTHER` — someone else holds it. *What to do*: wait at least
    /// `remaining` before expecting it free (a renewal extends it); `token` is what the
    /// holder's writes carry.
    HeldByOther {
        /// Server's remaining PTTL.
        remaining: Duration,
        /// The holder's fencing token (public: it is what effect targets compare).
        token: FencingToken,
        /// Who holds it, as its acquisition labelled itself
        /// ([`LeaseRequestBuilder::holder`]), if it did.
        ///
        /// [`LeaseRequestBuilder::holder`]: crate::protocol::LeaseRequestBuilder::holder
        holder: Option<HolderLabel>,
    },
    /// *When*: `DELAYED` — nobody holds it: the last lease ended without a release and its
    /// lock-delay refuses acquisitions for `remaining` more. *What to do*: expect an
    /// acquisition to succeed only after `remaining`; the last holder (`token`, `holder`)
    /// may still be finishing its work.
    LockDelayed {
        /// The lock-delay's remaining time.
        remaining: Duration,
        /// The ended lease's fencing token.
        token: FencingToken,
        /// The ended lease's label, if its acquisition gave one.
        holder: Option<HolderLabel>,
    },
    /// *When*: `ABSENT` — nobody holds it. *What to do*: nothing held it at the read; an
    /// acquisition may still lose to a faster one.
    Absent,
    /// *When*: the read provably did not run (no connection, refused). *What to do*: try
    /// again later; nothing is known.
    Unavailable {
        /// What failed.
        detail: FailureDetail,
    },
    /// *When*: the read may have run but its reply was lost. *What to do*: try again;
    /// nothing is known (a read changes nothing).
    Indeterminate {
        /// What failed.
        detail: FailureDetail,
    },
    /// *When*: refused locally, at once: the backend already had as many operations
    /// waiting to be sent as it admits
    /// ([`RedisConfig::queue_limit`](crate::RedisConfig::queue_limit)); nothing was sent.
    /// *What to do*: read fewer at once, or try again once some have been answered.
    QueueFull {
        /// The refusal (kind [`FailureKind::QueueFull`](crate::FailureKind::QueueFull)).
        detail: FailureDetail,
    },
}

/// What a read of a held lease says: remaining time, token, holder label.
pub(crate) type Held = (Duration, FencingToken, Option<HolderLabel>);

impl InspectOutcome {
    /// The holding, whoever holds it; `None` when absent; the detail when nothing is
    /// known — what every reader of another's lease (observe, list) wants.
    pub(crate) fn into_held(self) -> Result<Option<Held>, FailureDetail> {
        match self {
            Self::HeldByAttempt {
                remaining,
                token,
                holder,
            }
            | Self::HeldByOther {
                remaining,
                token,
                holder,
            } => Ok(Some((remaining, token, holder))),
            // Held by nobody: what an observer or a listing reports of it.
            Self::LockDelayed { .. } | Self::Absent => Ok(None),
            Self::Unavailable { detail }
            | Self::Indeterminate { detail }
            | Self::QueueFull { detail } => Err(detail),
        }
    }

    /// A counted lease's reading from its slots' (in slot order), as
    /// [`LeaseClient::inspect`](crate::LeaseClient::inspect) documents it: the attempt's
    /// slot; else a failed read; else `Absent` (a slot is free); else the slot that frees
    /// first. A plain lease's one outcome is itself.
    pub(crate) fn of_slots(slots: Vec<InspectOutcome>) -> InspectOutcome {
        let rank = |slot: &InspectOutcome| match slot {
            Self::HeldByAttempt { .. } => (0, Duration::ZERO),
            Self::Indeterminate { .. } => (1, Duration::ZERO),
            // Nothing was read: neither says anything of the slot.
            Self::Unavailable { .. } | Self::QueueFull { .. } => (2, Duration::ZERO),
            Self::Absent => (3, Duration::ZERO),
            Self::HeldByOther { remaining, .. } | Self::LockDelayed { remaining, .. } => {
                (4, *remaining)
            }
        };
        // The first of equals: a slot's order breaks ties, as the acquire script's does.
        let mut best: Option<InspectOutcome> = None;
        for slot in slots {
            if best.as_ref().is_none_or(|b| rank(&slot) < rank(b)) {
                best = Some(slot);
            }
        }
        best.unwrap_or(Self::Absent)
    }

    /// Whether someone (this attempt or another) held the lease at the read.
    pub fn is_held(&self) -> bool {
        matches!(self, Self::HeldByAttempt { .. } | Self::HeldByOther { .. })
    }

    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::HeldByAttempt { .. } => "held_by_attempt",
            Self::HeldByOther { .. } => "held_by_other",
            Self::LockDelayed { .. } => "lock_delayed",
            Self::Absent => "absent",
            Self::Unavailable { .. } => "unavailable",
            Self::Indeterminate { .. } => "indeterminate",
            Self::QueueFull { .. } => "queue_full",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FailureKind;

    #[test]
    fn a_counted_lease_reads_as_its_acquisition_would_see_it() {
        let ms = Duration::from_millis;
        let token = FencingToken::new;
        let other = |left, t| InspectOutcome::HeldByOther {
            remaining: ms(left),
            token: token(t),
            holder: None,
        };
        let delayed = |left, t| InspectOutcome::LockDelayed {
            remaining: ms(left),
            token: token(t),
            holder: None,
        };
        let mine = InspectOutcome::HeldByAttempt {
            remaining: ms(900),
            token: token(7),
            holder: None,
        };
        let lost = InspectOutcome::Indeterminate {
            detail: FailureDetail::new(FailureKind::Timeout, "t"),
        };
        let cases = [
            (vec![other(5, 1), lost.clone(), mine.clone()], mine),
            (
                vec![other(5, 1), InspectOutcome::Absent, lost.clone()],
                lost,
            ),
            (
                vec![other(5, 1), InspectOutcome::Absent],
                InspectOutcome::Absent,
            ),
            (
                vec![other(50, 1), delayed(5, 2), other(5, 3)],
                delayed(5, 2),
            ),
            (vec![other(50, 1), other(20, 2)], other(20, 2)),
            (vec![other(50, 1)], other(50, 1)),
        ];
        for (slots, read) in cases {
            assert_eq!(InspectOutcome::of_slots(slots.clone()), read, "{slots:?}");
        }
    }
}
