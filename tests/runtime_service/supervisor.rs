//! `LeaseSupervisor` as an actor of the application's tree: linked, failing, stopped or
//! killed from outside (its term's worker told first, the term counted), shut down
//! mid-acquisition, pacing a crash loop. `MemoryBackend` and paused time (on a real
//! redis-server: `supervisor_redis`; its memory over ten thousand terms:
//! `tests/supervisor_memory`).

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use ractor::{Actor, ActorStatus};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep};

use crate::app::AppSupervisor;
use crate::common::workers::{Deaf, FailsToStart, TellsCancelled, UntilCancelled};

const TTL: Duration = Duration::from_secs(3);

fn runtime() -> (LeaseRuntime, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (LeaseRuntime::new(client), backend)
}

fn request(client: &LeaseClient, wait: Duration) -> LeaseRequest {
    request_for(client, TTL, wait)
}

/// As [`request`], with a TTL a real server's command timeout leaves room in (30 s: a
/// lease left held would outlast the test's wait).
pub(crate) fn redis_request(client: &LeaseClient, wait: Duration) -> LeaseRequest {
    request_for(client, Duration::from_secs(30), wait)
}

fn request_for(client: &LeaseClient, ttl: Duration, wait: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("leader").unwrap(),
        ResourceDigest::of("scheduler"),
        client.new_attempt("candidate").unwrap(),
    )
    .ttl(ttl)
    .wait_timeout(wait)
    .build()
    .unwrap()
}

/// The next term's context (a term other than `after`).
pub(crate) async fn next_term(
    state: &mut watch::Receiver<SupervisorState>,
    after: Option<FencingToken>,
) -> LeaseContext {
    let held = state
        .wait_for(|s| s.token().is_some() && s.token() != after)
        .await
        .expect("the supervisor stopped instead of holding");
    match &*held {
        SupervisorState::Holding { context, .. } => context.clone(),
        other => unreachable!("{other:?}"),
    }
}

/// `make` panicking fails the supervisor — its application's supervisor hears an
/// `ActorFailed` — and the lease acquired for that term does not stay held.
#[tokio::test(start_paused = true)]
async fn a_linked_supervisor_whose_make_panics_fails_to_the_application_and_holds_nothing() {
    let (rt, backend) = runtime();
    let (tx, mut events) = mpsc::unbounded_channel();
    let (app, _) = Actor::spawn(None, AppSupervisor { filter: true }, tx)
        .await
        .unwrap();
    let supervisor = rt
        .supervise_linked(
            request(rt.client(), Duration::ZERO),
            |_| -> (UntilCancelled, ()) { panic!("the application's make failed") },
            CancelPolicy::Kill,
            SupervisorConfig::default(),
            app.get_cell(),
        )
        .await
        .unwrap();
    let (lease_end, event) = events.recv().await.unwrap();
    assert!(!lease_end, "{event}");
    assert!(
        event.contains("panicked") && event.contains("the application's make failed"),
        "{event}"
    );
    let summary = supervisor.join().await;
    assert_eq!(summary.terms, 0);
    sleep(Duration::from_millis(10)).await;
    assert_eq!(backend.held_leases(), 0, "the handle's drop released it");
    assert_eq!(rt.held(), 0);
}

/// The term as a stopped supervisor must have ended it: its worker told to stop for a
/// shutdown, stopped of its own accord, the lease released, the term counted.
pub(crate) fn assert_ended_by_a_stop(
    summary: &SupervisorSummary,
    term: &LeaseContext,
    told: &mut mpsc::UnboundedReceiver<LeaseCancelled>,
) {
    assert_eq!(summary.terms, 1, "{summary:?}");
    let last = summary.last.as_ref().expect("the term's report");
    assert_eq!(last.token, term.token());
    assert_eq!(
        last.end,
        JobEnd::Cancelled {
            reason: CancelReason::Shutdown,
            killed: false
        }
    );
    assert_eq!(last.release, ReleaseOutcome::Released);
    let cancelled = told.try_recv().expect("the worker was sent LeaseCancelled");
    assert_eq!(cancelled.reason, CancelReason::Shutdown);
    assert_eq!(cancelled.token, term.token());
    assert!(term.is_cancelled());
}

/// The application's supervisor stopping takes the lease supervisor with it (ractor kills
/// linked children), but not its term's worker without a word: the worker is sent
/// `LeaseCancelled` with `Shutdown`, stops, the lease is released, and the summary counts
/// the term.
#[tokio::test(start_paused = true)]
async fn stopping_the_application_tells_the_terms_worker_and_counts_the_term() {
    let (rt, backend) = runtime();
    let (tx, _events) = mpsc::unbounded_channel();
    let (app, _) = Actor::spawn(None, AppSupervisor { filter: true }, tx)
        .await
        .unwrap();
    let (told_tx, mut told) = mpsc::unbounded_channel();
    let supervisor = rt
        .supervise_linked(
            request(rt.client(), Duration::ZERO),
            move |_| (TellsCancelled, told_tx.clone()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
            app.get_cell(),
        )
        .await
        .unwrap();
    let term = next_term(&mut supervisor.watch(), None).await;
    assert_eq!(backend.held_leases(), 1);
    app.stop(None);
    let summary = supervisor.join().await;
    assert_ended_by_a_stop(&summary, &term, &mut told);
    assert_eq!(backend.held_leases(), 0);
    assert_eq!(rt.held(), 0);
    assert_eq!(app.get_status(), ActorStatus::Stopped);
}

/// Stopped or killed through its actor, the supervisor ends its term before its summary:
/// the worker is told, stops, then the lease is released, and the term is in the summary.
#[tokio::test(start_paused = true)]
async fn a_supervisor_stopped_or_killed_through_its_actor_ends_its_term_first() {
    for kill in [false, true] {
        let (rt, backend) = runtime();
        let (told_tx, mut told) = mpsc::unbounded_channel();
        let supervisor = rt
            .supervise(
                request(rt.client(), Duration::ZERO),
                move |_| (TellsCancelled, told_tx.clone()),
                CancelPolicy::Kill,
                SupervisorConfig::default(),
            )
            .await
            .unwrap();
        let term = next_term(&mut supervisor.watch(), None).await;
        if kill {
            supervisor.actor().kill();
        } else {
            supervisor.actor().stop(None);
        }
        let summary = supervisor.join().await;
        assert_ended_by_a_stop(&summary, &term, &mut told);
        assert_eq!(backend.held_leases(), 0, "killed: {kill}");
    }
}

/// A worker that does not stop on its cancellation is stopped after its grace: the term
/// ends `Aborted`, its lease released, within the grace and the release.
#[tokio::test(start_paused = true)]
async fn a_worker_deaf_to_its_cancellation_is_stopped_after_a_grace() {
    let (rt, backend) = runtime();
    let supervisor = rt
        .supervise(
            request(rt.client(), Duration::ZERO),
            |_| (Deaf, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    next_term(&mut supervisor.watch(), None).await;
    let asked = Instant::now();
    supervisor.actor().stop(None);
    let summary = supervisor.join().await;
    assert_eq!(
        asked.elapsed(),
        Duration::from_secs(1),
        "the grace, then the stop"
    );
    let last = summary.last.expect("the term's report");
    assert_eq!(last.end, JobEnd::Aborted);
    assert_eq!(
        last.cancelled.map(|c| c.reason),
        Some(CancelReason::Shutdown)
    );
    assert_eq!(last.release, ReleaseOutcome::Released);
    assert_eq!(backend.held_leases(), 0);
}

/// A shutdown while the supervisor waits for a lease someone else holds gives the wait up
/// at once; when the holder lets go, the lease stays free.
#[tokio::test(start_paused = true)]
async fn a_shutdown_during_the_acquisition_gives_it_up_and_takes_nothing() {
    let (rt, backend) = runtime();
    let mut holder = rt
        .client()
        .try_acquire(&request(rt.client(), Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let supervisor = rt
        .supervise(
            request(rt.client(), Duration::from_secs(60)),
            |_| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    sleep(TTL / 2).await;
    assert_eq!(*supervisor.watch().borrow(), SupervisorState::Acquiring);
    let asked = Instant::now();
    let summary = supervisor.shutdown().await;
    assert!(
        asked.elapsed() < Duration::from_millis(100),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(summary.terms, 0);
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
    sleep(TTL).await;
    assert_eq!(
        backend.held_leases(),
        0,
        "nobody took the lease after the shutdown"
    );
    assert_eq!(rt.held(), 0);
}

/// A job that fails as soon as it starts is restarted after a pause that doubles each
/// time, up to the bound — not in a tight loop against Redis.
#[tokio::test(start_paused = true)]
async fn a_job_that_fails_at_once_is_restarted_after_a_doubling_pause() {
    let (rt, backend) = runtime();
    let config = SupervisorConfig::backoff(Duration::from_millis(100), Duration::from_millis(400));
    // Each term's start is noted where it happens: a watch would coalesce a term that
    // begins and fails within one instant.
    let (started, mut starts) = mpsc::unbounded_channel();
    let supervisor = rt
        .supervise(
            request(rt.client(), Duration::ZERO),
            move |_| {
                let _ = started.send(Instant::now());
                (FailsToStart, ())
            },
            CancelPolicy::Kill,
            config,
        )
        .await
        .unwrap();
    let mut last = starts.recv().await.unwrap();
    for expected_ms in [100u64, 200, 400, 400] {
        let next = starts.recv().await.unwrap();
        let pause = next - last;
        let expected = Duration::from_millis(expected_ms);
        assert!(
            pause >= expected * 3 / 4 && pause <= expected * 5 / 4 + Duration::from_millis(5),
            "expected {expected:?} ± 25 %, paused {pause:?}"
        );
        last = next;
    }
    let summary = supervisor.shutdown().await;
    assert!(summary.terms >= 5, "{summary:?}");
    assert!(
        matches!(summary.last.map(|r| r.end), Some(JobEnd::Failed { .. })),
        "every term failed"
    );
    assert_eq!(backend.held_leases(), 0);
}

/// A pacing that could loop hot, or make no sense, is refused before anything starts.
#[tokio::test(start_paused = true)]
async fn a_supervisor_config_out_of_bounds_is_refused_before_anything_starts() {
    let (rt, backend) = runtime();
    let ms = Duration::from_millis;
    let rows = [
        ("zero pause", ms(0), ms(100), "backoff_min"),
        ("max below min", ms(200), ms(100), "backoff_max"),
        (
            "max beyond an hour",
            ms(100),
            Duration::from_secs(3601),
            "backoff_max",
        ),
    ];
    for (name, backoff_min, backoff_max, param) in rows {
        let config = SupervisorConfig::backoff(backoff_min, backoff_max);
        let refused = rt
            .supervise(
                request(rt.client(), Duration::ZERO),
                |_| (UntilCancelled, ()),
                CancelPolicy::Kill,
                config,
            )
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(
                &refused,
                RuntimeError::Invalid(LeaseError::InvalidDuration { param: p, .. }) if *p == param
            ),
            "{name}: {refused:?}"
        );
        assert_eq!(config.check().map_err(RuntimeError::from), Err(refused));
    }
    sleep(Duration::from_millis(10)).await;
    assert_eq!(backend.held_leases(), 0);
    assert_eq!(rt.held(), 0);
}

/// An acquisition whose reply was lost may have taken the lease (here it did). The next
/// acquisition replays its attempt, finds that grant, and the term starts within the
/// supervisor's backoff — not after the TTL a fresh attempt would wait out behind a lease
/// nobody uses.
#[tokio::test(start_paused = true)]
async fn an_acquisition_of_unknown_end_is_replayed_and_its_term_starts_within_one_renew_period() {
    let (rt, backend) = runtime();
    let ttl = Duration::from_secs(30);
    // Each acquisition replays its own lost replies for a second, then gives up unsure.
    let request = request_for(rt.client(), ttl, Duration::from_secs(1));
    backend.set_fault(Some(MemoryFault::LoseReply));
    let sup = rt
        .supervise(
            request,
            |_ctx| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    // Acquisitions run, their replies are lost: the lease is held by the first one's
    // attempt, and the supervisor knows nothing (each ends `Indeterminate`).
    sleep(Duration::from_secs(5)).await;
    assert_eq!(
        backend.held_leases(),
        1,
        "the lost acquisition took the lease"
    );
    backend.set_fault(None);
    let resumed = Instant::now();
    let mut w = sup.watch();
    let held = next_term(&mut w, None).await;
    let took = resumed.elapsed();
    // One renewal period (ttl / 3): the supervisor's backoff (at most 5 s) bounds it.
    assert!(
        took <= ttl / 3,
        "the term started {took:?} after Redis answered again"
    );
    assert_eq!(backend.held_leases(), 1, "one lease, the replayed one");
    println!(
        "measured: a lost acquisition replayed → term started {took:?} after the fault cleared (TTL {ttl:?})"
    );
    let summary = sup.shutdown().await;
    assert_eq!(summary.terms, 1);
    assert_eq!(backend.held_leases(), 0, "released on shutdown");
    drop(held);
}
