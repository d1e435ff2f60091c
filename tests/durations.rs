//! Every `Duration` a caller passes at the API edge is either bounded — refused with a
//! typed error naming the parameter, before any I/O — or saturates, `Duration::MAX` meaning
//! no deadline; never a panic. Properties over arbitrary durations in paused time, the drain
//! with no deadline, and the same on a real redis-server.

mod common;

use std::time::Duration;

use common::RedisServer;
use common::backends::redis_settings;
use common::leases::{acquired, request};
use common::workers::{Deaf, UntilCancelled};
use leasehold::fuzzing::{Holding, InspectReply, RenewReply, calls};
use leasehold::protocol::limits::{self, DurationBounds, NO_DEADLINE};
use leasehold::runtime::*;
use leasehold::*;
use proptest::prelude::*;
use tokio::time::Instant;

/// Durations at every edge: zero, one nanosecond, each bound and just past it, the far
/// future, `Duration::MAX`, and anything at all.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::from_nanos(1)),
            Just(Duration::from_secs(60)),
            Just(Duration::from_secs(3600)),
            Just(Duration::from_millis(3_600_001)),
            Just(NO_DEADLINE),
            Just(Duration::from_secs(u64::MAX)),
            Just(Duration::MAX),
        ],
        (0u64..7_200_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

fn memory_client() -> (LeaseClient, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (client, backend)
}

/// `result` is `Ok` exactly when `value` lies in `bounds`, and otherwise the typed error
/// naming `bounds.param`.
fn bounded<T: std::fmt::Debug>(
    bounds: DurationBounds,
    value: Duration,
    result: Result<T, LeaseError>,
) -> Result<(), TestCaseError> {
    let inside = (bounds.min..=bounds.max).contains(&value);
    match result {
        Ok(_) => prop_assert!(inside, "{} {value:?} accepted", bounds.param),
        Err(LeaseError::InvalidDuration { param, .. }) => {
            prop_assert!(!inside, "{} {value:?} refused", bounds.param);
            prop_assert_eq!(param, bounds.param);
        }
        Err(other) => prop_assert!(false, "{} {value:?}: {other:?}", bounds.param),
    }
    Ok(())
}

/// Whole milliseconds, as the request builder reads a ttl or a lock-delay.
fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

async fn edge_is_bounded(a: Duration, b: Duration) -> Result<(), TestCaseError> {
    let (client, backend) = memory_client();
    let calls = backend.calls();
    let builder = || client.request("edge", "r").unwrap();
    let observed = builder().build().unwrap();
    bounded(limits::OBSERVE_POLL, a, client.observe(&observed, a))?;
    bounded(limits::TTL, whole_millis(a), builder().ttl(a).build())?;
    bounded(limits::WAIT_TIMEOUT, a, builder().wait_timeout(a).build())?;
    bounded(
        limits::LOCK_DELAY,
        whole_millis(a),
        builder().lock_delay(a).build(),
    )?;
    let replicas = builder().wait_for_replicas(1, a).build();
    bounded(limits::REPLICA_WAIT, whole_millis(a), replicas)?;
    let backend_config = RedisConfig::new("redis://127.0.0.1:1").connect_timeout(a);
    bounded(
        limits::CONNECT_TIMEOUT,
        a,
        RedisBackend::new(backend_config),
    )?;
    let settings = LeaseSettings::default().with_command_timeout(a);
    // The safety margin defaults to the command timeout: only the bound can refuse it.
    bounded(limits::COMMAND_TIMEOUT, a, settings.validate())?;
    let margin = LeaseSettings::default().with_safety_margin(a).validate();
    let command_timeout = LeaseSettings::default().command_timeout;
    let in_bounds = command_timeout <= a && a <= Duration::from_secs(3600);
    prop_assert_eq!(
        margin.is_ok(),
        in_bounds,
        "safety_margin {:?}: {:?}",
        a,
        margin
    );
    for settings in [
        LeaseSettings::default().with_connect_timeout(a),
        LeaseSettings::default().with_drift_budget(a),
        LeaseSettings::default().with_retry_after_fallback(a),
        LeaseSettings::default().with_renew_every(a),
        LeaseSettings::default().with_safety_margin(a),
    ] {
        match LeaseClient::new(MemoryBackend::new(), settings) {
            Ok(client) => exercise(&client).await?,
            Err(e) => prop_assert!(matches!(e, LeaseError::InvalidDuration { .. }), "{e:?}"),
        }
    }
    let config = SupervisorConfig::backoff(a, b);
    let valid = SupervisorConfig::MIN_BACKOFF <= a && a <= b && b <= SupervisorConfig::MAX_BACKOFF;
    prop_assert_eq!(config.check().is_ok(), valid, "{:?}", config);
    let listed = client.list_within(None, 10, a).await;
    bounded(
        limits::LIST_BUDGET,
        a,
        listed.as_ref().map(|_| ()).map_err(Clone::clone),
    )?;
    let listed_ok = listed.is_ok();
    if let Ok(outcome) = listed {
        let complete = ListOutcome::Listed {
            leases: Vec::new(),
            coverage: ListCoverage::Complete,
        };
        prop_assert_eq!(outcome, complete);
    }
    // Only a listing within its bounds reached the store: one scan. (An observer started
    // above was dropped at once, before its task ran.)
    prop_assert_eq!(backend.calls(), calls + u64::from(listed_ok));
    Ok(())
}

/// A client whose settings were accepted holds, renews and releases a lease of an hour
/// (or refuses it, before any I/O, if the settings leave it no validity).
async fn exercise(client: &LeaseClient) -> Result<(), TestCaseError> {
    let request = client
        .request("edge", "settings")
        .unwrap()
        .ttl(Duration::from_secs(3600))
        .build()
        .unwrap();
    let mut lease = match client.try_acquire(&request).await {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        Err(LeaseError::InvalidDuration { .. }) => return Ok(()),
        other => return Err(TestCaseError::fail(format!("{other:?}"))),
    };
    let renewed = lease.renew().await;
    prop_assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "{:?}",
        renewed
    );
    prop_assert_eq!(lease.release().await, ReleaseOutcome::Released);
    Ok(())
}

/// `renew_within` and the backend's own calls take any duration: a bound past validity is
/// as none, a zero bound sends nothing.
async fn deadlines_saturate(a: Duration, b: Duration) -> Result<(), TestCaseError> {
    let (client, backend) = memory_client();
    let mut lease = acquired(&client, &request(&client, "edge", "renew", "op")).await;
    let outcome = lease.renew_within(a).await;
    if a.is_zero() {
        prop_assert!(
            matches!(outcome, RenewOutcome::Unavailable { .. }),
            "{:?}",
            outcome
        );
    } else {
        prop_assert!(
            matches!(outcome, RenewOutcome::Renewed { .. }),
            "{:?}",
            outcome
        );
    }
    let keys = lease.keys().clone();
    let attempt = client.new_attempt("stranger").unwrap();
    let holding = Holding::of_attempt(attempt.clone());
    let renewed = calls::renew(&backend, &keys, &holding, a, b).await;
    prop_assert_eq!(renewed, Ok(RenewReply::NotOwner));
    let read = calls::inspect(&backend, &keys, &attempt, b).await;
    prop_assert!(
        matches!(read, Ok(InspectReply::HeldByOther { .. })),
        "{:?}",
        read
    );
    prop_assert_eq!(lease.release().await, ReleaseOutcome::Released);
    Ok(())
}

/// A drain within any grace: the counts add up, it takes no longer than the grace (the far
/// future at most), and with a second or more every cooperative job ended and released.
async fn drain_within(grace: Duration) -> Result<(), TestCaseError> {
    let (client, _) = memory_client();
    let rt = LeaseRuntime::new(client.clone());
    let request = request(&client, "edge", "drain", "op");
    let job = rt
        .spawn_under_lease(&request, UntilCancelled, |_| (), CancelPolicy::Kill)
        .await
        .unwrap()
        .started();
    prop_assert!(job.is_some());
    let started = Instant::now();
    let summary = rt.shutdown(grace).await;
    let took = started.elapsed();
    prop_assert_eq!(summary.leases, 1);
    let counted = summary.ended + summary.stopped + summary.left;
    prop_assert_eq!(counted, summary.leases, "{:?}", summary);
    // Paused time moves by whole timer ticks of a millisecond.
    let tick = Duration::from_millis(1);
    prop_assert!(
        took <= grace.min(NO_DEADLINE) + tick,
        "{took:?} for {grace:?}"
    );
    if grace >= Duration::from_secs(1) {
        prop_assert_eq!((summary.ended, summary.left), (1, 0), "{:?}", summary);
    }
    Ok(())
}

/// An acquisition waits as long as its wait timeout says, no longer: for a lease held
/// 30 s by another, it gives up at its end, or takes the lease once it expired.
async fn wait_within(wait: Duration) -> Result<(), TestCaseError> {
    let (client, _) = memory_client();
    let _holder = acquired(&client, &request(&client, "edge", "waited", "holder")).await;
    let Ok(request) = client
        .request("edge", "waited")
        .unwrap()
        .wait_timeout(wait)
        .build()
    else {
        prop_assert!(wait > limits::WAIT_TIMEOUT.max, "{:?} refused", wait);
        return Ok(());
    };
    let started = Instant::now();
    let outcome = client.acquire(&request).await.unwrap();
    let waited = started.elapsed();
    prop_assert!(
        waited <= wait + Duration::from_secs(1),
        "{:?} for {:?}",
        waited,
        wait
    );
    match outcome {
        AcquireOutcome::Acquired(_) => {}
        AcquireOutcome::Contended { .. } => {
            prop_assert!(wait < Duration::from_secs(31), "{:?}", wait);
        }
        other => prop_assert!(false, "{:?}", other),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `acquire` takes any wait timeout its request accepted.
    #[test]
    fn an_acquisition_waits_no_longer_than_asked(wait in duration()) {
        paused().block_on(wait_within(wait))?;
    }

    /// Every bounded duration is refused exactly outside its bounds, with the typed error
    /// naming it, before any I/O; settings that are accepted work.
    #[test]
    fn a_duration_at_the_edge_is_refused_exactly_outside_its_bounds(
        a in duration(),
        b in duration(),
    ) {
        paused().block_on(edge_is_bounded(a, b))?;
    }

    /// Every deadline made from a caller's duration saturates: never an overflow.
    #[test]
    fn a_deadline_from_any_duration_saturates(a in duration(), b in duration()) {
        paused().block_on(deadlines_saturate(a, b))?;
    }

    /// `shutdown` takes any grace.
    #[test]
    fn a_drain_takes_any_grace(grace in duration()) {
        paused().block_on(drain_within(grace))?;
    }
}

/// `shutdown(Duration::MAX)` is a drain with no deadline: it returns once every job ended,
/// however long that takes — a worker under `NotifyOnly` that ignores its cancellation for
/// an hour is waited for. (Under `Kill`, local validity stops it, whatever the grace.)
#[tokio::test(start_paused = true)]
async fn a_drain_with_no_deadline_waits_for_the_work_to_stop() {
    let (client, _) = memory_client();
    let rt = LeaseRuntime::new(client.clone());
    let cooperative = request(&client, "edge", "cooperative", "op");
    let deaf = request(&client, "edge", "deaf", "op");
    rt.spawn_under_lease(&cooperative, UntilCancelled, |_| (), CancelPolicy::Kill)
        .await
        .unwrap()
        .started()
        .unwrap();
    let deaf = rt
        .spawn_under_lease(&deaf, Deaf, |_| (), CancelPolicy::NotifyOnly)
        .await
        .unwrap()
        .started()
        .unwrap();
    let drain = tokio::spawn({
        let rt = rt.clone();
        async move { rt.shutdown(Duration::MAX).await }
    });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        !drain.is_finished(),
        "no deadline: the deaf worker is waited for"
    );
    deaf.worker().stop(None);
    let summary = drain.await.unwrap();
    assert_eq!(
        (summary.leases, summary.ended, summary.stopped, summary.left),
        (2, 2, 0, 0),
        "{summary:?}"
    );
    assert!(summary.took >= Duration::from_secs(3600), "{summary:?}");
    assert!(client.list(None, 10).await.unwrap() == no_leases());
}

fn no_leases() -> ListOutcome {
    ListOutcome::Listed {
        leases: Vec::new(),
        coverage: ListCoverage::Complete,
    }
}

/// On a real redis-server: `Duration::MAX` wherever a caller passes a duration that may
/// saturate — the drain, a renewal's bound, the backend's own calls.
#[tokio::test]
async fn a_real_redis_takes_duration_max_wherever_it_means_no_deadline() {
    let server = RedisServer::start();
    let backend = RedisBackend::new(RedisConfig::new(server.url())).unwrap();
    let client = LeaseClient::new(backend.clone(), redis_settings()).unwrap();
    let mut lease = acquired(&client, &request(&client, "edge", "held", "op")).await;
    let outcome = lease.renew_within(Duration::MAX).await;
    assert!(
        matches!(outcome, RenewOutcome::Renewed { .. }),
        "{outcome:?}"
    );
    let attempt = client.new_attempt("stranger").unwrap();
    let read = calls::inspect(&backend, lease.keys(), &attempt, Duration::MAX).await;
    assert!(
        matches!(read, Ok(InspectReply::HeldByOther { .. })),
        "{read:?}"
    );
    assert_eq!(lease.release().await, ReleaseOutcome::Released);

    let rt = LeaseRuntime::new(client.clone());
    let request = request(&client, "edge", "drained", "op");
    rt.spawn_under_lease(&request, UntilCancelled, |_| (), CancelPolicy::Kill)
        .await
        .unwrap()
        .started()
        .unwrap();
    let summary = rt.shutdown(Duration::MAX).await;
    assert_eq!(
        (summary.leases, summary.ended, summary.left),
        (1, 1, 0),
        "{summary:?}"
    );
    assert_eq!(client.list(None, 10).await.unwrap(), no_leases());
}
