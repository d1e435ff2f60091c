//! Redis Sentinel: `RedisConfig::sentinel` finds the primary through the sentinels, follows
//! it across failovers, and stays honest about what may have happened. Every test runs real
//! processes (`common::sentinel`) and asserts both what the API reported and what the data
//! nodes hold afterwards.
//!
//! Tests that block in the harness while the backend's `+switch-master` watcher must run
//! use a multi-thread runtime: on a current-thread runtime the watcher could not run until
//! the test yields.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::backends::redis_settings;
use common::fault::FaultLine;
use common::leases::acquired;
use common::sentinel::{MASTER_NAME, SentinelTopology, query, role};
use leasehold::runtime::CancelReason;
use leasehold::*;

fn request(client: &LeaseClient, resource: &str, op: &str) -> LeaseRequest {
    common::leases::request(client, "sentinel", resource, op)
}

/// Acquires and releases `resource` `times` times; the tokens issued.
async fn churn(client: &LeaseClient, resource: &str, times: usize) -> Vec<FencingToken> {
    let mut tokens = Vec::new();
    for i in 0..times {
        let mut lease = acquired(client, &request(client, resource, &format!("churn-{i}"))).await;
        tokens.push(lease.token());
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    tokens
}

// Reads on a new connection each: a failover's `CLIENT KILL` breaks cached ones.
fn exists(node: &RedisServer, key: &str) -> bool {
    query::<i64>(node, &["EXISTS", key]) == 1
}

fn pttl(node: &RedisServer, key: &str) -> Duration {
    let ms: i64 = query(node, &["PTTL", key]);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Shortens the lease's server TTL to 5 s, so a renewal's reset is visible.
fn shorten(node: &RedisServer, key: &str) {
    let set: i64 = query(node, &["PEXPIRE", key, "5000"]);
    assert_eq!(set, 1, "the key exists on node {}", node.port());
}

/// Deletes `keys` on a replica behind the primary's back, as if their replication had been
/// lost: the replica is made writable for the moment (a local write is not replicated).
fn lose_on_replica(replica: &RedisServer, keys: &[&str]) {
    query::<()>(replica, &["CONFIG", "SET", "replica-read-only", "no"]);
    for key in keys {
        query::<()>(replica, &["DEL", key]);
    }
    query::<()>(replica, &["CONFIG", "SET", "replica-read-only", "yes"]);
}

/// A loopback port that nothing listens on (refuses connections).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn settings_with_timeout(command_timeout: Duration) -> LeaseSettings {
    LeaseSettings::default()
        .with_command_timeout(command_timeout)
        .with_connect_timeout(Duration::from_secs(1))
}

#[tokio::test]
async fn acquire_renew_and_release_through_the_sentinels_land_on_the_primary() {
    let topology = SentinelTopology::start();
    let client = topology.client(redis_settings());
    let req = request(&client, "r", "op");
    let mut lease = acquired(&client, &req).await;
    let key = lease.keys().lease.clone();
    let primary = topology.primary();
    assert!(exists(primary, &key), "the lease is on the primary");
    topology.wait_replicated();
    for replica in topology.replicas() {
        assert!(
            exists(replica, &key),
            "and replicated to {}",
            replica.port()
        );
    }

    let AcquireOutcome::Replayed(replay) = client.try_acquire(&req).await.unwrap() else {
        panic!("the same attempt must replay")
    };
    assert_eq!(replay.token(), lease.token());
    std::mem::forget(replay);
    let other = topology.client(redis_settings());
    let outcome = other
        .try_acquire(&request(&other, "r", "other"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Contended { .. }),
        "{outcome:?}"
    );

    shorten(primary, &key);
    assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
    assert!(
        pttl(primary, &key) > Duration::from_secs(29),
        "renew reset the TTL"
    );
    let inspected = client
        .inspect(lease.purpose(), lease.resource(), lease.attempt())
        .await;
    assert!(
        matches!(inspected, InspectOutcome::HeldByAttempt { token, .. } if token == lease.token()),
        "{inspected:?}"
    );

    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    assert!(
        !exists(primary, &key),
        "release deleted the key on the primary"
    );
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
    let key = held.keys().lease.clone();
    shorten(new_primary, &key);
    let renewed = held.renew().await;
    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "the key was replicated: {renewed:?}"
    );
    assert!(
        pttl(new_primary, &key) > Duration::from_secs(29),
        "the renewal reset the TTL on the new primary"
    );

    // A new acquisition, on the same backend, lands on the new primary — not on the old
    // one, which still takes writes until the sentinels demote it.
    let fresh = acquired(&client, &request(&client, "fresh", "op")).await;
    let fresh_key = fresh.keys().lease.clone();
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
        lose_on_replica(replica, &[&keys.lease, &keys.fence]);
    }
    let old = topology.primary_port();

    let new = topology.failover();
    let new_primary = topology.node(new);
    assert!(!exists(new_primary, &keys.lease), "precondition: lost");
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
        !exists(new_primary, &keys.lease),
        "nothing was written on the new primary"
    );

    let other = topology.client(redis_settings());
    let next = acquired(&other, &request(&other, "r", "next")).await;
    assert!(exists(new_primary, &keys.lease));
    let highest_before = before.iter().max().unwrap();
    assert!(
        next.token() > *highest_before,
        "a promotion that lost the counter must still issue a larger token: {:?} after {before:?}",
        next.token()
    );
    std::mem::forget(held);
}

fn replicated_request(
    client: &LeaseClient,
    resource: &str,
    replicas: u32,
    wait: Duration,
) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("sentinel").unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt("op").unwrap(),
    )
    .wait_for_replicas(replicas, wait)
    .build()
    .unwrap()
}

/// The durability knob (`WAIT` after the acquisition): how many replicas acknowledged it is
/// reported, short counts after the wait, and a replay — which writes nothing — waits for
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_that_waits_for_replicas_reports_how_many_acknowledged_it() {
    let topology = SentinelTopology::start();
    let client = topology.client(redis_settings());

    let req = replicated_request(&client, "both", 2, Duration::from_secs(2));
    let started = Instant::now();
    let lease = acquired(&client, &req).await;
    assert_eq!(
        lease.replication(),
        &Replication::Acknowledged {
            acked: 2,
            wanted: 2
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "both replicas answer at once"
    );
    for replica in topology.replicas() {
        assert!(
            exists(replica, &lease.keys().lease),
            "acknowledged, so it is there"
        );
    }
    let AcquireOutcome::Replayed(replay) = client.try_acquire(&req).await.unwrap() else {
        panic!("the same attempt replays")
    };
    assert_eq!(replay.replication(), &Replication::NotWaited);

    let wait = Duration::from_millis(300);
    let req = replicated_request(&client, "three", 3, wait);
    let started = Instant::now();
    let mut lease = acquired(&client, &req).await;
    let took = started.elapsed();
    assert_eq!(
        lease.replication(),
        &Replication::Acknowledged {
            acked: 2,
            wanted: 3
        },
        "two replicas exist"
    );
    assert!(took >= wait - Duration::from_millis(10), "waited {took:?}");
    assert_eq!(lease.state(), LeaseState::Active, "held all the same");
    let plain = acquired(&client, &request(&client, "plain", "op")).await;
    assert_eq!(plain.replication(), &Replication::NotRequested);
}

/// A replica that does not answer shortens the count, after the wait — and no other
/// operation of the process waits behind it: `WAIT` runs on a connection of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_shortens_the_count_and_holds_up_no_other_operation() {
    let topology = SentinelTopology::start();
    let client = topology.client(redis_settings());
    let mut other = acquired(&client, &request(&client, "other", "op")).await;
    let stopped = topology.replicas()[0];
    stopped.pause();
    let wait = Duration::from_millis(1500);
    let req = replicated_request(&client, "exposed", 2, wait);
    let waiter = {
        let (client, req) = (client.clone(), req.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let outcome = client.try_acquire(&req).await.unwrap();
            (outcome, started.elapsed())
        })
    };
    // Meanwhile: renewals and acquisitions on the same client answer at their usual pace.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let started = Instant::now();
        assert!(matches!(other.renew().await, RenewOutcome::Renewed { .. }));
        let mut fresh = acquired(&client, &request(&client, &format!("fresh-{i}"), "op")).await;
        let _ = fresh.release().await;
        slowest = slowest.max(started.elapsed());
    }
    let (outcome, took) = waiter.await.unwrap();
    stopped.resume();
    let AcquireOutcome::Acquired(lease) = outcome else {
        panic!("acquired all the same: {outcome:?}")
    };
    assert_eq!(
        lease.replication(),
        &Replication::Acknowledged {
            acked: 1,
            wanted: 2
        }
    );
    assert!(took >= wait - Duration::from_millis(10), "waited {took:?}");
    assert!(
        slowest < wait / 2,
        "other operations waited behind WAIT: slowest {slowest:?}"
    );
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
            lose_on_replica(replica, &[&keys[i].lease, &keys[i].fence]);
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
        assert!(!exists(new_primary, &keys[i].lease), "lease {i} came back");
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
        assert!(exists(new_primary, &key.lease));
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
    let mut held = acquired(&client, &request(&client, "held", "op")).await;
    topology.wait_replicated();
    let old = tokio::task::block_in_place(|| topology.kill_primary_only());

    // Calls go on during the failover; each answers within its timeout, and says "not
    // executed" or "may have executed" until the new primary answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut outcomes = Vec::new();
    loop {
        let started = Instant::now();
        let outcome = client
            .inspect(held.purpose(), held.resource(), held.attempt())
            .await;
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
    let key = held.keys().lease.clone();
    shorten(new_primary, &key);
    assert!(matches!(held.renew().await, RenewOutcome::Renewed { .. }));
    assert!(pttl(new_primary, &key) > Duration::from_secs(29));
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
    topology.failover();

    // The release is published on the new primary; the waiter subscribed there.
    let waiter = topology.client(redis_settings());
    common::backends::assert_waiter_wakes_on_release(&mut holder, waiter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_subscription_ends_when_the_primary_moves() {
    let topology = SentinelTopology::start();
    let backend = RedisBackend::new(topology.config()).unwrap();
    let client = LeaseClient::new(backend.clone(), redis_settings()).unwrap();
    let keys = client.keys(&Purpose::new("sentinel").unwrap(), &ResourceDigest::of("r"));
    let mut notices = backend
        .subscribe_releases(&keys, Duration::from_secs(2))
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

#[tokio::test]
async fn when_every_sentinel_refuses_a_call_is_unavailable_at_once() {
    let urls = vec![
        format!("redis://127.0.0.1:{}", closed_port()),
        format!("redis://127.0.0.1:{}", closed_port()),
    ];
    let timeout = Duration::from_millis(200);
    let backend = RedisBackend::new(RedisConfig::sentinel(urls, MASTER_NAME)).unwrap();
    let client = LeaseClient::new(backend, settings_with_timeout(timeout)).unwrap();
    let started = Instant::now();
    let outcome = client
        .try_acquire(&request(&client, "r", "op"))
        .await
        .unwrap();
    let took = started.elapsed();
    FaultLine::new("connection-refused/sentinel", 2)
        .with("outcome", outcome.as_str())
        .ms("took_ms", took)
        .ms("command_timeout_ms", timeout)
        .print();
    let AcquireOutcome::Unavailable { detail } = outcome else {
        panic!("expected unavailable, got {outcome:?}")
    };
    assert_eq!(detail.kind, FailureKind::Connect);
    assert!(detail.message.contains("no primary"), "{detail}");
    assert!(
        took < timeout,
        "refusals must not wait for the timeout: {took:?}"
    );
}

#[tokio::test]
async fn when_every_sentinel_is_silent_a_call_is_unavailable_within_the_command_timeout() {
    // Listening but never accepting: connections complete in the kernel, nothing answers.
    let silent: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut urls: Vec<String> = silent
        .iter()
        .map(|l| format!("redis://127.0.0.1:{}", l.local_addr().unwrap().port()))
        .collect();
    urls.push(format!("redis://127.0.0.1:{}", closed_port()));
    let timeout = Duration::from_millis(200);
    let backend = RedisBackend::new(RedisConfig::sentinel(urls, MASTER_NAME)).unwrap();
    let client = LeaseClient::new(backend, settings_with_timeout(timeout)).unwrap();
    for _ in 0..2 {
        let started = Instant::now();
        let outcome = client
            .try_acquire(&request(&client, "r", "op"))
            .await
            .unwrap();
        let took = started.elapsed();
        let AcquireOutcome::Unavailable { detail } = outcome else {
            panic!("expected unavailable, got {outcome:?}")
        };
        assert_eq!(detail.kind, FailureKind::Connect, "{detail}");
        assert!(
            took >= timeout - Duration::from_millis(20)
                && took < timeout + Duration::from_millis(100),
            "bounded by the command timeout: {took:?} ({detail})"
        );
    }
}

#[tokio::test]
async fn a_silent_sentinel_costs_nothing_when_a_majority_agrees_and_at_most_half_the_bound_otherwise()
 {
    let topology = SentinelTopology::start();
    let silent: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let silent_urls: Vec<String> = silent
        .iter()
        .map(|l| format!("redis://127.0.0.1:{}", l.local_addr().unwrap().port()))
        .collect();
    // Bound = min(connect timeout 1 s, command timeout 2 s); half of it is 500 ms.
    for (silent_count, expected) in [
        (1, Duration::ZERO..Duration::from_millis(300)),
        (3, Duration::from_millis(450)..Duration::from_millis(900)),
    ] {
        let mut urls = silent_urls[..silent_count].to_vec();
        urls.extend(topology.sentinel_urls());
        let backend = RedisBackend::new(
            RedisConfig::sentinel(urls, topology.master_name())
                .connect_timeout(Duration::from_secs(1)),
        )
        .unwrap();
        let client = LeaseClient::new(backend, redis_settings()).unwrap();
        let resource = format!("r{silent_count}");
        let started = Instant::now();
        let lease = acquired(&client, &request(&client, &resource, "op")).await;
        let took = started.elapsed();
        assert!(
            expected.contains(&took),
            "{silent_count} silent of {}: {took:?}, expected {expected:?}",
            silent_count + 3
        );
        assert!(exists(topology.primary(), &lease.keys().lease));
    }
}

#[tokio::test]
async fn reply_lost_through_the_sentinel_backend_is_indeterminate_and_the_attempt_replays() {
    let topology = SentinelTopology::start_proxied();
    let client = topology.client(settings_with_timeout(Duration::from_millis(150)));
    // Connect and load the script first (as in the contract suite's row).
    churn(&client, "warm", 1).await;
    let req = request(&client, "r", "op");
    topology.proxy().set_mode(common::ProxyMode::DropReplies);
    let outcome = client.try_acquire(&req).await.unwrap();
    let AcquireOutcome::Indeterminate { attempt, .. } = outcome else {
        panic!("expected indeterminate, got {outcome:?}")
    };
    topology.proxy().set_mode(common::ProxyMode::Pass);
    let keys = client.keys(req.purpose(), req.resource());
    assert!(exists(topology.primary(), &keys.lease), "the script ran");
    // The timeout dropped the connection: this finds the primary again, via the sentinels.
    let InspectOutcome::HeldByAttempt { token, .. } = client
        .inspect(req.purpose(), req.resource(), &attempt)
        .await
    else {
        panic!("inspect must find the attempt")
    };
    let AcquireOutcome::Replayed(lease) = client.try_acquire(&req).await.unwrap() else {
        panic!("retry with the same attempt must replay")
    };
    assert_eq!(lease.token(), token);
}

/// The path a demoted primary takes under Sentinel too (one code path): `READONLY` is
/// `Unavailable` — the script's first write was refused — and the next call starts on a new
/// connection, which finds the primary again.
#[tokio::test]
async fn readonly_from_a_demoted_node_is_unavailable_and_the_next_call_reconnects() {
    let node = RedisServer::start();
    let other = RedisServer::start();
    let client = LeaseClient::redis(&node.url(), redis_settings()).unwrap();
    churn(&client, "warm", 1).await;
    let connections = |n: &RedisServer| {
        let info: String = n.query(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap()
    };
    // Demoted without its clients being disconnected, as `REPLICAOF` does.
    node.cmd(&["REPLICAOF", "127.0.0.1", &other.port().to_string()]);
    let req = request(&client, "r", "op");
    let outcome = client.try_acquire(&req).await.unwrap();
    let AcquireOutcome::Unavailable { detail } = outcome else {
        panic!("expected unavailable, got {outcome:?}")
    };
    assert_eq!(detail.kind, FailureKind::ServerRefused);
    // The redis crate spells the code `ReadOnly`.
    assert!(
        detail.message.to_ascii_lowercase().contains("readonly"),
        "{detail}"
    );

    node.cmd(&["REPLICAOF", "NO", "ONE"]);
    let before = connections(&node);
    let lease = acquired(&client, &req).await;
    assert_eq!(
        connections(&node),
        before + 1,
        "a new connection after READONLY"
    );
    assert!(exists(&node, &lease.keys().lease));
}

#[tokio::test]
async fn bad_sentinel_configuration_is_rejected_before_any_io() {
    // A sentinel URL that would work: no connection may reach it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let good = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let secret = "hunter2";
    let cases: Vec<(&str, RedisConfig, &str)> = vec![
        (
            "empty list",
            RedisConfig::sentinel(Vec::new(), MASTER_NAME),
            "at least one sentinel",
        ),
        (
            "bad port",
            RedisConfig::sentinel(
                vec![
                    good.clone(),
                    format!("redis://:{secret}@127.0.0.1:notaport"),
                ],
                MASTER_NAME,
            ),
            "sentinel URL 2 of 2",
        ),
        (
            "not a URL",
            RedisConfig::sentinel(vec![format!("{secret}@nowhere")], MASTER_NAME),
            "sentinel URL 1 of 1",
        ),
        (
            "database on a sentinel",
            RedisConfig::sentinel(vec![format!("{good}/3")], MASTER_NAME),
            "names database 3",
        ),
        (
            "empty master name",
            RedisConfig::sentinel(vec![good.clone()], ""),
            "is empty",
        ),
        (
            "master name with a space",
            RedisConfig::sentinel(vec![good.clone()], "two words"),
            "whitespace",
        ),
        (
            "unix node template",
            RedisConfig::sentinel(vec![good.clone()], MASTER_NAME)
                .sentinel_node_url_template("unix:///tmp/redis.sock"),
            "redis:// or rediss://",
        ),
        (
            "unparsable node template",
            RedisConfig::sentinel(vec![good.clone()], MASTER_NAME)
                .sentinel_node_url_template(format!("redis://:{secret}@host:port")),
            "sentinel_node_url_template",
        ),
        (
            "node template on a standalone config",
            RedisConfig::new(good.clone()).sentinel_node_url_template("redis://x"),
            "only to a sentinel configuration",
        ),
    ];
    for (name, config, expected) in cases {
        let debug = format!("{config:?}");
        assert!(!debug.contains(secret), "{name}: Debug leaks: {debug}");
        let err = RedisBackend::new(config).unwrap_err();
        let LeaseError::InvalidRedisUrl { reason } = &err else {
            panic!("{name}: expected InvalidRedisUrl, got {err:?}")
        };
        assert!(reason.contains(expected), "{name}: {reason}");
        assert!(!err.to_string().contains(secret), "{name}: leaks: {err}");
    }
    let err = RedisBackend::new(
        RedisConfig::sentinel(vec![good.clone()], MASTER_NAME).connect_timeout(Duration::ZERO),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        LeaseError::InvalidDuration {
            param: "connect_timeout",
            ..
        }
    ));
    // Valid configurations do no I/O either: connections are made on first use.
    let _valid = RedisBackend::new(RedisConfig::sentinel(vec![good], MASTER_NAME)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no connection may be attempted"
    );
}

#[test]
fn debug_output_of_a_sentinel_config_and_backend_shows_no_url() {
    let config = RedisConfig::sentinel(
        vec![
            "redis://:sentinel-secret@10.0.0.1:26379".to_owned(),
            "redis://10.0.0.2:26379".to_owned(),
        ],
        "leases",
    )
    .sentinel_node_url_template("redis://user:node-secret@primary/2");
    let shown = format!("{config:?}");
    let backend = format!("{:?}", RedisBackend::new(config).unwrap());
    for text in [&shown, &backend] {
        for hidden in ["sentinel-secret", "node-secret", "10.0.0.1", "user"] {
            assert!(!text.contains(hidden), "{hidden:?} in {text}");
        }
        assert!(text.contains("leases"), "{text}");
    }
    assert!(shown.contains("<redacted>"), "{shown}");
}
