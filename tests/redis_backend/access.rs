//! What a real Redis lets through and hands back: ACLs (a user confined to the namespace, one
//! refused PUBLISH), what replies and keys carry (never an owner token or a raw id),
//! notices arriving together, bad URLs, malformed replies, a wait for replicas.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use leasehold::fuzzing::calls;
use leasehold::*;

use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::fault::FaultLine;
use crate::common::leases::acquired;
use crate::{failure_kind, lease_exists, request};

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

/// An ACL written before the line (no sorted-set commands) leaves the line out: a user
/// under it acquires, waits and releases as before, and no sorted set is written.
#[tokio::test]
async fn a_user_refused_the_sorted_set_commands_leases_and_waits_without_a_line() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "noline",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-@sortedset",
    ]);
    let url = format!("redis://noline:pw@127.0.0.1:{}", server.port());
    let client = LeaseClient::redis(&url, redis_settings()).unwrap();
    let mut holder = acquired(&client, &request(&client, "r")).await;
    let waiter = LeaseClient::redis(&url, redis_settings()).unwrap();
    let found = crate::common::backends::assert_waiter_finds_an_unheard_release(
        &mut holder,
        waiter,
        async {},
    )
    .await;
    println!("measured: without a line, the waiter found the release {found:?} after it");
    let keys = client.keys(&Purpose::new("test").unwrap(), &ResourceDigest::of("r"));
    let line = leasehold::fuzzing::calls::line_key(&keys);
    assert_eq!(server.query::<i64>(&["EXISTS", &line]), 0);
    // Inspect still reads the lease; how many wait is not known.
    let _holder = acquired(&client, &request(&client, "inspected")).await;
    let reading = client
        .inspect_with_line(&request(&client, "inspected"))
        .await;
    assert!(reading.outcome().is_held(), "{reading:?}");
    assert_eq!(reading.waiting, None);
    let log = format!("{:?}", server.cmd(&["ACL", "LOG"]));
    assert!(
        log.contains("zrank") && log.contains("zrange") && log.contains("zcard"),
        "no refused ZRANK, ZRANGE and ZCARD in the ACL log: {log}"
    );
}

/// The ACL of docs/production.md lets inspect count the line (`ZCARD`).
#[tokio::test]
async fn the_documented_acl_lets_inspect_count_the_line() {
    let server = RedisServer::start();
    let doc = include_str!("../../docs/production.md");
    let acl = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER leases on >secret "))
        .expect("docs/production.md gives the ACL");
    let mut words: Vec<&str> = acl.split_whitespace().collect();
    words[4] = ">pw";
    server.cmd(&words);
    let url = format!("redis://leases:pw@127.0.0.1:{}", server.port());
    let client = LeaseClient::redis(&url, redis_settings()).unwrap();
    let _holder = acquired(&client, &request(&client, "r")).await;
    let waiter = LeaseClient::redis(&url, redis_settings()).unwrap();
    // A waiting try joins the line (a wait's every try does).
    let req = request(&waiter, "r");
    let keys = waiter.keys(req.purpose(), req.resource());
    let backend = RedisBackend::new(RedisConfig::new(url.clone())).unwrap();
    let reply = calls::acquire_waiting(&backend, &keys, &req, Duration::from_secs(5)).await;
    assert!(reply.is_ok(), "{reply:?}");
    let reading = client.inspect_with_line(&request(&client, "r")).await;
    assert!(reading.outcome().is_held(), "{reading:?}");
    assert_eq!(reading.waiting, Some(1), "the waiter is counted");
}

/// A holder refused PUBLISH releases without a notice: a subscribed waiter still finds
/// the lease free within a second, not at the holder's TTL (30 s).
#[tokio::test]
async fn a_waiter_finds_a_release_without_a_notice_within_a_second() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ]);
    let url = format!("redis://nopub:pw@127.0.0.1:{}", server.port());
    let holder_client = LeaseClient::redis(&url, redis_settings()).unwrap();
    let req = LeaseRequest::builder(
        Purpose::new("test").unwrap(),
        ResourceDigest::of("r"),
        holder_client.new_attempt("holder").unwrap(),
    )
    .ttl(Duration::from_secs(30))
    .build()
    .unwrap();
    let mut holder = acquired(&holder_client, &req).await;
    let waiter = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let found = crate::common::backends::assert_waiter_finds_an_unheard_release(
        &mut holder,
        waiter,
        async {},
    )
    .await;
    println!("measured: a release without a notice found {found:?} after it");
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
    let script = crate::common::leases::batch_script();
    let reply = server.cmd(&[
        "EVAL",
        &script,
        "5",
        keys.lease(),
        keys.fence(),
        &leasehold::fuzzing::calls::line_key(&keys),
        keys.lease(),
        &leasehold::fuzzing::calls::line_key(&keys),
        "7",
        "A30000 -00000000000000a1",
        "another-owner op ",
        "I",
        "another-owner op ",
    ]);
    let text = crate::common::leases::batch_lines(reply).join("\n");
    assert!(
        text.contains("CONTENDED") && text.contains("HELD_BY_OTHER"),
        "{text}"
    );
    assert!(!text.contains(&secret), "owner token leaked: {text}");
}

/// What the script reads: a renewal and a release only the lease's value (the remaining
/// time answers nothing they report); a refusal also the remaining time it reports. (On the
/// script path whatever the server: `native` covers the server's own commands.)
#[tokio::test]
async fn renewals_and_releases_read_the_lease_value_only() {
    let server = RedisServer::start();
    let scripts_only = RedisConfig::new(server.url()).native_commands(false);
    let backend = RedisBackend::new(scripts_only).unwrap();
    let client = LeaseClient::new(backend, redis_settings()).unwrap();
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
    let mut notices = calls::subscribe_releases(&backend, &keys, Duration::from_secs(2))
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
