//! `LeaseClient::observe` on every backend: each change of holder is reported, woken by the
//! release and acquisition notices (the fallback poll is an hour, so nothing else could
//! explain a prompt report), an expiry when the holder's TTL runs out (and a lock-delay's
//! end when it does), a deletion from outside at the next poll, and a counted lease's
//! slots.

mod common;

use std::time::Duration;

use common::backends::Harness;
use common::leases::acquired;
use leasehold::*;

const HOUR: Duration = Duration::from_secs(3600);
/// Far longer than any report takes, far shorter than the poll or the TTL: a report within
/// it was woken by a notice or the expiry, nothing else.
const PROMPT: Duration = Duration::from_secs(10);

fn request(client: &LeaseClient, holder: &str, ttl: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("observed").unwrap(),
        ResourceDigest::of("leader"),
        client.new_attempt(holder).unwrap(),
    )
    .ttl(ttl)
    .holder(HolderLabel::new(holder).unwrap())
    .build()
    .unwrap()
}

fn observe(h: &Harness, poll: Duration) -> LeaseObserver {
    let watching = request(&h.client, "observer", HOUR);
    h.client.observe(&watching, poll).unwrap()
}

/// The next change, which must come within [`PROMPT`].
async fn next(observer: &mut LeaseObserver, what: &str) -> ResourceHolder {
    tokio::time::timeout(PROMPT, observer.changed())
        .await
        .unwrap_or_else(|_| panic!("no change reported within {PROMPT:?}: {what}"))
}

fn held_by(seen: &ResourceHolder) -> (Option<FencingToken>, Option<String>) {
    match seen {
        ResourceHolder::Held { token, holder, .. } => {
            (Some(*token), holder.as_ref().map(|h| h.to_string()))
        }
        _ => (None, None),
    }
}

async fn every_change_of_holder_is_reported_on_its_notice(h: Harness) {
    let mut observer = observe(&h, HOUR);
    assert_eq!(
        next(&mut observer, "first read").await,
        ResourceHolder::Free
    );
    let mut tokens = Vec::new();
    let mut waits = Vec::new();
    for round in 0..3 {
        for name in ["node-a", "node-b"] {
            let mut lease = acquired(&h.client, &request(&h.client, name, HOUR)).await;
            let acquired_at = std::time::Instant::now();
            let seen = next(&mut observer, "an acquisition").await;
            waits.push(acquired_at.elapsed());
            assert_eq!(
                held_by(&seen),
                (Some(lease.token()), Some(name.to_owned())),
                "round {round}"
            );
            tokens.push(lease.token());
            assert_eq!(lease.release().await, ReleaseOutcome::Released);
            let released_at = std::time::Instant::now();
            assert_eq!(next(&mut observer, "a release").await, ResourceHolder::Free);
            waits.push(released_at.elapsed());
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    waits.sort();
    println!(
        "measured: {} observer reported each change {:?} (median) .. {:?} (max) after it",
        h.name(),
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    assert_eq!(observer.current(), ResourceHolder::Free);
}

async fn a_holder_whose_ttl_runs_out_is_reported_gone_at_its_expiry(h: Harness) {
    let mut observer = observe(&h, HOUR);
    assert_eq!(
        next(&mut observer, "first read").await,
        ResourceHolder::Free
    );
    // A short lease can expire before the observer, woken by its acquisition notice, gets
    // to read it (a starved machine): then there was no holder to report and none is —
    // correct, but not what this test is about. So a lease the observer never saw is
    // followed by one that lives twice as long, until one is seen; its expiry (which
    // publishes nothing) must then be reported within PROMPT.
    for ttl in [1, 2, 4, 8].map(Duration::from_secs) {
        let lease = acquired(&h.client, &request(&h.client, "node-a", ttl)).await;
        let token = lease.token();
        // Never renewed, never released: the key expires, which publishes nothing.
        std::mem::forget(lease);
        match tokio::time::timeout(ttl + PROMPT, observer.changed()).await {
            Ok(seen) => {
                assert_eq!(held_by(&seen).0, Some(token));
                assert_eq!(
                    next(&mut observer, "the expiry").await,
                    ResourceHolder::Free
                );
                return;
            }
            Err(_) => {
                assert_eq!(observer.current(), ResourceHolder::Free);
                println!(
                    "{}: a {ttl:?} lease expired before the observer read it",
                    h.name()
                );
            }
        }
    }
    panic!("the observer never read a holder, even one of 8s");
}

async fn a_lease_deleted_from_outside_is_reported_free_at_the_next_poll(h: Harness) {
    let mut observer = observe(&h, Duration::from_millis(100));
    assert_eq!(
        next(&mut observer, "first read").await,
        ResourceHolder::Free
    );
    let lease = acquired(&h.client, &request(&h.client, "node-a", HOUR)).await;
    assert_eq!(
        held_by(&next(&mut observer, "the acquisition").await).0,
        Some(lease.token())
    );
    h.delete(lease.keys());
    std::mem::forget(lease);
    assert_eq!(
        next(&mut observer, "the deletion").await,
        ResourceHolder::Free
    );
}

async fn a_poll_out_of_bounds_is_refused_before_any_read(h: Harness) {
    let watching = request(&h.client, "observer", HOUR);
    for poll in [Duration::from_millis(9), HOUR + Duration::from_millis(1)] {
        let refused = h.client.observe(&watching, poll).map(|_| ());
        assert!(
            matches!(
                refused,
                Err(LeaseError::InvalidDuration { param: "poll", .. })
            ),
            "{poll:?}: {refused:?}"
        );
    }
}

/// Waits (within `bound`) until the observer reports what `wanted` accepts; returns it.
async fn until(
    observer: &LeaseObserver,
    bound: Duration,
    what: &str,
    wanted: impl FnMut(&ResourceHolder) -> bool,
) -> ResourceHolder {
    let mut watch = observer.watch();
    let seen = tokio::time::timeout(bound, watch.wait_for(wanted))
        .await
        .unwrap_or_else(|_| panic!("not reported within {bound:?}: {what}"));
    seen.expect("the observer runs").clone()
}

/// A counted lease's slots as observed: the holder's token in each, `None` for a free one.
fn slot_tokens(seen: &ResourceHolder) -> Option<Vec<Option<FencingToken>>> {
    let ResourceHolder::Counted { slots } = seen else {
        return None;
    };
    Some(
        slots
            .iter()
            .map(|slot| match slot {
                ResourceHolder::Held { token, .. } => Some(*token),
                _ => None,
            })
            .collect(),
    )
}

/// A counted lease is observed slot by slot, each acquisition and release on its notice —
/// never as `Free` while a slot is held.
async fn a_counted_lease_is_observed_slot_by_slot(h: Harness) {
    let counted = |name: &str| {
        LeaseRequest::builder(
            Purpose::new("observed").unwrap(),
            ResourceDigest::of("pool"),
            h.client.new_attempt(name).unwrap(),
        )
        .ttl(HOUR)
        .permits(3)
        .build()
        .unwrap()
    };
    let observer = h.client.observe(&counted("observer"), HOUR).unwrap();
    let free = vec![None; 3];
    until(&observer, PROMPT, "the first read", |s| {
        slot_tokens(s) == Some(free.clone())
    })
    .await;
    let mut a = acquired(&h.client, &counted("a")).await;
    let b = acquired(&h.client, &counted("b")).await;
    let both = vec![Some(a.token()), Some(b.token()), None];
    let seen = until(&observer, PROMPT, "two acquisitions", |s| {
        slot_tokens(s) == Some(both.clone())
    })
    .await;
    assert_ne!(seen, ResourceHolder::Free);
    assert_eq!(a.release().await, ReleaseOutcome::Released);
    let one = vec![None, Some(b.token()), None];
    until(&observer, PROMPT, "a slot's release", |s| {
        slot_tokens(s) == Some(one.clone())
    })
    .await;
    std::mem::forget(b);
}

/// A lease that ended unreleased is observed in its lock-delay — nobody holds it, yet a
/// follower acting on it is refused — and then free, though neither change publishes
/// anything.
async fn a_lease_in_its_lock_delay_is_observed_as_such_then_free(h: Harness) {
    let observer = observe(&h, HOUR);
    until(&observer, PROMPT, "the first read", |s| {
        *s == ResourceHolder::Free
    })
    .await;
    let delay = Duration::from_secs(3);
    let crashed = LeaseRequest::builder(
        Purpose::new("observed").unwrap(),
        ResourceDigest::of("leader"),
        h.client.new_attempt("crashed").unwrap(),
    )
    .ttl(Duration::from_secs(1))
    .lock_delay(delay)
    .build()
    .unwrap();
    let lease = acquired(&h.client, &crashed).await;
    let token = lease.token();
    // Never renewed, never released: its holder crashed.
    std::mem::forget(lease);
    let seen = until(
        &observer,
        Duration::from_secs(1) + PROMPT,
        "the lock-delay",
        |s| matches!(s, ResourceHolder::LockDelayed { .. }),
    )
    .await;
    let ResourceHolder::LockDelayed {
        token: ended,
        free_at,
        ..
    } = seen
    else {
        unreachable!()
    };
    assert_eq!(ended, token);
    let follower = request(&h.client, "follower", HOUR);
    let refused = h.client.try_acquire(&follower).await.unwrap();
    assert!(
        matches!(refused, AcquireOutcome::LockDelayed { .. }),
        "{refused:?}"
    );
    until(&observer, delay + PROMPT, "the lock-delay's end", |s| {
        *s == ResourceHolder::Free
    })
    .await;
    println!(
        "measured: {} observer reported the lock-delay's end {:?} after it",
        h.name(),
        tokio::time::Instant::now().saturating_duration_since(free_at)
    );
}

contract_tests!(
    a_counted_lease_is_observed_slot_by_slot,
    a_lease_in_its_lock_delay_is_observed_as_such_then_free,
    every_change_of_holder_is_reported_on_its_notice,
    a_holder_whose_ttl_runs_out_is_reported_gone_at_its_expiry,
    a_lease_deleted_from_outside_is_reported_free_at_the_next_poll,
    a_poll_out_of_bounds_is_refused_before_any_read,
);

/// A subscription that failed is tried again within a second, not after a whole poll: a
/// transient fault must not leave the observer blind to notices for an hour.
#[tokio::test(start_paused = true)]
async fn an_observer_whose_subscription_failed_subscribes_again_within_a_second() {
    let h = Harness::memory();
    let backend = match &h.backend {
        common::backends::Backend::Memory(m) => m.clone(),
        _ => unreachable!("a memory harness"),
    };
    backend.set_fault(Some(MemoryFault::Unavailable));
    let mut observer = observe(&h, HOUR);
    // Its first subscribe and read fail (it starts Unknown: nothing to report).
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(matches!(observer.current(), ResourceHolder::Unknown { .. }));
    backend.set_fault(None);
    let started = tokio::time::Instant::now();
    assert_eq!(
        next(&mut observer, "the read after the fault").await,
        ResourceHolder::Free
    );
    assert!(started.elapsed() <= Duration::from_secs(1));
    // Subscribed again: an acquisition is reported on its notice, at once.
    let lease = acquired(&h.client, &request(&h.client, "node-a", HOUR)).await;
    let acquired_at = tokio::time::Instant::now();
    assert_eq!(
        held_by(&next(&mut observer, "the acquisition").await).0,
        Some(lease.token())
    );
    assert_eq!(acquired_at.elapsed(), Duration::ZERO);
}
