//! `attach` and `supervise` on `MemoryBackend` under paused tokio time (`run_under_lease`
//! has tests/run_under_lease.rs).

mod common;

use std::time::Duration;

use common::entry::{TTL, keys, request, runtime};
use common::workers::UntilCancelled;
use leasehold::runtime::*;
use leasehold::*;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

/// A long-running actor that takes leases over its life.
struct Partitioner;

enum PartitionMsg {
    Cancelled(LeaseCancelled),
}

impl From<LeaseCancelled> for PartitionMsg {
    fn from(c: LeaseCancelled) -> Self {
        Self::Cancelled(c)
    }
}

impl Actor for Partitioner {
    type Msg = PartitionMsg;
    type State = mpsc::UnboundedSender<LeaseCancelled>;
    type Arguments = mpsc::UnboundedSender<LeaseCancelled>;

    async fn pre_start(
        &self,
        _: ActorRef<PartitionMsg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _: ActorRef<PartitionMsg>,
        msg: PartitionMsg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let PartitionMsg::Cancelled(c) = msg;
        let _ = tx.send(c);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn attached_worker_keeps_running_across_leases_and_hears_of_a_loss() {
    let (rt, backend) = runtime();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (worker, _) = Actor::spawn(None, Partitioner, tx).await.unwrap();
    // First lease: held for a while, released by the worker.
    let handle = rt
        .client()
        .try_acquire(&request(&rt, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let lease = rt
        .attach(handle, worker.clone(), None, CancelPolicy::NotifyOnly)
        .await
        .unwrap();
    sleep(TTL * 2).await;
    assert!(!lease.context().is_cancelled());
    let report = lease.release().await;
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
    // Second lease: lost behind its back.
    let handle = rt
        .client()
        .try_acquire(&request(&rt, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let lease = rt
        .attach(handle, worker.clone(), None, CancelPolicy::NotifyOnly)
        .await
        .unwrap();
    backend.delete(&keys(&rt));
    let c = rx.recv().await.unwrap();
    assert_eq!(c.reason, CancelReason::Lost(LostReason::Absent));
    let report = lease.wait().await;
    assert!(report.cancelled.is_some());
    assert_eq!(worker.get_status(), ractor::ActorStatus::Running);
    assert!(rx.try_recv().is_err(), "exactly one cancellation");
    worker.stop(None);
}

/// The worker hears of the loss and then releases, as an attached worker does: the report
/// says the lease ended cancelled, as it does when the worker waits instead.
#[tokio::test(start_paused = true)]
async fn an_attached_lease_released_after_a_loss_reports_the_cancellation() {
    let (rt, backend) = runtime();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (worker, _) = Actor::spawn(None, Partitioner, tx).await.unwrap();
    for release in [true, false] {
        let handle = rt
            .client()
            .try_acquire(&request(&rt, Duration::ZERO))
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        let lease = rt
            .attach(handle, worker.clone(), None, CancelPolicy::NotifyOnly)
            .await
            .unwrap();
        backend.delete(&keys(&rt));
        let lost = CancelReason::Lost(LostReason::Absent);
        let cancelled = rx.recv().await.unwrap();
        assert_eq!(cancelled.reason, lost);
        // The absolute instant the work must stop by: the context's, and as far away as the
        // validity left said when it was sent (no time passed since, under paused time).
        assert_eq!(cancelled.stop_by, lease.context().stop_by());
        assert_eq!(
            cancelled.stop_by - Instant::now(),
            cancelled.remaining_validity
        );
        let report = if release {
            lease.release().await
        } else {
            lease.wait().await
        };
        assert_eq!(
            report.end,
            JobEnd::Cancelled {
                reason: lost,
                killed: false
            },
            "release: {release}"
        );
    }
    worker.stop(None);
}

async fn holding(w: &mut tokio::sync::watch::Receiver<SupervisorState>) -> LeaseContext {
    loop {
        if let SupervisorState::Holding { context, .. } = &*w.borrow_and_update() {
            return context.clone();
        }
        w.changed().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn supervisor_reacquires_after_a_loss_with_a_larger_token() {
    let (rt, backend) = runtime();
    let sup = rt
        .supervise(
            request(&rt, Duration::from_secs(10)),
            |_ctx| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    let mut w = sup.watch();
    let first = holding(&mut w).await;
    backend.delete(&keys(&rt));
    w.changed().await.unwrap();
    let second = holding(&mut w).await;
    assert!(second.token() > first.token());
    assert_eq!(
        first.cancel_reason(),
        Some(CancelReason::Lost(LostReason::Absent)),
        "the first term's worker was told of the loss"
    );
    let summary = sup.shutdown().await;
    assert_eq!(summary.terms, 2);
    let last = summary.last.expect("the last term's report");
    assert_eq!(last.token, second.token());
    assert_eq!(
        last.cancelled.as_ref().map(|c| c.reason),
        Some(CancelReason::Shutdown)
    );
    assert_eq!(last.release, ReleaseOutcome::Released);
    assert_eq!(backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn two_supervisors_elect_one_leader_and_hand_over_on_shutdown() {
    let (rt, _) = runtime();
    let a = rt
        .supervise(
            request(&rt, Duration::from_secs(10)),
            |_| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    let mut wa = a.watch();
    let leader_token = holding(&mut wa).await.token();
    let b = rt
        .supervise(
            request(&rt, Duration::from_secs(10)),
            |_| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    let mut wb = b.watch();
    sleep(TTL * 3).await;
    assert_eq!(
        *wb.borrow(),
        SupervisorState::Acquiring,
        "one leader at a time"
    );
    let handed_over = Instant::now();
    let _ = a.shutdown().await;
    let next = holding(&mut wb).await.token();
    assert!(next > leader_token);
    assert!(
        handed_over.elapsed() < Duration::from_millis(100),
        "the follower wakes on the release notice: {:?}",
        handed_over.elapsed()
    );
    let _ = b.shutdown().await;
}
