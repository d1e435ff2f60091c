//! The renewal in flight: it runs beside the lease actor, not inside it, so a status, a
//! release or the worker's end is handled at once while a slow reply is awaited — and the
//! worker is still told, and stopped, on the lease's time whatever the renewal does.

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep, sleep_until};

use crate::worker::{Event, OnCancel};
use crate::{MS, Setup, TTL, settle, setup, start};

/// How long each call takes while the store is slow: within the command timeout (200 ms).
const SLOW: Duration = Duration::from_millis(150);

/// Waits until the first renewal (due at TTL/3, on the renewal grid) has been sent, then
/// half its slow reply more: the renewal is in flight.
async fn into_the_first_renewal(s: &Setup) {
    let calls = s.backend.calls();
    while s.backend.calls() == calls {
        sleep(MS * 5).await;
    }
    sleep(SLOW / 2).await;
}

#[tokio::test(start_paused = true)]
async fn a_status_is_answered_while_a_renewal_waits_for_its_reply() {
    let s = setup();
    let (job, _rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let before = job.status().await.unwrap();
    s.backend.set_fault(Some(MemoryFault::Slow(SLOW)));
    into_the_first_renewal(&s).await;
    let asked = Instant::now();
    let during = job.status().await.unwrap();
    assert_eq!(
        Instant::now(),
        asked,
        "the status waited behind the renewal"
    );
    assert_eq!(during.renewals, 0, "the renewal is still in flight");
    assert_eq!(during.valid_until, before.valid_until);
    sleep(SLOW).await;
    let after = job.status().await.unwrap();
    assert_eq!(after.renewals, 1);
    assert!(after.valid_until > before.valid_until);
    s.backend.set_fault(None);
    job.shutdown();
    let _ = job.wait().await;
}

/// A release asked for while the renewal waits: the worker is told at once, the renewal
/// is abandoned, the lease released once the worker stopped.
#[tokio::test(start_paused = true)]
async fn a_shutdown_during_a_renewal_tells_the_worker_at_once_and_releases() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    s.backend.set_fault(Some(MemoryFault::Slow(SLOW)));
    into_the_first_renewal(&s).await;
    let asked = Instant::now();
    job.shutdown();
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(c.reason, CancelReason::Shutdown);
    assert_eq!(at, asked, "the cancellation waited behind the renewal");
    let report = job.wait().await;
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Shutdown,
            killed: false
        }
    );
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert!(s.backend.held_leases() == 0, "released");
}

/// A store so slow that no renewal's reply comes in its bound: the worker is told before
/// the safety margin runs out — not when the renewal gives up — and, ignoring it, stopped
/// when local validity ends.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_never_answers_leaves_the_worker_told_and_stopped_in_time() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    let margin = s.runtime.client().settings().safety_margin();
    s.backend.set_fault(Some(MemoryFault::Slow(TTL * 10)));
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert!(
        at <= valid_until - margin,
        "told after the safety margin began"
    );
    assert!(c.remaining_validity >= margin);
    assert_eq!(c.stop_by, valid_until);
    sleep_until(valid_until - MS).await;
    settle().await;
    assert_eq!(job.worker().get_status(), ractor::ActorStatus::Running);
    sleep_until(valid_until).await;
    settle().await;
    assert_ne!(
        job.worker().get_status(),
        ractor::ActorStatus::Running,
        "the worker outlived local validity"
    );
    s.backend.set_fault(None);
    let report = job.wait().await;
    assert!(
        matches!(report.end, JobEnd::Cancelled { killed: true, .. }),
        "{:?}",
        report.end
    );
}

/// A release asked for while the renewal waits, the worker ignoring its cancellation: the
/// renewal confirmed afterwards does not move the end the worker was told, and it is
/// stopped then.
#[tokio::test(start_paused = true)]
async fn a_renewal_confirmed_after_the_cancellation_does_not_move_the_worker_s_end() {
    let s = setup();
    let (job, mut rx) = start(&s, OnCancel::Ignore, CancelPolicy::Kill).await;
    s.backend.set_fault(Some(MemoryFault::Slow(SLOW)));
    into_the_first_renewal(&s).await;
    job.shutdown();
    let Some(Event::Cancelled(c, _)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    // The renewal's reply comes, confirmed.
    sleep(SLOW).await;
    settle().await;
    let status = job.status().await.unwrap();
    assert_eq!(
        status.stop_by, c.stop_by,
        "a late confirmation moved the end"
    );
    assert_eq!(status.renewals, 0);
    s.backend.set_fault(None);
    sleep_until(c.stop_by).await;
    settle().await;
    assert_ne!(
        job.worker().get_status(),
        ractor::ActorStatus::Running,
        "the worker outlived the end it was told"
    );
    let report = job.wait().await;
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Shutdown,
            killed: true
        }
    );
}

/// A renewal whose call may have landed, its reply not back when the cancellation deadline
/// comes (a command timeout as long as the safety margin: the call is cut at the deadline
/// itself): the worker is told then, not later, and the lease is `Unknown` — what the
/// renewal's own outcome says a moment after — not merely unconfirmed.
#[tokio::test(start_paused = true)]
async fn a_renewal_awaiting_its_reply_at_the_deadline_leaves_the_lease_unknown() {
    let backend = MemoryBackend::new();
    let settings = LeaseSettings::default()
        .with_command_timeout(Duration::from_secs(1))
        .with_safety_margin(Duration::from_secs(1));
    let s = Setup {
        runtime: LeaseRuntime::new(LeaseClient::new(backend.clone(), settings).unwrap()),
        backend,
    };
    let (job, mut rx) = start(&s, OnCancel::Exit, CancelPolicy::Kill).await;
    let valid_until = job.status().await.unwrap().valid_until.unwrap();
    s.backend.set_fault(Some(MemoryFault::LoseReply));
    let Some(Event::Cancelled(c, at)) = rx.recv().await else {
        panic!("expected a cancellation")
    };
    assert_eq!(
        at,
        valid_until - Duration::from_secs(1),
        "told at the deadline"
    );
    assert_eq!(c.reason, CancelReason::Unknown);
    s.backend.set_fault(None);
    let report = job.wait().await;
    assert_eq!(
        report.cancelled.map(|c| c.reason),
        Some(CancelReason::Unknown)
    );
}
