//! `LeaseContext`: what a worker sees of its lease.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::{LeaseState, Replication};
use crate::protocol::{FencingToken, Purpose, ResourceDigest};
use crate::runtime::CancelReason;
use crate::runtime::lease_actor::published::{Subscriber, WorkLink};

/// The lease as the LeaseActor last confirmed it; published on every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseStatus {
    /// The handle's state.
    pub state: LeaseState,
    /// When local validity ends, while ACTIVE and not cancelled.
    pub valid_until: Option<Instant>,
    /// The local validity end of the last confirmation, kept after a cancellation: the
    /// instant by which the worker must have stopped (under `Kill` it is stopped then).
    pub stop_by: Instant,
    /// Renewals confirmed so far.
    pub renewals: u64,
    /// Why [`LeaseCancelled`](crate::runtime::LeaseCancelled) was sent, once it was.
    pub cancelled: Option<CancelReason>,
}

impl LeaseStatus {
    /// Validity left at `now`; zero once cancelled or not ACTIVE.
    pub fn remaining_at(&self, now: Instant) -> Duration {
        match (self.cancelled, self.valid_until) {
            (None, Some(until)) => until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }
}

/// Handed to the worker when it starts: its fencing token, a cancellation token, and a live
/// view of the lease's validity. Cheap to clone.
///
/// The cancellation token is cancelled at the moment [`LeaseCancelled`] is sent (exactly
/// once), and also when the LeaseActor ends for any reason — so a token obtained after the
/// loss is already cancelled.
///
/// [`LeaseCancelled`]: crate::runtime::LeaseCancelled
#[derive(Debug, Clone)]
pub struct LeaseContext {
    token: FencingToken,
    /// The status and the cancellation, and beside them the lease's facts: the work's
    /// future and every clone carry a context for as long as the lease is held, so it
    /// stays a few pointers wide.
    status: Subscriber,
}

impl LeaseContext {
    pub(crate) fn new(token: FencingToken, status: Subscriber) -> Self {
        Self { token, status }
    }

    /// The link work run in its caller's future keeps to its lease actor
    /// (`run_under_lease`).
    pub(crate) fn work_link(&self) -> WorkLink {
        self.status.work_link()
    }

    /// The slot held, `0 .. permits`, under a counted lease
    /// ([`LeaseRequestBuilder::permits`](crate::protocol::LeaseRequestBuilder::permits));
    /// `None` under a plain lease. Where the effects of a counted lease land, the pair
    /// (slot, token) is what fences: each slot's tokens increase.
    pub fn slot(&self) -> Option<u16> {
        self.status.facts().slot
    }

    /// The fencing token: pass it with every write the lease protects.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// What the lease is for.
    pub fn purpose(&self) -> &Purpose {
        &self.status.facts().purpose
    }

    /// Which resource.
    pub fn resource(&self) -> &ResourceDigest {
        &self.status.facts().resource
    }

    /// How many replicas acknowledged the acquisition, as the lease's handle reported it
    /// ([`LeaseHandle::replication`](crate::LeaseHandle::replication)); fixed for the
    /// lease's life. A worker that must not run on a lease a failover could lose checks it
    /// before its first write.
    pub fn replication(&self) -> &Replication {
        self.status.facts().replication()
    }

    /// Completes when the lease is cancelled (or its actor ended); at once if it already
    /// was. `Send`, so a spawned task may await it; pin it (`tokio::pin!`, `Box::pin`) to
    /// poll it by reference, as `select!` in a loop does.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing; call again.
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + '_ {
        self.status.cancelled()
    }

    /// Whether the lease was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.status.is_cancelled()
    }

    /// Why the lease was cancelled, once it was (`None` also after the lease actor ended
    /// without a cancellation, e.g. when the work completed).
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.status.get().cancelled
    }

    /// The cancellation as a token, e.g. to make child tokens for sub-tasks (a child of a
    /// cancelled token is born cancelled). Made on the first call for the lease (a held
    /// lease that is never asked keeps none); cancelled already if the lease was.
    pub fn cancellation_token(&self) -> &CancellationToken {
        self.status.token()
    }

    /// Local validity left now; zero once cancelled.
    pub fn remaining(&self) -> Duration {
        self.status.get().remaining_at(Instant::now())
    }

    /// The instant by which the work must have stopped: the local validity end of the last
    /// confirmation, also after a cancellation (see [`LeaseStatus::stop_by`]).
    pub fn stop_by(&self) -> Instant {
        self.status.get().stop_by
    }

    /// The latest published status.
    pub fn status(&self) -> LeaseStatus {
        self.status.get()
    }

    /// Waits until the status changes — a renewal moved [`stop_by`](Self::stop_by), the
    /// lease was cancelled, or the handle's state changed — and says whether it did:
    /// `false` once the lease actor is gone and nothing will change again. Each change is
    /// seen once per context (clones share nothing of this); several changes between two
    /// calls are seen as one, so read [`status`](Self::status) after it returns.
    ///
    /// For work that hands its deadline to something outside the process (a child
    /// process, a remote executor) and must move it with every renewal.
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet waited for stays pending for the next call.
    pub async fn changed(&mut self) -> bool {
        self.status.changed().await
    }
}
