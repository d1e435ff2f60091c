//! One acquisition attempt: the script (waiting for replicas when asked), the reply turned
//! into an [`AcquireOutcome`], and a handle for a lease acquired or replayed
//! (docs/design.md §5, §6).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{FailureDetail, FailureKind, ReplicatedReply, SendFailure};
use crate::lease::handle::LeaseHandle;
use crate::lease::outcome::Replication;
use crate::lease::session::Session;
use crate::lease::validity::ValidityBudget;
use crate::protocol::{AcquireReply, Attempt, FencingToken, LeaseRequest};
use crate::telemetry::{self, Operation};

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
        /// The refusal (kind [`FailureKind::QueueFull`]).
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

/// One acquisition attempt for a request already validated: `try_acquire`, and every try
/// of the wait loop.
pub(crate) async fn try_acquire(session: &Arc<Session>, request: &LeaseRequest) -> AcquireOutcome {
    let settings = session.settings();
    let keys = session.request_keys(request);
    // Before the backend's queue, if the operation waits in one: the instant is no later
    // than the send, so a wait there comes out of validity, never adds to it.
    let sent_at = Instant::now();
    let backend = session.backend();
    let (result, replication) = match request.replica_wait() {
        None => {
            let timeout = settings.command_timeout;
            let result = backend.acquire(&keys, request, timeout).await;
            (result, Replication::NotRequested)
        }
        Some(wait) => {
            let timeout = settings.command_timeout + wait.timeout();
            let result = backend
                .acquire_replicated(&keys, request, wait, timeout)
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
    // The lease (its slot, for a counted lease) is held, acquired or replayed: its handle,
    // on the budget its reply gives.
    let permits = keys.permits();
    let held = move |budget, token, slot| {
        LeaseHandle::new(
            Arc::clone(session),
            request,
            keys.into_slot(slot),
            token,
            budget,
            replication,
        )
    };
    let outcome = match result {
        Ok(AcquireReply::Acquired { slot, .. } | AcquireReply::Replayed { slot, .. })
            if slot >= permits =>
        {
            AcquireOutcome::Indeterminate {
                // The script may have stored the attempt in a slot this client cannot name;
                // a replay (or the TTL) settles it.
                attempt: request.attempt().clone(),
                detail: FailureDetail::new(
                    FailureKind::MalformedReply,
                    format!("slot {slot} of a lease of {permits} permits"),
                ),
            }
        }
        Ok(AcquireReply::Acquired { ttl, token, slot }) => AcquireOutcome::Acquired(held(
            ValidityBudget::acquired(sent_at, request.ttl(), ttl, drift),
            token,
            slot,
        )),
        Ok(AcquireReply::Replayed { pttl, token, slot }) => AcquireOutcome::Replayed(held(
            ValidityBudget::replayed(sent_at, request.ttl(), pttl, drift),
            token,
            slot,
        )),
        Ok(AcquireReply::Contended { pttl }) => AcquireOutcome::Contended {
            retry_after: session.retry_after(pttl),
        },
        Ok(AcquireReply::Delayed { pttl }) => AcquireOutcome::LockDelayed {
            retry_after: session.retry_after(pttl),
        },
        Ok(AcquireReply::Conflict { pttl }) => AcquireOutcome::OwnerOperationConflict {
            retry_after: session.retry_after(pttl),
        },
        Err(SendFailure::NotSent(detail)) if detail.kind == FailureKind::QueueFull => {
            AcquireOutcome::QueueFull { detail }
        }
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
