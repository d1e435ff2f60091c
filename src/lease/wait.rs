//! The wait loop behind [`LeaseClient::acquire`](crate::LeaseClient::acquire) (docs/design.md §6).
//!
//! # Invariants
//!
//! 1. One attempt throughout: every retry sends the request's attempt, so a try whose reply
//!    was lost is replayed, never duplicated under another owner.
//! 2. No sleep runs past the wait deadline; when the deadline comes, one last try is made
//!    and its outcome returned.
//! 3. Once any try may have reached Redis, a failed end is `Indeterminate`, never
//!    `Unavailable` — that try may hold the lease.
//! 4. The release subscription is live before the try whose `Contended` reply leads to a
//!    sleep, so a release between that reply and the sleep still wakes the waiter.

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt as _;
use tokio::time::Instant;

use crate::backend::{FailureDetail, ReleaseNotices};
use crate::lease::acquire;
use crate::lease::acquire::AcquireOutcome;
use crate::lease::session::Session;
use crate::protocol::{Attempt, LeaseRequest};
use crate::telemetry;

/// First backoff after `Unavailable`; doubled per consecutive one up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Pause after `Indeterminate` before the replay: the timeout already waited, but a
/// malformed reply comes back at once and must not spin.
const INDETERMINATE_PAUSE: Duration = Duration::from_millis(10);
/// Upper bound on the jitter added to a contended wait.
const JITTER_MAX: Duration = Duration::from_millis(20);

/// What the wait loop does after a try, decided from its outcome and the time alone.
#[derive(Debug)]
// Returned once per try and matched at once, never stored: boxing would only allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Step {
    /// The wait is over: return this outcome.
    Done(AcquireOutcome),
    /// Contended for the first time: subscribe to release notices, then try again at once
    /// (invariant 4).
    Subscribe,
    /// Sleep until `wake_at` (a release notice wakes the loop earlier), then try again;
    /// `why` names the outcome for the retry metric.
    Retry { wake_at: Instant, why: &'static str },
}

/// The wait loop's decisions, sans I/O: the deadline, whether the loop subscribed, whether
/// any try may have reached Redis, and the backoff after `Unavailable`.
#[derive(Debug)]
pub(crate) struct WaitPolicy {
    deadline: Instant,
    subscribed: bool,
    /// The attempt and failure of the last try that may have reached Redis.
    maybe_sent: Option<(Attempt, FailureDetail)>,
    backoff: Duration,
}

impl WaitPolicy {
    /// A wait of `wait_timeout` starting at `now`.
    pub(crate) fn new(now: Instant, wait_timeout: Duration) -> Self {
        Self {
            deadline: now + wait_timeout,
            subscribed: false,
            maybe_sent: None,
            backoff: BACKOFF_MIN,
        }
    }

    /// The step after a try that answered `outcome` at `now`; `jitter(max)` draws a random
    /// pause in `0 ..= max`.
    pub(crate) fn next(
        &mut self,
        outcome: AcquireOutcome,
        now: Instant,
        jitter: &mut impl FnMut(Duration) -> Duration,
    ) -> Step {
        let (pause, why) = match &outcome {
            AcquireOutcome::Acquired(_)
            | AcquireOutcome::Replayed(_)
            | AcquireOutcome::OwnerOperationConflict { .. } => return Step::Done(outcome),
            _ if now >= self.deadline => return Step::Done(self.settle(outcome)),
            // A lock-delay ends at its time, or earlier on the ended holder's release: the
            // notice wakes the waiter for it too.
            AcquireOutcome::Contended { .. } | AcquireOutcome::LockDelayed { .. }
                if !self.subscribed =>
            {
                self.subscribed = true;
                return Step::Subscribe;
            }
            AcquireOutcome::Contended { retry_after }
            | AcquireOutcome::LockDelayed { retry_after } => {
                (*retry_after + jitter(*retry_after / 10), outcome.as_str())
            }
            AcquireOutcome::Indeterminate { attempt, detail } => {
                self.maybe_sent = Some((attempt.clone(), detail.clone()));
                (INDETERMINATE_PAUSE, "indeterminate")
            }
            AcquireOutcome::Unavailable { .. } => {
                let pause = self.backoff / 2 + jitter(self.backoff / 2);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                (pause, "unavailable")
            }
        };
        Step::Retry {
            wake_at: (now + pause).min(self.deadline),
            why,
        }
    }

    /// Applies invariant 3 to the last outcome.
    fn settle(&mut self, outcome: AcquireOutcome) -> AcquireOutcome {
        match (outcome, self.maybe_sent.take()) {
            (AcquireOutcome::Unavailable { .. }, Some((attempt, detail))) => {
                AcquireOutcome::Indeterminate { attempt, detail }
            }
            (outcome, _) => outcome,
        }
    }
}

pub(crate) async fn acquire_with_wait(
    session: &Arc<Session>,
    request: &LeaseRequest,
) -> AcquireOutcome {
    let mut policy = WaitPolicy::new(Instant::now(), request.wait_timeout());
    let mut notices: Option<ReleaseNotices> = None;
    let mut jitter = random_jitter;
    loop {
        let outcome = acquire::try_acquire(session, request).await;
        let wake_at = match policy.next(outcome, Instant::now(), &mut jitter) {
            Step::Done(outcome) => return outcome,
            Step::Subscribe => {
                telemetry::wait_retry(request.purpose(), "contended");
                notices = subscribe(session, request).await;
                continue;
            }
            Step::Retry { wake_at, why } => {
                telemetry::wait_retry(request.purpose(), why);
                wake_at
            }
        };
        match notices.as_mut() {
            Some(n) => {
                tokio::select! {
                    () = tokio::time::sleep_until(wake_at) => {}
                    alive = n.next() => {
                        if alive {
                            telemetry::wait_wakeup(request.purpose());
                        } else {
                            // The subscription's connection ended: fall back to sleeping.
                            notices = None;
                        }
                    }
                }
            }
            None => tokio::time::sleep_until(wake_at).await,
        }
    }
}

async fn subscribe(session: &Session, request: &LeaseRequest) -> Option<ReleaseNotices> {
    let keys = session.request_keys(request);
    match session
        .backend()
        .subscribe_releases(&keys, session.settings().command_timeout)
        .await
    {
        Ok(notices) => Some(notices),
        Err(failure) => {
            // Waking early is an optimisation; without it the loop still polls on
            // retry_after.
            tracing::debug!(%failure, "release notices unavailable; polling instead");
            None
        }
    }
}

/// A random pause in `0 ..= min(max, JITTER_MAX)`.
fn random_jitter(max: Duration) -> Duration {
    let max = max.min(JITTER_MAX);
    if max.is_zero() {
        return Duration::ZERO;
    }
    rand::rng().random_range(Duration::ZERO..=max)
}

#[cfg(test)]
mod tests;
