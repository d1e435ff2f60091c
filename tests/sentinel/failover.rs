//! Failovers, ordered by `SENTINEL FAILOVER` or by killing the primary: leases that were
//! replicated go on, leases the promoted replica never got are never renewed, and every
//! token issued afterwards is larger than every token before.

use std::time::{Duration, Instant};

use crate::common;
use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::fault::FaultLine;
use crate::common::leases::acquired;
use crate::common::sentinel::{SentinelTopology, query, role};
use crate::{churn, exists, pttl, request, settings_with_timeout, shorten};
use leasehold::fuzzing::calls;
use leasehold::runtime::CancelReason;
use leasehold::*;

/// Deletes `keys` on a replica behind the primary's back, as if their replication had been
/// lost: the replica is made writable for the moment (a local write is not replicated).
fn lose_on_replica(replica: &RedisServer, keys: &[&str]) {
    query::<()>(replica, &["CONFIG", "SET", "replica-read-only", "no"]);
    for key in keys {
        query::<()>(replica, &["DEL", key]);
    }
    query::<()>(replica, &["CONFIG", "SET", "replica-read-only", "yes"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_replicated_before_a_failover_renews_on_the_new_primary_and_new_tokens_are_larger()
{
    let topology = SentinelTopology::start();
    let client = topology.client(redis_settings());
    let mut before = churn(&client, "r", 3).await;
    let mut held = acquired(&client, &request(&client, "held", "op")).await;
    before.push(held.token());
    topology.wait_replicated();
    let old = topology.primary_port();

    let new = topology.failover();
    assert_ne!(new, old);
    let new_primary = topology.node(new);
    let key = held.keys().lease().to_owned();
    shorten(new_primary, &key);
    let renewed = held.renew().await;
    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "the key was replicated: {renewed:?}"
    );
    assert!(
        pttl(new_primary, &key) > Duration::from_secs(15),
        "the renewal reset the TTL on the new primary"
    );

    // A new acquisition, on the same backend, lands on the new primary — not on the old
    // one, which still takes writes until the sentinels demote it.
    let fresh = acquired(&client, &request(&client, "fresh", "op")).await;
    let fresh_key = fresh.keys().lease().to_owned();
    assert!(exists(new_primary, &fresh_key));
    let old_primary = topology.node(old);
    if role(old_primary) == "master" {
        assert!(
            !exists(old_primary, &fresh_key),
            "the old primary must not get new leases"
        );
    }

    assert_eq!(held.release().await, ReleaseOutcome::Released);
    let after = churn(&client, "r", 2).await;
    let highest_before = before.iter().max().unwrap();
    assert!(
        after.iter().all(|t| t > highest_before),
        "tokens after the failover {after:?} must exceed every earlier one {before:?}"
    );
}

/// Regression guard: right after a failover the old primary still says `master`, so a
/// backend that only reconnects on errors would renew there and report `Renewed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_across_a_failover_that_lost_the_lease_is_never_renewed_and_the_new_primary_holds_nothing()
 {
    let topology = SentinelTopology::start();
    let client = topology.client(redis_settings());
    let mut before = churn(&client, "r", 3).await;
    let mut held = acquired(&client, &request(&client, "r", "holder")).await;
    before.push(held.token());
    let keys = held.keys().clone();
    topology.wait_replicated();
    // Whichever replica is promoted has lost the lease and the fence counter.
    for replica in topology.replicas() {
        lose_on_replica(replica, &[keys.lease(), keys.fence()]);
    }
    let old = topology.primary_port();

    let new = topology.failover();
    let new_primary = topology.node(new);
    assert!(!exists(new_primary, keys.lease()), "precondition: lost");
    let old_still_master = role(topology.node(old)) == "master";

    let outcome = held.renew().await;
    assert!(
        matches!(
            outcome,
            RenewOutcome::Lost { .. } | RenewOutcome::Indeterminate { .. }
        ),
        "a lease that is not on the new primary must not be renewed \
         (old primary still master: {old_still_master}): {outcome:?}"
    );
    assert_ne!(held.state(), LeaseState::Active);
    assert!(
        !exists(new_primary, keys.lease()),
        "nothing was written on the new primary"
    );

    let other = topology.client(redis_settings());
    let next = acquired(&other, &request(&other, "r", "next")).await;
    assert!(exists(new_primary, keys.lease()));
    let highest_before = before.iter().max().unwrap();
    assert!(
        next.token() > *highest_before,
        "a promotion that lost the counter must still issue a larger token: {:?} after {before:?}",
        next.token()
    );
    std::mem::forget(held);
}

/// What one lease's worker saw during a failover.
#[derive(Debug)]
struct Held {
    token: FencingToken,
    /// The reason and the validity left when `LeaseCancelled` came, if it came.
    cancelled: Option<(CancelReason, Duration)>,
    renewals: u64,
}

/// The fault-matrix row "Sentinel failover during held leases", on the runtime: leases whose
/// keys the promoted replica never got are cancelled before their validity ends (never
/// renewed on the new primary), the others keep renewing there, and every token issued
/// after the failover is larger than every token issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_during_held_leases_cancels_the_lost_ones_in_time_and_keeps_the_others() {
    const LEASES: usize = 12;
    let topology = SentinelTopology::start();
    // A 6 s TTL (renewal every 2 s) rides out the failover itself (~1-3 s here).
    let ttl = Duration::from_secs(6);
    let runtime = runtime::LeaseRuntime::new(topology.client(redis_settings()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut jobs = Vec::new();
    let mut keys = Vec::new();
    for i in 0..LEASES {
        let client = runtime.client().clone();
        let req = LeaseRequest::builder(
            Purpose::new("sentinel").unwrap(),
            ResourceDigest::of(format!("failover-{i}")),
            client.new_attempt("holder").unwrap(),
        )
        .ttl(ttl)
        .build()
        .unwrap();
        keys.push(client.keys(req.purpose(), req.resource()));
        let (runtime, mut stop) = (runtime.clone(), stop_rx.clone());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        jobs.push(tokio::spawn(async move {
            let work = move |ctx: runtime::LeaseContext| async move {
                let _ = ready_tx.send(());
                tokio::select! {
                    () = ctx.cancelled() => {}
                    _ = stop.wait_for(|stop| *stop) => {}
                }
                let status = ctx.status();
                let cancelled = ctx.cancel_reason().map(|reason| {
                    (
                        reason,
                        ctx.stop_by()
                            .saturating_duration_since(Instant::now().into()),
                    )
                });
                Held {
                    token: ctx.token(),
                    cancelled,
                    renewals: status.renewals,
                }
            };
            match runtime
                .run_under_lease(&req, runtime::CancelPolicy::Kill, work)
                .await
            {
                Ok(runtime::RunOutcome::Ran { output, .. }) => output.expect("the work ran"),
                other => panic!("lease {i}: {other:?}"),
            }
        }));
        ready_rx.await.expect("acquired");
    }
    topology.wait_replicated();
    // The promoted replica, whichever it is, never got the odd leases (nor their groups'
    // counters): they are lost in the failover.
    let lost: Vec<usize> = (0..LEASES).filter(|i| i % 2 == 1).collect();
    for replica in topology.replicas() {
        for &i in &lost {
            lose_on_replica(replica, &[keys[i].lease(), keys[i].fence()]);
        }
    }

    let failed_over = Instant::now();
    let new = tokio::task::block_in_place(|| topology.failover());
    let took = failed_over.elapsed();
    // Two renewal periods on the new primary.
    tokio::time::sleep(ttl * 2 / 3 + Duration::from_secs(1)).await;
    let _ = stop_tx.send(true);
    let mut held = Vec::new();
    for job in jobs {
        held.push(job.await.unwrap());
    }

    let new_primary = topology.node(new);
    let cancelled_in_time = lost
        .iter()
        .filter(|&&i| matches!(held[i].cancelled, Some((_, left)) if left > Duration::ZERO))
        .count();
    let mut least_left = ttl;
    for (i, h) in held.iter().enumerate() {
        if lost.contains(&i) {
            let Some((reason, left)) = h.cancelled else {
                panic!("lease {i} was lost in the failover but its worker was not cancelled")
            };
            assert!(
                matches!(reason, CancelReason::Lost(_) | CancelReason::Unknown),
                "lease {i}: {reason:?}"
            );
            assert!(
                left > Duration::ZERO,
                "lease {i}: cancelled after its validity ended"
            );
            least_left = least_left.min(left);
        } else {
            assert!(
                !matches!(h.cancelled, Some((CancelReason::Lost(_), _))),
                "lease {i} was on the new primary, yet reported lost: {:?}",
                h.cancelled
            );
        }
    }
    let kept_renewing = held
        .iter()
        .enumerate()
        .filter(|(i, h)| !lost.contains(i) && h.cancelled.is_none() && h.renewals >= 2)
        .count();
    assert!(
        kept_renewing > 0,
        "no kept lease renewed on the new primary"
    );
    for &i in &lost {
        assert!(!exists(new_primary, keys[i].lease()), "lease {i} came back");
    }

    // Every resource again, by another client: larger tokens than any before the failover.
    let highest_before = held.iter().map(|h| h.token).max().unwrap();
    let other = topology.client(redis_settings());
    for (i, key) in keys.iter().enumerate() {
        let req = LeaseRequest::builder(
            Purpose::new("sentinel").unwrap(),
            ResourceDigest::of(format!("failover-{i}")),
            other.new_attempt("after").unwrap(),
        )
        .wait_timeout(ttl * 2)
        .build()
        .unwrap();
        let AcquireOutcome::Acquired(lease) = other.acquire(&req).await.unwrap() else {
            panic!("resource {i} is free again after its holder released it")
        };
        assert!(exists(new_primary, key.lease()));
        assert!(
            lease.token() > highest_before,
            "resource {i}: token {:?} after the failover, {highest_before:?} before",
            lease.token()
        );
    }
    FaultLine::new("sentinel-failover", 1)
        .with("leases", LEASES)
        .share("leases_lost", lost.len(), LEASES)
        .share(
            "cancelled_before_validity_end",
            cancelled_in_time,
            lost.len(),
        )
        .ms("margin_ms", least_left)
        .share("kept_renewing", kept_renewing, LEASES - lost.len())
        .share("later_tokens_larger", keys.len(), keys.len())
        .ms("took_ms", took)
        .ms("ttl_ms", ttl)
        .print();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_primary_is_killed_calls_fail_fast_and_honestly_until_a_replica_is_promoted() {
    let mut topology = SentinelTopology::start();
    let timeout = Duration::from_millis(300);
    let client = topology.client(settings_with_timeout(timeout));
    let before = churn(&client, "r", 2).await;
    let holding = request(&client, "held", "op");
    let mut held = acquired(&client, &holding).await;
    topology.wait_replicated();
    let old = tokio::task::block_in_place(|| topology.kill_primary_only());

    // Calls go on during the failover; each answers within its timeout, and says "not
    // executed" or "may have executed" until the new primary answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut outcomes = Vec::new();
    loop {
        let started = Instant::now();
        let outcome = client.inspect(&holding).await;
        let took = started.elapsed();
        assert!(
            took < timeout + Duration::from_millis(200),
            "{outcome:?} took {took:?}"
        );
        match outcome {
            InspectOutcome::HeldByAttempt { token, .. } => {
                assert_eq!(token, held.token());
                break;
            }
            InspectOutcome::Unavailable { .. } | InspectOutcome::Indeterminate { .. } => {
                outcomes.push(outcome);
            }
            other => panic!("the replicated lease must be found, not {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "never reached the new primary: {outcomes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, InspectOutcome::Unavailable { .. })),
        "the dead primary refuses connections: {outcomes:?}"
    );
    let new = tokio::task::block_in_place(|| topology.wait_for_new_primary(old));
    assert_ne!(new, old);

    let new_primary = topology.node(new);
    let key = held.keys().lease().to_owned();
    shorten(new_primary, &key);
    assert!(matches!(held.renew().await, RenewOutcome::Renewed { .. }));
    assert!(pttl(new_primary, &key) > Duration::from_secs(15));
    assert_eq!(held.release().await, ReleaseOutcome::Released);
    assert!(!exists(new_primary, &key));
    let after = churn(&client, "r", 1).await;
    assert!(after[0] > *before.iter().max().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_after_a_failover_wakes_on_the_release_published_on_the_new_primary() {
    let topology = SentinelTopology::start();
    let holder_client = topology.client(redis_settings());
    let mut holder = acquired(&holder_client, &request(&holder_client, "r", "holder")).await;
    topology.wait_replicated();
    let old = topology.primary_port();
    topology.failover();
    // Until the old primary is demoted, the holder's connection made before the failover
    // may still reach it (see `wait_demoted`).
    topology.wait_demoted(old);

    // The release is published on the new primary; the waiter subscribed there.
    let waiter = topology.client(redis_settings());
    common::backends::assert_waiter_wakes_on_release(&mut holder, waiter).await;
}

/// A waiter subscribed on the old primary when a failover comes, the release published on
/// the new one as soon as the old one is demoted: the waiter finds the lease free within a second (it subscribes
/// again and tries, or looks again), not at the holder's TTL (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_subscribed_before_a_failover_finds_the_release_within_a_second() {
    let topology = SentinelTopology::start();
    let holder_client = topology.client(redis_settings());
    let mut holder = acquired(&holder_client, &request(&holder_client, "r", "holder")).await;
    topology.wait_replicated();
    let waiter = topology.client(redis_settings());
    let old = topology.primary_port();
    // The release goes out once the old primary is demoted: released on the old primary
    // while it still says `master`, the deletion would be lost with it (asynchronous
    // replication), and the waiter would rightly wait out the TTL on the new one.
    let found =
        common::backends::assert_waiter_finds_an_unheard_release(&mut holder, waiter, async {
            tokio::task::block_in_place(|| {
                topology.failover();
                topology.wait_demoted(old);
            });
        })
        .await;
    println!("measured: a release just after a failover found {found:?} after it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_subscription_ends_when_the_primary_moves() {
    let topology = SentinelTopology::start();
    let backend = RedisBackend::new(topology.config()).unwrap();
    let client = LeaseClient::new(backend.clone(), redis_settings()).unwrap();
    let keys = client.keys(&Purpose::new("sentinel").unwrap(), &ResourceDigest::of("r"));
    let mut notices = calls::subscribe_releases(&backend, &keys, Duration::from_secs(2))
        .await
        .unwrap();
    let old = topology.primary_port();
    tokio::task::block_in_place(|| topology.failover());
    // The old primary is alive and keeps the subscription open; only the move ends it.
    assert_eq!(role(topology.node(old)), "master", "precondition");
    let ended = tokio::time::timeout(Duration::from_secs(2), notices.next()).await;
    assert_eq!(
        ended,
        Ok(false),
        "the subscription must end, not wait on the old primary"
    );
}
