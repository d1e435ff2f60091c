//! `run_under_lease` on `MemoryBackend` under paused tokio time: the output, the
//! cancellation, the stop at validity's end, a dropped future, a panic, a refusal.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::entry::{TTL, keys, request, runtime};
use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep};

/// Runs its closure when dropped: what a future saw at the moment it was dropped.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

#[tokio::test(start_paused = true)]
async fn run_under_lease_returns_the_output_and_releases_at_once() {
    let (rt, backend) = runtime();
    let outcome = rt
        .run_under_lease(
            &request(&rt, Duration::ZERO),
            CancelPolicy::Kill,
            |ctx| async move {
                sleep(TTL * 2).await; // outlives one TTL: renewals keep it
                assert!(!ctx.is_cancelled());
                assert!(ctx.remaining() > Duration::ZERO);
                assert_eq!(ctx.slot(), None, "a plain lease has no slot");
                ctx.token()
            },
        )
        .await
        .unwrap();
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("not acquired")
    };
    assert_eq!(output, Some(report.token));
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn run_under_lease_context_is_cancelled_on_loss() {
    let (rt, backend) = runtime();
    let k = keys(&rt);
    let deleter = backend.clone();
    tokio::spawn(async move {
        sleep(Duration::from_millis(500)).await;
        deleter.delete(&k);
    });
    let outcome = rt
        .run_under_lease(
            &request(&rt, Duration::ZERO),
            CancelPolicy::Kill,
            |ctx| async move {
                ctx.cancelled().await;
                assert_eq!(ctx.remaining(), Duration::ZERO);
                "stopped cleanly"
            },
        )
        .await
        .unwrap();
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("not acquired")
    };
    assert_eq!(output, Some("stopped cleanly"));
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Lost(LostReason::Absent),
            killed: false
        }
    );
}

#[tokio::test(start_paused = true)]
async fn run_under_lease_future_is_dropped_at_validity_end_under_kill() {
    let (rt, backend) = runtime();
    let dropped_at = Arc::new(std::sync::Mutex::new(None));
    let flag = dropped_at.clone();
    let faults = backend.clone();
    let started = Instant::now();
    let outcome = rt
        .run_under_lease(
            &request(&rt, Duration::ZERO),
            CancelPolicy::Kill,
            move |_ctx| async move {
                let _guard = OnDrop(move || *flag.lock().unwrap() = Some(Instant::now()));
                // Renewals start failing; this work ignores the cancellation.
                faults.set_fault(Some(MemoryFault::Unavailable));
                sleep(TTL * 10).await;
                "never"
            },
        )
        .await
        .unwrap();
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("not acquired")
    };
    assert_eq!(output, None);
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::RenewalUnconfirmed,
            killed: true
        }
    );
    let dropped_at = dropped_at.lock().unwrap().expect("the future was dropped");
    assert!(
        dropped_at - started <= TTL,
        "dropped at validity end, not later"
    );
    // The store stayed unreachable: the release was retried, then reported honestly.
    assert!(matches!(report.release, ReleaseOutcome::Unavailable { .. }));
}

/// The work runs in `run_under_lease`'s own future: dropping that future (here by aborting
/// the task it was spawned as) drops the work while the lease is still held, then the lease
/// is released at once. The future borrows neither the runtime nor the request.
#[tokio::test(start_paused = true)]
async fn run_under_lease_dropped_drops_the_work_then_releases_at_once() {
    let (rt, backend) = runtime();
    let held_while_dropped = Arc::new(std::sync::Mutex::new(None));
    let (seen, store) = (held_while_dropped.clone(), backend.clone());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let req = request(&rt, Duration::ZERO);
    let future = rt.run_under_lease(&req, CancelPolicy::Kill, move |_ctx| async move {
        let _guard = OnDrop(move || *seen.lock().unwrap() = Some(store.held_leases()));
        let _ = started_tx.send(());
        sleep(TTL * 10).await;
        "never"
    });
    drop(req);
    let task = tokio::spawn(future);
    started_rx.await.expect("the work started");
    let dropped_at = Instant::now();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(
        *held_while_dropped.lock().unwrap(),
        Some(1),
        "the work was dropped while the lease was still held"
    );
    while backend.held_leases() > 0 && dropped_at.elapsed() <= Duration::from_millis(10) {
        sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        backend.held_leases(),
        0,
        "released at once, not at the TTL's end"
    );
}

/// The context's token is made when first asked for: asked before the loss it fires with
/// it; asked only after, it is born cancelled.
#[tokio::test(start_paused = true)]
async fn run_under_lease_a_token_asked_for_before_the_loss_fires_and_after_it_is_born_cancelled() {
    for ask_before in [true, false] {
        let (rt, backend) = runtime();
        let k = keys(&rt);
        let deleter = backend.clone();
        let outcome = rt
            .run_under_lease(
                &request(&rt, Duration::ZERO),
                CancelPolicy::Kill,
                move |ctx| async move {
                    let early = ask_before.then(|| ctx.cancellation_token().child_token());
                    deleter.delete(&k);
                    ctx.cancelled().await;
                    let token = early.unwrap_or_else(|| ctx.cancellation_token().child_token());
                    tokio::time::timeout(Duration::from_millis(1), token.cancelled())
                        .await
                        .is_ok()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            outcome.into_output(),
            Some(true),
            "token asked for {} the loss is cancelled",
            if ask_before { "before" } else { "after" }
        );
    }
}

/// A panicking future fails the job (the panic's text in the report), the lease is released
/// after the future is gone, and nothing else is disturbed.
#[tokio::test(start_paused = true)]
async fn run_under_lease_a_panicking_future_fails_the_job_and_releases() {
    let (rt, backend) = runtime();
    let held_while_dropped = Arc::new(std::sync::Mutex::new(None));
    let (seen, store) = (held_while_dropped.clone(), backend.clone());
    let outcome = rt
        .run_under_lease(
            &request(&rt, Duration::ZERO),
            CancelPolicy::Kill,
            move |_ctx| async move {
                let _guard = OnDrop(move || *seen.lock().unwrap() = Some(store.held_leases()));
                sleep(TTL).await;
                panic!("boom at work")
            },
        )
        .await
        .unwrap();
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("not acquired")
    };
    assert_eq!(output, None);
    let JobEnd::Failed { error } = &report.end else {
        panic!("expected a failed job, got {:?}", report.end)
    };
    assert!(error.contains("boom at work"), "{error}");
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(backend.held_leases(), 0);
    assert_eq!(
        *held_while_dropped.lock().unwrap(),
        Some(1),
        "the future was gone before the release"
    );
    // The runtime's slot was given back: another lease runs.
    let again = rt
        .run_under_lease(
            &request(&rt, Duration::ZERO),
            CancelPolicy::Kill,
            |_| async { 7 },
        )
        .await
        .unwrap();
    assert!(matches!(
        again,
        RunOutcome::Ran {
            output: Some(7),
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn run_under_lease_not_acquired_does_not_call_the_closure() {
    let (rt, _) = runtime();
    let client = rt.client().clone();
    let _holder = client
        .try_acquire(&request(&rt, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let outcome = rt
        .run_under_lease(
            &request(&rt, Duration::ZERO),
            CancelPolicy::Kill,
            |_| async { panic!("must not run") },
        )
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        RunOutcome::NotAcquired(AcquireOutcome::Contended { .. })
    ));
}

/// The worker sees how many replicas acknowledged its lease (`MemoryBackend` has none, so
/// none did), and a replica wait that leaves renewals no room within the TTL is refused
/// before anything is sent.
#[tokio::test(start_paused = true)]
async fn run_under_lease_shows_the_replica_report_and_refuses_a_wait_without_room() {
    let (rt, backend) = runtime();
    let replicated = |wait: Duration| {
        LeaseRequest::builder(
            Purpose::new("entry").unwrap(),
            ResourceDigest::of("r"),
            rt.client().new_attempt("op").unwrap(),
        )
        .ttl(TTL)
        .wait_for_replicas(1, wait)
        .build()
        .unwrap()
    };
    let outcome = rt
        .run_under_lease(
            &replicated(Duration::from_millis(100)),
            CancelPolicy::Kill,
            |ctx| async move { ctx.replication().clone() },
        )
        .await
        .unwrap();
    let RunOutcome::Ran { output, .. } = outcome else {
        panic!("not acquired")
    };
    assert_eq!(
        output,
        Some(Replication::Acknowledged {
            acked: 0,
            wanted: 1
        })
    );

    // 3 s − 10 ms drift − 200 ms safety margin − 1 s cadence leaves 1.79 s.
    let calls = backend.calls();
    let refused = rt
        .run_under_lease(
            &replicated(Duration::from_millis(1790)),
            CancelPolicy::Kill,
            |_| async {},
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(RuntimeError::Invalid(LeaseError::InvalidDuration {
                param: "replica_wait",
                ..
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(backend.calls(), calls, "nothing may be sent");
}
