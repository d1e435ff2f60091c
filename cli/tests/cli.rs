//! The `leasehold` binary end to end, the basics: exclusion, exit statuses, release when
//! the command exits, a lost lease stopping it, `inspect`, and the raw resource id never
//! leaving the process. Every test runs the built binary as a subprocess against its own
//! real `redis-server`.
//!
//! Timing: leases are short (`--ttl 1s`/`2s`) so the file runs fast, and every timing
//! assertion is an upper bound with a generous margin (a loaded 2-core CI machine), never
//! a lower bound that depends on scheduling. Every wait for a subprocess has a deadline,
//! after which the test kills it (by PID) and fails, so no test can hang.
//!
//! The harness (clean environment, output in files, bounded waits) is `common/cli.rs`.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::fault::FaultLine;
use common::observe::{Monitor, dump_redis};
use common::tree::time_until_gone;
use leasehold::ResourceDigest;

#[test]
fn concurrent_runs_on_one_resource_never_overlap_and_see_increasing_tokens() {
    const RUNS: usize = 8;
    let server = RedisServer::start();
    let dir = TempDir::new("mutex");
    let log = dir.path("log");
    let mut runs: Vec<Running> = (0..RUNS)
        .map(|i| {
            let mut cmd = run_cmd(&server, "shared");
            cmd.args(["--wait", "30s", "--ttl", "2s", "--", "sh", "-c"])
                .arg(
                    r#"echo "start $LEASEHOLD_FENCING_TOKEN" >> "$1"
                       sleep 0.1
                       echo "end $LEASEHOLD_FENCING_TOKEN" >> "$1""#,
                )
                .arg("sh")
                .arg(&log);
            Running::spawn(cmd, &dir, &format!("run{i}"))
        })
        .collect();
    for (i, run) in runs.iter_mut().enumerate() {
        run.finish_within(Duration::from_secs(45), &format!("run {i}"))
            .assert_code(0, &format!("run {i}"));
    }
    let text = fs::read_to_string(&log).expect("read log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * RUNS, "log:\n{text}");
    let mut last: Option<u64> = None;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("expected a start line, got {:?}; log:\n{text}", pair[0]));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("expected an end line, got {:?}; log:\n{text}", pair[1]));
        assert_eq!(start, end, "overlapping holders; log:\n{text}");
        let token: u64 = start
            .parse()
            .unwrap_or_else(|e| panic!("token {start:?}: {e}; log:\n{text}"));
        if let Some(previous) = last {
            assert!(token > previous, "tokens not increasing; log:\n{text}");
        }
        last = Some(token);
    }
    assert!(lease_keys(&server).is_empty(), "a lease key remained");
}

#[test]
fn a_contended_run_without_wait_exits_75_with_one_line_on_stderr() {
    let server = RedisServer::start();
    let dir = TempDir::new("contended");
    let holder = Holder::start(&server, &dir, "busy", "10s");
    let mut cmd = run_cmd(&server, "busy");
    cmd.args(["--wait", "0s", "--", "sh", "-c", "echo ran"]);
    let contender = finish(cmd, &dir, "contender");
    contender.assert_code(75, "contended run");
    assert_eq!(
        contender.stderr_lines().len(),
        1,
        "stderr: {:?}",
        contender.stderr
    );
    assert!(
        contender.stdout.is_empty(),
        "the command must not run: {:?}",
        contender.stdout
    );
    holder.release().assert_code(0, "holder");
}

#[test]
fn the_command_exit_status_passes_through_and_126_127_mean_not_executable_or_not_found() {
    let server = RedisServer::start();
    let dir = TempDir::new("status");
    let not_executable = dir.path("not-executable.sh");
    fs::write(&not_executable, "#!/bin/sh\nexit 0\n").expect("write script");
    fs::set_permissions(&not_executable, fs::Permissions::from_mode(0o644)).expect("chmod");
    let missing = "leasehold-test-no-such-command-5f3a";
    let cases: [(&[&str], i32); 4] = [
        (&["sh", "-c", "exit 3"], 3),
        (&["sh", "-c", "kill -9 $$"], 128 + 9),
        (&[missing], 127),
        (&[not_executable.to_str().expect("utf-8 temp path")], 126),
    ];
    for (i, (command, code)) in cases.into_iter().enumerate() {
        let mut cmd = run_cmd(&server, "status");
        cmd.args(["--ttl", "2s", "--"]).args(command);
        let done = finish(cmd, &dir, &format!("case{i}"));
        done.assert_code(code, &format!("{command:?}"));
        assert!(
            lease_keys(&server).is_empty(),
            "{command:?} left the lease held: {:?}",
            all_keys(&server)
        );
    }
}

#[test]
fn the_lease_is_released_as_soon_as_the_command_exits() {
    let server = RedisServer::start();
    let dir = TempDir::new("release");
    let mut cmd = run_cmd(&server, "released");
    cmd.args(["--ttl", "30s", "--", "true"]);
    finish(cmd, &dir, "run").assert_code(0, "run -- true");
    // Right away: a 30 s lease still there would show up here.
    let inspect = finish(inspect_cmd(&server, "released"), &dir, "inspect");
    inspect.assert_code(1, "inspect after release");
    assert_eq!(inspect.stdout.trim(), "held: no\nwaiting: 0");
    let keys = all_keys(&server);
    let expected = keys_of("released");
    assert_eq!(
        keys,
        vec![expected.fence().to_owned()],
        "only the fence may remain"
    );
    let lease = expected.lease();
    assert!(is_lease_key(lease, "run"), "unexpected key layout: {lease}");
    let (group, _) = lease.rsplit_once(':').expect("group before the digest");
    assert_eq!(
        keys[0],
        format!("{group}:fence"),
        "one fence counter per group"
    );
}

#[test]
fn killing_redis_stops_the_command_and_exits_124_within_the_ttl() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("redis-killed");
    let pidfile = dir.path("cmd.pid");
    let mut cmd = run_cmd(&server, "doomed");
    cmd.args([
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        r#"echo $$ > "$1"; exec sleep 30"#,
        "sh",
    ])
    .arg(&pidfile);
    let mut run = Running::spawn(cmd, &dir, "run");
    let command_pid = run.wait_for_command_pid(&pidfile);
    wait_for_lease_key(&server);
    let killed_at = Instant::now();
    server.kill();
    let done = run.finish_within(Duration::from_secs(20), "run after redis was killed");
    let delay = done.ended_at - killed_at;
    FaultLine::new("redis-killed/cli", 1)
        .with("exit", exit_text(&done))
        .ms("took_ms", delay)
        .ms("ttl_ms", Duration::from_secs(1))
        .print();
    done.assert_code(124, "run after redis was killed");
    assert!(
        delay < Duration::from_secs(1) + Duration::from_secs(3),
        "leasehold took {delay:?} after redis died (ttl 1s)"
    );
    assert_gone_soon(command_pid, "the command");
}

/// Returns just after a renewal of `key`: when its PTTL, polled every millisecond, goes
/// back up.
fn after_a_renewal(server: &RedisServer, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last: i64 = server.query(&["PTTL", key]);
    loop {
        assert!(Instant::now() < deadline, "no renewal of {key} within 5 s");
        std::thread::sleep(Duration::from_millis(1));
        let pttl: i64 = server.query(&["PTTL", key]);
        if pttl > last + 50 {
            return;
        }
        last = pttl;
    }
}

#[test]
fn deleting_the_lease_key_stops_the_command_within_one_renew_period_and_says_lost() {
    let server = RedisServer::start();
    let dir = TempDir::new("deleted");
    let pidfile = dir.path("cmd.pid");
    let mut cmd = run_cmd(&server, "deleted");
    cmd.args([
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        r#"echo $$ > "$1"; exec sleep 30"#,
        "sh",
    ])
    .arg(&pidfile);
    let mut run = Running::spawn(cmd, &dir, "run");
    let command_pid = run.wait_for_command_pid(&pidfile);
    let key = wait_for_lease_key(&server);
    assert_eq!(key, keys_of("deleted").lease());
    assert!(is_lease_key(&key, "run"), "unexpected key layout: {key}");
    // The renew period in force, between two renewals (ttl/3 at most; a 1 s TTL's safety
    // margin makes it shorter). The DEL lands half a period after a renewal: the next one,
    // due half a period later, finds the lease gone, and the command must be gone before a
    // whole period has passed since the DEL — a second renewal would be due only then.
    after_a_renewal(&server, &key);
    let renewed_at = Instant::now();
    after_a_renewal(&server, &key);
    let period = renewed_at.elapsed();
    assert!(
        period <= Duration::from_millis(333) + Duration::from_millis(50),
        "renewals {period:?} apart on a 1 s TTL (ttl/3 at most)"
    );
    std::thread::sleep(period / 2);
    let deleted_at = Instant::now();
    let removed: i64 = server.query(&["DEL", &key]);
    assert_eq!(removed, 1);
    let stopped =
        time_until_gone(command_pid, Duration::from_secs(20)).map(|_| deleted_at.elapsed());
    let done = run.finish_within(Duration::from_secs(20), "run after DEL");
    let delay = done.ended_at - deleted_at;
    FaultLine::new("lease-deleted/cli", 1)
        .with("exit", exit_text(&done))
        .with(
            "says_lost",
            done.stderr_lines().iter().any(|l| l.contains("lost")),
        )
        .ms("took_ms", delay)
        .ms("ttl_ms", Duration::from_secs(1))
        .print();
    done.assert_code(124, "run after DEL");
    let stopped = stopped.expect("the command ends");
    assert!(
        stopped <= period,
        "the command ran {stopped:?} after the DEL, more than one renew period ({period:?})"
    );
    assert!(
        done.stderr_lines().iter().any(|l| l.contains("lost")),
        "no line says the lease was lost: {:?}",
        done.stderr
    );
    assert_gone_soon(command_pid, "the command");
}

#[test]
fn the_raw_resource_id_never_reaches_redis_or_the_output() {
    const RAW: &str = "customer-4711-raw";
    let server = RedisServer::start();
    let dir = TempDir::new("raw-id");
    let monitor = Monitor::start(&server);
    let mut outputs = Vec::new();

    let mut cmd = run_cmd(&server, RAW);
    cmd.args(["--ttl", "2s", "--", "true"]);
    let ok = finish(cmd, &dir, "ok");
    ok.assert_code(0, "successful run");
    outputs.push(("successful run", ok));

    let holder = Holder::start(&server, &dir, RAW, "10s");
    let stored = dump_redis(&server);
    let mut cmd = run_cmd(&server, RAW);
    cmd.args(["--", "true"]);
    let contended = finish(cmd, &dir, "contended");
    contended.assert_code(75, "contended run");
    outputs.push(("contended run", contended));
    let text = finish(inspect_cmd(&server, RAW), &dir, "inspect");
    text.assert_code(0, "inspect");
    outputs.push(("inspect", text));
    let mut cmd = inspect_cmd(&server, RAW);
    cmd.arg("--json");
    let json = finish(cmd, &dir, "inspect-json");
    json.assert_code(0, "inspect --json");
    outputs.push(("inspect --json", json));
    let held = holder.release();
    held.assert_code(0, "holder");
    outputs.push(("holder", held));
    let stored_after = dump_redis(&server);
    let commands = monitor.finish(&server);

    let digest = ResourceDigest::of(RAW.as_bytes()).hex();
    assert!(
        stored.contains(&digest) && commands.contains(&digest),
        "sanity: the digest should be in the keys and the commands"
    );
    for (what, text) in [
        ("keys and values while held", &stored),
        ("keys and values after", &stored_after),
        ("commands redis executed (MONITOR)", &commands),
    ] {
        assert!(!text.contains(RAW), "the raw id is in {what}:\n{text}");
    }
    for (what, done) in &outputs {
        assert!(
            !done.stdout.contains(RAW) && !done.stderr.contains(RAW),
            "the raw id is in the output of {what}: {done:?}"
        );
    }
}

#[test]
fn inspect_reports_the_holder_token_and_remaining_time_and_absent_and_errors() {
    let server = RedisServer::start();
    let dir = TempDir::new("inspect");
    let holder = Holder::start(&server, &dir, "inspected", "10s");

    let text = finish(inspect_cmd(&server, "inspected"), &dir, "text");
    text.assert_code(0, "inspect (held)");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(lines.contains(&"held: yes"), "stdout: {:?}", text.stdout);
    assert!(
        lines.iter().any(|l| l.starts_with("remaining: ")),
        "stdout: {:?}",
        text.stdout
    );
    // By default the holder is `<hostname>:<pid>` of the leasehold that holds it.
    let pid = holder.running.pid();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("holder: ") && l.ends_with(&format!(":{pid}"))),
        "expected the holder label ending in :{pid}: {:?}",
        text.stdout
    );
    assert!(
        lines.contains(&format!("fencing_token: {}", holder.token).as_str()),
        "expected the holder's token {}: {:?}",
        holder.token,
        text.stdout
    );

    let mut cmd = inspect_cmd(&server, "inspected");
    cmd.arg("--json");
    let json = finish(cmd, &dir, "json");
    json.assert_code(0, "inspect --json (held)");
    let value: serde_json::Value = serde_json::from_str(json.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON: {e}: {:?}", json.stdout));
    let object = value.as_object().expect("a JSON object");
    let mut fields: Vec<&str> = object.keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "fencing_token",
            "held",
            "holder",
            "key",
            "remaining_ms",
            "waiting"
        ],
        "{value}"
    );
    // The key an operator deletes to take the lease away (docs/production.md: breaking a stuck lease).
    let key = keys_of("inspected").lease().to_owned();
    assert_eq!(value["key"].as_str(), Some(key.as_str()), "{value}");
    assert!(lease_keys(&server).contains(&key), "{value}");
    let label = value["holder"].as_str().expect("holder: a string");
    assert!(label.ends_with(&format!(":{pid}")), "{value}");
    assert_eq!(value["held"], serde_json::json!(true));
    assert_eq!(
        value["fencing_token"].as_u64(),
        Some(holder.token),
        "{value}"
    );
    let remaining = value["remaining_ms"].as_u64().expect("remaining_ms: u64");
    assert!(
        remaining > 0 && remaining <= 10_000,
        "remaining_ms {remaining} for a 10s lease"
    );
    holder.release().assert_code(0, "holder");

    let mut cmd = inspect_cmd(&server, "inspected");
    cmd.arg("--json");
    let free = finish(cmd, &dir, "free");
    free.assert_code(1, "inspect --json (free)");
    let value: serde_json::Value = serde_json::from_str(free.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON: {e}: {:?}", free.stdout));
    assert_eq!(
        value,
        serde_json::json!({ "held": false, "key": key, "waiting": 0 })
    );

    let mut cmd = bare();
    cmd.args([
        "inspect",
        "--redis",
        &format!("redis://127.0.0.1:{}", closed_port()),
        "--resource",
        "inspected",
    ]);
    let closed = finish(cmd, &dir, "closed");
    closed.assert_code(125, "inspect against a closed port");
    assert_eq!(
        closed.stderr_lines().len(),
        1,
        "stderr: {:?}",
        closed.stderr
    );
}

#[test]
fn list_shows_every_held_lease_with_its_holder_and_token_and_never_the_raw_id() {
    let server = RedisServer::start();
    let (dir_a, dir_b) = (TempDir::new("list-a"), TempDir::new("list-b"));
    let a = Holder::start(&server, &dir_a, "listed-raw-id-a", "10s");
    let b = Holder::start(&server, &dir_b, "listed-raw-id-b", "10s");

    let text = finish(leasehold("list", &server), &dir_a, "list");
    text.assert_code(0, "list");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{:?}", text.stdout);
    for (holder, raw) in [(&a, "listed-raw-id-a"), (&b, "listed-raw-id-b")] {
        let digest = ResourceDigest::of(raw);
        let line = lines
            .iter()
            .find(|l| l.contains(&digest.to_string()))
            .unwrap_or_else(|| panic!("{digest} not listed: {:?}", text.stdout));
        let pid = holder.running.pid();
        assert!(line.starts_with("run "), "{line}");
        assert!(
            line.contains(&format!(":{pid} ")),
            "holder label of pid {pid}: {line}"
        );
        assert!(
            line.contains(&format!("fencing_token={}", holder.token)),
            "{line}"
        );
    }
    assert!(!text.stdout.contains("listed-raw-id"), "{:?}", text.stdout);

    let mut cmd = leasehold("list", &server);
    cmd.args(["--json", "--purpose", "run"]);
    let json = finish(cmd, &dir_a, "list-json");
    json.assert_code(0, "list --json");
    let value: serde_json::Value = serde_json::from_str(json.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON: {e}: {:?}", json.stdout));
    assert_eq!(value["truncated"], serde_json::json!(false));
    assert_eq!(value["incomplete"], serde_json::json!(false));
    let mut tokens: Vec<u64> = value["leases"]
        .as_array()
        .expect("leases: an array")
        .iter()
        .map(|l| l["fencing_token"].as_u64().expect("a token"))
        .collect();
    tokens.sort_unstable();
    let mut expected = vec![a.token, b.token];
    expected.sort_unstable();
    assert_eq!(tokens, expected, "{value}");

    let mut cmd = leasehold("list", &server);
    cmd.args(["--purpose", "other"]);
    let none = finish(cmd, &dir_a, "list-other");
    none.assert_code(0, "list --purpose other");
    assert_eq!(none.stdout, "", "no lease for another purpose");

    let mut cmd = leasehold("list", &server);
    cmd.args(["--limit", "1"]);
    let cut = finish(cmd, &dir_a, "list-cut");
    cut.assert_code(0, "list --limit 1");
    assert_eq!(cut.stdout.lines().count(), 1);
    assert!(cut.stderr.contains("--limit"), "{:?}", cut.stderr);

    // A keyspace a 1 ms budget cannot cross (100 steps of `SCAN`): what was read by then,
    // marked incomplete on stderr and in the JSON, exit 0. A budget out of bounds: 125.
    server.cmd(&["DEBUG", "POPULATE", "100000"]);
    let mut cmd = leasehold("list", &server);
    cmd.args(["--json", "--budget", "1ms"]);
    let partial = finish(cmd, &dir_a, "list-partial");
    partial.assert_code(0, "list --budget 1ms");
    assert!(
        partial.stderr.contains("incomplete"),
        "{:?}",
        partial.stderr
    );
    let value: serde_json::Value = serde_json::from_str(partial.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON: {e}: {:?}", partial.stdout));
    assert_eq!(value["incomplete"], serde_json::json!(true), "{value}");
    let mut cmd = leasehold("list", &server);
    cmd.args(["--budget", "2h"]);
    finish(cmd, &dir_a, "list-budget-2h").assert_code(125, "list --budget 2h");

    a.release().assert_code(0, "holder a");
    b.release().assert_code(0, "holder b");
    let empty = finish(leasehold("list", &server), &dir_a, "list-empty");
    empty.assert_code(0, "list (nothing held)");
    assert_eq!(empty.stdout, "");
}
