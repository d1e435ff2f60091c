//! The leases a runtime holds now: each one's admission under the runtime's limit, and the
//! lease actor a drain must reach. Shared by every clone of a
//! [`LeaseRuntime`](crate::runtime::LeaseRuntime).
//!
//! An [`Admission`] is taken before any I/O (the limit and a drain both refuse there) and
//! lives as long as its lease: the lease actor gives it back when the release is over, just
//! before its report, so a caller that reads the report finds the runtime's limit free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ractor::ActorRef;
use tokio::sync::{Semaphore, TryAcquireError, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::runtime::RuntimeError;
use crate::runtime::lease_actor::message::LeaseActorMsg;

/// The live leases of one runtime.
#[derive(Debug)]
pub(crate) struct Registry {
    max: usize,
    permits: Semaphore,
    actors: Mutex<Actors>,
    /// How many leases are admitted; a drain waits for zero.
    live: watch::Sender<usize>,
    /// Cancelled when a drain begins: acquisitions in flight give up.
    drain: CancellationToken,
    /// Acquisitions a drain gave up whose release could not be confirmed: each may have
    /// taken its lease, held until its TTL ends. Counted in the drain's `left`.
    unreleased: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Default)]
struct Actors {
    next_id: u64,
    /// Every admission by id, with its lease actor once it runs.
    by_id: HashMap<u64, Option<ActorRef<LeaseActorMsg>>>,
}

impl Registry {
    pub(crate) fn new(max: usize) -> Arc<Registry> {
        Arc::new(Registry {
            max,
            permits: Semaphore::new(max),
            actors: Mutex::new(Actors::default()),
            live: watch::Sender::new(0),
            drain: CancellationToken::new(),
            unreleased: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// An acquisition given up for a drain could not be released for sure. Call it while
    /// its admission still lives, so that the drain, which waits for none to live, reads
    /// it in its summary.
    pub(crate) fn note_unreleased(&self) {
        self.unreleased
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Acquisitions given up for a drain whose release could not be confirmed.
    pub(crate) fn unreleased(&self) -> usize {
        self.unreleased.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Leases admitted now.
    pub(crate) fn live(&self) -> usize {
        *self.live.borrow()
    }

    /// Whether a drain began: no lease is admitted any more.
    pub(crate) fn draining(&self) -> bool {
        self.drain.is_cancelled()
    }

    /// Completes when a drain begins.
    pub(crate) async fn drain_began(&self) {
        self.drain.cancelled().await;
    }

    fn actors(&self) -> std::sync::MutexGuard<'_, Actors> {
        // A panic while holding the lock leaves the map consistent (every update is one
        // insert or remove), so a poisoned lock is used as is.
        self.actors.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits one more lease, before any I/O.
    pub(crate) fn admit(self: &Arc<Self>) -> Result<Admission, RuntimeError> {
        // The permit is given back by the admission's drop: an owned permit would widen
        // every held lease's actor state by its own `Arc`.
        match self.permits.try_acquire() {
            Ok(permit) => permit.forget(),
            Err(TryAcquireError::Closed) => return Err(RuntimeError::ShuttingDown),
            Err(TryAcquireError::NoPermits) => {
                return Err(RuntimeError::LimitReached { max: self.max });
            }
        };
        let id = {
            let mut actors = self.actors();
            let id = actors.next_id;
            actors.next_id += 1;
            actors.by_id.insert(id, None);
            id
        };
        self.live.send_modify(|n| *n += 1);
        Ok(Admission {
            id,
            registry: Arc::clone(self),
        })
    }

    /// The lease actor of admission `id` started. If a drain began meanwhile, it is told at
    /// once.
    pub(crate) fn started(&self, id: u64, actor: &ActorRef<LeaseActorMsg>) {
        let draining = {
            let mut actors = self.actors();
            let Some(entry) = actors.by_id.get_mut(&id) else {
                return; // Already over.
            };
            *entry = Some(actor.clone());
            self.draining()
        };
        if draining {
            let _ = actor.send_message(LeaseActorMsg::drain());
        }
    }

    /// Begins a drain: no lease is admitted from now on; the lease actors running now.
    pub(crate) fn close(&self) -> Vec<ActorRef<LeaseActorMsg>> {
        let actors = self.actors();
        self.permits.close();
        self.drain.cancel();
        Self::in_order(&actors)
    }

    /// The lease actors running now.
    pub(crate) fn running(&self) -> Vec<ActorRef<LeaseActorMsg>> {
        Self::in_order(&self.actors())
    }

    /// The running lease actors in the order they were admitted: a drain tells them in
    /// that order, the same on every run.
    fn in_order(actors: &Actors) -> Vec<ActorRef<LeaseActorMsg>> {
        let mut running: Vec<_> = actors
            .by_id
            .iter()
            .filter_map(|(id, actor)| Some((*id, actor.clone()?)))
            .collect();
        running.sort_unstable_by_key(|(id, _)| *id);
        // A deliberate bug the simulation must find: the first lease is forgotten.
        #[cfg(feature = "__simulation")]
        if crate::simulation::bugs().drain_forgets_a_lease && !running.is_empty() {
            running.remove(0);
        }
        running.into_iter().map(|(_, actor)| actor).collect()
    }

    /// Waits until no lease is admitted, or `deadline`; whether none is.
    pub(crate) async fn wait_empty_until(&self, deadline: Instant) -> bool {
        let mut live = self.live.subscribe();
        tokio::time::timeout_at(deadline, live.wait_for(|n| *n == 0))
            .await
            .is_ok()
    }
}

/// One lease's place in its runtime: counted against the limit (one of the registry's
/// permits, given back when dropped) and reachable by a drain until dropped.
#[derive(Debug)]
pub(crate) struct Admission {
    id: u64,
    registry: Arc<Registry>,
}

impl Admission {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.registry.actors().by_id.remove(&self.id);
        self.registry.live.send_modify(|n| *n = n.saturating_sub(1));
        self.registry.permits.add_permits(1);
    }
}
