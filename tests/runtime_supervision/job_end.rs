//! A job that ends from its own side — the worker exits, errs or panics, or its lease actor
//! is killed or stopped — releases the lease and reports how it ended.

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep};

use crate::worker::{Event, OnCancel, WorkerMsg};
use crate::{MS, cancellations, setup, start};

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
    // Released once the worker stopped, and the report says what the release did.
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(worker.get_status(), ractor::ActorStatus::Stopped);
    assert!(
        !matches!(rx.try_recv(), Ok(Event::Cancelled(..))),
        "a kill leaves no time for a cancellation"
    );
    assert_eq!(s.backend.held_leases(), 0);
    assert_eq!(s.runtime.held(), 0);
}

/// Stopped from outside, the lease actor tells its worker (a shutdown) and gives it a grace
/// to end on its own: one that does ends `Cancelled`; one that ignores it is stopped after
/// the grace and ends `Aborted`. The lease is released after either.
#[tokio::test(start_paused = true)]
async fn stopping_the_lease_actor_tells_the_worker_then_stops_it_then_releases() {
    for (on_cancel, ended) in [
        (
            OnCancel::Exit,
            JobEnd::Cancelled {
                reason: CancelReason::Shutdown,
                killed: false,
            },
        ),
        (OnCancel::Ignore, JobEnd::Aborted),
    ] {
        let s = setup();
        let (job, mut rx) = start(&s, on_cancel, CancelPolicy::Kill).await;
        let worker = job.worker().clone();
        let asked = Instant::now();
        job.lease_actor().stop(None);
        let report = job.wait().await;
        assert_eq!(report.end, ended);
        assert_eq!(report.release, ReleaseOutcome::Released);
        assert_eq!(worker.get_status(), ractor::ActorStatus::Stopped);
        let told: Vec<_> = cancellations(&mut rx).iter().map(|c| c.reason).collect();
        assert_eq!(told, [CancelReason::Shutdown], "{ended:?}");
        let grace = match ended {
            JobEnd::Aborted => MS * 1000,
            _ => Duration::ZERO,
        };
        assert_eq!(asked.elapsed(), grace, "{ended:?}");
        assert_eq!(s.backend.held_leases(), 0);
    }
}
