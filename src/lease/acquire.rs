//! One acquisition attempt: the script (waiting for replicas when asked), its reply read as
//! an [`AcquireOutcome`] (`acquire/outcome.rs` holds the mapping), and a handle for a lease
//! acquired or replayed (docs/design.md §5, §6).

use std::sync::Arc;

use tokio::time::Instant;

use crate::backend::SendFailure;
use crate::lease::handle::LeaseHandle;
use crate::lease::outcome::Replication;
use crate::lease::session::Session;
use crate::protocol::{AcquireReply, LeaseKeys, LeaseRequest, LinePlace};
use crate::telemetry::{self, Operation};

mod outcome;

pub use outcome::AcquireOutcome;
pub(crate) use outcome::AcquireSent;

/// One acquisition attempt for a request already validated: `try_acquire`, and every try
/// of the wait loop.
pub(crate) async fn try_acquire(session: &Arc<Session>, request: &LeaseRequest) -> AcquireOutcome {
    try_in_line(session, request, LinePlace::Tries).await.0
}

/// One acquisition attempt standing towards the lease's line as `place` says, and the rank
/// in the line its refusal gave (a waiting try's; `None` otherwise).
pub(crate) async fn try_in_line(
    session: &Arc<Session>,
    request: &LeaseRequest,
    place: LinePlace,
) -> (AcquireOutcome, Option<u32>) {
    let settings = session.settings();
    let keys = session.request_keys(request);
    // Before the backend's queue, if the operation waits in one: the instant is no later
    // than the send, so a wait there comes out of validity, never adds to it.
    let sent_at = Instant::now();
    let (result, replication) = send(session, &keys, request, place).await;
    let rank = match &result {
        Ok(AcquireReply::Contended { rank, .. } | AcquireReply::Delayed { rank, .. }) => *rank,
        _ => None,
    };
    let sent = AcquireSent {
        attempt: request.attempt(),
        permits: keys.permits(),
        sent_at,
        ttl: request.ttl(),
        drift: settings.drift_budget,
        retry_after_fallback: settings.retry_after_fallback,
    };
    // The lease (its slot, for a counted lease) is held, acquired or replayed: its handle,
    // on the budget its reply gives.
    let outcome = AcquireOutcome::from_reply(result, &sent, |budget, token, slot| {
        let keys = keys.into_slot(slot);
        LeaseHandle::new(
            Arc::clone(session),
            request,
            keys,
            token,
            budget,
            replication,
        )
    });
    let latency = sent_at.elapsed();
    telemetry::operation(Operation::Acquire, request.purpose(), &outcome, latency);
    (outcome, rank)
}

/// The acquire script for `request` on `keys`, and what its wait for replicas, if it asks
/// for one, learnt: on its own connections, bounded by the command timeout plus the wait.
async fn send(
    session: &Session,
    keys: &LeaseKeys,
    request: &LeaseRequest,
    place: LinePlace,
) -> (Result<AcquireReply, SendFailure>, Replication) {
    let backend = session.backend();
    let timeout = session.settings().command_timeout;
    let id = session.waiter_id(request);
    match request.replica_wait() {
        None => {
            let result = backend.acquire(keys, request, place, &id, timeout).await;
            (result, Replication::NotRequested)
        }
        Some(wait) => {
            let timeout = timeout + wait.timeout();
            let result = backend
                .acquire_replicated(keys, request, place, &id, wait, timeout)
                .await;
            let replication = Replication::of_wait(&result, wait.replicas());
            (result.map(|r| r.reply), replication)
        }
    }
}
