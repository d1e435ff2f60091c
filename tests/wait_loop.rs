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

/// A notice can be lost, so a subscribed waiter looks again (every 600–750 ms), but no
/// more often while the holder keeps the lease.
#[tokio::test(start_paused = true)]
async fn contended_looks_again_no_more_than_once_per_600ms_while_the_holder_keeps_the_lease() {
    let (client, backend) = setup();
    let _holder = hold(&client, Duration::from_secs(30)).await;
    let calls = backend.calls();
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(6));
    let started = Instant::now();
    assert!(matches!(
        client.acquire(&req).await.unwrap(),
        AcquireOutcome::Contended { .. }
    ));
    assert_eq!(started.elapsed(), Duration::from_secs(6));
    // The first try, two subscription calls (the release, the waiter's turn), the try
    // right after subscribing, a look every 600 ms at least (10 in 6 s), the try at the
    // deadline, leaving the line, and the client's keep-alive in the line every 900 ms
    // (6 in 6 s).
    let made = backend.calls() - calls;
    assert!(made <= 4 + 10 + 2 + 6, "{made} calls");
    // ... and at least one every 750 ms (7 before the deadline's try).
    let least = 4 + 7 + 2 + 6;
    assert!(made >= least, "{made} calls: the waiter did not look again");
}

/// A release whose notice is lost (here: sent by no one — the holder's key is deleted
/// behind leasehold's back) still reaches a subscribed waiter within 750 ms and a try.
#[tokio::test(start_paused = true)]
async fn a_freed_lease_whose_notice_is_lost_is_found_within_750ms() {
    let (client, backend) = setup();
    let holder = hold(&client, Duration::from_secs(30)).await;
    let req = request(&client, Duration::from_secs(30), Duration::from_secs(20));
    let waiter = tokio::spawn({
        let client = client.clone();
        async move { client.acquire(&req).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let probe = request(&client, Duration::from_secs(30), Duration::ZERO);
    assert!(backend.delete(&client.keys(probe.purpose(), probe.resource())));
    std::mem::forget(holder);
    let freed = Instant::now();
    let outcome = waiter.await.unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    assert!(
        freed.elapsed() <= Duration::from_millis(750),
        "{:?}",
        freed.elapsed()
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

/// A release whose notice went out while the waiter was still subscribing (its SUBSCRIBE
/// slow to land) is found by the try the waiter makes once subscribed (invariant 4), not
/// at the next look.
#[tokio::test(start_paused = true)]
async fn a_release_noticed_before_the_waiter_subscribed_is_found_by_its_next_try() {
    let (holder_client, backend) = setup();
    let mut holder = hold(&holder_client, Duration::from_secs(30)).await;
    let connection = backend.connection();
    connection.set_connection_fault(Some(MemoryFault::Slow(Duration::from_millis(100))));
    let waiter = LeaseClient::new(connection, LeaseSettings::default()).unwrap();
    let req = request(&waiter, Duration::from_secs(30), Duration::from_secs(20));
    let started = Instant::now();
    let task = tokio::spawn(async move { waiter.acquire(&req).await.unwrap() });
    // The first try lands at 100 ms (contended), the subscription at 200 ms.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
    let released = started.elapsed();
    let outcome = task.await.unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    // The try after subscribing lands at 300 ms.
    let found = started.elapsed() - released;
    assert!(
        found <= Duration::from_millis(150),
        "found {found:?} after the release"
    );
}

/// A wait dropped while its runtime shuts down (its task never polled again) leaves its
/// place in the line to the keep-alive: the leave it would spawn cannot run, and nothing
/// spawns again and again (a regression: that overflowed the stack).
#[test]
fn a_wait_dropped_with_its_runtime_shutting_down_ends() {
    for flavor in ["current_thread", "multi_thread"] {
        let runtime = match flavor {
            "current_thread" => tokio::runtime::Builder::new_current_thread(),
            _ => tokio::runtime::Builder::new_multi_thread(),
        }
        .enable_all()
        .build()
        .unwrap();
        runtime.block_on(async {
            let (client, _backend) = setup();
            let holder = hold(&client, Duration::from_secs(30)).await;
            let req = request(&client, Duration::from_secs(30), Duration::from_secs(60));
            let waiter = client.clone();
            tokio::spawn(async move { waiter.acquire(&req).await });
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::mem::forget(holder);
        });
        drop(runtime);
    }
}

/// A line outlives its creation's hour while anyone waits in it: the waiting clients'
/// keep-alives extend it. Waiters that came half an hour apart are served in that order
/// past the hour, not the later one first because the line expired under the earlier.
#[tokio::test(start_paused = true)]
async fn a_line_waited_in_past_its_first_hour_keeps_its_order() {
    let backend = MemoryBackend::new();
    let client = || LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let (holder_client, first, second, third) = (client(), client(), client(), client());
    let mut holder = hold(&holder_client, Duration::from_secs(3600)).await;
    let hour = Duration::from_secs(3600);
    let wait = |c: LeaseClient, after: Duration| {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let req = request(&c, Duration::from_secs(30), hour);
            let outcome = c.acquire(&req).await.unwrap();
            let mut lease = outcome.into_handle().expect("served");
            let at = Instant::now();
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(lease.release().await, ReleaseOutcome::Released);
            at
        })
    };
    // The first waiter made the line at 0 and leaves it at 60 min, its wait over; the
    // second has waited in it since 30 min, the third comes at 61 min.
    let first = tokio::spawn(async move {
        let req = request(&first, Duration::from_secs(30), hour);
        first.acquire(&req).await.unwrap()
    });
    let second = wait(second, Duration::from_secs(30 * 60));
    // The holder keeps the lease past the hour.
    tokio::time::sleep(Duration::from_secs(45 * 60)).await;
    assert!(matches!(holder.renew().await, RenewOutcome::Renewed { .. }));
    // The line was made 61 min ago: without its extensions it ends now, and the third
    // would join an empty line before the second looks again (within 750 ms).
    tokio::time::sleep(Duration::from_secs(16 * 60) + Duration::from_millis(1)).await;
    let third = wait(third, Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
    assert!(matches!(
        first.await.unwrap(),
        AcquireOutcome::Contended { .. }
    ));
    let (second, third) = (second.await.unwrap(), third.await.unwrap());
    assert!(
        second < third,
        "the waiter of 30 min was served after the one of 61 min"
    );
}
