//! A service's own actors around lease actors: what an application supervisor that links
//! them receives, and what a stopped worker leaves behind. `MemoryBackend`, paused time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::app::AppSupervisor;
use crate::common::workers::Deaf;

const TTL: Duration = Duration::from_secs(3);

fn runtime() -> (LeaseRuntime, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (LeaseRuntime::new(client), backend)
}

fn request(client: &LeaseClient) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("service").unwrap(),
        ResourceDigest::of("partition-1"),
        client.new_attempt("op").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap()
}

async fn acquired(client: &LeaseClient) -> LeaseHandle {
    client
        .try_acquire(&request(client))
        .await
        .unwrap()
        .into_handle()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_supervisor_that_keeps_ractor_s_default_is_stopped_by_the_first_lease_end() {
    let (rt, _) = runtime();
    let (tx, mut events) = mpsc::unbounded_channel();
    let (app, _) = Actor::spawn(None, AppSupervisor { filter: false }, tx)
        .await
        .unwrap();
    let (worker, _) = Actor::spawn(None, Deaf, ()).await.unwrap();
    let handle = acquired(rt.client()).await;
    let lease = rt
        .attach(
            handle,
            worker.clone(),
            Some(app.get_cell()),
            CancelPolicy::Kill,
        )
        .await
        .unwrap();
    let report = lease.release().await;
    assert_eq!(report.release, ReleaseOutcome::Released);
    let (lease_end, event) = events.recv().await.unwrap();
    assert!(lease_end, "a normal release is a lease end: {event}");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        app.get_status(),
        ActorStatus::Stopped,
        "what attach's docs warn of"
    );
    worker.stop(None);
}

#[tokio::test(start_paused = true)]
async fn a_supervisor_that_lets_lease_ends_pass_outlives_every_lease_and_still_sees_a_kill() {
    let (rt, backend) = runtime();
    let (tx, mut events) = mpsc::unbounded_channel();
    let (app, _) = Actor::spawn(None, AppSupervisor { filter: true }, tx)
        .await
        .unwrap();
    let (worker, _) = Actor::spawn(None, Deaf, ()).await.unwrap();
    let attach = |handle| {
        rt.attach(
            handle,
            worker.clone(),
            Some(app.get_cell()),
            CancelPolicy::NotifyOnly,
        )
    };
    // Released, three times; then lost behind its back.
    for _ in 0..3 {
        let lease = attach(acquired(rt.client()).await).await.unwrap();
        tokio::time::sleep(TTL).await;
        assert_eq!(lease.release().await.release, ReleaseOutcome::Released);
    }
    let lease = attach(acquired(rt.client()).await).await.unwrap();
    backend.delete(&rt.client().keys(
        &Purpose::new("service").unwrap(),
        &ResourceDigest::of("partition-1"),
    ));
    let report = lease.wait().await;
    assert!(report.cancelled.is_some());
    for round in 0..4 {
        let (lease_end, event) = events.recv().await.unwrap();
        assert!(lease_end, "round {round}: {event}");
    }
    assert_eq!(app.get_status(), ActorStatus::Running);
    // Killed from outside: not a lease end, so the application's own policy applies.
    let lease = attach(acquired(rt.client()).await).await.unwrap();
    lease.lease_actor().kill();
    let (lease_end, event) = events.recv().await.unwrap();
    assert!(!lease_end, "a kill is not a lease end: {event}");
    worker.stop(None);
    app.stop(None);
}

/// Holds a clock reading of its own drop: when what a worker held was freed.
struct DroppedAt(Arc<Mutex<Option<Instant>>>);

impl Drop for DroppedAt {
    fn drop(&mut self) {
        if let Ok(mut at) = self.0.lock() {
            *at = Some(Instant::now());
        }
    }
}

/// A worker whose state records when it was dropped, and which ignores its cancellation.
struct Holder;

impl Actor for Holder {
    type Msg = LeaseCancelled;
    type State = DroppedAt;
    type Arguments = Arc<Mutex<Option<Instant>>>;

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        at: Self::Arguments,
    ) -> Result<DroppedAt, ActorProcessingErr> {
        Ok(DroppedAt(at))
    }

    async fn handle(
        &self,
        _: ActorRef<LeaseCancelled>,
        _: LeaseCancelled,
        _: &mut DroppedAt,
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

/// ractor hands a stopped worker's final state to its supervisor, the lease actor; what
/// the worker held (a connection, a file lock) must be freed when it is stopped at the end
/// of validity, not after the release's retries against an unreachable Redis.
#[tokio::test(start_paused = true)]
async fn a_killed_worker_s_state_is_dropped_at_validity_end_not_after_the_release() {
    let (rt, backend) = runtime();
    let dropped = Arc::new(Mutex::new(None));
    let at = Arc::clone(&dropped);
    let job = rt
        .spawn_under_lease(
            &request(rt.client()),
            Holder,
            move |_| at,
            CancelPolicy::Kill,
        )
        .await
        .unwrap()
        .started()
        .unwrap();
    backend.set_fault(Some(MemoryFault::Unavailable));
    let stop_by = job.context().stop_by();
    let report = job.wait().await;
    let reported = Instant::now();
    assert!(matches!(report.end, JobEnd::Cancelled { killed: true, .. }));
    assert!(
        reported > stop_by,
        "the release's retries take time: {:?}",
        reported - stop_by
    );
    let dropped = dropped
        .lock()
        .unwrap()
        .expect("the worker's state was dropped");
    assert_eq!(
        dropped,
        stop_by,
        "dropped {:?} after validity end",
        dropped - stop_by
    );
}
