//! Release notices on a real redis-server: every waiter of a client listens on one shared
//! pub/sub connection (docs/design.md §10), which stays open for the next wait; a channel is
//! unsubscribed once nobody waits on it; when that connection dies the waiters still get
//! their leases and the next wait opens a new one; a waiter refused its subscription
//! tries again within a second, on the same connection; and a thousand waiters subscribing
//! together cost one round of two `SUBSCRIBE`s.

mod common;

use std::time::Duration;

use common::RedisServer;
use common::backends::redis_settings;
use common::leases::acquired;
use leasehold::fuzzing::calls;
use leasehold::*;
use tokio::time::{Instant, sleep};

const WAITERS: usize = 20;
const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_secs(3);

fn request(client: &LeaseClient, resource: &str, ttl: Duration, wait: Duration) -> LeaseRequest {
    client
        .request("notices", resource)
        .unwrap()
        .ttl(ttl)
        .wait_timeout(wait)
        .build()
        .unwrap()
}

/// The ids of the server's pub/sub connections: those subscribed to a channel now
/// (`CLIENT LIST TYPE pubsub`).
fn pubsub_connections(server: &RedisServer) -> Vec<String> {
    connections(server, &["CLIENT", "LIST", "TYPE", "pubsub"])
}

/// The ids of every connection to the server.
fn all_connections(server: &RedisServer) -> Vec<String> {
    connections(server, &["CLIENT", "LIST"])
}

fn connections(server: &RedisServer, command: &[&str]) -> Vec<String> {
    let list: String = server.query(command);
    list.lines()
        .filter_map(|l| l.split(' ').next()?.strip_prefix("id=").map(str::to_owned))
        .collect()
}

fn subscribed_channels(server: &RedisServer) -> usize {
    server.query::<Vec<String>>(&["PUBSUB", "CHANNELS"]).len()
}

/// Polls `check` every 10 ms until it holds, for at most 10 s.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        sleep(Duration::from_millis(10)).await;
    }
}

/// Holds `WAITERS` leases of `ttl` on `holder` and starts a waiter for each on `waiter`;
/// returns the held leases and the waiting tasks once every waiter is subscribed.
async fn contended(
    server: &RedisServer,
    holder: &LeaseClient,
    waiter: &LeaseClient,
    round: usize,
    ttl: Duration,
) -> (
    Vec<LeaseHandle>,
    Vec<tokio::task::JoinHandle<AcquireOutcome>>,
) {
    let mut held = Vec::new();
    let mut waiting = Vec::new();
    for i in 0..WAITERS {
        let resource = format!("r{round}-{i}");
        held.push(acquired(holder, &request(holder, &resource, ttl, Duration::ZERO)).await);
        let req = request(waiter, &resource, ttl, Duration::from_secs(20));
        let client = waiter.clone();
        waiting.push(tokio::spawn(
            async move { client.acquire(&req).await.unwrap() },
        ));
    }
    // Each waiter listens for the lease's release and for its own turn in the line.
    until("every waiter is subscribed", || {
        subscribed_channels(server) == 2 * WAITERS
    })
    .await;
    (held, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_of_a_client_listens_on_one_connection_which_stays_for_the_next_wait() {
    let server = RedisServer::start();
    let holder = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let waiter = LeaseClient::redis(&server.url(), redis_settings()).unwrap();

    let (held, waiting) = contended(&server, &holder, &waiter, 0, LONG).await;
    let first = pubsub_connections(&server);
    assert_eq!(
        first.len(),
        1,
        "{WAITERS} waiters, one connection: {first:?}"
    );
    for mut lease in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    for task in waiting {
        let mut lease = task.await.unwrap().into_handle().expect("acquired");
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    // Nobody waits any more: every channel is unsubscribed (so Redis no longer counts the
    // connection as pub/sub), and the connection stays open.
    until("no channel is subscribed", || {
        subscribed_channels(&server) == 0
    })
    .await;
    assert!(all_connections(&server).contains(&first[0]));

    // The next waits use the same connection.
    let (held, waiting) = contended(&server, &holder, &waiter, 1, LONG).await;
    assert_eq!(pubsub_connections(&server), first);
    for mut lease in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    for task in waiting {
        assert!(task.await.unwrap().into_handle().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_shared_connection_dies_waiters_still_acquire_and_the_next_wait_opens_another() {
    let server = RedisServer::start();
    let holder = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let waiter = LeaseClient::redis(&server.url(), redis_settings()).unwrap();

    // A waiter whose subscription ended subscribes again within a second and tries each
    // time; the short TTL is a backstop.
    let (held, waiting) = contended(&server, &holder, &waiter, 0, SHORT).await;
    let first = pubsub_connections(&server);
    let _: i64 = server.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    until("the connection is gone", || {
        pubsub_connections(&server).is_empty()
    })
    .await;
    // Released while the waiters may not listen yet: they find out, within the wait.
    for mut lease in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    for task in waiting {
        assert!(
            task.await.unwrap().into_handle().is_some(),
            "acquired by polling"
        );
    }

    let (held, waiting) = contended(&server, &holder, &waiter, 1, LONG).await;
    let second = pubsub_connections(&server);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, first, "a new connection");
    for mut lease in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    for task in waiting {
        assert!(task.await.unwrap().into_handle().is_some());
    }
}

/// A release made just after the waiter's pub/sub connection was killed reaches no
/// subscription: the waiter still finds the lease free within a second (it subscribes
/// again and tries, or looks again), not at the holder's TTL (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_connection_was_killed_finds_the_release_within_a_second() {
    let server = RedisServer::start();
    let holder_client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let waiter = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let mut holder = acquired(
        &holder_client,
        &request(&holder_client, "killed", LONG, Duration::ZERO),
    )
    .await;
    let found =
        common::backends::assert_waiter_finds_an_unheard_release(&mut holder, waiter, async {
            assert_eq!(pubsub_connections(&server).len(), 1, "the waiter listens");
            let _: i64 = server.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        })
        .await;
    println!(
        "measured: a release after the waiter's connection was killed found {found:?} after it"
    );
}

/// `SUBSCRIBE`s the server refused (an ACL), from `INFO commandstats`.
fn refused_subscribes(server: &RedisServer) -> u64 {
    let info: String = server.query(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_subscribe:"))
        .and_then(|stats| {
            (stats.split(','))
                .find_map(|f| f.strip_prefix("rejected_calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// A waiter whose user may not `SUBSCRIBE` (an ACL) gets no notices: it keeps trying to
/// subscribe — after 50 ms, doubling to a second — and tries each time, and looks again
/// every 600–750 ms besides, so it takes the lease within a second of its release, not when
/// the holder's 30 s TTL would have run out. The refusals cost no new connection: the
/// pub/sub connection stays, refused channels and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_refused_its_subscription_tries_again_within_a_second_on_one_connection() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "deaf",
        "on",
        ">pw",
        "~leasehold:*",
        "resetchannels",
        "+@all",
    ]);
    let deaf_url = format!("redis://deaf:pw@127.0.0.1:{}", server.port());
    let holder = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let waiter = LeaseClient::redis(&deaf_url, redis_settings()).unwrap();
    let mut held = acquired(&holder, &request(&holder, "r", LONG, Duration::ZERO)).await;
    let req = request(&waiter, "r", LONG, Duration::from_secs(20));
    let client = waiter.clone();
    let waiting = tokio::spawn(async move { client.acquire(&req).await.unwrap() });

    // Seven refusals bring the pause between attempts to its longest, a second (50 ms
    // doubling: 50, 100, 200, 400, 800, then 1 s). The release comes half a second after a
    // refusal: the waiter takes the lease at its next look or attempt, within a second.
    until("seven subscriptions were refused", || {
        refused_subscribes(&server) >= 7
    })
    .await;
    let refused = refused_subscribes(&server);
    until("one more subscription was refused", || {
        refused_subscribes(&server) > refused
    })
    .await;
    sleep(Duration::from_millis(500)).await;
    let deaf = || -> Vec<String> {
        let list: String = server.query(&["CLIENT", "LIST"]);
        list.lines()
            .filter(|l| l.contains(" user=deaf "))
            .filter_map(|l| l.split(' ').next().map(str::to_owned))
            .collect()
    };
    let connections = deaf();
    assert_eq!(
        connections.len(),
        2,
        "a connection and a pub/sub one: {connections:?}"
    );
    let released = Instant::now();
    assert_eq!(held.release().await, ReleaseOutcome::Released);
    // Held, not released here: releasing publishes, which this user may not do either.
    let _lease = waiting.await.unwrap().into_handle().expect("acquired");
    let took = released.elapsed();
    println!("measured: a waiter without notices took the lease {took:?} after its release");
    assert!(
        took < Duration::from_secs(1),
        "took {took:?} after the release, more than a second (the TTL is {LONG:?})"
    );
    assert_eq!(deaf(), connections, "no connection was replaced");
}

/// A thousand waiters subscribing together are one round of the shared connection's
/// writer, whose channels go as `SUBSCRIBE`s of at most 500 channels each, all in flight
/// at once (src/backend/redis/pubsub.rs): two `SUBSCRIBE`s, not one per waiter, nor one per
/// round of a few. "Together" is all of them routed before the writer's next round starts:
/// on one thread, in one poll that tokio's cooperative budget does not cut short (it would
/// after 128 lock acquisitions, and the writer would start a round with those).
#[tokio::test]
async fn a_thousand_waiters_subscribing_together_cost_two_subscribes_of_500_channels() {
    const THOUSAND: usize = 1_000;
    let server = RedisServer::start();
    let backend = RedisBackend::new(RedisConfig::new(server.url())).unwrap();
    let keys_of = |resource: &str| {
        LeaseKeys::new(
            &Namespace::default(),
            &Purpose::new("wait").unwrap(),
            &ResourceDigest::of(resource),
        )
    };
    // Connected, and the shared pub/sub connection open: one subscription, ended.
    let warm = keys_of("warm");
    drop(
        calls::subscribe_releases(&backend, &warm, LONG)
            .await
            .unwrap(),
    );
    until("the warm-up channel is unsubscribed", || {
        subscribed_channels(&server) == 0
    })
    .await;
    server.reset_stats();
    let keys: Vec<LeaseKeys> = (0..THOUSAND).map(|i| keys_of(&format!("r{i}"))).collect();
    let together = futures_util::future::join_all(
        keys.iter()
            .map(|k| calls::subscribe_releases(&backend, k, LONG)),
    );
    let subscriptions = tokio::task::unconstrained(together).await;
    let subscribed = subscriptions.iter().filter(|s| s.is_ok()).count();
    let commands = server.calls_of("subscribe");
    println!("measured: {THOUSAND} waiters subscribing together: {commands} SUBSCRIBE commands");
    assert_eq!(subscribed, THOUSAND, "every subscription confirmed");
    assert_eq!(subscribed_channels(&server), THOUSAND);
    assert_eq!(
        commands, 2,
        "{THOUSAND} channels in one round of SUBSCRIBEs of 500 each"
    );
}
