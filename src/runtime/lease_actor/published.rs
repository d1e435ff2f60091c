//! A lease's published status: one writer (its lease actor), any number of readers (the
//! contexts of its work), each able to wait for the next change — and the lease's
//! cancellation, which is a moment of that status.
//!
//! Why not `tokio::sync::watch`: its shared state keeps eight wakers' lists for many
//! concurrent waiters, 384 bytes per held lease; here one list, about a third of that
//! (docs/performance.md, "Memory"). The work of one lease has few waiters.
//!
//! Why the cancellation is not a `CancellationToken` of its own: a token is an allocation of
//! 128 bytes per held lease, and most work only awaits `cancelled()`. One is made when a
//! context is first asked for it, under the same lock as the cancellation, so it is born
//! cancelled when it comes late.
//!
//! Work that `run_under_lease` runs in its caller's future is stopped through the same
//! shared state: the actor's `WorkSwitch` kills it, the caller's future polls its
//! `WorkLink` before the work, and the work's guard marks its end there, where a release
//! waits for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker, ready};

use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio_util::sync::CancellationToken;

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
            cancelled: false,
            kill: false,
            kill_waker: None,
            work_ended: false,
            closed: false,
        }),
        changed: Notify::new(),
        token: OnceLock::new(),
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
    /// How many replicas acknowledged the acquisition; `None` for `NotRequested`, the
    /// usual case, which then costs a pointer rather than the enum's 32 bytes.
    replication: Option<Box<Replication>>,
    pub(crate) slot: Option<u16>,
    /// One span for the lease's whole life: its actor handles every event in it, and the
    /// work run in its caller's future is polled in it.
    pub(crate) span: tracing::Span,
}

impl LeaseFacts {
    pub(crate) fn new(
        purpose: Purpose,
        resource: ResourceDigest,
        replication: Replication,
        slot: Option<u16>,
        span: tracing::Span,
    ) -> Self {
        let replication = match replication {
            Replication::NotRequested => None,
            other => Some(Box::new(other)),
        };
        Self {
            purpose,
            resource,
            replication,
            slot,
            span,
        }
    }

    /// How many replicas acknowledged the acquisition.
    pub(crate) fn replication(&self) -> &Replication {
        static NOT_REQUESTED: Replication = Replication::NotRequested;
        self.replication.as_deref().unwrap_or(&NOT_REQUESTED)
    }
}

#[derive(Debug)]
struct Shared {
    /// What the lease's contexts say of it that never changes: kept once per lease here
    /// rather than in every context (docs/performance.md, "R with one actor per lease").
    facts: LeaseFacts,
    current: Mutex<Current>,
    /// Woken on every change, on the cancellation and when the publisher goes.
    changed: Notify,
    /// The cancellation as a token, made when a context first asks for it; set and
    /// cancelled only under `current`'s lock.
    token: OnceLock<CancellationToken>,
}

#[derive(Debug)]
struct Current {
    status: LeaseStatus,
    /// Bumped on every change, so a subscriber knows whether it saw the latest.
    version: u64,
    /// The lease was cancelled, or its actor finished: what `cancelled()` waits for.
    cancelled: bool,
    /// The work run in its caller's future must stop now (`WorkSwitch::kill`).
    kill: bool,
    /// That caller's future, to wake when it must stop: polled in place, it keeps no
    /// `Notified` of its own.
    kill_waker: Option<Waker>,
    /// That work was dropped, or ended (`WorkGuard`'s drop).
    work_ended: bool,
    /// The publisher is gone: nothing will change again.
    closed: bool,
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, Current> {
        // Every update under the lock is a plain assignment: a poisoned lock is used as is.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets a flag of `current` and wakes every waiter (each checks its own condition),
    /// the work's caller among them.
    fn set(&self, flag: impl FnOnce(&mut Current)) {
        let waker = {
            let mut current = self.current();
            flag(&mut current);
            current.kill_waker.take()
        };
        self.changed.notify_waiters();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Completes once `done` holds of `current`; at once if it does. Cancel safe.
    async fn wait_for(&self, done: impl Fn(&Current) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the check, so a change between the check and the wait
            // still wakes it.
            notified.as_mut().enable();
            if done(&self.current()) {
                return;
            }
            notified.await;
        }
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

    /// The lease's span.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.0.facts.span
    }

    /// The switch that stops the work run in its caller's future, and tells when it ended.
    pub(crate) fn work_switch(&self) -> WorkSwitch {
        WorkSwitch(Arc::clone(&self.0))
    }

    /// Cancels the lease for its contexts (once; again is nothing): `cancelled()` completes
    /// and the token, if one was made, fires.
    pub(crate) fn cancel(&self) {
        let token = &self.0.token;
        self.0.set(|current| {
            current.cancelled = true;
            if let Some(token) = token.get() {
                token.cancel();
            }
        });
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // The actor is gone: its contexts count as cancelled (invariant 6).
        self.cancel();
        self.0.set(|current| current.closed = true);
    }
}

/// The lease actor's hold on work that runs in its caller's future (`run_under_lease`):
/// what a task's `JoinHandle` would be, without a task. It may outlive the actor (a killed
/// actor's release waits for the work's end in a task of its own).
#[derive(Debug)]
pub(crate) struct WorkSwitch(Arc<Shared>);

impl WorkSwitch {
    /// Stops the work: its caller's future drops it the next time it is polled, without
    /// polling it again.
    pub(crate) fn kill(&self) {
        self.0.set(|current| current.kill = true);
    }

    /// Completes once the work was dropped or ended.
    pub(crate) async fn ended(&self) {
        self.0.wait_for(|current| current.work_ended).await;
    }
}

/// Kept beside the work in its caller's future: says when the work must stop, and that it
/// ended (`WorkGuard`, which holds it, says so when dropped after the work).
#[derive(Debug)]
pub(crate) struct WorkLink(Arc<Shared>);

impl WorkLink {
    /// The lease's span, which the work is polled in.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.0.facts.span
    }

    /// The work was dropped or ended.
    pub(crate) fn ended(&self) {
        self.0.set(|current| current.work_ended = true);
    }

    /// Ready once the work must stop: killed, or its lease actor gone (nobody renews the
    /// lease any more). Pending, it wakes `cx` when that happens.
    pub(crate) fn poll_killed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut current = self.0.current();
        if current.kill || current.closed {
            return Poll::Ready(());
        }
        match &mut current.kill_waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

pin_project! {
    /// `Subscriber::cancelled`: a future written out, as the work keeps it for as long as
    /// the lease is held (an `async fn` would keep its `Notified` pinned twice over).
    pub(crate) struct Cancelled<'a> {
        subscriber: &'a Subscriber,
        // Made before each check of the flag: `notify_waiters` wakes a `Notified` from
        // its making, so a cancellation between the check and the poll is not missed.
        #[pin]
        notified: Notified<'a>,
    }
}

impl Future for Cancelled<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        loop {
            if this.subscriber.is_cancelled() {
                return Poll::Ready(());
            }
            ready!(this.notified.as_mut().poll(cx));
            // Woken by some change: wait for the next one unless it was the cancellation.
            this.notified.set(this.subscriber.shared.changed.notified());
        }
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

    /// Whether the lease was cancelled (or its actor finished).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.shared.current().cancelled
    }

    /// Completes once the lease is cancelled (or its actor finished); at once if it was.
    /// Cancel safe.
    pub(crate) fn cancelled(&self) -> Cancelled<'_> {
        Cancelled {
            subscriber: self,
            notified: self.shared.changed.notified(),
        }
    }

    /// The link the work keeps to its lease actor while it runs in its caller's future.
    pub(crate) fn work_link(&self) -> WorkLink {
        WorkLink(Arc::clone(&self.shared))
    }

    /// The cancellation as a token: made on the first call, cancelled already if the
    /// lease was.
    pub(crate) fn token(&self) -> &CancellationToken {
        // Under the lock `Publisher::cancel` takes: either it finds the token and cancels
        // it, or the token is made after and is born cancelled.
        let current = self.shared.current();
        self.shared.token.get_or_init(|| {
            let token = CancellationToken::new();
            if current.cancelled {
                token.cancel();
            }
            token
        })
    }

    /// Waits for a status this subscriber has not seen: `true` when there is one, `false`
    /// once the publisher is gone and nothing will change again. Cancel safe.
    pub(crate) async fn changed(&mut self) -> bool {
        let seen = self.seen;
        self.shared
            .wait_for(|current| current.version != seen || current.closed)
            .await;
        let version = self.shared.current().version;
        let changed = version != seen;
        self.seen = version;
        changed
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
        let facts = LeaseFacts::new(
            Purpose::new("p").unwrap(),
            ResourceDigest::of(b"r"),
            Replication::NotRequested,
            None,
            tracing::Span::none(),
        );
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
