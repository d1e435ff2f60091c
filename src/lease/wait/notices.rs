//! The waiter's subscriptions and its sleep between tries (`src/lease/wait.rs`,
//! invariants 4, 5, 7 and 8).

use std::time::Duration;

use tokio::time::Instant;

use super::{Listen, WaitPolicy};
use crate::backend::ReleaseNotices;
use crate::lease::line_places::LinePlaces;
use crate::lease::session::Session;
use crate::protocol::LeaseRequest;
use crate::telemetry;

/// The waiter's two subscriptions: the lease's releases and its own turn in line. Both
/// are made together and end together: either ending is the connection's end.
pub(super) struct Notices {
    pub(super) releases: ReleaseNotices,
    pub(super) turn: ReleaseNotices,
}

/// Sleeps until `wake_at` or a notice `listen` names. A subscription that ends meanwhile
/// brings the wake forward to the next attempt to subscribe (invariant 5). A turn that
/// comes while only the turn is listened for makes the waiter first in line: from then on
/// a release wakes it, and it looks within [`WaitPolicy::handle_turn`]'s bound
/// (invariant 8).
pub(super) async fn sleep(
    notices: &mut Option<Notices>,
    policy: &mut WaitPolicy,
    mut wake_at: Instant,
    mut listen: Listen,
    request: &LeaseRequest,
    jitter: &mut impl FnMut(Duration) -> Duration,
    places: &LinePlaces,
) {
    while let Some(n) = notices.as_mut() {
        let release = async {
            match listen {
                Listen::Releases => n.releases.next().await,
                Listen::Turn => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake_at) => return,
            alive = release => {
                if alive {
                    telemetry::wait_wakeup(request.purpose());
                    return;
                }
            }
            alive = n.turn.next() => {
                if alive && listen == Listen::Turn {
                    // Releases delivered before the turn are of holdings before the one
                    // that told it: the next release to wake it is that one's.
                    n.releases.drain();
                    listen = Listen::Releases;
                    // Told at rank permits - 1: among the next served.
                    let place = u32::from(request.permits().saturating_sub(1));
                    places.report_place(request.attempt(), Some(place));
                    wake_at = wake_at.min(policy.handle_turn(Instant::now(), jitter));
                    continue;
                }
                if alive {
                    telemetry::wait_wakeup(request.purpose());
                    return;
                }
            }
        }
        // A subscription's connection ended.
        *notices = None;
        wake_at = wake_at.min(policy.handle_subscription_lost(Instant::now()));
    }
    tokio::time::sleep_until(wake_at).await;
}

pub(super) async fn subscribe(session: &Session, request: &LeaseRequest) -> Option<Notices> {
    let keys = session.request_keys(request);
    let id = session.waiter_id(request);
    let backend = session.backend();
    let timeout = session.settings().command_timeout;
    let (releases, turn) = tokio::join!(
        backend.subscribe_releases(&keys, timeout),
        backend.subscribe_turn(&keys, &id, timeout),
    );
    match (releases, turn) {
        (Ok(releases), Ok(turn)) => Some(Notices { releases, turn }),
        (Err(failure), _) | (_, Err(failure)) => {
            // Waking early is an optimisation; without it the loop still looks again
            // (invariants 5, 7, 8).
            tracing::debug!(%failure, "release notices unavailable; polling instead");
            None
        }
    }
}
