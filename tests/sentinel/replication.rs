//! Writes through the sentinels land on the primary they name and reach its replicas;
//! the durability knob (`WAIT` after an acquisition) says how many replicas acknowledged,
//! and waits on a connection of its own so that a slow replica holds up nothing else.

use std::time::{Duration, Instant};

use crate::common::backends::redis_settings;
use crate::common::leases::acquired;
use crate::common::sentinel::SentinelTopology;
use crate::{exists, pttl, request, shorten};
use leasehold::*;

#[tokio::test]
async fn acquire_renew_and_release_through_the_sentinels_land_on_the_primary() {
    let topology = SentinelTopology::start();
    let client = topology.client(redis_settings());
    let req = request(&client, "r", "op");
    let mut lease = acquired(&client, &req).await;
    let key = lease.keys().lease().to_owned();
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
        pttl(primary, &key) > Duration::from_secs(15),
        "renew reset the TTL"
    );
    let inspected = client.inspect(&req).await;
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

    // A wait far longer than two answering replicas take even on a starved machine: the
    // bound below tells "answered" from "waited it out", whatever the load.
    let long_wait = Duration::from_secs(10);
    let req = replicated_request(&client, "both", 2, long_wait);
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
        started.elapsed() < long_wait / 2,
        "both replicas answer at once: {:?}",
        started.elapsed()
    );
    for replica in topology.replicas() {
        assert!(
            exists(replica, lease.keys().lease()),
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
    assert!(took >= wait / 2, "waited {took:?}");
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
    // Long enough that an operation queued behind `WAIT` would take seconds, so the bound
    // below holds on a starved machine too.
    let wait = Duration::from_secs(4);
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
    // Redis times `WAIT` out on its own clock, which once ended a 4 s wait 0.9 s early on
    // a loaded machine: the bound shows the wait happened, not Redis's timer precision.
    assert!(took >= wait / 2, "waited {took:?}");
    assert!(
        slowest < wait / 2,
        "other operations waited behind WAIT: slowest {slowest:?}"
    );
}
