//! One acquisition attempt: the script (waiting for replicas when asked), the reply turned
//! into an outcome, and a handle for a lease acquired or replayed (docs/design.md §5, §6).

use std::sync::Arc;

use tokio::time::Instant;

use crate::backend::{ReplicatedReply, SendFailure};
use crate::lease::handle::LeaseHandle;
use crate::lease::outcome::{AcquireOutcome, Replication};
use crate::lease::session::Session;
use crate::lease::validity::ValidityBudget;
use crate::protocol::{AcquireReply, LeaseRequest};
use crate::telemetry::{self, Operation};

/// One acquisition attempt for a request already validated: `try_acquire`, and every try
/// of the wait loop.
pub(crate) async fn try_acquire(session: &Arc<Session>, request: &LeaseRequest) -> AcquireOutcome {
    let settings = session.settings();
    let keys = session.keys(request.purpose(), request.resource());
    let sent_at = Instant::now();
    let backend = session.backend();
    let (result, replication) = match request.replica_wait() {
        None => {
            let timeout = settings.command_timeout;
            let result = backend
                .acquire(&keys, request.attempt(), request.ttl(), timeout)
                .await;
            (result, Replication::NotRequested)
        }
        Some(wait) => {
            let timeout = settings.command_timeout + wait.timeout();
            let attempt = request.attempt();
            let result = backend
                .acquire_replicated(&keys, attempt, request.ttl(), wait, timeout)
                .await;
            let replication = match &result {
                Ok(ReplicatedReply {
                    acked: Some(Ok(acked)),
                    ..
                }) => Replication::Acknowledged {
                    acked: *acked,
                    wanted: wait.replicas(),
                },
                Ok(ReplicatedReply {
                    acked: Some(Err(detail)),
                    ..
                }) => Replication::Unknown {
                    detail: detail.clone(),
                },
                _ => Replication::NotWaited,
            };
            (result.map(|r| r.reply), replication)
        }
    };
    let drift = settings.drift_budget;
    // The lease is held (acquired or replayed): its handle, on the budget its reply gives.
    let held = |budget, token| {
        LeaseHandle::new(
            Arc::clone(session),
            request,
            keys,
            token,
            budget,
            replication,
        )
    };
    let outcome = match result {
        Ok(AcquireReply::Acquired { ttl, token }) => AcquireOutcome::Acquired(held(
            ValidityBudget::acquired(sent_at, request.ttl(), ttl, drift),
            token,
        )),
        Ok(AcquireReply::Replayed { pttl, token }) => AcquireOutcome::Replayed(held(
            ValidityBudget::replayed(sent_at, request.ttl(), pttl, drift),
            token,
        )),
        Ok(AcquireReply::Contended { pttl }) => AcquireOutcome::Contended {
            retry_after: session.retry_after(pttl),
        },
        Ok(AcquireReply::Conflict { pttl }) => AcquireOutcome::OwnerOperationConflict {
            retry_after: session.retry_after(pttl),
        },
        Err(SendFailure::NotSent(detail)) => AcquireOutcome::Unavailable { detail },
        Err(SendFailure::MaybeSent(detail)) => AcquireOutcome::Indeterminate {
            attempt: request.attempt().clone(),
            detail,
        },
    };
    let latency = sent_at.elapsed();
    telemetry::operation(
        Operation::Acquire,
        request.purpose(),
        outcome.as_str(),
        latency,
    );
    outcome
}
