//! What an operator reads when Redis is not what leasehold needs: one line on stderr,
//! naming the server as `host:port` (never the password), saying what is wrong — refused,
//! not Redis, TLS, credentials, permission — and exit 125 with nothing left held.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::thread;
use std::time::Duration;

use common::cli::*;
use common::{Proxy, ProxyMode, RedisServer};

/// Runs `leasehold run --redis <url> --resource msg -- true` and returns how it ended.
fn run_against(url: &str, dir: &TempDir, label: &str) -> Finished {
    let mut cmd = bare();
    cmd.args(["run", "--redis", url, "--resource", "msg", "--", "true"])
        .env("LEASEHOLD_CONNECT_TIMEOUT", "500ms");
    finish(cmd, dir, label)
}

/// Asserts one line on stderr that names `addr` and contains `words`, and exit 125.
#[track_caller]
fn assert_one_line(done: &Finished, addr: &str, words: &str) {
    done.assert_code(125, words);
    let lines = done.stderr_lines();
    assert_eq!(lines.len(), 1, "one line, got {:?}", done.stderr);
    assert!(
        lines[0].contains(addr),
        "{:?} does not name {addr}",
        lines[0]
    );
    assert!(
        lines[0].contains(words),
        "{:?} does not say {words:?}",
        lines[0]
    );
}

#[test]
fn a_closed_port_is_connection_refused_at_host_and_port() {
    let dir = TempDir::new("refused");
    let port = closed_port();
    let done = run_against(&format!("redis://127.0.0.1:{port}"), &dir, "refused");
    assert_one_line(&done, &format!("127.0.0.1:{port}"), "connection refused");
}

#[test]
fn a_server_that_never_answers_is_a_connect_timeout_at_host_and_port() {
    let server = RedisServer::start();
    let dir = TempDir::new("timeout");
    let proxy = Proxy::start(server.addr());
    proxy.set_mode(ProxyMode::BlackHole);
    let addr = proxy.addr().to_string();
    let done = run_against(&format!("redis://{addr}"), &dir, "timeout");
    assert_one_line(&done, &addr, "timed out");
    assert!(
        done.stderr
            .contains("LEASEHOLD_CONNECT_TIMEOUT sets the limit"),
        "{}",
        done.stderr
    );
    // A connect timeout longer than the command timeout (500 ms here): the command timeout
    // bounds each call, its connection included, and is the one named.
    let mut cmd = bare();
    cmd.args([
        "run",
        "--redis",
        &format!("redis://{addr}"),
        "--resource",
        "msg",
    ])
    .args(["--", "true"])
    .env("LEASEHOLD_CONNECT_TIMEOUT", "20s");
    let started = std::time::Instant::now();
    let done = finish(cmd, &dir, "command-timeout");
    assert_one_line(&done, &addr, "timed out after 500ms");
    assert!(
        done.stderr.contains("LEASEHOLD_COMMAND_TIMEOUT"),
        "{}",
        done.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the 20 s connect timeout ran"
    );
}

#[test]
fn a_server_that_is_not_redis_is_named_as_such() {
    let dir = TempDir::new("not-redis");
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // An HTTP server's answer to whatever it is sent; it serves a few connections.
    let server = thread::spawn(move || {
        for stream in listener.incoming().take(4).flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 256];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let done = run_against(&format!("redis://127.0.0.1:{port}"), &dir, "not-redis");
    assert_one_line(
        &done,
        &format!("127.0.0.1:{port}"),
        "did not answer as a Redis server",
    );
    drop(server);
}

#[test]
fn rediss_against_a_plain_server_asks_whether_the_port_speaks_tls() {
    let server = RedisServer::start();
    let dir = TempDir::new("tls-plain");
    let addr = server.addr().to_string();
    let done = run_against(&format!("rediss://{addr}"), &dir, "tls-plain");
    done.assert_code(125, "rediss:// against plain");
    let lines = done.stderr_lines();
    assert_eq!(lines.len(), 1, "{:?}", done.stderr);
    assert!(lines[0].contains(&addr), "{:?}", lines[0]);
    assert!(
        lines[0].contains("TLS"),
        "{:?} says nothing of TLS",
        lines[0]
    );
}

#[test]
fn wrong_credentials_read_as_authentication_failed_without_the_password() {
    let server = RedisServer::start();
    let dir = TempDir::new("auth");
    server.cmd(&["ACL", "SETUSER", "ops", "on", ">right", "~*", "&*", "+@all"]);
    let addr = server.addr().to_string();
    let done = run_against(&format!("redis://ops:wrong-secret@{addr}"), &dir, "auth");
    assert_one_line(&done, &addr, "authentication failed");
    assert!(!done.stderr.contains("wrong-secret"), "{}", done.stderr);
}

#[test]
fn a_user_without_evalsha_reads_as_permission_not_unavailable() {
    let server = RedisServer::start();
    let dir = TempDir::new("noeval");
    server.cmd(&[
        "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
    ]);
    let addr = server.addr().to_string();
    let done = run_against(&format!("redis://noeval:pw@{addr}"), &dir, "noeval");
    assert_one_line(&done, &addr, "denied permission (ACL)");
    assert!(!done.stderr.contains("unavailable"), "{}", done.stderr);
}

/// A user whose ACL refuses PUBLISH still releases: the notice only wakes waiters early,
/// so it is best effort, and the lease is not left held for its TTL.
#[test]
fn a_user_without_publish_still_releases_the_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("nopub");
    server.cmd(&[
        "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ]);
    let url = format!("redis://nopub:pw@{}", server.addr());
    let run = |label: &str| {
        let mut cmd = bare();
        cmd.args([
            "run",
            "--redis",
            &url,
            "--resource",
            "nopub",
            "--ttl",
            "30s",
        ])
        .args(["--", "true"]);
        finish(cmd, &dir, label)
    };
    let first = run("first");
    first.assert_code(0, "the command's own status");
    assert_eq!(
        first.stderr, "",
        "the release was refused or said something"
    );
    assert!(
        lease_keys(&server).is_empty(),
        "the lease stayed held: {:?}",
        lease_keys(&server)
    );
    // So the next run, not waiting, gets it at once.
    run("second").assert_code(0, "the next run");
    // The notices were refused, as the ACL says: the path under test was taken.
    let log = format!("{:?}", server.cmd(&["ACL", "LOG"]));
    assert!(
        log.contains("publish"),
        "no refused PUBLISH in the ACL log: {log}"
    );
}

/// A holder whose ACL refuses PUBLISH releases without a notice: a `run --wait` waiter
/// still runs its command within a second of the release, not at the holder's 30 s TTL.
#[test]
fn a_waiter_runs_within_a_second_of_a_release_that_sent_no_notice() {
    let server = RedisServer::start();
    let dir = TempDir::new("nopub-wait");
    server.cmd(&[
        "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ]);
    let go = dir.path("go");
    let started = dir.path("started");
    let mut holder = bare();
    holder
        .args(["run", "--redis"])
        .arg(format!("redis://nopub:pw@{}", server.addr()))
        .args(["--resource", "nopub", "--ttl", "30s", "--", "bash", "-c"])
        .arg(format!(
            "while [ ! -e {} ]; do sleep 0.01; done",
            go.display()
        ));
    let mut holder = Running::spawn(holder, &dir, "holder");
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while lease_keys(&server).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "the holder did not acquire"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let mut waiter = bare();
    waiter
        .args(["run", "--redis", &server.url()])
        .args(["--resource", "nopub", "--wait", "20s", "--", "bash", "-c"])
        .arg(format!("echo $EPOCHREALTIME > {}", started.display()));
    let mut waiter = Running::spawn(waiter, &dir, "waiter");
    // The waiter has tried, subscribed and gone to sleep.
    thread::sleep(Duration::from_millis(500));
    let released = std::time::SystemTime::now();
    std::fs::write(&go, "").expect("the holder's signal");
    holder
        .finish_within(EXIT_TIMEOUT, "the holder")
        .assert_code(0, "the holder");
    waiter
        .finish_within(EXIT_TIMEOUT, "the waiter")
        .assert_code(0, "the waiter");
    let started: f64 = std::fs::read_to_string(&started)
        .expect("the waiter's command ran")
        .trim()
        .parse()
        .expect("a time");
    let released = released
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64();
    let after = started - released;
    println!(
        "measured: the waiter's command started {after:.3} s after the holder's command was told to end"
    );
    assert!(
        after < 1.0,
        "the waiter started {after:.3} s after the release (the holder's TTL: 30 s)"
    );
    let log = format!("{:?}", server.cmd(&["ACL", "LOG"]));
    assert!(
        log.contains("publish"),
        "no refused PUBLISH in the ACL log: {log}"
    );
}

#[test]
fn doctor_passes_a_healthy_server_and_fails_a_user_who_cannot_release() {
    let server = RedisServer::start();
    let dir = TempDir::new("doctor");
    let url = server.url();
    let healthy = finish(
        {
            let mut cmd = bare();
            cmd.args(["doctor", "--redis", &url]);
            cmd
        },
        &dir,
        "healthy",
    );
    healthy.assert_code(0, "doctor on a healthy server");
    assert!(
        healthy
            .stdout
            .contains("ok    acquire, renew and release work"),
        "{}",
        healthy.stdout
    );
    assert!(healthy.stdout.contains("Redis "), "{}", healthy.stdout);
    // The test server runs without persistence: said, as what it means for a lease.
    assert!(
        healthy.stdout.contains("warn  AOF off"),
        "{}",
        healthy.stdout
    );
    assert!(
        lease_keys(&server).is_empty(),
        "doctor left its probe lease held"
    );

    server.cmd(&[
        "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ]);
    let addr = server.addr().to_string();
    let mut cmd = bare();
    cmd.args(["doctor", "--redis", &format!("redis://nopub:pw@{addr}")]);
    let nopub = finish(cmd, &dir, "nopub");
    // Leases work (the notice is best effort); what the refusal costs is said.
    nopub.assert_code(0, "doctor for a user without PUBLISH");
    let warn = nopub
        .stdout
        .lines()
        .find(|l| l.starts_with("warn  PUBLISH"))
        .unwrap_or_else(|| panic!("no PUBLISH warning: {}", nopub.stdout));
    assert!(warn.contains("not woken"), "{warn}");

    server.cmd(&[
        "ACL",
        "SETUSER",
        "nosub",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-subscribe",
    ]);
    let mut cmd = bare();
    cmd.args(["doctor", "--redis", &format!("redis://nosub:pw@{addr}")]);
    let nosub = finish(cmd, &dir, "nosub");
    // Leases work (a waiter polls without notices); what the refusal costs is said.
    nosub.assert_code(0, "doctor for a user without SUBSCRIBE");
    let warn = nosub
        .stdout
        .lines()
        .find(|l| l.starts_with("warn  SUBSCRIBE"))
        .unwrap_or_else(|| panic!("no SUBSCRIBE warning: {}", nosub.stdout));
    assert!(warn.contains("denied permission"), "{warn}");
    assert!(warn.contains("poll instead"), "{warn}");

    server.cmd(&[
        "ACL", "SETUSER", "nodel", "on", ">pw", "~*", "&*", "+@all", "-del",
    ]);
    let mut cmd = bare();
    cmd.args(["doctor", "--redis", &format!("redis://nodel:pw@{addr}")]);
    let refused = finish(cmd, &dir, "nodel");
    refused.assert_code(125, "doctor for a user without DEL");
    let fail = refused
        .stdout
        .lines()
        .find(|l| l.starts_with("FAIL"))
        .unwrap_or_else(|| panic!("no FAIL line: {}", refused.stdout));
    assert!(fail.contains("release"), "{fail}");
}

#[test]
fn doctor_json_is_one_object_with_a_level_per_finding() {
    let server = RedisServer::start();
    let dir = TempDir::new("doctor-json");
    let mut cmd = leasehold("doctor", &server);
    cmd.arg("--json");
    let done = finish(cmd, &dir, "json");
    done.assert_code(0, "doctor --json");
    let value: serde_json::Value = serde_json::from_str(done.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", done.stdout));
    assert_eq!(value["ok"], true, "{value}");
    let findings = value["findings"].as_array().expect("findings");
    assert!(findings.len() >= 3, "{value}");
    for finding in findings {
        assert!(
            matches!(finding["level"].as_str(), Some("ok" | "warn" | "fail")),
            "{finding}"
        );
        assert!(finding["message"].is_string(), "{finding}");
    }
    assert!(
        lease_keys(&server).is_empty(),
        "doctor left its probe lease held"
    );
}

#[test]
fn a_losing_cron_host_can_be_quiet_and_choose_its_exit_status() {
    let server = RedisServer::start();
    let dir = TempDir::new("cron");
    let holder = Holder::start(&server, &dir, "nightly", "30s");
    let mut cmd = run_cmd(&server, "nightly");
    cmd.args(["--quiet", "--conflict-exit-code", "0", "--", "true"]);
    let quiet = finish(cmd, &dir, "quiet");
    quiet.assert_code(0, "--conflict-exit-code 0");
    assert_eq!(quiet.stderr, "", "--quiet printed something");
    let mut cmd = run_cmd(&server, "nightly");
    cmd.args(["--conflict-exit-code", "3", "--", "true"]);
    let loud = finish(cmd, &dir, "loud");
    loud.assert_code(3, "--conflict-exit-code 3");
    assert_eq!(loud.stderr_lines().len(), 1, "{}", loud.stderr);
    // A failure is not contention: still 125, still said.
    let mut cmd = bare();
    cmd.args([
        "run",
        "--redis",
        &format!("redis://127.0.0.1:{}", closed_port()),
    ])
    .args([
        "--resource",
        "nightly",
        "--quiet",
        "--conflict-exit-code",
        "0",
        "--",
        "true",
    ]);
    let failed = finish(cmd, &dir, "failed");
    failed.assert_code(125, "a failure under --quiet");
    assert_eq!(failed.stderr_lines().len(), 1, "{}", failed.stderr);
    assert_eq!(holder.release().code(), Some(0));
}

#[test]
fn under_log_format_json_every_line_on_stderr_is_json_and_none_is_coloured() {
    let server = RedisServer::start();
    let dir = TempDir::new("json-lines");
    let holder = Holder::start(&server, &dir, "json", "30s");
    let runs = [
        // Contention, a bad argument, a command left processes behind, a debug log.
        vec!["--resource", "json", "--", "true"],
        vec!["--resource", "json", "--bogus", "--", "true"],
        vec!["--resource", "json2", "--", "sh", "-c", "sleep 5 & exit 0"],
        vec!["--resource", "json3", "--log-level", "debug", "--", "true"],
    ];
    for (i, args) in runs.iter().enumerate() {
        let mut cmd = leasehold("run", &server);
        cmd.args(["--log-format", "json"]).args(args);
        let done = finish(cmd, &dir, &format!("json{i}"));
        assert!(!done.stderr.is_empty(), "{args:?}: nothing on stderr");
        for line in done.stderr_lines() {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {line}"));
            assert!(value["fields"]["message"].is_string(), "{args:?}: {line}");
        }
        assert!(
            !done.stderr.contains('\u{1b}'),
            "{args:?}: colour codes in a file"
        );
    }
    // Text logs into a file carry no colour either.
    let mut cmd = run_cmd(&server, "text");
    cmd.args(["--log-level", "debug", "--", "true"]);
    let text = finish(cmd, &dir, "text");
    assert!(!text.stderr.is_empty(), "debug logs expected");
    assert!(
        !text.stderr.contains('\u{1b}'),
        "colour codes in a file: {}",
        text.stderr
    );
    drop(holder);
}

#[test]
fn metrics_addr_takes_a_host_name() {
    let server = RedisServer::start();
    let dir = TempDir::new("metrics-host");
    let mut cmd = run_cmd(&server, "metrics-host");
    cmd.args(["--metrics-addr", "localhost:0", "--", "true"]);
    finish(cmd, &dir, "run").assert_code(0, "--metrics-addr localhost:0");
}
