//! Sentinels that refuse or never answer, a reply lost on the way back, and a node demoted
//! under the backend: each call answers within its bound and says honestly whether it
//! may have run.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::fault::FaultLine;
use crate::common::leases::acquired;
use crate::common::sentinel::{MASTER_NAME, SentinelTopology};
use crate::{churn, exists, request, settings_with_timeout};
use leasehold::*;

/// A loopback port that nothing listens on (refuses connections).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
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
        assert!(exists(topology.primary(), lease.keys().lease()));
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
    assert_eq!(
        &attempt,
        req.attempt(),
        "the request's attempt, to settle by"
    );
    topology.proxy().set_mode(common::ProxyMode::Pass);
    let keys = client.keys(req.purpose(), req.resource());
    assert!(exists(topology.primary(), keys.lease()), "the script ran");
    // The timeout dropped the connection: this finds the primary again, via the sentinels.
    let inspected = client.inspect(&req).await;
    let InspectOutcome::HeldByAttempt { token, .. } = inspected else {
        panic!("inspect must find the attempt, got {inspected:?}")
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
    assert!(exists(&node, lease.keys().lease()));
}
