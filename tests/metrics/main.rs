//! Every outcome, transition and cancellation increments the series of the telemetry table
//! with the right labels; no label carries a digest, an owner token or a raw resource id.
//! On `MemoryBackend` under paused time, with a thread-local recorder that keeps every series (`recorder`).

#[path = "../common/mod.rs"]
mod common;
mod line;
mod recorder;

use std::time::Duration;

use common::workers::UntilCancelled;
use leasehold::runtime::*;
use leasehold::telemetry::names;
use leasehold::*;
use recorder::{Recorded, Series, series};

const RAW_ID: &str = "raw-customer-id-4711";

const P: &str = "metrics";

fn setup() -> (LeaseClient, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (client, backend)
}

fn request(client: &LeaseClient, resource: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new(P).unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt("op").unwrap(),
    )
    .ttl(Duration::from_secs(3))
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_acquire_renew_release_and_inspect_outcome_is_counted() {
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (client, backend) = setup();

    let req = request(&client, RAW_ID);
    let mut lease = client
        .try_acquire(&req)
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let _ = client.try_acquire(&req).await.unwrap(); // replayed
    let _ = client.try_acquire(&request(&client, RAW_ID)).await.unwrap(); // contended
    let conflict = Attempt::from_parts(
        req.attempt().owner().clone(),
        OperationId::new("other").unwrap(),
    );
    let conflict = LeaseRequest::builder(req.purpose().clone(), *req.resource(), conflict)
        .build()
        .unwrap();
    let _ = client.try_acquire(&conflict).await.unwrap();
    backend.set_fault(Some(MemoryFault::Unavailable));
    let _ = client.try_acquire(&request(&client, "u")).await.unwrap();
    backend.set_fault(Some(MemoryFault::LoseRequest));
    let _ = client.try_acquire(&request(&client, "i")).await.unwrap();
    backend.set_fault(None);
    for outcome in [
        "acquired",
        "replayed",
        "contended",
        "owner_operation_conflict",
        "unavailable",
        "indeterminate",
    ] {
        assert_eq!(
            m.counter(
                names::ACQUIRE_TOTAL,
                &[("purpose", P), ("outcome", outcome)]
            ),
            1,
            "acquire {outcome}"
        );
    }

    assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
    assert_eq!(
        m.counter(
            names::RENEW_TOTAL,
            &[("purpose", P), ("outcome", "renewed")]
        ),
        1
    );
    let margins = m.histogram(names::RENEW_MARGIN_SECONDS, &[("purpose", P)]);
    assert_eq!(margins.len(), 1);
    // 3 s − 10 ms drift − the ~200 ms the lost-request try above waited.
    assert!(
        margins[0] > 2.5 && margins[0] < 3.0,
        "margin {}",
        margins[0]
    );
    assert_eq!(
        m.histogram(
            names::OPERATION_SECONDS,
            &[("purpose", P), ("operation", "renew")]
        )
        .len(),
        1
    );

    let stranger = req.with_new_attempt().unwrap();
    let nobody = LeaseRequest::builder(
        req.purpose().clone(),
        ResourceDigest::of("none"),
        stranger.attempt().clone(),
    )
    .build()
    .unwrap();
    let _ = client.inspect(&req).await;
    let _ = client.inspect(&stranger).await;
    let _ = client.inspect(&nobody).await;
    for outcome in ["held_by_attempt", "held_by_other", "absent"] {
        assert_eq!(
            m.counter(
                names::INSPECT_TOTAL,
                &[("purpose", P), ("outcome", outcome)]
            ),
            1,
            "inspect {outcome}"
        );
    }

    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    assert_eq!(
        m.counter(
            names::RELEASE_TOTAL,
            &[("purpose", P), ("outcome", "released")]
        ),
        1
    );
    assert_eq!(
        lease.renew().await,
        RenewOutcome::Refused {
            state: LeaseState::Released
        }
    );
    assert_eq!(
        m.counter(
            names::RENEW_TOTAL,
            &[("purpose", P), ("outcome", "refused")]
        ),
        1
    );
    assert_eq!(
        m.counter(
            names::STATE_TRANSITIONS_TOTAL,
            &[("purpose", P), ("from", "active"), ("to", "released")]
        ),
        1
    );

    let values = m.all_label_values();
    let digest = ResourceDigest::of(RAW_ID);
    for v in &values {
        assert!(!v.contains(RAW_ID), "raw id in a label: {v}");
        assert!(!v.contains(&digest.short()), "digest in a label: {v}");
        assert!(
            !v.contains(req.attempt().owner().expose()),
            "owner token in a label"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn transitions_to_lost_and_unknown_and_the_held_gauge_are_recorded() {
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (client, backend) = setup();

    let mut lost = client
        .try_acquire(&request(&client, "lost"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert_eq!(m.gauge(names::LEASES_HELD, &[("purpose", P)]), Some(1.0));
    // Process-wide: other tests' leases (on other paused clocks) share it, so only its
    // presence is checked here.
    assert!(
        m.gauge(names::MIN_REMAINING_VALIDITY_SECONDS, &[])
            .is_some()
    );
    backend.delete(lost.keys());
    let _ = lost.renew().await;
    assert_eq!(
        m.counter(
            names::STATE_TRANSITIONS_TOTAL,
            &[("purpose", P), ("from", "active"), ("to", "lost")]
        ),
        1
    );
    assert_eq!(
        m.counter(names::RENEW_TOTAL, &[("purpose", P), ("outcome", "lost")]),
        1
    );
    assert_eq!(m.gauge(names::LEASES_HELD, &[("purpose", P)]), Some(0.0));

    let mut unknown = client
        .try_acquire(&request(&client, "unknown"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    backend.set_fault(Some(MemoryFault::LoseReply));
    let _ = unknown.renew().await;
    backend.set_fault(None);
    let _ = unknown.release().await;
    for (from, to) in [("active", "unknown"), ("unknown", "released")] {
        assert_eq!(
            m.counter(
                names::STATE_TRANSITIONS_TOTAL,
                &[("purpose", P), ("from", from), ("to", to)]
            ),
            1,
            "{from} -> {to}"
        );
    }
    assert_eq!(
        m.counter(
            names::RENEW_TOTAL,
            &[("purpose", P), ("outcome", "indeterminate")]
        ),
        1
    );
    assert_eq!(m.gauge(names::LEASES_HELD, &[("purpose", P)]), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn wait_retries_wakeups_and_wait_time_are_recorded() {
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (client, _) = setup();
    let mut holder = client
        .try_acquire(&request(&client, "r"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let waiter = client.clone();
    let req = LeaseRequest::builder(
        Purpose::new(P).unwrap(),
        ResourceDigest::of("r"),
        client.new_attempt("waiter").unwrap(),
    )
    .wait_timeout(Duration::from_secs(10))
    .build()
    .unwrap();
    let task = tokio::spawn(async move { waiter.acquire(&req).await.unwrap() });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = holder.release().await;
    assert!(matches!(task.await.unwrap(), AcquireOutcome::Acquired(_)));
    assert!(
        m.counter(
            names::WAIT_RETRIES_TOTAL,
            &[("purpose", P), ("cause", "contended")]
        ) >= 1
    );
    assert_eq!(m.counter(names::WAIT_WAKEUPS_TOTAL, &[("purpose", P)]), 1);
    let waited = m.histogram(
        names::WAIT_SECONDS,
        &[("purpose", P), ("outcome", "acquired")],
    );
    assert_eq!(waited.len(), 1);
    assert!((waited[0] - 1.0).abs() < 0.01, "waited {}", waited[0]);
}

#[tokio::test(start_paused = true)]
async fn cancellations_and_their_delay_from_the_first_failed_renewal_are_recorded() {
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (client, backend) = setup();
    let runtime = LeaseRuntime::new(client.clone());
    let job = runtime
        .spawn_under_lease(
            &request(&client, "r"),
            UntilCancelled,
            |_| (),
            CancelPolicy::Kill,
        )
        .await
        .unwrap()
        .started()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    backend.set_fault(Some(MemoryFault::Unavailable));
    let report = job.wait().await;
    assert_eq!(
        report.cancelled.map(|c| c.reason),
        Some(CancelReason::RenewalUnconfirmed)
    );
    assert_eq!(
        m.counter(
            names::CANCELLATIONS_TOTAL,
            &[("purpose", P), ("reason", "renewal_unconfirmed")]
        ),
        1
    );
    let delays = m.histogram(
        names::CANCEL_DELAY_SECONDS,
        &[("purpose", P), ("reason", "renewal_unconfirmed")],
    );
    assert_eq!(delays.len(), 1);
    // From the first refused renewal to the cancellation at validity − safety margin: less
    // than one TTL.
    assert!(delays[0] > 0.0 && delays[0] < 3.0, "{}", delays[0]);
    assert!(
        m.counter(
            names::RENEW_TOTAL,
            &[("purpose", P), ("outcome", "unavailable")]
        ) >= 1
    );
}

/// A series born at its first increment shows no `increase` in Prometheus, so the event
/// counters a dashboard watches exist at zero from the first time a purpose holds a lease
/// here — with the label values the outcomes themselves spell — and later leases of the
/// purpose never reset a count.
#[tokio::test(start_paused = true)]
async fn event_counters_exist_at_zero_once_a_purpose_holds_a_lease() {
    const ZERO: &str = "metrics-zero";
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (client, backend) = setup();
    let request = |resource: &str| {
        let attempt = client.new_attempt("op").unwrap();
        LeaseRequest::builder(
            Purpose::new(ZERO).unwrap(),
            ResourceDigest::of(resource),
            attempt,
        )
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap()
    };
    let detail = FailureDetail::new(FailureKind::Timeout, "test");
    let expected: Vec<Series> = [
        CancelReason::Lost(LostReason::Absent).as_str(),
        CancelReason::Unknown.as_str(),
        CancelReason::RenewalUnconfirmed.as_str(),
        CancelReason::Shutdown.as_str(),
    ]
    .into_iter()
    .map(|reason| {
        series(
            names::CANCELLATIONS_TOTAL,
            &[("purpose", ZERO), ("reason", reason)],
        )
    })
    .chain(
        [
            RenewOutcome::Lost {
                reason: LostReason::Absent,
            }
            .as_str(),
            RenewOutcome::Indeterminate {
                detail: detail.clone(),
            }
            .as_str(),
            RenewOutcome::Unavailable {
                detail,
                remaining: Duration::ZERO,
            }
            .as_str(),
        ]
        .into_iter()
        .map(|outcome| {
            series(
                names::RENEW_TOTAL,
                &[("purpose", ZERO), ("outcome", outcome)],
            )
        }),
    )
    .chain(
        [LeaseState::Lost(LostReason::Absent), LeaseState::Unknown].map(|to| {
            series(
                names::STATE_TRANSITIONS_TOTAL,
                &[
                    ("purpose", ZERO),
                    ("from", LeaseState::Active.as_str()),
                    ("to", to.as_str()),
                ],
            )
        }),
    )
    .collect();

    let mut first = client
        .try_acquire(&request("first"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let counters = m.counters();
    for want in &expected {
        assert_eq!(counters.get(want), Some(&0), "{want:?} at zero");
    }
    // A loss counts once; the next lease of the purpose does not start it over.
    backend.delete(first.keys());
    let _ = first.renew().await;
    let _second = client.try_acquire(&request("second")).await.unwrap();
    assert_eq!(
        m.counter(
            names::RENEW_TOTAL,
            &[("purpose", ZERO), ("outcome", "lost")]
        ),
        1
    );
}

/// A waiter's one acquisition and the release notice that woke it show as an increase:
/// their series exist at zero from the purpose's first wait in the process.
#[tokio::test(start_paused = true)]
async fn a_waiters_acquisition_and_wakeup_exist_at_zero_once_it_waits() {
    const WAITING: &str = "metrics-wait-zero";
    let (client, _) = setup();
    let request = |op: &str| {
        LeaseRequest::builder(
            Purpose::new(WAITING).unwrap(),
            ResourceDigest::of("r"),
            client.new_attempt(op).unwrap(),
        )
        .wait_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
    };
    // The holder acquires before the recorder is installed: what it sees is the waiter's.
    let mut holder = client
        .try_acquire(&request("holder"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (waiter, waiting) = (client.clone(), request("waiter"));
    let task = tokio::spawn(async move { waiter.acquire(&waiting).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let acquired = series(
        names::ACQUIRE_TOTAL,
        &[("purpose", WAITING), ("outcome", "acquired")],
    );
    let woken = series(names::WAIT_WAKEUPS_TOTAL, &[("purpose", WAITING)]);
    let counters = m.counters();
    assert_eq!(counters.get(&acquired), Some(&0), "acquired at zero");
    assert_eq!(counters.get(&woken), Some(&0), "wake-ups at zero");

    let _ = holder.release().await;
    assert!(matches!(task.await.unwrap(), AcquireOutcome::Acquired(_)));
    let counters = m.counters();
    assert_eq!(counters.get(&acquired), Some(&1));
    assert_eq!(counters.get(&woken), Some(&1));
}
