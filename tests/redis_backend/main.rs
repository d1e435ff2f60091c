//! What only a real Redis can show: connection faults, server refusals, script reloads,
//! persistence (here), ACLs and what a script reply carries (`access`). Each test asserts
//! what the API reported and what Redis holds afterwards.

mod access;
#[path = "../common/mod.rs"]
mod common;
mod line_order;
mod native;
mod plain_path;

use std::time::{Duration, Instant};

use common::backends::{LONG_TIMEOUT, long_timeouts, redis_settings};
use common::fault::FaultLine;
use common::leases::acquired;
use common::{Proxy, ProxyMode, RedisServer};
use leasehold::*;

pub(crate) fn request(client: &LeaseClient, resource: &str) -> LeaseRequest {
    common::leases::request(client, "redis", resource, "op")
}

pub(crate) fn lease_exists(server: &RedisServer, keys: &LeaseKeys) -> bool {
    server.query::<i64>(&["EXISTS", keys.lease()]) == 1
}

/// The failure class of an acquisition that failed, for a `FAULT` line.
pub(crate) fn failure_kind(outcome: &AcquireOutcome) -> String {
    match outcome {
        AcquireOutcome::Unavailable { detail } | AcquireOutcome::Indeterminate { detail, .. } => {
            detail.kind.to_string()
        }
        _ => "none".to_owned(),
    }
}

#[tokio::test]
async fn closed_port_is_unavailable_without_waiting_for_a_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    proxy.stop_listening();
    let client = LeaseClient::redis(&proxy.url(), long_timeouts()).unwrap();
    let req = request(&client, "r");
    let started = Instant::now();
    let outcome = client.try_acquire(&req).await.unwrap();
    let took = started.elapsed();
    FaultLine::new("connection-refused/redis", 1)
        .with("outcome", outcome.as_str())
        .with("kind", failure_kind(&outcome))
        .ms("took_ms", took)
        .with(
            "held_after",
            lease_exists(&server, &client.keys(req.purpose(), req.resource())),
        )
        .print();
    assert!(
        matches!(
            outcome,
            AcquireOutcome::Unavailable {
                detail: FailureDetail {
                    kind: FailureKind::Connect,
                    ..
                }
            }
        ),
        "{outcome:?}"
    );
    assert!(
        took < LONG_TIMEOUT / 2,
        "refusal waited out a timeout: {took:?}"
    );
    assert!(!lease_exists(
        &server,
        &client.keys(req.purpose(), req.resource())
    ));
    // Once the port opens, the same client connects.
    proxy.start_listening();
    assert!(matches!(
        client.try_acquire(&req).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test]
async fn black_holed_request_is_indeterminate_after_the_command_timeout_and_nothing_is_held() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let settings = redis_settings().with_command_timeout(Duration::from_millis(300));
    let client = LeaseClient::redis(&proxy.url(), settings).unwrap();
    let warm = request(&client, "warm");
    let _ = acquired(&client, &warm).await.release().await;
    proxy.set_mode(ProxyMode::DropRequests);
    let req = request(&client, "r");
    let started = Instant::now();
    let outcome = client.try_acquire(&req).await.unwrap();
    let waited = started.elapsed();
    FaultLine::new("request-black-hole/redis", 1)
        .with("outcome", outcome.as_str())
        .with("kind", failure_kind(&outcome))
        .ms("took_ms", waited)
        .ms("command_timeout_ms", Duration::from_millis(300))
        .with(
            "held_after",
            lease_exists(&server, &client.keys(req.purpose(), req.resource())),
        )
        .print();
    assert!(
        matches!(outcome, AcquireOutcome::Indeterminate { .. }),
        "{outcome:?}"
    );
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(2));
    assert!(!lease_exists(
        &server,
        &client.keys(req.purpose(), req.resource())
    ));
    // The silent connection is dropped; after the network heals the same attempt acquires.
    proxy.set_mode(ProxyMode::Pass);
    assert!(matches!(
        client.try_acquire(&req).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test]
async fn renew_survives_a_reset_connection_by_retrying_on_a_new_one() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let client = LeaseClient::redis(&proxy.url(), redis_settings()).unwrap();
    let mut lease = acquired(&client, &request(&client, "r")).await;
    proxy.reset_all();
    let outcome = lease.renew().await;
    assert!(
        matches!(outcome, RenewOutcome::Renewed { .. }),
        "{outcome:?}"
    );
    assert!(proxy.accepted() >= 2, "a second connection was made");
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
}

#[tokio::test]
async fn script_flush_mid_run_is_recovered_by_reloading_the_script() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let req = request(&client, "r");
    let mut lease = acquired(&client, &req).await;
    server.cmd(&["SCRIPT", "FLUSH"]);
    assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
    server.cmd(&["SCRIPT", "FLUSH"]);
    assert!(matches!(
        client.inspect(&req).await,
        InspectOutcome::HeldByAttempt { .. }
    ));
    server.cmd(&["SCRIPT", "FLUSH"]);
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    server.cmd(&["SCRIPT", "FLUSH"]);
    assert!(matches!(
        client.try_acquire(&request(&client, "r")).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test]
async fn lease_and_fencing_counter_survive_a_restart_with_persistence() {
    let mut server = RedisServer::start_persistent();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let req = request(&client, "r");
    let mut lease = acquired(&client, &req).await;
    let first = lease.token();
    server.restart();
    // The lease is still held by the same attempt, and renewal works on a new connection.
    let mut renewed = lease.renew().await;
    let first_renewal = renewed.as_str();
    if !matches!(renewed, RenewOutcome::Renewed { .. }) {
        renewed = lease.renew().await;
    }
    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "{renewed:?}"
    );
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    server.restart();
    // The first command on the connection the restart closed fails with a broken pipe,
    // which may have been written (docs/design.md §12): `Indeterminate`, and `acquire` replays the
    // same attempt until it is certain.
    let req = LeaseRequest::builder(
        Purpose::new("redis").unwrap(),
        ResourceDigest::of("r"),
        client.new_attempt("op").unwrap(),
    )
    .wait_timeout(Duration::from_secs(5))
    .build()
    .unwrap();
    let next = client
        .acquire(&req)
        .await
        .unwrap()
        .into_handle()
        .expect("acquired");
    FaultLine::new("aof-restart/redis", 2)
        .with("first_renewal_after_restart", first_renewal)
        .with("renewal", renewed.as_str())
        .with("token_after_second_restart_larger", next.token() > first)
        .print();
    assert!(next.token() > first, "{} !> {first}", next.token());
}

#[tokio::test]
async fn busy_server_is_unavailable_and_nothing_is_written() {
    let server = RedisServer::start();
    // Its name before Redis 7.0 (busy-reply-threshold since), which every later server
    // still takes.
    server.cmd(&["CONFIG", "SET", "lua-time-limit", "50"]);
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let warm = request(&client, "warm");
    let _ = acquired(&client, &warm).await.release().await;
    // A read-only script that spins: other clients get BUSY until it is killed.
    let url = server.url();
    let spinner = std::thread::spawn(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("local i = 0 while true do i = i + 1 end")
            .arg(0)
            .query(&mut conn);
    });
    std::thread::sleep(Duration::from_millis(200));
    let req = request(&client, "r");
    let outcome = client.try_acquire(&req).await.unwrap();
    server.cmd(&["SCRIPT", "KILL"]);
    spinner.join().unwrap();
    let AcquireOutcome::Unavailable { detail } = outcome else {
        panic!("expected unavailable, got {outcome:?}")
    };
    assert_eq!(detail.kind, FailureKind::ServerRefused);
    assert!(detail.message.contains("BUSY"), "{detail}");
    assert!(!lease_exists(
        &server,
        &client.keys(req.purpose(), req.resource())
    ));
}

#[tokio::test]
async fn out_of_memory_is_unavailable_and_nothing_is_written() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let warm = request(&client, "warm");
    let _ = acquired(&client, &warm).await.release().await;
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    let req = request(&client, "r");
    let outcome = client.try_acquire(&req).await.unwrap();
    server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    let AcquireOutcome::Unavailable { detail } = outcome else {
        panic!("expected unavailable, got {outcome:?}")
    };
    assert!(detail.message.contains("OOM"), "{detail}");
    assert!(!lease_exists(
        &server,
        &client.keys(req.purpose(), req.resource())
    ));
}
