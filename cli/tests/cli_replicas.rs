//! `leasehold run --replicas`: how an acquisition's replica acknowledgements are reported,
//! and `--require-replicas` refusing to run the command on a shortfall.

mod common;

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;

/// The fields of the one `lease acquired` event in JSON logs (`--log-format json
/// --log-level info`) on stderr.
#[track_caller]
fn acquired_event(done: &Finished) -> serde_json::Value {
    let events: Vec<serde_json::Value> = done
        .stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["fields"]["message"] == "lease acquired")
        .map(|event| event["fields"].clone())
        .collect();
    assert_eq!(
        events.len(),
        1,
        "expected one `lease acquired` event: {}",
        done.stderr
    );
    events[0].clone()
}

/// leasehold's own lines for the operator — under `--log-format json`, the events of
/// target `leasehold` — as their messages.
fn plain_lines(done: &Finished) -> Vec<String> {
    done.stderr_lines()
        .into_iter()
        .filter_map(|line| {
            let event = serde_json::from_str::<serde_json::Value>(line).ok()?;
            (event["target"] == "leasehold")
                .then(|| event["fields"]["message"].as_str().map(str::to_owned))
                .flatten()
        })
        .collect()
}

/// `leasehold --log-format json --log-level info run --redis <server> --resource <resource>`.
fn run_logged(server: &RedisServer, resource: &str) -> Command {
    let mut cmd = bare();
    cmd.args(["--log-format", "json", "--log-level", "info", "run"])
        .args(["--redis", &server.url(), "--resource", resource]);
    cmd
}

#[test]
fn replicas_a_standalone_server_lacks_are_reported_after_the_wait_and_the_command_runs() {
    const WAIT: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let dir = TempDir::new("replicas-short");
    let ran = dir.path("ran");
    let mut cmd = run_logged(&server, "durable");
    cmd.args(["--ttl", "5s", "--replicas", "1", "--replica-wait", "300ms"])
        .args(["--", "sh", "-c", r#"echo ran > "$1""#, "sh"])
        .arg(&ran);
    let started = Instant::now();
    let done = finish(cmd, &dir, "short");
    done.assert_code(0, "run --replicas 1 on a server without replicas");
    assert_eq!(fs::read_to_string(&ran).ok().as_deref(), Some("ran\n"));
    // WAIT 1 300 blocks on the server for the whole wait when no replica can answer: a
    // lower bound that does not depend on scheduling.
    let took = done.ended_at - started;
    assert!(
        took >= WAIT,
        "finished in {took:?}, before the wait ran out"
    );
    let event = acquired_event(&done);
    assert_eq!(event["replication"], "acknowledged", "{event}");
    assert_eq!(event["replicas_acked"], 0, "{event}");
    assert_eq!(event["replicas_wanted"], 1, "{event}");
    let lines = plain_lines(&done);
    assert_eq!(lines.len(), 1, "stderr: {}", done.stderr);
    assert!(
        lines[0].contains("0 of 1 replicas acknowledged the lease within 300ms")
            && lines[0].contains("running the command anyway"),
        "{:?}",
        lines[0]
    );
    assert!(lease_keys(&server).is_empty(), "the lease was not released");

    // --require-replicas: the same shortfall refuses, before the command starts.
    let refused_file = dir.path("refused");
    let mut cmd = run_logged(&server, "durable");
    cmd.args(["--ttl", "5s", "--replicas", "1", "--replica-wait", "300ms"])
        .args([
            "--require-replicas",
            "--",
            "sh",
            "-c",
            r#"echo ran > "$1""#,
            "sh",
        ])
        .arg(&refused_file);
    let refused = finish(cmd, &dir, "refused");
    refused.assert_code(125, "run --replicas 1 --require-replicas without replicas");
    assert!(!refused_file.exists(), "the command ran");
    let event = acquired_event(&refused);
    assert_eq!(event["replicas_acked"], 0, "{event}");
    assert_eq!(event["replicas_wanted"], 1, "{event}");
    let lines = plain_lines(&refused);
    assert_eq!(lines.len(), 1, "stderr: {}", refused.stderr);
    assert!(
        lines[0].contains("0 of 1 replicas acknowledged")
            && lines[0].contains("not run")
            && lines[0].contains("release: released"),
        "{:?}",
        lines[0]
    );
    assert!(lease_keys(&server).is_empty(), "the lease was not released");
}

#[test]
fn a_replica_that_acknowledges_is_reported_and_require_replicas_runs_the_command() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.make_replica_of(&primary);
    let dir = TempDir::new("replicas-acked");
    let token_file = dir.path("token");
    let mut cmd = run_logged(&primary, "durable");
    cmd.args(["--ttl", "10s", "--replicas", "1", "--replica-wait", "5s"])
        .args(["--require-replicas", "--", "sh", "-c"])
        .arg(r#"echo "$LEASEHOLD_FENCING_TOKEN" > "$1""#)
        .arg("sh")
        .arg(&token_file);
    let started = Instant::now();
    let done = finish(cmd, &dir, "acked");
    done.assert_code(0, "run --replicas 1 --require-replicas with one replica");
    let took = done.ended_at - started;
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: the replica's acknowledgement did not end the wait"
    );
    let token: u64 = fs::read_to_string(&token_file)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("the command wrote no token ({e}): {}", done.stderr));
    let event = acquired_event(&done);
    assert_eq!(event["replication"], "acknowledged", "{event}");
    assert_eq!(event["replicas_acked"], 1, "{event}");
    assert_eq!(event["replicas_wanted"], 1, "{event}");
    assert_eq!(event["token"].as_u64(), Some(token), "{event}");
    assert!(
        plain_lines(&done).is_empty(),
        "no shortfall to report: {}",
        done.stderr
    );
    // The acknowledged write is on the replica: its group's fence counter.
    let fence = keys_of("durable").fence().to_owned();
    let on_replica: i64 = replica.query(&["EXISTS", &fence]);
    assert_eq!(on_replica, 1, "{fence} is not on the replica");
}
