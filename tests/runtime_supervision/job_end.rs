//! A job that ends from its own side — the worker exits, errs or panics, or its lease actor
//! is killed or stopped — releases the lease and reports how it ended.

use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep};

use crate::worker::{Event, OnCancel, WorkerMsg};
use crate::{MS, cancellations, settle, setup, start};

#[tokio::test(start_paused = true)]
async fn worker_exit_releases_the_lease_at_once() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    sleep(MS * 500).await;
    let exited = Instant::now();
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(
        Instant::now(),
        exited,
        "released at once, not left to expire"
    );
    assert_eq!(s.backend.held_leases(), 0);
    assert_eq!(s.runtime.held(), 0, "the lease slot is free again");
}

#[tokio::test(start_paused = true)]
async fn worker_error_is_released_and_reported_as_failed() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.worker().send_message(WorkerMsg::Fail).unwrap();
    let report = job.wait().await;
    assert!(
        matches!(&report.end, JobEnd::Failed { error } if error.contains("job failed")),
        "{report:?}"
    );
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert!(cancellations(&mut rx).is_empty());
    assert_eq!(s.backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn worker_panic_is_released_and_reported_as_failed() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.worker().send_message(WorkerMsg::Panic).unwrap();
    let report = job.wait().await;
    assert!(
        matches!(&report.end, JobEnd::Failed { error } if error.contains("job panicked")),
        "{report:?}"
    );
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(s.backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn killing_the_lease_actor_stops_the_worker() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let worker = job.worker().clone();
    job.lease_actor().kill();
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Aborted);
    // Nothing was released here: the release was left to the handle's drop, and says so.
    assert!(
        matches!(
            &report.release,
            ReleaseOutcome::Indeterminate { detail } if detail.kind == FailureKind::Abandoned
        ),
        "{report:?}"
    );
    settle().await;
    assert_eq!(worker.get_status(), ractor::ActorStatus::Stopped);
    assert!(
        !matches!(rx.try_recv(), Ok(Event::Cancelled(..))),
        "no cancellation to a stopped worker"
    );
    // The handle's drop released the lease best effort.
    settle().await;
    assert_eq!(s.backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn stopping_the_lease_actor_stops_the_worker_then_releases() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let worker = job.worker().clone();
    job.lease_actor().stop(None);
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Aborted);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(worker.get_status(), ractor::ActorStatus::Stopped);
}
