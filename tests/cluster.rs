//! Redis Cluster: `RedisConfig::cluster` runs each lease's scripts on the primary serving
//! the slot of its hash tag, follows a slot that moves (`MOVED`), and wakes waiters with
//! release notices. Every test runs a real three-primary cluster (`common::cluster`) and
//! asserts both what the API reported and what the nodes hold afterwards.

mod common;

use std::collections::HashSet;
use std::net::TcpListener;
use std::time::Instant;

use common::backends::{LONG_TIMEOUT, long_timeouts, redis_settings};
use common::cluster::ClusterTopology;
use common::fault::FaultLine;
use common::leases::acquired;
use leasehold::*;

fn request(client: &LeaseClient, resource: &str, op: &str) -> LeaseRequest {
    common::leases::request(client, "cluster", resource, op)
}

fn exists(topology: &ClusterTopology, key: &str) -> bool {
    topology.owner(key).query::<i64>(&["EXISTS", key]) == 1
}

#[tokio::test]
async fn leases_on_every_primary_acquire_renew_inspect_and_release_on_their_slot_owner() {
    let topology = ClusterTopology::start();
    let client = topology.client(redis_settings());
    let mut owners = HashSet::new();
    for i in 0..12 {
        let resource = format!("r{i}");
        let req = request(&client, &resource, "op");
        let mut lease = acquired(&client, &req).await;
        let keys = lease.keys().clone();
        let owner = topology.owner_of(keys.lease());
        owners.insert(owner);
        assert_eq!(topology.owner_of(keys.fence()), owner, "one slot per lease");
        assert!(exists(&topology, keys.lease()), "the lease is on its owner");
        let pexpire: i64 = topology.nodes()[owner].query(&["PEXPIRE", keys.lease(), "5000"]);
        assert_eq!(pexpire, 1);

        assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
        let pttl: i64 = topology.nodes()[owner].query(&["PTTL", keys.lease()]);
        assert!(pttl > 29_000, "renew reset the TTL: {pttl}");
        let inspected = client.inspect(&req).await;
        assert!(
            matches!(inspected, InspectOutcome::HeldByAttempt { token, .. } if token == lease.token()),
            "{inspected:?}"
        );
        let other = client
            .try_acquire(&request(&client, &resource, "other"))
            .await
            .unwrap();
        assert!(
            matches!(other, AcquireOutcome::Contended { .. }),
            "{other:?}"
        );
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
        assert!(!exists(&topology, keys.lease()), "released on its owner");
    }
    assert_eq!(owners.len(), 3, "twelve leases spread over every primary");
}

#[tokio::test]
async fn a_lease_whose_slot_moves_renews_on_the_new_owner_and_tokens_keep_growing() {
    let topology = ClusterTopology::start();
    let client = topology.client(redis_settings());
    let mut first = acquired(&client, &request(&client, "moving", "first")).await;
    let first_token = first.token();
    assert_eq!(first.release().await, ReleaseOutcome::Released);
    let mut held = acquired(&client, &request(&client, "moving", "held")).await;
    let keys = held.keys().clone();
    let from = topology.owner_of(keys.lease());
    let to = (from + 1) % 3;

    topology.move_slot(keys.lease(), to);
    assert_eq!(topology.owner_of(keys.lease()), to);
    // The backend's map still names the old owner, which answers MOVED: the call follows it
    // to the new owner (and the map is fetched again for later calls).
    let started = Instant::now();
    let renewed = held.renew().await;
    let took = started.elapsed();
    let pttl_on_new_owner: i64 = topology.nodes()[to].query(&["PTTL", keys.lease()]);
    FaultLine::new("cluster-slot-moved", 1)
        .with("outcome", renewed.as_str())
        .with("renewed_on_new_owner", pttl_on_new_owner > 29_000)
        .ms("took_ms", took)
        .print();
    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "{renewed:?}"
    );
    let pttl: i64 = topology.nodes()[to].query(&["PTTL", keys.lease()]);
    assert!(pttl > 29_000, "renewed on the new owner: {pttl}");
    assert_eq!(held.release().await, ReleaseOutcome::Released);
    assert!(!exists(&topology, keys.lease()));

    // The fence moved with the lease: the next token is larger than both earlier ones.
    let next = acquired(&client, &request(&client, "moving", "next")).await;
    assert!(next.token() > held.token() && held.token() > first_token);
    std::mem::forget(next);
}

/// During a slot migration the source answers `ASK` for the keys it already handed over:
/// the backend follows it within the call (`ASKING` on the importing node), so a held
/// lease renews, inspects and releases while the migration runs — nothing waits for its end
/// (an inspection reads the lease alone then: the line's count is unknown).
#[tokio::test]
async fn a_lease_whose_slot_is_migrating_follows_ask_to_the_importing_node() {
    let topology = ClusterTopology::start();
    let client = topology.client(redis_settings());
    let other = topology.client(redis_settings());
    let mut held = acquired(&client, &request(&client, "migrating", "held")).await;
    let keys = held.keys().clone();
    let from = topology.owner_of(keys.lease());
    let to = (from + 1) % 3;
    topology.begin_migration(keys.lease(), to);
    let (source, target) = (&topology.nodes()[from], &topology.nodes()[to]);
    let slot = topology.slot(keys.lease()).to_string();
    assert_eq!(
        topology.owner_of(keys.lease()),
        from,
        "the source still owns the slot"
    );
    assert_eq!(
        source.query::<i64>(&["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        0
    );
    assert_eq!(target.asking_query::<i64>(&["EXISTS", keys.lease()]), 1);

    let started = Instant::now();
    let renewed = held.renew().await;
    let took = started.elapsed();
    let pttl: i64 = target.asking_query(&["PTTL", keys.lease()]);
    FaultLine::new("cluster-slot-migrating", 1)
        .with("outcome", renewed.as_str())
        .with("renewed_on_importing_node", pttl > 29_000)
        .ms("took_ms", took)
        .print();
    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "{renewed:?}"
    );
    assert!(pttl > 29_000, "renewed on the importing node: {pttl}");
    let look = request(&other, "migrating", "look");
    let seen = other.inspect(&look).await;
    assert!(
        matches!(seen, InspectOutcome::HeldByOther { token, .. } if token == held.token()),
        "{seen:?}"
    );
    // The line, which has not moved, cannot be read beside the lease: its count is unknown.
    let reading = other.inspect_with_line(&look).await;
    assert!(reading.outcome().is_held(), "{:?}", reading.outcome());
    assert_eq!(reading.waiting, None);
    assert_eq!(held.release().await, ReleaseOutcome::Released);
    assert_eq!(target.asking_query::<i64>(&["EXISTS", keys.lease()]), 0);

    // Once the slot has moved, the source answers MOVED, which the next acquisition follows
    // to the new owner: a token larger than the migrated lease's.
    topology.end_migration(keys.lease(), to);
    let next = acquired(&client, &request(&client, "migrating", "next")).await;
    assert!(next.token() > held.token());
    assert!(target.query::<i64>(&["EXISTS", keys.lease()]) == 1);
    std::mem::forget(next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_on_the_release_notice() {
    let topology = ClusterTopology::start();
    let holder_client = topology.client(redis_settings());
    let mut holder = acquired(&holder_client, &request(&holder_client, "r", "holder")).await;
    let waiter = topology.client(redis_settings());
    common::backends::assert_waiter_wakes_on_release(&mut holder, waiter).await;
}

#[tokio::test]
async fn dead_and_silent_seeds_are_skipped_and_a_cluster_of_dead_seeds_is_unavailable_at_once() {
    let closed = || {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!(
            "redis://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        )
    };
    let topology = ClusterTopology::start();
    let mut seeds = vec![closed()];
    seeds.extend(topology.seed_urls());
    let backend = RedisBackend::new(RedisConfig::cluster(seeds)).unwrap();
    let client = LeaseClient::new(backend, redis_settings()).unwrap();
    let mut lease = acquired(&client, &request(&client, "r", "op")).await;
    assert_eq!(lease.release().await, ReleaseOutcome::Released);

    // A seed that accepts and never answers costs nothing while another answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut seeds = vec![format!("redis://{}", silent.local_addr().unwrap())];
    seeds.extend(topology.seed_urls());
    let backend = RedisBackend::new(RedisConfig::cluster(seeds)).unwrap();
    let client = LeaseClient::new(backend, long_timeouts()).unwrap();
    let started = Instant::now();
    let mut lease = acquired(&client, &request(&client, "r", "op")).await;
    let took = started.elapsed();
    assert!(
        took < LONG_TIMEOUT / 2,
        "waited out the silent seed: {took:?}"
    );
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    drop(silent);

    let backend = RedisBackend::new(RedisConfig::cluster(vec![closed(), closed()])).unwrap();
    let client = LeaseClient::new(backend, long_timeouts()).unwrap();
    let started = Instant::now();
    let outcome = client
        .try_acquire(&request(&client, "r", "op"))
        .await
        .unwrap();
    let AcquireOutcome::Unavailable { detail } = outcome else {
        panic!("expected unavailable, got {outcome:?}")
    };
    assert_eq!(detail.kind, FailureKind::Connect);
    assert!(detail.message.contains("no cluster seed"), "{detail}");
    let took = started.elapsed();
    assert!(took < LONG_TIMEOUT / 2, "waited out a timeout: {took:?}");
}

#[test]
fn a_cluster_configuration_is_checked_before_any_io_and_never_shows_a_password() {
    let invalid = |config: RedisConfig| {
        matches!(
            RedisBackend::new(config),
            Err(LeaseError::InvalidRedisUrl { .. })
        )
    };
    assert!(invalid(RedisConfig::cluster(vec![])));
    assert!(invalid(RedisConfig::cluster(vec!["not a url".into()])));
    assert!(invalid(RedisConfig::cluster(vec!["redis://h:1/2".into()])));
    assert!(invalid(RedisConfig::cluster(vec!["unix:///tmp/s".into()])));
    assert!(invalid(
        RedisConfig::cluster(vec!["redis://h:1".into()]).sentinel_node_url_template("redis://h")
    ));
    let config = RedisConfig::cluster(vec!["redis://u:hunter2@h:1".into()]);
    assert!(!format!("{config:?}").contains("hunter2"));
    let backend = RedisBackend::new(config).unwrap();
    assert!(!format!("{backend:?}").contains("hunter2"));
}
