//! What the lease does to a job: renewed at its cadence while held; cancelled, exactly
//! once and before its validity ends, when it is lost, unknown or cannot be confirmed; and
//! a worker that ignores the cancellation killed (Kill) or left running (NotifyOnly).

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep, sleep_until};

use crate::worker::{Event, OnCancel, WorkerMsg};
use crate::{MS, TTL, cancellations, lose_replies, settle, setup, start};

#[tokio::test(start_paused = true)]
async fn lease_held_ten_ttls_stays_active_renewed_at_the_cadence_and_never_cancelled() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let calls = s.backend.calls();
    sleep(TTL * 10).await;
    settle().await;
    let status = job.status().await.unwrap();
    assert_eq!(status.state, LeaseState::Active);
    assert_eq!(status.cancelled, None);
    // ttl/3 cadence: 30 renewals in 10 TTLs (give or take the boundary).
    assert!(
        (29..=31).contains(&status.renewals),
        "{} renewals",
        status.renewals
    );
    assert_eq!(s.backend.calls() - calls, status.renewals);
    assert!(job.context().remaining() > TTL / 2);
    assert!(cancellations(&mut rx).is_empty());
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let report = job.wait().await;
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn key_deleted_behind_the_holder_cancels_the_worker_within_one_renew_period() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let keys = s
        .runtime
        .client()
        .keys(&Purpose::new("job").unwrap(), &ResourceDigest::of("r"));
    sleep(MS * 100).await;
    let deleted_at = Instant::now();
    assert!(s.backend.delete(&keys));
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Lost(LostReason::Absent));
    assert_eq!(c.token, job.token());
    assert!(at - deleted_at <= TTL / 3, "took {:?}", at - deleted_at);
    let report = job.wait().await;
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Lost(LostReason::Absent),
            killed: false
        }
    );
    assert_eq!(report.release, ReleaseOutcome::AlreadyAbsent);
}

#[tokio::test(start_paused = true)]
async fn lost_renew_replies_make_the_lease_unknown_and_cancel_before_validity_ends() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    lose_replies(&s);
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Unknown);
    assert!(at < valid_until, "cancelled after validity ended");
    assert!(c.remaining_validity > Duration::ZERO);
    assert_eq!(at + c.remaining_validity, valid_until);
    assert!(job.context().is_cancelled());
    assert_eq!(job.context().remaining(), Duration::ZERO);
    s.backend.set_fault(None);
    let report = job.wait().await;
    assert_eq!(
        report.release,
        ReleaseOutcome::Released,
        "UNKNOWN still releases"
    );
}

#[tokio::test(start_paused = true)]
async fn unconfirmable_renewal_cancels_at_the_safety_margin() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    s.backend.set_fault(Some(MemoryFault::Unavailable));
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::RenewalUnconfirmed);
    let margin = s.runtime.client().settings().safety_margin();
    assert!(at <= valid_until - margin + MS, "cancelled too late");
    assert!(at >= valid_until - margin - TTL / 3, "cancelled too early");
    s.backend.set_fault(None);
    let _ = job.wait().await;
}

/// A renewal that reached nothing is retried once over: the handle's attempts, then nothing
/// until the next renewal on the schedule — half-way to the cancellation deadline — which
/// keeps the lease once the store answers again.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_reached_nothing_is_tried_again_half_way_to_the_deadline() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let started = Instant::now();
    // The first renewal (about 1 s in) confirmed; the second (about 2 s) will reach nothing.
    sleep(MS * 1500).await;
    assert_eq!(job.status().await.unwrap().renewals, 1);
    let calls = s.backend.calls();
    s.backend.set_fault(Some(MemoryFault::Unavailable));
    sleep_until(started + MS * 2300).await;
    settle().await;
    assert_eq!(
        s.backend.calls() - calls,
        3,
        "the handle's 3 attempts (`LeaseHandle::renew`), and no other retry"
    );
    s.backend.set_fault(None);
    // Half-way from the failed renewal to the cancellation deadline (about 2.8 s).
    sleep_until(started + MS * 3000).await;
    settle().await;
    let status = job.status().await.unwrap();
    assert_eq!(status.renewals, 2);
    assert_eq!(status.cancelled, None);
    assert!(cancellations(&mut rx).is_empty());
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    assert_eq!(job.wait().await.end, JobEnd::Completed);
}

#[tokio::test(start_paused = true)]
async fn worker_that_ignores_cancellation_is_killed_at_validity_end_under_kill() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    lose_replies(&s);
    let Some(Event::Cancelled(..)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    s.backend.set_fault(None);
    let report = job.wait().await;
    let stopped_at = Instant::now();
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Unknown,
            killed: true
        }
    );
    assert!(
        stopped_at <= valid_until + MS,
        "worker outlived local validity"
    );
    assert!(stopped_at >= valid_until, "killed before validity ended");
    assert!(
        cancellations(&mut rx).is_empty(),
        "exactly one cancellation"
    );
}

#[tokio::test(start_paused = true)]
async fn worker_that_ignores_cancellation_is_left_running_under_notify_only() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::NotifyOnly).await;
    lose_replies(&s);
    sleep(TTL * 3).await;
    settle().await;
    assert_eq!(
        job.worker().get_status(),
        ractor::ActorStatus::Running,
        "NotifyOnly leaves the worker to decide"
    );
    assert_eq!(cancellations(&mut rx).len(), 1, "exactly one cancellation");
    s.backend.set_fault(None);
    job.worker().send_message(WorkerMsg::Exit).unwrap();
    let report = job.wait().await;
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Unknown,
            killed: false
        }
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_the_worker_once_and_releases_after_it_exits() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    job.shutdown();
    job.shutdown();
    let Some(Event::Cancelled(c, _)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Shutdown);
    let report = job.wait().await;
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert!(
        cancellations(&mut rx).is_empty(),
        "exactly one cancellation"
    );
}
