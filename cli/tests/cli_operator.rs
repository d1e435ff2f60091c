//! What an operator sees of a lease from the command line: a refused or waiting run names
//! the holder (and each new one) and how many wait, `inspect` and `inspect --watch` how many
//! wait too, `inspect --watch` prints each change of holder, flock(1)'s
//! and timeout(1)'s short options work, and `--timeout` ends the command like timeout(1)
//! (exit 124) and releases.
//!
//! Holders are written into Redis as leasehold writes them (`<owner> <op> <holder>
//! <token>`, with a PX expiry), so who holds the lease and when it changes is the test's
//! to decide, not a race between processes.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;

/// Makes `holder` the holder of `resource`'s lease (replacing whoever held it), under
/// `token`, for 30 s.
fn hold(server: &RedisServer, resource: &str, holder: &str, token: u64) {
    let key = keys_of(resource).lease().to_owned();
    let value = format!("owner-{token} op-{token} {holder} {token}");
    let _: () = server.query(&["SET", &key, &value, "PX", "30000"]);
}

/// Ends the holding as a release does: the key deleted, the notice published (a waiter
/// wakes on it at once; after a bare DEL it would find the lease only at its next look).
fn free(server: &RedisServer, resource: &str) {
    let keys = keys_of(resource);
    let _: i64 = server.query(&["DEL", keys.lease()]);
    let _: i64 = server.query(&["PUBLISH", keys.release_channel(), "released"]);
}

/// Puts `n` entries into the line `name` (a lease's key, or a counted lease's name) as
/// waiters that joined long ago and said nothing since: counted until an acquisition of
/// the lease, once free, drops them.
fn line_up(server: &RedisServer, name: &str, n: usize) {
    let line = format!("{name}:line");
    for i in 0..n {
        let _: i64 = server.query(&["ZADD", &line, "1", &format!("{i:016x}")]);
    }
}

#[test]
fn a_refused_run_names_the_holder_and_short_options_work_as_in_flock() {
    let server = RedisServer::start();
    let dir = TempDir::new("refused");
    hold(&server, "busy", "web-7:4242", 1796223359965023);
    // -n: try once; -E: the status for a held lease.
    let mut cmd = run_cmd(&server, "busy");
    cmd.args(["-n", "-E", "3", "--", "true"]);
    let done = finish(cmd, &dir, "no-wait");
    done.assert_code(3, "-n -E 3");
    let lines = done.stderr_lines();
    assert_eq!(lines.len(), 1, "{:?}", done.stderr);
    assert!(
        lines[0].contains("held by web-7:4242 (fencing token 1796223359965023)"),
        "{:?}",
        lines[0]
    );
    // -w with a bare number of seconds, as flock takes it: the wait ends, still held.
    let mut cmd = run_cmd(&server, "busy");
    cmd.args(["-w", "0.3", "--", "true"]);
    let done = finish(cmd, &dir, "short-wait");
    done.assert_code(75, "-w 0.3");
    let last = done.stderr_lines().last().copied().unwrap_or_default();
    assert!(
        last.contains("not acquired within --wait 300ms: held by web-7:4242"),
        "{}",
        done.stderr
    );
}

#[test]
fn a_waiting_run_names_the_holder_and_each_new_one() {
    let server = RedisServer::start();
    let dir = TempDir::new("waiting");
    hold(&server, "queue", "web-7:4242", 1796223359965023);
    let mut cmd = run_cmd(&server, "queue");
    cmd.args(["--wait", "60s", "--", "sh", "-c", "echo ran"]);
    let mut waiter = Running::spawn(cmd, &dir, "waiter");
    let first = waiter.wait_for_stderr("web-7:4242");
    assert!(first.contains("waiting for the lease"), "{first}");
    assert!(first.contains("unless renewed; none waiting"), "{first}");
    // Another holder takes over without a release (no notice): the observer's poll sees it.
    hold(&server, "queue", "web-9:311", 1796223359965099);
    let changed = Instant::now();
    let second = waiter.wait_for_stderr("web-9:311");
    println!(
        "measured: a holder changed without a notice → named by the waiter after {:?}",
        changed.elapsed()
    );
    assert!(
        second.contains("fencing token 1796223359965099"),
        "{second}"
    );
    free(&server, "queue");
    let done = waiter.finish_within(EXIT_TIMEOUT, "waiter");
    done.assert_code(0, "the waiter, once the lease was free");
    assert_eq!(done.stdout.trim(), "ran");
    // One line per holder, nothing else.
    assert_eq!(done.stderr_lines().len(), 2, "{}", done.stderr);
    assert!(lease_keys(&server).is_empty(), "the waiter did not release");
}

#[test]
fn a_waiting_run_under_json_logs_says_who_it_waits_for_as_json() {
    let server = RedisServer::start();
    let dir = TempDir::new("waiting-json");
    hold(&server, "queue", "web-7:4242", 1796223359965023);
    line_up(&server, keys_of("queue").lease(), 2);
    let mut cmd = run_cmd(&server, "queue");
    cmd.args(["--log-format", "json", "--wait", "60s", "--", "true"]);
    let mut waiter = Running::spawn(cmd, &dir, "waiter");
    let line = waiter.wait_for_stderr("web-7:4242");
    let value: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let fields = &value["fields"];
    assert_eq!(fields["holder"], "web-7:4242", "{value}");
    assert_eq!(fields["fencing_token"], 1796223359965023_u64, "{value}");
    assert!(fields["remaining_ms"].as_u64().is_some(), "{value}");
    assert!(fields["wait_left_ms"].as_u64().is_some(), "{value}");
    assert_eq!(fields["waiting"], 2, "{value}");
    assert!(
        fields["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("; 2 waiting")),
        "{value}"
    );
    assert_eq!(fields["place_in_line"], serde_json::Value::Null, "{value}");
    // Once its wait joined the line (behind the two), the next line says its own place.
    let line_key = format!("{}:line", keys_of("queue").lease());
    let joined = Instant::now();
    while server.query::<u64>(&["ZCARD", &line_key]) < 3 {
        assert!(
            joined.elapsed() < EXIT_TIMEOUT,
            "the waiter never joined the line"
        );
        thread::sleep(Duration::from_millis(20));
    }
    hold(&server, "queue", "web-9:311", 1796223359965099);
    let line = waiter.wait_for_stderr("web-9:311");
    let value: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert_eq!(value["fields"]["place_in_line"], 3, "{value}");
    assert!(
        value["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("; 3rd in line, ")),
        "{value}"
    );
    free(&server, "queue");
    waiter
        .finish_within(EXIT_TIMEOUT, "waiter")
        .assert_code(0, "the waiter");
}

/// The holders `inspect --watch` printed, one per line, as `web-7:4242`, `web-9:311` or
/// `not_held`. A read that timed out on a starved machine prints an unknown, and the
/// holding again after it: both are left out, and nothing else.
fn changes_printed<'a>(stdout: &'a str, not_held: &'a str) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    let mut after_unknown = false;
    for line in stdout.lines() {
        if line.contains("unknown") || line.contains("null") {
            after_unknown = true;
            continue;
        }
        let holder = ["web-7:4242", "web-9:311", not_held]
            .into_iter()
            .find(|w| line.contains(w))
            .unwrap_or(line);
        if !(after_unknown && seen.last() == Some(&holder)) {
            seen.push(holder);
        }
        after_unknown = false;
    }
    seen
}

#[test]
fn inspect_watch_prints_each_change_of_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("watch");
    for json in [false, true] {
        let mut cmd = inspect_cmd(&server, "watched");
        cmd.arg("--watch");
        if json {
            cmd.arg("--json");
        }
        let mut watch = Running::spawn(cmd, &dir, &format!("watch-{json}"));
        let not_held = if json { r#""held":false"# } else { "held: no" };
        watch.wait_for_stdout(not_held);
        // Each change is waited for among the lines written after it was made.
        let before = watch.stdout_lines();
        hold(&server, "watched", "web-7:4242", 1796223359965023);
        let first = watch.wait_for_stdout_after(before, "web-7:4242");
        // The same holder over two reads (one a second): nothing more to print.
        thread::sleep(Duration::from_millis(2200));
        let before = watch.stdout_lines();
        hold(&server, "watched", "web-9:311", 1796223359965099);
        let changed = Instant::now();
        let second = watch.wait_for_stdout_after(before, "web-9:311");
        println!(
            "measured: inspect --watch (json {json}): a silent change of holder printed after {:?}",
            changed.elapsed()
        );
        if json {
            let value: serde_json::Value = serde_json::from_str(&second).expect("JSON");
            assert_eq!(value["held"], true, "{second}");
            assert_eq!(value["fencing_token"], 1796223359965099_u64, "{second}");
            assert!(value["time"].is_string(), "{second}");
        } else {
            assert!(first.contains("fencing_token 1796223359965023"), "{first}");
        }
        let before = watch.stdout_lines();
        free(&server, "watched");
        let freed = Instant::now();
        watch.wait_for_stdout_after(before, not_held);
        println!(
            "measured: inspect --watch (json {json}): a release (with its notice) printed after {:?}",
            freed.elapsed()
        );
        assert!(
            send_signal(watch.pid(), "TERM"),
            "kill -TERM inspect --watch"
        );
        let done = watch.finish_within(EXIT_TIMEOUT, "inspect --watch");
        done.assert_code(0, "inspect --watch after SIGTERM");
        // Each change exactly once: not held, held by one, by the other, not held.
        let seen = changes_printed(&done.stdout, not_held);
        assert_eq!(
            seen,
            ["held: no", "web-7:4242", "web-9:311", "held: no"].map(|w| if w == "held: no" {
                not_held
            } else {
                w
            }),
            "{}",
            done.stdout
        );
    }
}

#[test]
fn a_run_past_its_timeout_is_stopped_exits_124_and_releases() {
    let server = RedisServer::start();
    let dir = TempDir::new("timeout");
    // A command that ignores SIGTERM: -k's SIGKILL ends it.
    let pidfile = dir.path("pid");
    let mut cmd = run_cmd(&server, "slow");
    cmd.args(["--timeout", "500ms", "-k", "300ms", "--", "sh", "-c"])
        .arg(r#"trap '' TERM; echo $$ > "$1"; while :; do sleep 0.05; done"#)
        .arg("sh")
        .arg(&pidfile);
    let mut run = Running::spawn(cmd, &dir, "slow");
    let pid = run.wait_for_command_pid(&pidfile);
    let started = Instant::now();
    let done = run.finish_within(EXIT_TIMEOUT, "run --timeout");
    let took = started.elapsed();
    done.assert_code(124, "run past --timeout");
    assert!(!is_alive(pid), "the command outlived its timeout");
    assert!(
        done.stderr
            .contains("ran past --timeout 500ms; sending it SIGTERM"),
        "{}",
        done.stderr
    );
    assert!(lease_keys(&server).is_empty(), "the lease was not released");
    // 500 ms, then 300 ms: generous for a loaded machine.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    println!("measured: --timeout 500ms -k 300ms, TERM ignored → exit 124 after {took:?}");

    // -s: the signal to send; a command that ends on it also makes 124.
    let mut cmd = run_cmd(&server, "slow");
    cmd.args(["--timeout", "300ms", "-s", "INT", "--", "sleep", "30"]);
    let done = finish(cmd, &dir, "int");
    done.assert_code(124, "run past --timeout -s INT");
    assert!(done.stderr.contains("SIGINT"), "{}", done.stderr);
    assert!(lease_keys(&server).is_empty(), "the lease was not released");

    // A command that ends in time keeps its own status.
    let mut cmd = run_cmd(&server, "slow");
    cmd.args(["--timeout", "30s", "--", "sh", "-c", "exit 3"]);
    finish(cmd, &dir, "quick").assert_code(3, "a command within its timeout");
}

#[test]
fn a_waiter_stopped_by_sigterm_says_it_never_held_the_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("waiter-term");
    hold(&server, "held", "web-7:4242", 1796223359965023);
    let mut cmd = run_cmd(&server, "held");
    cmd.args(["--wait", "60s", "--", "true"]);
    let mut waiter = Running::spawn(cmd, &dir, "waiter");
    waiter.wait_for_stderr("waiting for the lease");
    assert!(send_signal(waiter.pid(), "TERM"), "kill -TERM leasehold");
    let done = waiter.finish_within(EXIT_TIMEOUT, "waiter after SIGTERM");
    done.assert_code(143, "a waiter stopped by SIGTERM");
    let last = done.stderr_lines().last().copied().unwrap_or_default();
    assert!(
        last.contains("SIGTERM before the command started; it never held the lease"),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("not_owner"), "{}", done.stderr);
    // The holder's lease is untouched.
    assert_eq!(lease_keys(&server), vec![keys_of("held").lease()]);
}

#[test]
fn inspect_says_how_many_wait_in_text_and_json() {
    let server = RedisServer::start();
    let dir = TempDir::new("inspect-line");
    hold(&server, "seen", "web-7:4242", 1796223359965023);
    line_up(&server, keys_of("seen").lease(), 2);
    let done = finish(inspect_cmd(&server, "seen"), &dir, "text");
    done.assert_code(0, "inspect of a held lease");
    assert!(
        done.stdout.contains("holder: web-7:4242"),
        "{}",
        done.stdout
    );
    assert_eq!(
        done.stdout.lines().last(),
        Some("waiting: 2"),
        "{}",
        done.stdout
    );
    let mut cmd = inspect_cmd(&server, "seen");
    cmd.arg("--json");
    let done = finish(cmd, &dir, "json");
    let value: serde_json::Value = serde_json::from_str(done.stdout.trim()).expect("JSON");
    assert_eq!(
        (&value["held"], &value["waiting"]),
        (&true.into(), &2.into()),
        "{value}"
    );
    // A counted lease: its one line, said once for the lease.
    line_up(&server, keys_of("seen").counted(3).lease(), 1);
    let mut cmd = inspect_cmd(&server, "seen");
    cmd.args(["--json", "--permits", "3"]);
    let done = finish(cmd, &dir, "counted");
    let value: serde_json::Value = serde_json::from_str(done.stdout.trim()).expect("JSON");
    assert_eq!(
        (&value["held"], &value["waiting"]),
        (&0.into(), &1.into()),
        "{value}"
    );
    assert!(value["slots"][0].get("waiting").is_none(), "{value}");
}

#[test]
fn inspect_watch_says_how_many_wait_and_when_that_changes() {
    let server = RedisServer::start();
    let dir = TempDir::new("watch-line");
    hold(&server, "watched", "web-7:4242", 1796223359965023);
    for json in [false, true] {
        let mut cmd = inspect_cmd(&server, "watched");
        cmd.arg("--watch");
        if json {
            cmd.arg("--json");
        }
        let mut watch = Running::spawn(cmd, &dir, &format!("watch-{json}"));
        let (none, three) = if json {
            (r#""waiting":0"#, r#""waiting":3"#)
        } else {
            (
                "web-7:4242, fencing_token 1796223359965023, remaining",
                "waiting 3",
            )
        };
        let first = watch.wait_for_stdout(none);
        assert!(json || first.ends_with("waiting 0"), "{first}");
        let before = watch.stdout_lines();
        // Joins publish nothing: the observer's next read (within a second) counts them.
        line_up(&server, keys_of("watched").lease(), 3);
        let counted = watch.wait_for_stdout_after(before, three);
        assert!(
            counted.contains("web-7:4242"),
            "the holder again: {counted}"
        );
        assert!(
            send_signal(watch.pid(), "TERM"),
            "kill -TERM inspect --watch"
        );
        watch
            .finish_within(EXIT_TIMEOUT, "inspect --watch")
            .assert_code(0, "inspect --watch after SIGTERM");
        let _: i64 = server.query(&["DEL", &format!("{}:line", keys_of("watched").lease())]);
    }
}
