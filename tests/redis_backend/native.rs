//! The server's own commands in place of the script, where it has them (`ServerCapabilities`):
//! which path each operation takes on the server the harness runs (Redis 7: the script;
//! Valkey 9, in CI's server matrix: `SET … IFEQ`), and that both give the same outcomes —
//! also where only the script can answer (a lock-delay, a replay under another label) and
//! where the configuration keeps the script — and, against the commands the server itself
//! has (not the backend's reading of `INFO server`), that renewals and releases take them.

use std::time::Duration;

use leasehold::*;

use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::leases::acquired;
use crate::request;

/// What the harness's server can do, by the same reading the backend makes.
fn capabilities(server: &RedisServer) -> ServerCapabilities {
    ServerCapabilities::from_info(&server.query::<String>(&["INFO", "server"]))
}

fn client_on(server: &RedisServer, native_commands: bool) -> LeaseClient {
    let config = RedisConfig::new(server.url()).native_commands(native_commands);
    LeaseClient::new(RedisBackend::new(config).unwrap(), redis_settings()).unwrap()
}

/// The `SET`s and the script calls the server ran for `renew`.
async fn renew_counting(server: &RedisServer, lease: &mut LeaseHandle) -> (u64, u64) {
    server.reset_stats();
    let outcome = lease.renew().await;
    assert!(
        matches!(outcome, RenewOutcome::Renewed { .. }),
        "{outcome:?}"
    );
    (server.calls_of("set"), server.calls_of("evalsha"))
}

#[tokio::test]
async fn a_renewal_is_one_set_ifeq_where_the_server_has_it_and_the_script_elsewhere() {
    let server = RedisServer::start();
    let native = capabilities(&server).renews_natively();
    let client = client_on(&server, true);
    let mut lease = acquired(&client, &request(&client, "r")).await;
    server.cmd(&["PEXPIRE", lease.keys().lease(), "5000"]);
    let calls = renew_counting(&server, &mut lease).await;
    assert_eq!(
        calls,
        if native { (1, 0) } else { (0, 1) },
        "native: {native}"
    );
    let pttl: i64 = server.query(&["PTTL", lease.keys().lease()]);
    assert!(pttl > 20_000, "the renewal reset the expiry: {pttl}");
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
}

#[tokio::test]
async fn native_commands_off_keeps_every_renewal_on_the_script() {
    let server = RedisServer::start();
    let client = client_on(&server, false);
    let mut lease = acquired(&client, &request(&client, "r")).await;
    assert_eq!(renew_counting(&server, &mut lease).await, (0, 1));
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
}

/// A lease with a lock-delay is renewed only while it has not ended: a test only the
/// script makes, so it never takes the server's `SET`.
#[tokio::test]
async fn a_lease_with_a_lock_delay_is_renewed_by_the_script() {
    let server = RedisServer::start();
    let client = client_on(&server, true);
    let req = LeaseRequest::builder(
        Purpose::new("redis").unwrap(),
        ResourceDigest::of("r"),
        client.new_attempt("op").unwrap(),
    )
    .ttl(Duration::from_secs(30))
    .lock_delay(Duration::from_secs(1))
    .build()
    .unwrap();
    let mut lease = acquired(&client, &req).await;
    assert_eq!(renew_counting(&server, &mut lease).await, (0, 1));
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
}

/// A replay keeps the value stored first: a handle whose request named another holder
/// label compares against a value the key does not hold. The server's `SET` then finds
/// the attempt's own lease under another value, and the script renews it.
#[tokio::test]
async fn a_replay_under_another_label_is_renewed_and_never_reported_lost() {
    let server = RedisServer::start();
    let native = capabilities(&server).renews_natively();
    let client = client_on(&server, true);
    let attempt = client.new_attempt("op").unwrap();
    let labelled = |label: &str| {
        LeaseRequest::builder(
            Purpose::new("redis").unwrap(),
            ResourceDigest::of("r"),
            attempt.clone(),
        )
        .ttl(Duration::from_secs(30))
        .holder(HolderLabel::new(label).unwrap())
        .build()
        .unwrap()
    };
    let first = acquired(&client, &labelled("web-1")).await;
    let AcquireOutcome::Replayed(mut replay) =
        client.try_acquire(&labelled("web-2")).await.unwrap()
    else {
        panic!("expected a replay");
    };
    let calls = renew_counting(&server, &mut replay).await;
    assert_eq!(
        calls,
        if native { (1, 1) } else { (0, 1) },
        "native: {native}"
    );
    let value: String = server.query(&["GET", replay.keys().lease()]);
    assert!(value.contains(" web-1 "), "the stored label stays");
    assert_eq!(replay.release().await, ReleaseOutcome::Released);
    std::mem::forget(first);
}

/// Someone else's lease, and no lease: the same outcomes by either path.
#[tokio::test]
async fn not_the_owner_and_absent_are_lost_on_either_path() {
    let server = RedisServer::start();
    for native_commands in [true, false] {
        let client = client_on(&server, native_commands);
        let resource = format!("r-{native_commands}");
        let mut lease = acquired(&client, &request(&client, &resource)).await;
        let key = lease.keys().lease().to_owned();
        server.cmd(&["SET", &key, "someone else 1", "PX", "30000"]);
        assert_eq!(
            lease.renew().await,
            RenewOutcome::Lost {
                reason: LostReason::NotOwner
            },
            "native commands: {native_commands}"
        );
        let mut lease = acquired(&client, &request(&client, &format!("{resource}-2"))).await;
        server.cmd(&["DEL", lease.keys().lease()]);
        assert_eq!(
            lease.renew().await,
            RenewOutcome::Lost {
                reason: LostReason::Absent
            },
            "native commands: {native_commands}"
        );
        server.cmd(&["DEL", &key]);
    }
}

/// A release is `DELIFEQ` and its notice where the server has it; a release that finds no
/// lease, or another's, is answered by the script — the same outcomes on either path.
#[tokio::test]
async fn a_release_is_delifeq_where_the_server_has_it_and_answers_alike_on_either_path() {
    let server = RedisServer::start();
    let native = capabilities(&server).releases_natively();
    for native_commands in [true, false] {
        let client = client_on(&server, native_commands);
        let by_server = native && native_commands;
        let resource = format!("r-{native_commands}");
        let mut lease = acquired(&client, &request(&client, &resource)).await;
        server.reset_stats();
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
        let calls = (
            server.calls_of("delifeq"),
            server.calls_of("publish"),
            server.calls_of("evalsha"),
        );
        let expected = if by_server { (1, 1, 0) } else { (0, 1, 1) };
        assert_eq!(calls, expected, "native commands: {native_commands}");
        assert!(!crate::lease_exists(&server, lease.keys()));

        let mut gone = acquired(&client, &request(&client, &format!("{resource}-gone"))).await;
        server.cmd(&["DEL", gone.keys().lease()]);
        assert_eq!(gone.release().await, ReleaseOutcome::AlreadyAbsent);

        let mut taken = acquired(&client, &request(&client, &format!("{resource}-taken"))).await;
        let key = taken.keys().lease().to_owned();
        server.cmd(&["SET", &key, "someone else 1", "PX", "30000"]);
        assert_eq!(taken.release().await, ReleaseOutcome::NotOwner);
        let value: String = server.query(&["GET", &key]);
        assert_eq!(value, "someone else 1", "another's lease is never touched");
    }
}

/// An ACL written for the script (README's, which has no `DELIFEQ`): a release the server
/// refuses to run by its own command is released by the script, and the connection keeps
/// to the script from then on.
#[tokio::test]
async fn a_user_refused_the_servers_own_release_still_releases_by_the_script() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "scripted",
        "on",
        ">pw",
        "~leasehold:lease:v2:*",
        "&leasehold:lease:v2:*",
        "+evalsha",
        "+eval",
        "+script|load",
        "+get",
        "+set",
        "+pexpire",
        "+del",
        "+pttl",
        "+time",
        "+publish",
        "+subscribe",
        "+unsubscribe",
        "+wait",
        "+ping",
        "+info",
    ]);
    let url = format!("redis://scripted:pw@127.0.0.1:{}", server.port());
    let client = LeaseClient::redis(&url, redis_settings()).unwrap();
    let native = capabilities(&server);
    for round in 0..2 {
        let mut lease = acquired(&client, &request(&client, &format!("r-{round}"))).await;
        server.reset_stats();
        assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
        assert!(!crate::lease_exists(&server, lease.keys()));
        // The first round's release was refused once, then released by the script; from
        // then on the connection sends the script alone, the renewal included.
        let first = round == 0;
        let refused = u64::from(native.releases_natively() && first);
        let sets = u64::from(native.renews_natively() && first);
        let calls = (
            server.rejected_calls_of("delifeq"),
            server.calls_of("delifeq"),
            server.calls_of("set"),
            server.calls_of("evalsha"),
        );
        assert_eq!(calls, (refused, 0, sets, 2 - sets), "round {round}");
    }
}

/// Which of its own compare-and-set commands the server has — `SET … IFEQ` and `DELIFEQ`
/// — asked of the server itself (a `SET … IFEQ` tried on a key of its own, `COMMAND INFO`),
/// not read from `INFO server` as the backend reads it.
fn commands_the_server_has(server: &RedisServer) -> (bool, bool) {
    let set_ifeq = server
        .try_cmd(&["SET", "probe:set-ifeq", "x", "IFEQ", "x"])
        .is_ok();
    let delifeq = match server.cmd(&["COMMAND", "INFO", "DELIFEQ"]) {
        redis::Value::Array(found) => found.iter().any(|c| *c != redis::Value::Nil),
        other => panic!("COMMAND INFO answered {other:?}"),
    };
    (set_ifeq, delifeq)
}

/// The path each operation takes, from `INFO commandstats`, against the commands the
/// server has (asked of it, not of the backend's reading of `INFO server`): on Valkey 9 a
/// renewal is one `SET` and a release one `DELIFEQ`, no script; on Redis 7 both are the
/// script (`EVALSHA`). A misread `INFO server` cannot put a server that has the commands on
/// the script path unnoticed.
#[tokio::test]
async fn renewals_and_releases_run_as_the_servers_own_commands_exactly_where_it_has_them() {
    let server = RedisServer::start();
    let (set_ifeq, delifeq) = commands_the_server_has(&server);
    let info: String = server.query(&["INFO", "server"]);
    if info.contains("valkey_version:9.") {
        assert!(set_ifeq && delifeq, "Valkey 9 has SET … IFEQ and DELIFEQ");
    }
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let mut lease = acquired(&client, &request(&client, "r")).await;
    let renewed = renew_counting(&server, &mut lease).await;
    server.reset_stats();
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    let released = (server.calls_of("delifeq"), server.calls_of("evalsha"));
    println!(
        "measured: SET … IFEQ {set_ifeq}, DELIFEQ {delifeq}: renewal (set, evalsha) {renewed:?}, \
         release (delifeq, evalsha) {released:?}"
    );
    let by = |native: bool| if native { (1, 0) } else { (0, 1) };
    assert_eq!(renewed, by(set_ifeq), "renewal: SET … IFEQ {set_ifeq}");
    assert_eq!(released, by(delifeq), "release: DELIFEQ {delifeq}");
}
