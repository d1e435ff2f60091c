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
use crate::lease::outcome::AcquireOutcome;
use crate::lease::session::Session;
use crate::protocol::LeaseRequest;
use crate::telemetry;

/// First backoff after `Unavailable`; doubled per consecutive one up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Pause after `Indeterminate` before the replay: the timeout already waited, but a
/// malformed reply comes back at once and must not spin.
const INDETERMINATE_PAUSE: Duration = Duration::from_millis(10);
/// Upper bound on the jitter added to a contended wait.
const JITTER_MAX: Duration = Duration::from_millis(20);

pub(crate) async fn acquire_with_wait(
    session: &Arc<Session>,
    request: &LeaseRequest,
) -> AcquireOutcome {
    let deadline = Instant::now() + request.wait_timeout();
    let mut notices: Option<ReleaseNotices> = None;
    let mut subscribed = false;
    let mut maybe_sent: Option<FailureDetail> = None;
    let mut backoff = BACKOFF_MIN;
    loop {
        let outcome = acquire::try_acquire(session, request).await;
        let now = Instant::now();
        let pause = match &outcome {
            AcquireOutcome::Acquired(_)
            | AcquireOutcome::Replayed(_)
            | AcquireOutcome::OwnerOperationConflict { .. } => return outcome,
            _ if now >= deadline => return settle(outcome, maybe_sent, request),
            AcquireOutcome::Contended { retry_after } => {
                telemetry::wait_retry(request.purpose(), "contended");
                if !subscribed {
                    subscribed = true;
                    notices = subscribe(session, request).await;
                    // Try again at once: the subscription is live now (invariant 4).
                    continue;
                }
                *retry_after + jitter(*retry_after / 10)
            }
            AcquireOutcome::Indeterminate { detail, .. } => {
                telemetry::wait_retry(request.purpose(), "indeterminate");
                maybe_sent = Some(detail.clone());
                INDETERMINATE_PAUSE
            }
            AcquireOutcome::Unavailable { .. } => {
                telemetry::wait_retry(request.purpose(), "unavailable");
                let pause = backoff / 2 + jitter(backoff / 2);
                backoff = (backoff * 2).min(BACKOFF_MAX);
                pause
            }
        };
        let wake_at = (now + pause).min(deadline);
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

/// Applies invariant 3 to the last outcome.
fn settle(
    outcome: AcquireOutcome,
    maybe_sent: Option<FailureDetail>,
    request: &LeaseRequest,
) -> AcquireOutcome {
    match (outcome, maybe_sent) {
        (AcquireOutcome::Unavailable { .. }, Some(detail)) => AcquireOutcome::Indeterminate {
            attempt: request.attempt().clone(),
            detail,
        },
        (outcome, _) => outcome,
    }
}

async fn subscribe(session: &Session, request: &LeaseRequest) -> Option<ReleaseNotices> {
    let keys = session.keys(request.purpose(), request.resource());
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

fn jitter(max: Duration) -> Duration {
    let max = max.min(JITTER_MAX);
    if max.is_zero() {
        return Duration::ZERO;
    }
    rand::rng().random_range(Duration::ZERO..=max)
}
