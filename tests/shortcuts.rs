//! The one-line forms: `LeaseClient::request` (a request without naming its parts) and
//! `RunOutcome::into_output` (the work's output, or none), on `MemoryBackend` under paused
//! tokio time.

use std::time::Duration;

use leasehold::runtime::{CancelPolicy, LeaseRuntime};
use leasehold::*;
use tokio::time::sleep;

const TTL: Duration = Duration::from_secs(3);

fn client() -> LeaseClient {
    LeaseClient::new(MemoryBackend::new(), LeaseSettings::default()).unwrap()
}

#[test]
fn request_hashes_the_resource_and_gives_each_request_a_fresh_attempt() {
    let client = client();
    let a = client
        .request("reports", "tenant-42")
        .unwrap()
        .build()
        .unwrap();
    let b = client
        .request("reports", "tenant-42")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(a.purpose(), &Purpose::new("reports").unwrap());
    assert_eq!(a.resource(), &ResourceDigest::of("tenant-42"));
    assert_eq!(a.attempt().operation().as_str(), "reports");
    assert_ne!(a.attempt(), b.attempt(), "each request its own owner token");
}

#[test]
fn request_refuses_a_bad_purpose_with_its_typed_error() {
    let err = client().request("Not A Purpose", "r").unwrap_err();
    assert!(matches!(err, LeaseError::InvalidPurpose { .. }), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn into_output_is_the_output_of_work_that_ran_to_its_end_and_none_otherwise() {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let request = || {
        client
            .request("shortcut", "r")
            .unwrap()
            .ttl(TTL)
            .build()
            .unwrap()
    };

    let ran = rt
        .run_under_lease(&request(), CancelPolicy::Kill, |ctx| async move {
            ctx.token().get()
        })
        .await
        .unwrap();
    assert!(ran.into_output().is_some_and(|token| token > 0));

    // Not acquired: someone else holds it.
    let AcquireOutcome::Acquired(mut holder) = client.try_acquire(&request()).await.unwrap() else {
        panic!("the resource is free")
    };
    let refused = rt
        .run_under_lease(&request(), CancelPolicy::Kill, |_ctx| async { 1 })
        .await
        .unwrap();
    assert_eq!(refused.into_output(), None);
    assert_eq!(holder.release().await, ReleaseOutcome::Released);

    // Stopped: renewals fail and the work ignores the cancellation, so it is dropped at
    // validity end and has no output.
    let stopped = rt
        .run_under_lease(&request(), CancelPolicy::Kill, |_ctx| async move {
            backend.set_fault(Some(MemoryFault::Unavailable));
            sleep(TTL * 10).await;
            1
        })
        .await
        .unwrap();
    assert_eq!(stopped.into_output(), None);
}
