//! The wait loop of `acquire` (docs/design.md §6), on `MemoryBackend` under paused tokio time.

use std::time::Duration;

use leasehold::*;
use tokio::time::Instant;

fn setup() -> (LeaseClient, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (client, backend)
}

fn request(client: &LeaseClient, ttl: Duration, wait: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("wait").unwrap(),
        ResourceDigest::of("r"),
        client.new_attempt("op").unwrap(),
    )
    .ttl(ttl)
    .wait_timeout(wait)
    .build()
    .unwrap()
}

async fn hold(client: &LeaseClient, ttl: Duration) -> LeaseHandle {
    let req = request(client, ttl, Duration::ZERO);
    client
        .try_acquire(&req)
        .await
        .unwrap()
        .into_handle()
        .expect("acquired")
}

#[tokio::test(start_paused = true)]
async fn zero_wait_timeout_tries_exactly_once() {
    let (client, backend) = setup();
    let _holder = hold(&client, Duration::from_secs(30)).await;
    let calls = backend.calls();
    let req = request(&client, Duration::from_secs(30), Duration::ZERO);
    let started = Instant::now();
    assert!(matches!(
        client.acquire(&req).await.unwrap(),
        AcquireOutcome::Contended { .. }
    ));
    assert_eq!(backend.calls() - calls, 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn contended_sleeps_until_the_holders_expiry_not_longer() {
    let (client, _) = setup();
    let holder = hold(&client, Duration::from_secs(1)).await;
    std::mem::forget(holder); // the holder vanishes without releasing
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(5));
    let started = Instant::now();
    let outcome = client.acquire(&req).await.unwrap();
    let waited = started.elapsed();
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert!(waited <= Duration::from_millis(1_100), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn contended_does_not_poll_while_the_holder_keeps_the_lease() {
    let (client, backend) = setup();
    let _holder = hold(&client, Duration::from_secs(30)).await;
    let calls = backend.calls();
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(2));
    let started = Instant::now();
    assert!(matches!(
        client.acquire(&req).await.unwrap(),
        AcquireOutcome::Contended { .. }
    ));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    // First try, the try right after subscribing, the try at the deadline: one subscription
    // call besides.
    assert!(
        backend.calls() - calls <= 4,
        "{} calls",
        backend.calls() - calls
    );
}

#[tokio::test(start_paused = true)]
async fn indeterminate_is_retried_with_the_same_attempt_and_replays() {
    let (client, backend) = setup();
    backend.set_fault(Some(MemoryFault::LoseReply));
    let healer = backend.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        healer.set_fault(None);
    });
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(5));
    let outcome = client.acquire(&req).await.unwrap();
    let AcquireOutcome::Replayed(lease) = outcome else {
        panic!("the lost first try must be replayed, got {outcome:?}")
    };
    assert_eq!(lease.attempt(), req.attempt());
    assert_eq!(backend.held_leases(), 1, "one lease, not two");
}

#[tokio::test(start_paused = true)]
async fn unavailable_backs_off_instead_of_spinning() {
    let (client, backend) = setup();
    backend.set_fault(Some(MemoryFault::Unavailable));
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(2));
    let calls = backend.calls();
    let outcome = client.acquire(&req).await.unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Unavailable { .. }),
        "{outcome:?}"
    );
    let tries = backend.calls() - calls;
    // 10 ms doubling to 1 s: about ten tries in two seconds, never hundreds.
    assert!((4..=20).contains(&tries), "{tries} tries");
}

#[tokio::test(start_paused = true)]
async fn a_try_that_may_have_executed_makes_a_failed_end_indeterminate() {
    let (client, backend) = setup();
    backend.set_fault(Some(MemoryFault::LoseRequest));
    let switch = backend.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        switch.set_fault(Some(MemoryFault::Unavailable));
    });
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(1));
    let outcome = client.acquire(&req).await.unwrap();
    let AcquireOutcome::Indeterminate { attempt, .. } = outcome else {
        panic!("an earlier maybe-sent try must not be reported as unavailable: {outcome:?}")
    };
    assert_eq!(&attempt, req.attempt());
}

#[tokio::test(start_paused = true)]
async fn release_notice_wakes_the_waiter_at_once() {
    let (client, _) = setup();
    let mut holder = hold(&client, Duration::from_secs(30)).await;
    let waiter = client.clone();
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(10));
    let task = tokio::spawn(async move { waiter.acquire(&req).await.unwrap() });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let released_at = Instant::now();
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
    let outcome = task.await.unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    assert_eq!(released_at.elapsed(), Duration::ZERO, "woken, not polled");
}
