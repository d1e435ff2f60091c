//! What the runtime refuses before a worker starts: past its lease limit, a TTL without
//! room for renewals, a contended lease; and a finished job's slot is free at once.

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::sync::mpsc;

use crate::worker::{OnCancel, Worker, WorkerArgs, WorkerMsg};
use crate::{Setup, request, setup, start};

#[tokio::test(start_paused = true)]
async fn the_lease_limit_is_a_typed_error_before_any_io() {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let s = Setup {
        backend: backend.clone(),
        runtime: LeaseRuntime::new(client).with_max_leases(1),
    };
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let calls = backend.calls();
    let (tx, _rx2) = mpsc::unbounded_channel();
    let err = s
        .runtime
        .spawn_under_lease(
            &request(&s, "other"),
            Worker,
            move |_| WorkerArgs {
                on_cancel: OnCancel::Exit,
                events: tx,
            },
            CancelPolicy::Kill,
        )
        .await
        .unwrap_err();
    assert_eq!(err, RuntimeError::LimitReached { max: 1 });
    assert_eq!(backend.calls(), calls);
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let _ = job.wait().await;
}

// Real threads: the actor stopping and the caller resuming race only there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_slot_is_free_when_its_wait_returns() {
    // With room for one lease, the next job starts right after the last one's `wait()`:
    // the slot is given back before the report, never a moment after it.
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let s = Setup {
        backend,
        runtime: LeaseRuntime::new(client).with_max_leases(1),
    };
    for round in 0..50 {
        let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
        job.worker().send_message(WorkerMsg::Exit).unwrap();
        let report = job.wait().await;
        assert_eq!(report.release, ReleaseOutcome::Released, "round {round}");
        assert_eq!(
            s.runtime.held(),
            0,
            "round {round}: the slot is still taken"
        );
    }
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let _ = job.wait().await;
}

#[tokio::test(start_paused = true)]
async fn a_ttl_without_room_for_renewals_is_rejected_before_any_io() {
    let s = setup();
    let req = LeaseRequest::builder(
        Purpose::new("job").unwrap(),
        ResourceDigest::of("r"),
        s.runtime.client().new_attempt("run").unwrap(),
    )
    .ttl(Duration::from_millis(300))
    .build()
    .unwrap();
    let (tx, _rx) = mpsc::unbounded_channel();
    let err = s
        .runtime
        .spawn_under_lease(
            &req,
            Worker,
            move |_| WorkerArgs {
                on_cancel: OnCancel::Exit,
                events: tx,
            },
            CancelPolicy::Kill,
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        RuntimeError::Invalid(LeaseError::InvalidDuration {
            param: "renew_every",
            ..
        })
    ));
    assert_eq!(s.backend.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn contended_lease_starts_no_worker() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let (tx, mut rx2) = mpsc::unbounded_channel();
    let outcome = s
        .runtime
        .spawn_under_lease(
            &request(&s, "r"),
            Worker,
            move |_| WorkerArgs {
                on_cancel: OnCancel::Exit,
                events: tx,
            },
            CancelPolicy::Kill,
        )
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        SpawnOutcome::NotAcquired(AcquireOutcome::Contended { .. })
    ));
    assert!(rx2.try_recv().is_err(), "no worker started");
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let _ = job.wait().await;
}
