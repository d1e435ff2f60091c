//! Lock-delay on every backend: a lease that ends without a release keeps refusing
//! acquisitions for its delay, says so (`LockDelayed`, never a plain contention), cannot be
//! renewed back to life, and a release — before or after the end — skips the delay.
//! Every time a reply carries is the lease's own, never the delay's added to it.

mod common;

use std::time::Duration;

use common::backends::Harness;
use common::leases::acquired;
use leasehold::*;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);
const DELAY: Duration = Duration::from_secs(10);

fn request(client: &LeaseClient, op: &str, delay: Option<Duration>) -> LeaseRequest {
    let mut builder = LeaseRequest::builder(
        Purpose::new("contract").unwrap(),
        ResourceDigest::of("delayed"),
        client.new_attempt(op).unwrap(),
    )
    .ttl(TTL)
    .holder(HolderLabel::new(op).unwrap());
    if let Some(delay) = delay {
        builder = builder.lock_delay(delay);
    }
    builder.build().unwrap()
}

/// A lease with a 10 s lock-delay whose 30 s ran out 1 s ago, unreleased: its key holds
/// only the delay, ~9 s of it.
async fn ended(h: &Harness) -> (LeaseRequest, LeaseHandle) {
    let req = request(&h.client, "crashed", Some(DELAY));
    let lease = acquired(&h.client, &req).await;
    // Redis shortens the key's TTL alone (the handle still believes); memory advances its
    // paused clock, and the handle's validity runs out too.
    if h.is_redis() {
        h.shorten_server_ttl(lease.keys(), TTL + Duration::from_secs(1));
    } else {
        h.advance_clock(TTL + Duration::from_secs(1)).await;
    }
    (req, lease)
}

async fn while_held_every_time_reported_is_the_leases_own_not_the_delays(h: Harness) {
    let req = request(&h.client, "holder", Some(DELAY));
    let mut lease = acquired(&h.client, &req).await;
    let outcome = h
        .client
        .try_acquire(&request(&h.client, "other", None))
        .await
        .unwrap();
    let AcquireOutcome::Contended { retry_after } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        retry_after <= TTL && retry_after > TTL - DELAY,
        "{retry_after:?}"
    );
    let AcquireOutcome::Replayed(mut replay) = h.client.try_acquire(&req).await.unwrap() else {
        panic!("the holder's own attempt replays")
    };
    assert!(replay.remaining_validity() <= TTL);
    let inspected = h.client.inspect(&req).await;
    let InspectOutcome::HeldByAttempt { remaining, .. } = inspected else {
        panic!("{inspected:?}")
    };
    assert!(remaining <= TTL && remaining > TTL - DELAY, "{remaining:?}");
    assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
    std::mem::forget(replay);
}

async fn an_unreleased_end_refuses_everyone_with_lock_delayed_until_the_delay_ends(h: Harness) {
    let (req, mut lease) = ended(&h).await;
    let outcome = h
        .client
        .try_acquire(&request(&h.client, "next", None))
        .await
        .unwrap();
    let AcquireOutcome::LockDelayed { retry_after } = outcome else {
        panic!("a lease in its lock-delay: {outcome:?}")
    };
    assert!(
        retry_after <= DELAY - Duration::from_secs(1),
        "{retry_after:?}"
    );
    assert!(retry_after > Duration::from_secs(3), "{retry_after:?}");
    // Its own attempt too: the lease it held has ended.
    let own = h.client.try_acquire(&req).await.unwrap();
    assert!(matches!(own, AcquireOutcome::LockDelayed { .. }), "{own:?}");
    // Nobody holds it; inspect says whose lease ended, and for how long it refuses.
    let stranger = req.with_new_attempt().unwrap();
    let seen = h.client.inspect(&stranger).await;
    let InspectOutcome::LockDelayed {
        remaining,
        token,
        holder,
    } = seen
    else {
        panic!("{seen:?}")
    };
    assert_eq!(token, lease.token());
    assert_eq!(holder.map(|h| h.to_string()), Some("crashed".to_owned()));
    assert!(remaining <= retry_after);
    // A renewal never brings the ended lease back.
    let renewed = lease.renew().await;
    assert!(
        !matches!(renewed, RenewOutcome::Renewed { .. }),
        "{renewed:?}"
    );
    if h.is_redis() {
        // On Redis the holder's own clock was not aged: the server said so.
        assert!(
            matches!(
                renewed,
                RenewOutcome::Lost {
                    reason: LostReason::Absent
                }
            ),
            "{renewed:?}"
        );
    }
    // Once the delay is over, the next acquisition gets a larger token: Redis runs out the
    // key's TTL, memory advances its paused clock an hour.
    if h.is_redis() {
        h.run_out_server_ttl(lease.keys()).await;
    } else {
        h.advance_clock(Duration::from_secs(3600)).await;
    }
    let next = acquired(&h.client, &request(&h.client, "next", None)).await;
    assert!(next.token() > token);
    std::mem::forget(lease);
    std::mem::forget(next);
}

async fn a_waiter_waits_out_the_lock_delay_and_then_acquires(h: Harness) {
    let req = request(&h.client, "crashed", Some(Duration::from_secs(2)));
    let lease = acquired(&h.client, &req).await;
    // 30 s of 32 gone: the lease has ended, its 2 s delay is running. Redis shortens the
    // key's TTL, memory advances its paused clock.
    if h.is_redis() {
        h.shorten_server_ttl(lease.keys(), TTL);
    } else {
        h.advance_clock(TTL).await;
    }
    let waiter = LeaseRequest::builder(
        req.purpose().clone(),
        *req.resource(),
        h.client.new_attempt("waiter").unwrap(),
    )
    .wait_timeout(Duration::from_secs(20))
    .build()
    .unwrap();
    let started = Instant::now();
    let outcome = h.client.acquire(&waiter).await.unwrap();
    let waited = started.elapsed();
    let AcquireOutcome::Acquired(next) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(next.token() > lease.token());
    // Not before the delay ended (a lower bound: no machine is too slow for it).
    assert!(
        waited >= Duration::from_millis(1500),
        "acquired after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(20),
        "acquired after {waited:?}"
    );
    std::mem::forget(lease);
    std::mem::forget(next);
}

async fn a_release_skips_the_lock_delay_before_and_after_the_end(h: Harness) {
    let req = request(&h.client, "clean", Some(DELAY));
    let mut lease = acquired(&h.client, &req).await;
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    let mut next = acquired(&h.client, &request(&h.client, "next", Some(DELAY))).await;
    assert!(next.token() > lease.token());
    assert_eq!(next.release().await, ReleaseOutcome::Released);

    // After the end, its holder's release (of the attempt: the handle may have given up
    // locally) says its work is over: the delay goes with the key.
    let (req, lease) = ended(&h).await;
    let released = h.client.release_attempt(&req).await;
    assert_eq!(released, ReleaseOutcome::Released);
    let after = acquired(&h.client, &request(&h.client, "after", None)).await;
    assert!(after.token() > lease.token());
    std::mem::forget(lease);
    std::mem::forget(after);
}

async fn a_counted_lease_counts_a_slot_in_its_lock_delay_as_taken(h: Harness) {
    let counted = |op: &str, delay: Option<Duration>| {
        let mut builder = LeaseRequest::builder(
            Purpose::new("contract").unwrap(),
            ResourceDigest::of("delayed-pool"),
            h.client.new_attempt(op).unwrap(),
        )
        .ttl(TTL)
        .permits(2);
        if let Some(delay) = delay {
            builder = builder.lock_delay(delay);
        }
        builder.build().unwrap()
    };
    let crashed = acquired(&h.client, &counted("crashed", Some(DELAY))).await;
    let mut other = acquired(&h.client, &counted("other", None)).await;
    // Redis shortens the crashed slot's TTL alone; memory advances its paused clock, which
    // ages both slots.
    if h.is_redis() {
        h.shorten_server_ttl(crashed.keys(), TTL + Duration::from_secs(1));
    } else {
        h.advance_clock(TTL + Duration::from_secs(1)).await;
    }
    // Both slots taken, the earliest to free (memory aged both) in its lock-delay.
    let third = h.client.try_acquire(&counted("third", None)).await.unwrap();
    if h.is_redis() {
        assert!(
            matches!(third, AcquireOutcome::LockDelayed { .. }),
            "{third:?}"
        );
        assert_eq!(other.release().await, ReleaseOutcome::Released);
        let taken = acquired(&h.client, &counted("third", None)).await;
        assert_eq!(taken.keys().slot(), other.keys().slot());
        std::mem::forget(taken);
    } else {
        // Memory's clock aged "other" past its end too: its slot is free.
        let AcquireOutcome::Acquired(taken) = third else {
            panic!("{third:?}")
        };
        assert_eq!(taken.keys().slot(), other.keys().slot());
        std::mem::forget(taken);
    }
    std::mem::forget(crashed);
    std::mem::forget(other);
}

async fn a_lock_delay_out_of_bounds_is_refused_before_any_command(h: Harness) {
    for delay in [Duration::ZERO, Duration::from_secs(3601)] {
        let built = LeaseRequest::builder(
            Purpose::new("contract").unwrap(),
            ResourceDigest::of("delayed"),
            h.client.new_attempt("op").unwrap(),
        )
        .lock_delay(delay)
        .build();
        assert!(
            matches!(
                built,
                Err(LeaseError::InvalidDuration {
                    param: "lock_delay",
                    ..
                })
            ),
            "{delay:?}: {built:?}"
        );
    }
}

contract_tests!(
    while_held_every_time_reported_is_the_leases_own_not_the_delays,
    an_unreleased_end_refuses_everyone_with_lock_delayed_until_the_delay_ends,
    a_waiter_waits_out_the_lock_delay_and_then_acquires,
    a_release_skips_the_lock_delay_before_and_after_the_end,
    a_counted_lease_counts_a_slot_in_its_lock_delay_as_taken,
    a_lock_delay_out_of_bounds_is_refused_before_any_command,
);
