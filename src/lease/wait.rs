//! The wait loop behind [`LeaseClient::acquire`](crate::LeaseClient::acquire) (docs/design.md §6):
//! its policy, a pure machine of (outcome, now); its driver, the I/O, in `wait/driver.rs`.
//!
//! # Invariants
//!
//! 1. One attempt throughout: every retry sends the request's attempt, so a try whose reply
//!    was lost is replayed, never duplicated under another owner.
//! 2. No sleep runs past the wait deadline — while contended, the contended one; while the
//!    last try's end is unknown, the settling one ([`Patience`]); when the deadline comes,
//!    one last try is made and its outcome returned.
//! 3. Once any try may have reached Redis, a failed end is `Indeterminate`, never
//!    `Unavailable` or `QueueFull` — that try may hold the lease.
//! 4. The release subscription is live before the try whose `Contended` reply leads to a
//!    sleep, so a release between that reply and the sleep still wakes the waiter — for a
//!    waiter first or next in line; one further back subscribes and sleeps at once (its
//!    look bounds the sleep: invariant 8).
//! 5. Once contended, the loop keeps a subscription: while it has none (subscribing failed,
//!    or the connection ended) a contended sleep lasts at most until the next attempt to
//!    subscribe — [`RESUBSCRIBE_MIN`] doubling to [`RESUBSCRIBE_MAX`] — never the holder's
//!    whole remaining TTL; each attempt is followed by a try. (Behind others in the line a
//!    waiter's look bounds its sleep instead: invariant 8.)
//! 6. A grant is handed out only with local validity left at the instant its reply is
//!    handled; one that arrived spent is `Indeterminate`, and replayed.
//! 7. No wake-up hangs on one message: subscribed or not, a contended (or lock-delayed)
//!    sleep lasts at most [`LOOK_AGAIN_MAX`] for a waiter first in the lease's line (or
//!    whose place is not known), never the holder's whole remaining TTL. A notice can be
//!    lost without the subscription ending — a holder refused `PUBLISH`, a notice
//!    published on a primary the subscription is not on (a failover) — so a waiter finds a
//!    freed lease within that plus one try.
//! 8. A waiter behind others in the line (`lua/line.lua`) sleeps through releases: only
//!    its turn notice wakes it, or its next look, [`BEHIND_LOOK_MIN`] to
//!    [`BEHIND_LOOK_MAX`] later — [`FAR_LOOK_MIN`] to [`FAR_LOOK_MAX`] more than
//!    [`NEAR_BEHIND`] ranks behind the next — which tells it its rank, so a lost turn
//!    notice costs at most that. Its place is kept alive by its client's line session
//!    (`src/lease/line_keeper.rs`), not by its looks. Its turn makes it first
//!    in line while the acquisition that told it holds the lease: it then sleeps as the
//!    first waiter does (woken by a release, or looking within [`LOOK_AGAIN_MAX`]), without
//!    a try that could only be refused. So a release costs Redis one try, the first
//!    waiter's, however many wait.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{FailureDetail, FailureKind};
use crate::lease::acquire::AcquireOutcome;
use crate::protocol::limits::WAIT_TIMEOUT;
use crate::protocol::{Attempt, LeaseRequest};
use crate::telemetry;

/// First backoff after `Unavailable` or `QueueFull`; doubled per consecutive one up to
/// [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Pause after `Indeterminate` before the replay: the timeout already waited, but a
/// malformed reply comes back at once and must not spin.
const INDETERMINATE_PAUSE: Duration = Duration::from_millis(10);
/// Upper bound on the jitter added to a contended wait.
const JITTER_MAX: Duration = Duration::from_millis(20);
/// First pause before subscribing again after subscribing failed or the subscription
/// ended; doubled per consecutive failure up to [`RESUBSCRIBE_MAX`], and back to this once
/// a subscription is confirmed.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(1);
/// The longest a contended sleep lasts (invariant 7): drawn in
/// `LOOK_AGAIN_MIN ..= LOOK_AGAIN_MAX`, so that many waiters do not look together.
/// A waiter costs Redis at most one try per `LOOK_AGAIN_MIN` while the lease stays held.
const LOOK_AGAIN_MIN: Duration = Duration::from_millis(600);
const LOOK_AGAIN_MAX: Duration = Duration::from_millis(750);
/// The sleep of a waiter behind others in the line (invariant 8), drawn in this range:
/// its look tells it its rank, and finds its turn if the notice was lost.
const BEHIND_LOOK_MIN: Duration = Duration::from_millis(800);
const BEHIND_LOOK_MAX: Duration = Duration::from_millis(950);
/// Ranks behind the next waiter within which a waiter looks every [`BEHIND_LOOK_MIN`] to
/// [`BEHIND_LOOK_MAX`]; further back it looks every [`FAR_LOOK_MIN`] to [`FAR_LOOK_MAX`].
const NEAR_BEHIND: u32 = 32;
/// The sleep of a waiter far back in line (invariant 8): its client's line session keeps
/// its place alive, and its turn notice wakes it; the look is for a turn notice lost all
/// the same (a holder refused `PUBLISH`).
const FAR_LOOK_MIN: Duration = Duration::from_millis(4000);
const FAR_LOOK_MAX: Duration = Duration::from_millis(5000);

/// How long the wait loop keeps trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Patience {
    /// Whatever the outcomes.
    pub(crate) wait: Duration,
    /// While the lease is contended or in its lock-delay (at least `wait`).
    pub(crate) contended: Duration,
    /// Past `wait`, while the last try's end is unknown (`Indeterminate`, or `Unavailable`
    /// after a try that may have landed): the same attempt is replayed this much longer,
    /// so the wait ends knowing whether the attempt holds the lease.
    pub(crate) settling: Duration,
}

impl Patience {
    /// The request's wait timeout, for every outcome: what [`LeaseClient::acquire`] does.
    ///
    /// [`LeaseClient::acquire`]: crate::LeaseClient::acquire
    pub(crate) fn of(request: &LeaseRequest) -> Self {
        let wait = request.wait_timeout();
        Self {
            wait,
            contended: wait,
            settling: Duration::ZERO,
        }
    }

    /// The runtime's entry points' (`spawn_under_lease`, `run_under_lease`): the request's
    /// wait, and past it, while the last try's end is unknown, replays of the same attempt
    /// for up to the request's TTL more. An acquisition that landed before the wait ended
    /// is found by a replay (and its work runs) or, once a TTL has passed with no answer,
    /// has expired — unless Redis ran it later still (a paused server reading a command
    /// sent long before), which is the one case left `Indeterminate`.
    pub(crate) fn settling(request: &LeaseRequest) -> Self {
        Self {
            settling: request.ttl(),
            ..Self::of(request)
        }
    }

    /// A lease supervisor's: while contended, as long as any wait may last
    /// ([`WAIT_TIMEOUT`]'s maximum), listening for the release notice; any other outcome
    /// ends the wait after the request's wait timeout, so the supervisor paces it.
    pub(crate) fn while_contended(request: &LeaseRequest) -> Self {
        let wait = request.wait_timeout();
        Self {
            wait,
            contended: wait.max(WAIT_TIMEOUT.max),
            settling: Duration::ZERO,
        }
    }
}

/// What the wait loop does after a try, decided from its outcome and the time alone.
#[derive(Debug)]
// Returned once per try and matched at once, never stored: boxing would only allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Step {
    /// The wait is over: return this outcome.
    Done(AcquireOutcome),
    /// Contended for the first time: subscribe to release notices, then try again at once
    /// (invariant 4). From then on [`WaitPolicy::poll_subscribe`] says when to subscribe
    /// again.
    Subscribe,
    /// Sleep until `wake_at` (a notice `listen` names wakes the loop earlier), then try
    /// again; `why` is the outcome that made it, for the retry metric.
    Retry {
        wake_at: Instant,
        why: Retried,
        listen: Listen,
    },
}

/// Which notices end a sleep early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listen {
    /// A release, or the waiter's turn: it is first in line, or its place is not known.
    Releases,
    /// Only the waiter's turn: others are ahead of it in line (invariant 8).
    Turn,
}

/// Where the last try left the waiter in the lease's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// First in line (among the first `permits` of a counted lease), or not known (a try
    /// that did not wait, an outcome without a rank).
    Front,
    /// Next after them: its turn may come at any moment.
    Next,
    /// Further back, up to [`NEAR_BEHIND`] ranks behind the next: its turn comes once the
    /// waiters ahead of it were served.
    Behind,
    /// Further back still: its turn cannot come before many grants.
    Far,
}

impl Place {
    /// The place a refusal's `rank` gives, on a lease of `permits`.
    pub(crate) fn of(rank: Option<u32>, permits: u16) -> Self {
        let permits = u32::from(permits);
        match rank {
            Some(rank) if rank > permits + NEAR_BEHIND => Self::Far,
            Some(rank) if rank > permits => Self::Behind,
            Some(rank) if rank == permits => Self::Next,
            _ => Self::Front,
        }
    }
}

/// Why the wait loop tries again: the kind of the try's outcome before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retried {
    Contended,
    LockDelayed,
    Indeterminate,
    Unavailable,
    QueueFull,
}

impl telemetry::Label for Retried {
    /// The outcome's own name (`AcquireOutcome::as_str`).
    fn label(&self) -> &'static str {
        match self {
            Self::Contended => "contended",
            Self::LockDelayed => "lock_delayed",
            Self::Indeterminate => "indeterminate",
            Self::Unavailable => "unavailable",
            Self::QueueFull => "queue_full",
        }
    }
}

/// The wait loop's decisions, sans I/O: the deadline, whether the loop listens for
/// notices, whether any try may have reached Redis, and the backoffs after `Unavailable`
/// and after a failed subscription. In the machines' vocabulary (docs/design.md §6):
/// `handle_*` tells it what happened, `poll_subscribe` asks what to do before a try; the
/// time to sleep until is in the [`Step`] it returns.
#[derive(Debug)]
pub(crate) struct WaitPolicy {
    deadline: Instant,
    /// The deadline while contended (or lock-delayed): at or after `deadline`.
    contended_deadline: Instant,
    /// The deadline while the last try's end is unknown: at or after `deadline`.
    settling_deadline: Instant,
    /// Contended once: the loop keeps a subscription from then on (invariant 5).
    wants_notices: bool,
    /// When to subscribe again while there is no subscription: `None` while there is one.
    resubscribe_at: Option<Instant>,
    resubscribe: Duration,
    /// The attempt and failure of the last try that may have reached Redis.
    maybe_sent: Option<(Attempt, FailureDetail)>,
    backoff: Duration,
}

impl WaitPolicy {
    /// A wait of `patience` starting at `now`.
    pub(crate) fn new(now: Instant, patience: Patience) -> Self {
        Self {
            deadline: now + patience.wait,
            contended_deadline: now + patience.contended.max(patience.wait),
            settling_deadline: now + patience.wait + patience.settling,
            wants_notices: false,
            resubscribe_at: Some(now),
            resubscribe: RESUBSCRIBE_MIN,
            maybe_sent: None,
            backoff: BACKOFF_MIN,
        }
    }

    /// Whether the loop should subscribe before its next try, at `now`.
    pub(crate) fn poll_subscribe(&self, now: Instant) -> bool {
        self.wants_notices && self.resubscribe_at.is_some_and(|at| at <= now)
    }

    /// The loop subscribed (`live`) or failed to, at `now`.
    pub(crate) fn handle_subscribed(&mut self, live: bool, now: Instant) {
        if live {
            self.resubscribe_at = None;
            self.resubscribe = RESUBSCRIBE_MIN;
        } else {
            self.handle_subscription_lost(now);
        }
    }

    /// There is no subscription any more (or subscribing failed), at `now`: the time of the
    /// next attempt to subscribe, which a contended sleep does not pass.
    pub(crate) fn handle_subscription_lost(&mut self, now: Instant) -> Instant {
        let at = now + self.resubscribe;
        self.resubscribe = (self.resubscribe * 2).min(RESUBSCRIBE_MAX);
        self.resubscribe_at = Some(at);
        at
    }

    /// The step after a try that answered `outcome` at `now`; `jitter(max)` draws a random
    /// pause in `0 ..= max`.
    pub(crate) fn handle_outcome(
        &mut self,
        outcome: AcquireOutcome,
        place: Place,
        now: Instant,
        jitter: &mut impl FnMut(Duration) -> Duration,
    ) -> Step {
        let outcome = spent_on_arrival(outcome, now);
        let contended = matches!(
            outcome,
            AcquireOutcome::Contended { .. } | AcquireOutcome::LockDelayed { .. }
        );
        let unknown = match &outcome {
            AcquireOutcome::Indeterminate { .. } => true,
            AcquireOutcome::Unavailable { .. } | AcquireOutcome::QueueFull { .. } => {
                self.maybe_sent.is_some()
            }
            _ => false,
        };
        let deadline = if contended {
            self.contended_deadline
        } else if unknown {
            self.settling_deadline
        } else {
            self.deadline
        };
        let (pause, why) = match &outcome {
            AcquireOutcome::Acquired(_)
            | AcquireOutcome::Replayed(_)
            | AcquireOutcome::OwnerOperationConflict { .. } => return Step::Done(outcome),
            _ if now >= deadline => return Step::Done(self.settle(outcome)),
            // A lock-delay ends at its time, or earlier on the ended holder's release: the
            // notice wakes the waiter for it too.
            // Far back in line nothing it could miss before its subscription is live
            // concerns it: it subscribes and sleeps (invariant 8), without the try.
            AcquireOutcome::Contended { .. } | AcquireOutcome::LockDelayed { .. }
                if !self.wants_notices && !matches!(place, Place::Behind | Place::Far) =>
            {
                self.wants_notices = true;
                return Step::Subscribe;
            }
            AcquireOutcome::Contended { retry_after }
            | AcquireOutcome::LockDelayed { retry_after } => {
                self.wants_notices = true;
                let pause = self.contended_pause(*retry_after, place, now, jitter);
                let why = if matches!(outcome, AcquireOutcome::Contended { .. }) {
                    Retried::Contended
                } else {
                    Retried::LockDelayed
                };
                (pause, why)
            }
            AcquireOutcome::Indeterminate { attempt, detail } => {
                self.maybe_sent = Some((attempt.clone(), detail.clone()));
                (INDETERMINATE_PAUSE, Retried::Indeterminate)
            }
            AcquireOutcome::Unavailable { .. } | AcquireOutcome::QueueFull { .. } => {
                let pause = self.backoff / 2 + jitter(self.backoff / 2);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                let why = if matches!(outcome, AcquireOutcome::QueueFull { .. }) {
                    Retried::QueueFull
                } else {
                    Retried::Unavailable
                };
                (pause, why)
            }
        };
        let listen = match (place, why) {
            (
                Place::Next | Place::Behind | Place::Far,
                Retried::Contended | Retried::LockDelayed,
            ) => Listen::Turn,
            _ => Listen::Releases,
        };
        Step::Retry {
            wake_at: (now + pause).min(deadline),
            why,
            listen,
        }
    }

    /// The sleep after a contended (or lock-delayed) try that left the waiter at `place`.
    fn contended_pause(
        &self,
        retry_after: Duration,
        place: Place,
        now: Instant,
        jitter: &mut impl FnMut(Duration) -> Duration,
    ) -> Duration {
        let pause = match place {
            Place::Front => {
                let pause = retry_after + jitter(retry_after / 10);
                // A notice can be lost (invariant 7).
                let look_again = LOOK_AGAIN_MIN + jitter(LOOK_AGAIN_MAX - LOOK_AGAIN_MIN);
                pause.min(look_again)
            }
            Place::Next | Place::Behind => {
                BEHIND_LOOK_MIN + jitter(BEHIND_LOOK_MAX - BEHIND_LOOK_MIN)
            }
            Place::Far => FAR_LOOK_MIN + jitter(FAR_LOOK_MAX - FAR_LOOK_MIN),
        };
        // Without a subscription, no longer than until the next attempt at one (invariant
        // 5) — but behind others, whose look bounds its sleep anyway.
        match (self.resubscribe_at, place) {
            (Some(at), Place::Front) => pause.min(at.saturating_duration_since(now)),
            _ => pause,
        }
    }

    /// The waiter, asleep behind others, was told its turn at `now`: it is first in line
    /// now, and the lease is held by the acquisition that told it (`lua/line.lua`). It
    /// tries at the next release, or at its look ([`LOOK_AGAIN_MIN`] to
    /// [`LOOK_AGAIN_MAX`] from now, invariant 7), whichever comes first — not at once: a
    /// try now would only be refused. Returns the time of that look.
    pub(crate) fn handle_turn(
        &self,
        now: Instant,
        jitter: &mut impl FnMut(Duration) -> Duration,
    ) -> Instant {
        let look_again = LOOK_AGAIN_MIN + jitter(LOOK_AGAIN_MAX - LOOK_AGAIN_MIN);
        (now + look_again).min(self.contended_deadline)
    }

    /// Applies invariant 3 to the last outcome.
    fn settle(&mut self, outcome: AcquireOutcome) -> AcquireOutcome {
        match (outcome, self.maybe_sent.take()) {
            (
                AcquireOutcome::Unavailable { .. } | AcquireOutcome::QueueFull { .. },
                Some((attempt, detail)),
            ) => AcquireOutcome::Indeterminate { attempt, detail },
            (outcome, _) => outcome,
        }
    }
}

/// A grant whose reply came after its local validity had run out (a slow reply, a
/// replay of a grant about to expire) is no lease to hand out: its holder would be told
/// to stop the moment it started. The attempt may still hold the lease in Redis, so it is
/// `Indeterminate` (invariant 6): replayed, its budget then runs from the replay's own
/// send. The handle is LOST first, so that dropping it releases nothing the replay may
/// find.
fn spent_on_arrival(mut outcome: AcquireOutcome, now: Instant) -> AcquireOutcome {
    let (AcquireOutcome::Acquired(lease) | AcquireOutcome::Replayed(lease)) = &mut outcome else {
        return outcome;
    };
    if lease.active_at(now) {
        return outcome;
    }
    AcquireOutcome::Indeterminate {
        attempt: lease.attempt().clone(),
        detail: FailureDetail::new(
            FailureKind::Timeout,
            "the grant's reply came after its local validity had ended",
        ),
    }
}

mod driver;
mod in_line;
mod notices;

pub(crate) use driver::acquire_with_wait;
#[cfg(test)]
mod tests;
