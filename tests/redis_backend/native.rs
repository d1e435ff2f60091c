//! The server's own commands in place of the script, where it has them (`ServerCapabilities`):
//! which path each operation takes on the server the harness runs (Redis 7: the script;
//! Valkey 9, in CI's server matrix: `SET … IFEQ`), and that both give the same outcomes —
//! also where only the script can answer (a lock-delay, a replay under another label) and
//! where the configuration keeps the script — and, against the commands the server itself
//! has and to the paths docs/design.md §4 states per server (not the backend's reading of
//! `INFO server`), that acquisitions, renewals and releases take them.

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

/// An ACL written for the script (docs/production.md's, which has no `DELIFEQ`): a release the server
/// refuses to run by its own command is released by the script, and the connection keeps
/// to the script from then on.
#[tokio::test]
async fn a_user_refused_the_servers_own_release_still_releases_by_the_script() {
    let server = RedisServer::start();
    // The ACL of docs/production.md, word for word but for the user's name and password.
    let doc = include_str!("../../docs/production.md");
    let acl = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER leases on >secret "))
        .expect("docs/production.md gives the ACL");
    let mut words: Vec<&str> = acl.split_whitespace().collect();
    words[2] = "scripted";
    words[4] = ">pw";
    assert!(
        !words.contains(&"+delifeq"),
        "the ACL written for the script"
    );
    server.cmd(&words);
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

/// Which path leasehold takes on each server, as docs/design.md §4 states it, by the
/// server's name and version in `INFO server`: `(server_name, from version, renewals by
/// SET … IFEQ, releases by DELIFEQ)`, the first row that matches. Written out here, not
/// read from the backend's `ServerCapabilities`, so that a detection gone wrong shows as a
/// path that differs from this table. Redis 8.4 has the same compare-and-set
/// (`SET … IFEQ`, `DELEX … IFEQ`), but leasehold keeps the script there until its suites
/// run on that server: every Redis row is the script.
const PATHS: &[(&str, (u32, u32), bool, bool)] = &[
    ("valkey", (9, 0), true, true),
    ("valkey", (8, 1), true, false),
    ("valkey", (0, 0), false, false),
    ("redis", (0, 0), false, false),
];

/// The server's name and `major.minor` version, from its `INFO server`: Valkey names
/// itself (`server_name:valkey`, `valkey_version`); Redis has `redis_version` alone.
fn server_of(info: &str) -> (String, (u32, u32), String) {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let (name, version) = match field("server_name") {
        Some("valkey") => ("valkey", field("valkey_version").expect("valkey_version")),
        _ => ("redis", field("redis_version").expect("redis_version")),
    };
    let mut parts = version
        .split('.')
        .map(|p| p.parse::<u32>().expect("a version"));
    let major_minor = (
        parts.next().expect("a major version"),
        parts.next().unwrap_or(0),
    );
    (name.to_owned(), major_minor, version.to_owned())
}

/// The path each operation takes, from the server's own `INFO commandstats` after
/// `CONFIG RESETSTAT`, against the table above (not the backend's reading of `INFO
/// server`): an acquisition is the script everywhere; on Valkey 9 a renewal is one `SET`
/// and a release one `DELIFEQ`, no script; on Redis (6.2, 7.0, 8.2) both are the script
/// (`EVALSHA`). A detection that misreads the server cannot put it on the other path
/// unnoticed. The table is held to the server too: a path it names is a command the server
/// has (`commands_the_server_has`).
#[tokio::test]
async fn acquisitions_renewals_and_releases_take_the_path_the_servers_name_and_version_give() {
    let server = RedisServer::start();
    let info: String = server.query(&["INFO", "server"]);
    let (name, version, text) = server_of(&info);
    let &(_, _, renews, releases) = PATHS
        .iter()
        .find(|(server, from, ..)| *server == name && version >= *from)
        .expect("every server has a row");
    let (set_ifeq, delifeq) = commands_the_server_has(&server);
    assert!(
        (!renews || set_ifeq) && (!releases || delifeq),
        "{name} {text}: the table names a command the server lacks (SET … IFEQ {set_ifeq}, \
         DELIFEQ {delifeq})"
    );

    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    // The first call loads the script (EVALSHA, NOSCRIPT, SCRIPT LOAD): not measured.
    let mut first = acquired(&client, &request(&client, "first")).await;
    assert_eq!(first.release().await, ReleaseOutcome::Released);
    let calls = |server: &RedisServer| {
        (
            server.calls_of("set"),
            server.calls_of("delifeq"),
            server.calls_of("evalsha") + server.calls_of("eval"),
        )
    };

    server.reset_stats();
    let mut lease = acquired(&client, &request(&client, "r")).await;
    let acquisition = (
        server.calls_of("delifeq"),
        server.calls_of("evalsha"),
        server.calls_of("eval"),
    );
    server.reset_stats();
    let outcome = lease.renew().await;
    assert!(
        matches!(outcome, RenewOutcome::Renewed { .. }),
        "{outcome:?}"
    );
    let renewal = calls(&server);
    server.reset_stats();
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    let release = calls(&server);
    assert!(!crate::lease_exists(&server, lease.keys()));
    println!(
        "{name} {text}: acquisition (delifeq, evalsha, eval) {acquisition:?}, renewal \
         (set, delifeq, scripts) {renewal:?}, release {release:?}"
    );

    assert_eq!(
        acquisition,
        (0, 1, 0),
        "{name} {text}: an acquisition is the script"
    );
    // The script's renewal is a PEXPIRE inside it (no SET); the script's release a DEL.
    let renewal_expected = if renews { (1, 0, 0) } else { (0, 0, 1) };
    assert_eq!(
        renewal, renewal_expected,
        "{name} {text}: renewal, SET … IFEQ {renews}"
    );
    let release_expected = if releases { (0, 1, 0) } else { (0, 0, 1) };
    assert_eq!(
        release, release_expected,
        "{name} {text}: release, DELIFEQ {releases}"
    );
}
