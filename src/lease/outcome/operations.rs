//! What renew, release and inspect achieved, in the certainty each has; each is made from a
//! reply only in the parent module (an acquisition's outcome is beside the acquisition,
//! `lease/acquire/outcome.rs`).

use std::time::Duration;

use crate::backend::FailureDetail;
use crate::lease::outcome::{LeaseState, LostReason};
use crate::protocol::{FencingToken, HolderLabel};

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

impl crate::telemetry::Label for RenewOutcome {
    fn label(&self) -> &'static str {
        self.as_str()
    }
}

impl RenewOutcome {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            // Telemetry keeps keys for this one outcome by its name.
            Self::Renewed { .. } => crate::telemetry::RENEWED,
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

impl crate::telemetry::Label for ReleaseOutcome {
    fn label(&self) -> &'static str {
        self.as_str()
    }
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

    /// Whether the lease may still be held after this release: it did not run, or its end
    /// is unknown (the TTL ends it).
    pub(crate) fn may_leave_it_held(&self) -> bool {
        matches!(self, Self::Indeterminate { .. } | Self::Unavailable { .. })
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

impl crate::telemetry::Label for InspectOutcome {
    fn label(&self) -> &'static str {
        self.as_str()
    }
}

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
