//! The wait loop's driver (`src/lease/wait.rs`): the I/O around [`WaitPolicy`] — it
//! subscribes, tries, keeps the waiter's place in the line and sleeps as the policy's
//! steps say, reading the clock once per event and passing it down.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::in_line::InLine;
use super::notices::{Notices, sleep, subscribe};
use super::{JITTER_MAX, Patience, Place, Retried, Step, WaitPolicy};
use crate::lease::acquire;
use crate::lease::acquire::AcquireOutcome;
use crate::lease::session::Session;
use crate::protocol::{LeaseRequest, LinePlace};
use crate::telemetry;

pub(crate) async fn acquire_with_wait(
    session: &Arc<Session>,
    request: &LeaseRequest,
    patience: Patience,
) -> AcquireOutcome {
    let mut policy = WaitPolicy::new(Instant::now(), patience);
    let mut notices: Option<Notices> = None;
    let mut jitter = random_jitter;
    let mut waiting = false;
    // A wait with no time for a second try must not leave a place in the line behind it.
    let waits = !patience.contended.is_zero();
    let permits = request.permits();
    let mut in_line = InLine::new(session, request);
    loop {
        if notices.is_none() && policy.poll_subscribe(Instant::now()) {
            notices = subscribe(session, request).await;
            policy.handle_subscribed(notices.is_some(), Instant::now());
        }
        if let Some(n) = notices.as_mut() {
            n.releases.drain();
            n.turn.drain();
        }
        let line = match (waits, in_line.is_joined()) {
            (false, _) => LinePlace::Tries,
            (true, false) => LinePlace::Joins,
            (true, true) => LinePlace::Waits,
        };
        let (outcome, rank) = acquire::try_in_line(session, request, line).await;
        // Whatever its outcome said: a waiting try whose reply was lost may have joined.
        if waits {
            in_line.joined();
            session.line_places().report_place(request.attempt(), rank);
        }
        let place = Place::of(rank, permits);
        let step = policy.handle_outcome(outcome, place, Instant::now(), &mut jitter);
        let (wake, why) = match step {
            Step::Done(outcome) => {
                session.line_places().report_place(request.attempt(), None);
                if outcome.token().is_some() {
                    // A grant took it out of the line.
                    in_line.served();
                }
                in_line.leave().await;
                return outcome;
            }
            Step::Subscribe => (None, Retried::Contended),
            Step::Retry {
                wake_at,
                why,
                listen,
            } => (Some((wake_at, listen)), why),
        };
        if !waiting {
            telemetry::waiting(request.purpose());
            waiting = true;
        }
        telemetry::wait_retry(request.purpose(), &why);
        if let Some((wake_at, listen)) = wake {
            // Listening before the sleep (a waiter far back subscribes here, not before a try).
            if notices.is_none() && policy.poll_subscribe(Instant::now()) {
                notices = subscribe(session, request).await;
                policy.handle_subscribed(notices.is_some(), Instant::now());
            }
            sleep(
                &mut notices,
                &mut policy,
                wake_at,
                listen,
                request,
                &mut jitter,
                session.line_places(),
            )
            .await;
        }
    }
}

/// A random pause in `0 ..= min(max, JITTER_MAX)`.
fn random_jitter(max: Duration) -> Duration {
    let max = max.min(JITTER_MAX);
    if max.is_zero() {
        return Duration::ZERO;
    }
    crate::jitter::up_to(max)
}
