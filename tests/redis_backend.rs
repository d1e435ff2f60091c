//! What only a real Redis can show: connection faults, server refusals, script reloads,
//! persistence, ACLs, and what a script reply carries. Each test asserts what the API
//! reported and what Redis holds afterwards.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::backends::{LONG_TIMEOUT, long_timeouts, redis_settings};
use common::fault::FaultLine;
use common::leases::acquired;
use common::{Proxy, ProxyMode, RedisServer};
use leasehold::*;

fn request(client: &LeaseClient, resource: &str) -> LeaseRequest {
    common::leases::request(client, "redis", resource, "op")
}

fn lease_exists(server: &RedisServer, keys: &LeaseKeys) -> bool {
    server.query::<i64>(&["EXISTS", keys.lease()]) == 1
}

/// The failure class of an acquisition that failed, for a `FAULT` line.
fn failure_kind(outcome: &AcquireOutcome) -> String {
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
    server.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
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

#[tokio::test]
async fn acl_user_confined_to_the_namespace_can_lease_and_a_wrong_password_is_unavailable() {
    let server = RedisServer::start();
    let leaser = server.namespace_user_url();
    let port = server.port();
    let ok = LeaseClient::redis(&leaser, redis_settings()).unwrap();
    let mut lease = acquired(&ok, &request(&ok, "r")).await;
    assert_eq!(lease.release().await, ReleaseOutcome::Released);

    let url = format!("redis://leaser:wrong@127.0.0.1:{port}");
    let bad = LeaseClient::redis(&url, redis_settings()).unwrap();
    let outcome = bad.try_acquire(&request(&bad, "r")).await.unwrap();
    let AcquireOutcome::Unavailable { detail } = outcome else {
        panic!("expected unavailable, got {outcome:?}")
    };
    assert!(
        !detail.message.contains("wrong"),
        "password leaked: {detail}"
    );
    assert!(!format!("{bad:?}").contains("wrong"), "password in Debug");

    let other_ns = LeaseClient::redis(
        &leaser,
        redis_settings().with_namespace(Namespace::new("other").unwrap()),
    )
    .unwrap();
    let outcome = other_ns
        .try_acquire(&request(&other_ns, "r"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Unavailable { .. }),
        "NOPERM outside the namespace: {outcome:?}"
    );
}

/// The notices are best effort: a user who may not PUBLISH still acquires and releases,
/// and the release deletes the key rather than leave the lease held for its TTL.
#[tokio::test]
async fn a_user_refused_publish_still_acquires_and_releases() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ]);
    let url = format!("redis://nopub:pw@127.0.0.1:{}", server.port());
    let client = LeaseClient::redis(&url, redis_settings()).unwrap();
    let req = request(&client, "r");
    let keys = client.keys(req.purpose(), req.resource());
    let mut lease = acquired(&client, &req).await;
    assert!(lease_exists(&server, &keys), "not acquired");
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    assert!(
        !lease_exists(&server, &keys),
        "the release left the lease held"
    );
    // Both notices were refused: the path under test was taken.
    let log = format!("{:?}", server.cmd(&["ACL", "LOG"]));
    assert!(
        log.contains("publish"),
        "no refused PUBLISH in the ACL log: {log}"
    );
}

#[tokio::test]
async fn contended_and_inspect_replies_never_carry_the_holders_owner_token() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let req = request(&client, "r");
    let _lease = acquired(&client, &req).await;
    let keys = client.keys(req.purpose(), req.resource());
    let secret = req.attempt().owner().expose().to_owned();
    // The script leasehold sends, with one acquire and one inspect item by another owner.
    let script = common::leases::batch_script();
    let reply = server.cmd(&[
        "EVAL",
        &script,
        "3",
        keys.lease(),
        keys.fence(),
        keys.lease(),
        "7",
        "A30000",
        "another-owner op ",
        "I",
        "another-owner op ",
    ]);
    let text = format!("{reply:?}");
    assert!(
        text.contains("CONTENDED") && text.contains("HELD_BY_OTHER"),
        "{text}"
    );
    assert!(!text.contains(&secret), "owner token leaked: {text}");
}

/// What the script reads: a renewal and a release only the lease's value (the remaining
/// time answers nothing they report); a refusal also the remaining time it reports.
#[tokio::test]
async fn renewals_and_releases_read_the_lease_value_only() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let other = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let mut lease = acquired(&client, &request(&client, "reads")).await;
    server.reset_stats();

    let renewed = lease.renew().await;
    let released = lease.release().await;

    assert!(
        matches!(renewed, RenewOutcome::Renewed { .. }),
        "{renewed:?}"
    );
    assert_eq!(released, ReleaseOutcome::Released);
    let reads = |s: &RedisServer| (s.calls_of("get"), s.calls_of("pttl"));
    assert_eq!(
        reads(&server),
        (2, 0),
        "(GET, PTTL) for a renewal and a release"
    );
    assert_eq!((server.calls_of("pexpire"), server.calls_of("del")), (1, 1));

    let held = acquired(&other, &request(&other, "reads")).await;
    server.reset_stats();
    let refused = client
        .try_acquire(&request(&client, "reads"))
        .await
        .unwrap();
    let AcquireOutcome::Contended { retry_after } = refused else {
        panic!("expected contended, got {refused:?}")
    };
    assert!(retry_after > Duration::ZERO && retry_after <= held.ttl());
    assert_eq!(reads(&server), (1, 1), "(GET, PTTL) for a refusal");
}

/// Release notices are coalesced: several releases published before the waiter looks again
/// wake it once — one acquisition try answers them all.
#[tokio::test]
async fn release_notices_that_arrived_together_wake_the_waiter_once() {
    let server = RedisServer::start();
    let backend = RedisBackend::new(RedisConfig::new(server.url())).unwrap();
    let client = LeaseClient::new(backend.clone(), redis_settings()).unwrap();
    let req = request(&client, "notices");
    let keys = client.keys(req.purpose(), req.resource());
    let mut notices = backend
        .subscribe_releases(&keys, Duration::from_secs(2))
        .await
        .unwrap();
    for _ in 0..3 {
        server.cmd(&["PUBLISH", keys.release_channel(), "released"]);
    }
    // Published before PUBLISH answered: in the socket now, read while this task sleeps.
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert!(notices.next().await, "woken by the releases");
    let again = tokio::time::timeout(Duration::from_millis(200), notices.next()).await;
    assert!(again.is_err(), "woken again by a release already answered");

    server.cmd(&["PUBLISH", keys.release_channel(), "released"]);
    let later = tokio::time::timeout(Duration::from_secs(5), notices.next()).await;
    assert_eq!(later, Ok(true), "a later release wakes it again");
}

#[tokio::test]
async fn raw_resource_ids_never_reach_redis() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let raw = "customer-4711-secret";
    let req = LeaseRequest::builder(
        Purpose::new("redis").unwrap(),
        ResourceDigest::of(raw),
        client.new_attempt("op").unwrap(),
    )
    .build()
    .unwrap();
    let _lease = acquired(&client, &req).await;
    let keys: Vec<String> = server.query(&["KEYS", "*"]);
    assert!(!keys.is_empty());
    assert!(keys.iter().all(|k| !k.contains(raw)), "{keys:?}");
}

#[tokio::test]
async fn bad_urls_are_rejected_before_any_io_without_echoing_secrets() {
    for url in ["not a url", "http://127.0.0.1:6379", "redis://user:pw@[::1"] {
        let err = LeaseClient::redis(url, LeaseSettings::default()).unwrap_err();
        assert!(
            matches!(err, LeaseError::InvalidRedisUrl { .. }),
            "{url}: {err:?}"
        );
        assert!(!err.to_string().contains("pw"));
    }
}

/// A fake server that answers every command with `+OK`: a script reply Redis would never
/// send. The outcome must be `Indeterminate` with detail, never a panic.
#[tokio::test]
async fn malformed_script_replies_are_indeterminate_not_a_panic() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    // One reply per command (count RESP array headers in the chunk).
                    let commands = buf[..n].iter().filter(|&&b| b == b'*').count().max(1);
                    for _ in 0..commands {
                        if stream.write_all(b"+OK\r\n").is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let settings = redis_settings().with_command_timeout(Duration::from_millis(500));
    let client = LeaseClient::redis(&format!("redis://{addr}"), settings).unwrap();
    let outcome = client.try_acquire(&request(&client, "r")).await.unwrap();
    FaultLine::new("malformed-reply/redis", 1)
        .with("outcome", outcome.as_str())
        .with("kind", failure_kind(&outcome))
        .print();
    let AcquireOutcome::Indeterminate { detail, .. } = outcome else {
        panic!("expected indeterminate, got {outcome:?}")
    };
    assert_eq!(detail.kind, FailureKind::MalformedReply, "{detail}");
}

/// A standalone Redis has no replicas: an acquisition that waits for one is acknowledged by
/// none, after the wait, and is held all the same.
#[tokio::test]
async fn waiting_for_a_replica_on_a_server_without_any_reports_none_after_the_wait() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let wait = Duration::from_millis(200);
    let req = LeaseRequest::builder(
        Purpose::new("redis").unwrap(),
        ResourceDigest::of("r"),
        client.new_attempt("op").unwrap(),
    )
    .wait_for_replicas(1, wait)
    .build()
    .unwrap();
    let started = Instant::now();
    let lease = acquired(&client, &req).await;
    assert!(started.elapsed() >= wait - Duration::from_millis(10));
    assert_eq!(
        lease.replication(),
        &Replication::Acknowledged {
            acked: 0,
            wanted: 1
        }
    );
    assert!(lease_exists(&server, lease.keys()));
}
