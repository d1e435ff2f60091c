//! One renewal's calls to the backend, apart from the handle that asked for them: its
//! attempts, their retries and their send instants. [`LeaseHandle`] begins a renewal (the
//! state machine says whether one may be sent, and until when) and applies what the calls
//! got; in between the calls own what they need, so a lease actor runs them in a task of
//! their own while it goes on answering its other messages (docs/design.md §8).
//!
//! [`LeaseHandle`]: crate::LeaseHandle

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use crate::backend::{FailureDetail, FailureKind, RenewBound, SendFailure};
use crate::lease::outcome::RenewOutcome;
use crate::lease::session::Session;
use crate::protocol::{Holding, LeaseKeys, RenewReply};

/// Idempotent attempts one renewal makes before it declares the lease UNKNOWN (a lease
/// actor's renewal is the handle's: one retry policy).
pub(crate) const RENEW_ATTEMPTS: u32 = 3;

/// A renewal's calls, ready to be made: what [`LeaseHandle::begin_renewal`] returns when
/// the lease may be renewed. Owns everything it sends (the session, the keys, the holding),
/// so it may run in a task of its own; dropping it mid-flight is safe — the handle keeps its
/// old budget, a lower bound whether or not the renewal landed.
///
/// [`LeaseHandle::begin_renewal`]: crate::LeaseHandle
#[must_use = "a renewal does nothing until it is sent"]
pub(crate) struct RenewCall {
    pub(super) session: Arc<Session>,
    pub(super) keys: Arc<LeaseKeys>,
    pub(super) holding: Arc<Holding>,
    pub(super) ttl: Duration,
    /// No attempt starts at or after it: the caller's limit or local validity's end,
    /// whichever comes first (a confirmation after validity ended is worthless).
    pub(super) deadline: Instant,
    /// The renewal's span, opened when it began; [`LeaseHandle`] closes it.
    ///
    /// [`LeaseHandle`]: crate::LeaseHandle
    pub(super) span: tracing::Span,
    /// When the renewal began, for its latency.
    pub(super) began: Instant,
    /// Whether the calls may have reached Redis so far, for an owner that reads it while
    /// they run.
    pub(super) reach: RenewReach,
}

/// Whether a renewal's calls may have reached Redis so far: one is awaiting its reply, or
/// one failed after it may have been sent. Read by a lease actor whose cancellation
/// deadline comes while the renewal is in flight: if one may have landed, the lease cannot
/// be vouched for (`Unknown`), as the renewal's own outcome would say a moment later;
/// otherwise no renewal was confirmed in time.
#[derive(Debug, Clone, Default)]
pub(crate) struct RenewReach(Arc<AtomicU8>);

/// [`RenewReach`]'s bits, in one atomic so a reader never sees one without the other.
const AWAITING: u8 = 1;
const MAYBE_SENT: u8 = 2;

impl RenewReach {
    /// Whether a call may have reached Redis so far.
    pub(crate) fn may_have_landed(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }

    fn sending(&self) {
        self.0.fetch_or(AWAITING, Ordering::AcqRel);
    }

    fn answered(&self, maybe_sent: bool) {
        let set = if maybe_sent { MAYBE_SENT } else { 0 };
        // One step: the awaiting bit cleared and the maybe-sent bit set together.
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
                Some((bits & !AWAITING) | set)
            });
    }
}

/// What a renewal's calls got, for the handle to apply with
/// [`LeaseHandle::end_renewal`](crate::LeaseHandle).
#[derive(Debug)]
pub(crate) struct RenewSent {
    pub(super) result: CallResult,
    pub(super) span: tracing::Span,
    pub(super) began: Instant,
}

/// How the attempts ended.
#[derive(Debug)]
pub(super) enum CallResult {
    /// An attempt sent at `sent_at` got `reply`.
    Replied { reply: RenewReply, sent_at: Instant },
    /// Every attempt failed, or there was no time for one; `maybe_sent` if any may have
    /// reached Redis, `detail` the last failure.
    Failed {
        maybe_sent: bool,
        detail: FailureDetail,
    },
}

impl RenewCall {
    /// Whether these calls may have reached Redis so far, readable while they run.
    pub(crate) fn reach(&self) -> RenewReach {
        self.reach.clone()
    }

    /// Makes up to [`RENEW_ATTEMPTS`] idempotent attempts, none starting at or after the
    /// deadline: each may wait to be written until the deadline, its round trip is bounded
    /// by the command timeout, and its reply is due by the deadline. The send instant is read once per attempt, just before it is handed to the
    /// backend (docs/design.md §6): the budget a reply proves counts from it.
    pub(crate) async fn send(self) -> RenewSent {
        let span = self.span.clone();
        let result = self.attempts().instrument(span.clone()).await;
        RenewSent {
            result,
            span,
            began: self.began,
        }
    }

    async fn attempts(&self) -> CallResult {
        let command_timeout = self.session.settings().command_timeout;
        let mut last_failure = None;
        let mut maybe_sent = false;
        for attempt_no in 0..RENEW_ATTEMPTS {
            let sent_at = Instant::now();
            if sent_at >= self.deadline {
                break;
            }
            // It may wait to be sent until the deadline: asked again, an unsent renewal would
            // only queue again behind everything queued meanwhile.
            let bound = RenewBound {
                round_trip: command_timeout,
                by: self.deadline,
            };
            self.reach.sending();
            let result = self
                .session
                .backend()
                .renew(&self.keys, &self.holding, self.ttl, bound)
                .await;
            match result {
                Ok(reply) => {
                    self.reach.answered(true);
                    return CallResult::Replied { reply, sent_at };
                }
                Err(failure) => {
                    tracing::debug!(attempt = attempt_no + 1, %failure, "renew attempt failed");
                    maybe_sent |= matches!(failure, SendFailure::MaybeSent(_));
                    self.reach.answered(maybe_sent);
                    last_failure = Some(failure.detail().clone());
                }
            }
            // A short pause keeps a fast-failing connection from spinning; bounded by the
            // deadline, which the next attempt checks. None after the last attempt: the
            // caller should hear the outcome at once.
            if attempt_no + 1 < RENEW_ATTEMPTS {
                let pause = Duration::from_millis(5 * u64::from(attempt_no + 1));
                tokio::time::sleep_until((sent_at + pause).min(self.deadline)).await;
            }
        }
        CallResult::Failed {
            maybe_sent,
            detail: last_failure.unwrap_or_else(|| {
                FailureDetail::new(FailureKind::Timeout, "no time left for a renewal attempt")
            }),
        }
    }
}

/// How a renewal ended, as its handle applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// `RENEWED`, read while local validity was left: validity now ends at `valid_until`
    /// (the renewal's send instant + ttl − drift). What the reply proved, and nothing more.
    Confirmed { valid_until: Instant },
    /// Not confirmed: what [`renew`](crate::LeaseHandle::renew) answers — never `Renewed`,
    /// which is always [`Confirmed`](Self::Confirmed).
    Unconfirmed(RenewOutcome),
}

impl Renewal {
    /// What [`renew`](crate::LeaseHandle::renew) answers for it, at `now`.
    pub(crate) fn outcome(self, now: Instant) -> RenewOutcome {
        match self {
            Self::Confirmed { valid_until } => RenewOutcome::Renewed {
                remaining: valid_until.saturating_duration_since(now),
            },
            Self::Unconfirmed(outcome) => outcome,
        }
    }
}
