//! A lease's published status: one writer (its lease actor), any number of readers (the
//! contexts of its work), each able to wait for the next change.
//!
//! Why not `tokio::sync::watch`: its shared state keeps eight wakers' lists for many
//! concurrent waiters, 384 bytes per held lease; here one list, about a third of that
//! (docs/performance.md, "Memory"). The work of one lease has few waiters.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::lease::Replication;
use crate::protocol::{Purpose, ResourceDigest};
use crate::runtime::LeaseStatus;

/// A new status, published by `Publisher` and read by its `Subscriber`s, beside the lease's
/// `facts`, which never change.
pub(crate) fn channel(initial: LeaseStatus, facts: LeaseFacts) -> (Publisher, Subscriber) {
    let shared = Arc::new(Shared {
        facts,
        current: Mutex::new(Current {
            status: initial,
            version: 0,
            closed: false,
        }),
        changed: Notify::new(),
    });
    let subscriber = Subscriber {
        shared: Arc::clone(&shared),
        seen: 0,
    };
    (Publisher(shared), subscriber)
}

/// What a lease's contexts say of it that never changes; kept once per lease, beside its
/// published status.
#[derive(Debug)]
pub(crate) struct LeaseFacts {
    pub(crate) purpose: Purpose,
    pub(crate) resource: ResourceDigest,
    pub(crate) replication: Replication,
    pub(crate) slot: Option<u16>,
}

#[derive(Debug)]
struct Shared {
    /// What the lease's contexts say of it that never changes: kept once per lease here
    /// rather than in every context (docs/performance.md, "R with one actor per lease").
    facts: LeaseFacts,
    current: Mutex<Current>,
    /// Woken on every change and when the publisher goes.
    changed: Notify,
}

#[derive(Debug)]
struct Current {
    status: LeaseStatus,
    /// Bumped on every change, so a subscriber knows whether it saw the latest.
    version: u64,
    /// The publisher is gone: nothing will change again.
    closed: bool,
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, Current> {
        // Every update under the lock is a plain assignment: a poisoned lock is used as is.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The lease actor's end.
#[derive(Debug)]
pub(crate) struct Publisher(Arc<Shared>);

impl Publisher {
    /// Publishes `status`; subscribers waiting are woken if it differs from the last.
    pub(crate) fn publish(&self, status: LeaseStatus) {
        {
            let mut current = self.0.current();
            if current.status == status {
                return;
            }
            current.status = status;
            current.version += 1;
        }
        self.0.changed.notify_waiters();
    }

    /// The status published last.
    pub(crate) fn get(&self) -> LeaseStatus {
        self.0.current().status
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.0.current().closed = true;
        self.0.changed.notify_waiters();
    }
}

/// A reader's end; a clone has seen what the original saw.
#[derive(Debug, Clone)]
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
    /// The version this subscriber last returned from `changed`.
    seen: u64,
}

impl Subscriber {
    /// The lease's facts, which never change.
    pub(crate) fn facts(&self) -> &LeaseFacts {
        &self.shared.facts
    }

    /// The status published last.
    pub(crate) fn get(&self) -> LeaseStatus {
        self.shared.current().status
    }

    /// Waits for a status this subscriber has not seen: `true` when there is one, `false`
    /// once the publisher is gone and nothing will change again. Cancel safe.
    pub(crate) async fn changed(&mut self) -> bool {
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            // Registered before the check, so a change between the check and the wait
            // still wakes it.
            notified.as_mut().enable();
            {
                let current = self.shared.current();
                if current.version != self.seen {
                    self.seen = current.version;
                    return true;
                }
                if current.closed {
                    return false;
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::lease::LeaseState;
    use crate::runtime::CancelReason;

    fn channel(initial: LeaseStatus) -> (Publisher, Subscriber) {
        let facts = LeaseFacts {
            purpose: Purpose::new("p").unwrap(),
            resource: ResourceDigest::of(b"r"),
            replication: Replication::NotRequested,
            slot: None,
        };
        super::channel(initial, facts)
    }

    fn status(renewals: u64) -> LeaseStatus {
        LeaseStatus {
            state: LeaseState::Active,
            valid_until: None,
            stop_by: Instant::now(),
            renewals,
            cancelled: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_seen_once_per_subscriber_and_a_same_status_is_no_change() {
        let initial = status(0);
        let (tx, mut rx) = channel(initial);
        let mut other = rx.clone();
        assert_eq!(rx.get(), initial);
        tx.publish(initial);
        let nothing = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
        assert!(nothing.is_err(), "the same status again is no change");
        tx.publish(status(1));
        tx.publish(status(2));
        assert!(rx.changed().await, "two changes seen as one");
        assert_eq!(rx.get().renewals, 2);
        assert!(other.changed().await, "each subscriber sees it");
        let nothing = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
        assert!(nothing.is_err(), "seen already");
        assert_eq!(tx.get().renewals, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_woken_by_a_change_and_by_the_publisher_going() {
        let (tx, mut rx) = channel(status(0));
        let waiter = tokio::spawn(async move {
            let first = rx.changed().await;
            let cancelled = rx.get().cancelled;
            let second = rx.changed().await;
            (first, cancelled, second)
        });
        tokio::task::yield_now().await;
        let mut cancelled = status(0);
        cancelled.cancelled = Some(CancelReason::Shutdown);
        tx.publish(cancelled);
        tokio::task::yield_now().await;
        drop(tx);
        let (first, reason, second) = waiter.await.unwrap();
        assert!(first);
        assert_eq!(reason, Some(CancelReason::Shutdown));
        assert!(!second, "gone: nothing will change");
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_before_the_publisher_went_is_still_seen() {
        let (tx, mut rx) = channel(status(0));
        tx.publish(status(1));
        drop(tx);
        assert!(rx.changed().await);
        assert!(!rx.changed().await);
        assert_eq!(rx.get().renewals, 1);
    }
}
