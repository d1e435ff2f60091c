//! What an acquisition achieved ([`AcquireOutcome`]) and the one mapping from the acquire
//! script's result to it, beside the acquisition: an outcome that holds a lease holds its
//! handle, so it lives above the handle, never below it (docs/design.md §5).

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{FailureDetail, FailureKind, SendFailure};
use crate::lease::handle::LeaseHandle;
use crate::lease::outcome::Certainty;
use crate::lease::validity::ValidityBudget;
use crate::protocol::{AcquireReply, Attempt, FencingToken};

/// What `try_acquire` or `acquire` achieved.
#[must_use = "an acquisition may hold a lease until its TTL; inspect the outcome"]
#[derive(Debug)]
pub enum AcquireOutcome {
    /// *When*: the lease was absent and the script stored this attempt (`ACQUIRED`).
    /// *What to do*: run the work; renew before [`LeaseHandle::remaining_validity`] runs out;
    /// pass [`LeaseHandle::token`] to every write the lease protects.
    Acquired(LeaseHandle),
    /// *When*: this very attempt already held the lease (`REPLAYED`), e.g. a retry after an
    /// indeterminate reply. The handle's validity comes from the server's remaining PTTL and
    /// the token is the original one.
    /// *What to do*: as for `Acquired`.
    Replayed(LeaseHandle),
    /// *When*: someone else holds it (`CONTENDED`), and the wait timeout (if any) ran out.
    /// *What to do*: try later; `retry_after` is the holder's remaining PTTL (or the
    /// configured fallback when the server reported none).
    Contended {
        /// When the current holder's lease would expire if not renewed.
        retry_after: Duration,
    },
    /// *When*: the last holder's lease ended without a release (it expired: a crash, a
    /// partition, a pause) and its lock-delay
    /// ([`LeaseRequestBuilder::lock_delay`](crate::protocol::LeaseRequestBuilder::lock_delay))
    /// refuses every acquisition until it runs out (`DELAYED`); for a counted lease, every
    /// slot is taken and the earliest to free is in its lock-delay.
    /// *What to do*: as for `Contended` — `acquire` waits it out within its wait timeout.
    /// Nobody holds the lease, but the last holder's work may still be running.
    LockDelayed {
        /// When the lock-delay ends (or the configured fallback when the server reported
        /// no time).
        retry_after: Duration,
    },
    /// *When*: the same owner token holds it under another operation id (`CONFLICT`).
    /// *What to do*: this is a caller bug — one owner token per operation; use a new attempt.
    OwnerOperationConflict {
        /// The other operation's remaining time.
        retry_after: Duration,
    },
    /// *When*: the command provably did not run (no connection, refused, `LOADING`, `BUSY`,
    /// `OOM`…). *What to do*: retry later with the same or a new attempt; nothing is held.
    Unavailable {
        /// What failed.
        detail: FailureDetail,
    },
    /// *When*: refused locally, at once: the backend already had as many operations waiting
    /// to be sent as it admits
    /// ([`RedisConfig::queue_limit`](crate::RedisConfig::queue_limit)) — this process's own
    /// burst, not the server's failure. Nothing was sent; nothing is held.
    /// *What to do*: send fewer at once, or retry once some have been answered.
    QueueFull {
        /// The refusal (kind [`FailureKind::QueueFull`](crate::FailureKind::QueueFull)).
        detail: FailureDetail,
    },
    /// *When*: the command may have reached Redis (timeout or connection lost after the
    /// write, unreadable reply). *What to do*: retry with the same `attempt` (a replay
    /// returns the same token) or `inspect` it; never assume the lease is not yours — it may
    /// be held until its TTL.
    Indeterminate {
        /// The attempt to retry or inspect.
        attempt: Attempt,
        /// What failed.
        detail: FailureDetail,
    },
}

impl crate::telemetry::Label for AcquireOutcome {
    fn label(&self) -> &'static str {
        self.as_str()
    }
}

impl AcquireOutcome {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Acquired(_) => "acquired",
            Self::Replayed(_) => "replayed",
            Self::Contended { .. } => "contended",
            Self::LockDelayed { .. } => "lock_delayed",
            Self::OwnerOperationConflict { .. } => "owner_operation_conflict",
            Self::Unavailable { .. } => "unavailable",
            Self::QueueFull { .. } => "queue_full",
            Self::Indeterminate { .. } => "indeterminate",
        }
    }

    /// The token issued, for `Acquired` and `Replayed`.
    pub(crate) fn token(&self) -> Option<FencingToken> {
        match self {
            Self::Acquired(h) | Self::Replayed(h) => Some(h.token()),
            _ => None,
        }
    }

    /// The handle, for `Acquired` and `Replayed`.
    pub fn into_handle(self) -> Option<LeaseHandle> {
        match self {
            Self::Acquired(h) | Self::Replayed(h) => Some(h),
            _ => None,
        }
    }
}

/// What an acquire reply is read against: the acquisition it answers.
pub(crate) struct AcquireSent<'a> {
    /// The attempt sent: what an `Indeterminate` retries.
    pub(crate) attempt: &'a Attempt,
    /// The lease's permits: a slot at or past them is not one this client can name.
    pub(crate) permits: u16,
    /// The instant just before the send: where a held lease's validity starts.
    pub(crate) sent_at: Instant,
    /// The TTL the request asked for: no grant is trusted for longer.
    pub(crate) ttl: Duration,
    /// The drift budget, subtracted from every grant.
    pub(crate) drift: Duration,
    /// The wait after a refusal whose reply carried no positive PTTL.
    pub(crate) retry_after_fallback: Duration,
}

impl AcquireOutcome {
    /// The one mapping from an acquire script's result to its outcome. A lease held —
    /// acquired or replayed, in a slot this client can name — becomes a handle through
    /// `hold`, from its validity budget, its token and its slot.
    pub(crate) fn from_reply(
        result: Result<AcquireReply, SendFailure>,
        sent: &AcquireSent<'_>,
        hold: impl FnOnce(ValidityBudget, FencingToken, u16) -> LeaseHandle,
    ) -> Self {
        let reply = match result {
            Ok(reply) => reply,
            Err(failure) => {
                return match Certainty::from(failure) {
                    Certainty::QueueFull(detail) => Self::QueueFull { detail },
                    Certainty::Unavailable(detail) => Self::Unavailable { detail },
                    Certainty::Indeterminate(detail) => Self::Indeterminate {
                        attempt: sent.attempt.clone(),
                        detail,
                    },
                };
            }
        };
        let retry_after = |pttl: Duration| {
            if pttl.is_zero() {
                sent.retry_after_fallback
            } else {
                pttl
            }
        };
        match reply {
            AcquireReply::Acquired { slot, .. } | AcquireReply::Replayed { slot, .. }
                if slot >= sent.permits =>
            {
                Self::Indeterminate {
                    // The script may have stored the attempt in a slot this client cannot
                    // name; a replay (or the TTL) settles it.
                    attempt: sent.attempt.clone(),
                    detail: FailureDetail::new(
                        FailureKind::MalformedReply,
                        format!("slot {slot} of a lease of {} permits", sent.permits),
                    ),
                }
            }
            AcquireReply::Acquired { ttl, token, slot } => {
                let budget = ValidityBudget::acquired(sent.sent_at, sent.ttl, ttl, sent.drift);
                Self::Acquired(hold(budget, token, slot))
            }
            AcquireReply::Replayed { pttl, token, slot } => {
                let budget = ValidityBudget::replayed(sent.sent_at, sent.ttl, pttl, sent.drift);
                Self::Replayed(hold(budget, token, slot))
            }
            AcquireReply::Contended { pttl, .. } => Self::Contended {
                retry_after: retry_after(pttl),
            },
            AcquireReply::Delayed { pttl, .. } => Self::LockDelayed {
                retry_after: retry_after(pttl),
            },
            AcquireReply::Conflict { pttl } => Self::OwnerOperationConflict {
                retry_after: retry_after(pttl),
            },
        }
    }
}
