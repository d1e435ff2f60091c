//! `leasehold run --lock-delay D` on real processes: a holder SIGKILLed (so nothing
//! releases its lease) keeps the resource refused for D after its TTL ends; a run that ends
//! normally releases, and the next one starts at once.
//!
//! Timing: only lower bounds that follow from the lease's own times (nothing acquires
//! before the delay ended, however fast the machine) and deadlines for failures.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;

#[test]
fn a_sigkilled_holder_blocks_the_next_run_for_its_lock_delay_after_its_ttl() {
    let server = RedisServer::start();
    let dir = TempDir::new("lock-delay");
    let pidfile = dir.path("pid");
    let mut holder = run_cmd(&server, "delayed");
    holder
        .args(["--ttl", "1s", "--lock-delay", "2s", "--", "sh", "-c"])
        .arg(r#"echo $$ > "$1"; sleep 100"#)
        .arg("sh")
        .arg(&pidfile);
    let mut holder = Running::spawn(holder, &dir, "holder");
    let command = holder.wait_for_command_pid(&pidfile);
    assert!(send_signal(holder.pid(), "KILL"), "kill -KILL leasehold");
    let killed_at = Instant::now();
    holder.finish_within(Duration::from_secs(10), "the killed holder");
    assert_gone_soon(command, "the holder's command");

    // The lease was never released: its TTL (at most 1 s) runs out, then 2 s of delay.
    // (That a run without --wait is refused meanwhile, saying why, is the last test's: here
    // a starved machine could start it after the delay.)
    let mut next = run_cmd(&server, "delayed");
    next.args(["--wait", "30s", "--", "true"]);
    let next = finish(next, &dir, "next");
    let waited = killed_at.elapsed();
    next.assert_code(0, "the run after the lock-delay");
    assert!(
        waited >= Duration::from_secs(2),
        "acquired {waited:?} after the holder was killed: before its lock-delay ended"
    );
    println!(
        "measured: SIGKILLed holder (ttl 1s, lock-delay 2s) → next run acquired after {waited:?}"
    );
    assert!(lease_keys(&server).is_empty(), "a lease key remained");
}

#[test]
fn a_run_that_ends_normally_releases_and_skips_its_lock_delay() {
    let server = RedisServer::start();
    let dir = TempDir::new("lock-delay-clean");
    let mut first = run_cmd(&server, "clean");
    first.args(["--ttl", "30s", "--lock-delay", "1h", "--", "true"]);
    finish(first, &dir, "first").assert_code(0, "the first run");
    // No --wait: a lock-delay (or a held lease) would refuse it with 75.
    let mut second = run_cmd(&server, "clean");
    second.args(["--", "true"]);
    finish(second, &dir, "second").assert_code(0, "the run right after a clean end");
}

#[test]
fn a_refused_run_says_it_met_a_lock_delay() {
    let server = RedisServer::start();
    let dir = TempDir::new("lock-delay-message");
    // A lease in its lock-delay, written as leasehold writes one: value
    // "<owner> <op> <token> d<delay>", expiring after the delay.
    let key = keys_of("said").lease().to_owned();
    let _: () = server.query(&[
        "SET",
        &key,
        "owner op 1796223359965023 d60000",
        "PX",
        "30000",
    ]);
    let mut run = run_cmd(&server, "said");
    run.args(["--", "true"]);
    let done = finish(run, &dir, "refused");
    done.assert_code(75, "a run in the lock-delay");
    assert!(
        done.stderr.contains("lock-delay"),
        "stderr: {}",
        done.stderr
    );
    let mut inspect = inspect_cmd(&server, "said");
    inspect.arg("--json");
    let inspected = finish(inspect, &dir, "inspect");
    inspected.assert_code(1, "inspect: not held");
    let value: serde_json::Value =
        serde_json::from_str(inspected.stdout.trim()).expect("inspect --json");
    assert_eq!(value["held"], false, "{value}");
    assert_eq!(value["fencing_token"], 1796223359965023_u64, "{value}");
    let left = value["lock_delay_ms"].as_u64().expect("lock_delay_ms");
    assert!(left > 0 && left <= 30_000, "{value}");
}
