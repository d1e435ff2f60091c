//! The `leasehold` binary end to end: every test runs the built binary as a subprocess
//! against its own real `redis-server`.
//!
//! Timing: leases are short (`--ttl 1s`/`2s`) so the file runs fast, and every timing
//! assertion is an upper bound with a generous margin (a loaded 2-core CI machine), never
//! a lower bound that depends on scheduling. Every wait for a subprocess has a deadline,
//! after which the test kills it (by PID) and fails, so no test can hang.
//!
//! Environment: each child gets a clean `LEASEHOLD_*` environment (so the developer's
//! `LEASEHOLD_REDIS_URL` or settings never leak in) plus `LEASEHOLD_COMMAND_TIMEOUT=500ms`:
//! the default 200 ms can expire spuriously on a starved machine, which would turn a test
//! about something else into a lost lease. 500 ms still fits a 1 s TTL (renew every 333 ms
//! < 1 s − 10 ms drift − 500 ms safety margin).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::fault::FaultLine;
use leasehold::ResourceDigest;

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

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
    assert_eq!(inspect.stdout.trim(), "held: no");
    let keys = all_keys(&server);
    let expected = keys_of("released");
    assert_eq!(
        keys,
        vec![expected.fence.clone()],
        "only the fence may remain"
    );
    let lease = &expected.lease;
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
    assert_eq!(key, keys_of("deleted").lease);
    assert!(is_lease_key(&key, "run"), "unexpected key layout: {key}");
    let deleted_at = Instant::now();
    let removed: i64 = server.query(&["DEL", &key]);
    assert_eq!(removed, 1);
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
    assert!(
        delay < Duration::from_millis(2500),
        "leasehold took {delay:?} after the DEL (renew every ~333ms)"
    );
    assert!(
        done.stderr_lines().iter().any(|l| l.contains("lost")),
        "no line says the lease was lost: {:?}",
        done.stderr
    );
    assert_gone_soon(command_pid, "the command");
}

#[test]
fn bad_input_exits_125_with_one_line_naming_the_option_and_touches_nothing_in_redis() {
    let server = RedisServer::start();
    let dir = TempDir::new("bad-input");
    let url = server.url();
    // (arguments after `leasehold run`, split at spaces; extra environment; what the line
    // must name)
    let cases = [
        ("--resource x --ttl 0 -- true", None, "--ttl"),
        ("--resource x --ttl abc -- true", None, "--ttl"),
        ("--resource x --ttl 50ms -- true", None, "--ttl"),
        ("--resource x true", None, "--"),
        ("-- true", None, "--resource"),
        ("--resource x --bogus -- true", None, "--bogus"),
        (
            "--resource x --ttl 1s --renew-every 2s -- true",
            None,
            "--renew-every",
        ),
        ("--resource x --purpose Bad -- true", None, "--purpose"),
        ("--resource x --redis http://x -- true", None, "--redis"),
        (
            "--resource x --ttl 1s -- true",
            Some(("LEASEHOLD_DRIFT_BUDGET", "2s")),
            "drift",
        ),
        ("--resource x --replicas 0 -- true", None, "--replicas"),
        ("--resource x --replicas 17 -- true", None, "--replicas"),
        ("--resource x --replicas -1 -- true", None, "--replicas"),
        ("--resource x --replicas two -- true", None, "--replicas"),
        (
            "--resource x --replicas 1 --replica-wait soon -- true",
            None,
            "--replica-wait",
        ),
        (
            "--resource x --replicas 1 --replica-wait 11s -- true",
            None,
            "--replica-wait",
        ),
        (
            "--resource x --replicas 1 --replica-wait 0s -- true",
            None,
            "--replica-wait",
        ),
        // Without --replicas there is nothing to wait for or require.
        ("--resource x --replica-wait 1s -- true", None, "--replicas"),
        (
            "--resource x --require-replicas -- true",
            None,
            "--replicas",
        ),
        // The default 1 s wait does not fit a 1 s lease's renewals.
        (
            "--resource x --ttl 1s --replicas 1 -- true",
            None,
            "--replica-wait",
        ),
        (
            "--resource x --ttl 2s --replicas 1 --replica-wait 900ms -- true",
            None,
            "--replica-wait",
        ),
        // Every duration is bounded at parse time: no overflow later, no panic.
        (
            "--resource x --grace 580000000000y -- true",
            None,
            "--grace",
        ),
        ("--resource x --grace 2h -- true", None, "--grace"),
        (
            "--resource x --kill-after 580000000000y -- true",
            None,
            "--kill-after",
        ),
        ("--resource x --wait 2h -- true", None, "--wait"),
        (
            "--resource x --renew-every 580000000000y -- true",
            None,
            "--renew-every",
        ),
        // The resource: empty, unreadable, or from an empty variable.
        ("--resource= -- true", None, "--resource"),
        (
            "--resource-file /nonexistent/leasehold-id -- true",
            None,
            "--resource-file",
        ),
        (
            "-- true",
            Some(("LEASEHOLD_RESOURCE", "")),
            "LEASEHOLD_RESOURCE",
        ),
        // A variable's bad value is named as the variable; the flag's as the flag.
        (
            "--resource x -- true",
            Some(("LEASEHOLD_NAMESPACE", "Bad!")),
            "LEASEHOLD_NAMESPACE",
        ),
        ("--resource x --namespace Bad! -- true", None, "--namespace"),
        (
            "--resource x -- true",
            Some(("LEASEHOLD_REDIS_URL", "http://x")),
            "LEASEHOLD_REDIS_URL",
        ),
        (
            "--resource x -- true",
            Some(("LEASEHOLD_RENEW_EVERY", "soon")),
            "LEASEHOLD_RENEW_EVERY",
        ),
    ];
    server.reset_stats();
    for (i, (args, env, names)) in cases.into_iter().enumerate() {
        let args: Vec<&str> = args.split(' ').collect();
        let mut cmd = bare();
        cmd.arg("run");
        if !args.contains(&"--redis") && env.is_none_or(|(var, _)| var != "LEASEHOLD_REDIS_URL") {
            cmd.args(["--redis", &url]);
        }
        cmd.args(&args).envs(env);
        let done = finish(cmd, &dir, &format!("case{i}"));
        let what = format!("run {args:?} {env:?}");
        done.assert_code(125, &what);
        let lines = done.stderr_lines();
        assert_eq!(lines.len(), 1, "{what}: stderr {:?}", done.stderr);
        assert!(
            names_option(lines[0], names),
            "{what}: the line does not name {names}: {:?}",
            lines[0]
        );
        assert!(done.stdout.is_empty(), "{what}: stdout {:?}", done.stdout);
        assert_eq!(
            server.command_calls(),
            0,
            "{what}: leasehold sent commands to redis"
        );
        let size: i64 = server.query(&["DBSIZE"]);
        assert_eq!(
            size,
            0,
            "{what}: redis is not empty: {:?}",
            all_keys(&server)
        );
        server.reset_stats();
    }
}

/// Whether an error line names `option`. The library's relation checks name parameters in
/// their config spelling (`renew_every`, `drift_budget`), which is accepted for the option;
/// `--` (the separator) must appear other than in the `--help` hint.
fn names_option(line: &str, option: &str) -> bool {
    let normal = line.replace('_', "-").to_ascii_lowercase();
    match option {
        // A variable is named first, as itself.
        var if var.starts_with("LEASEHOLD_") => line.starts_with(&format!("leasehold: {var}")),
        "--" => normal.replace("--help", "").contains("--"),
        "--redis" => normal.contains("--redis") || normal.contains("redis url"),
        "--renew-every" => normal.contains("renew-every"),
        "drift" => normal.contains("ttl") && normal.contains("drift"),
        _ => normal.contains(option),
    }
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
    assert_eq!(fields, ["fencing_token", "held", "remaining_ms"], "{value}");
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
    assert_eq!(value, serde_json::json!({ "held": false }));

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
fn sigterm_to_leasehold_is_forwarded_to_the_command_and_the_lease_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("sigterm");
    let pidfile = dir.path("cmd.pid");
    let mut cmd = run_cmd(&server, "terminated");
    cmd.args(["--ttl", "2s", "--", "sh", "-c"])
        .arg(r#"trap "exit 7" TERM; echo $$ > "$1"; while :; do sleep 0.05; done"#)
        .arg("sh")
        .arg(&pidfile);
    let mut run = Running::spawn(cmd, &dir, "run");
    let command_pid = run.wait_for_command_pid(&pidfile);
    // leasehold installs its SIGTERM handler just after it spawned the command (see
    // `sigterm_as_soon_as_the_command_has_started_is_forwarded_too`): wait for it here, so
    // this test is about forwarding only.
    let deadline = Instant::now() + READY_TIMEOUT;
    while !catches_sigterm(run.pid()) {
        assert!(Instant::now() < deadline, "leasehold never caught SIGTERM");
        thread::sleep(POLL);
    }
    assert!(send_signal(run.pid(), "TERM"), "kill -TERM leasehold");
    let done = run.finish_within(Duration::from_secs(10), "run after SIGTERM");
    done.assert_code(7, "run after SIGTERM");
    assert_gone_soon(command_pid, "the command");
    let inspect = finish(inspect_cmd(&server, "terminated"), &dir, "inspect");
    inspect.assert_code(1, "inspect after SIGTERM");
}

#[test]
fn sigterm_as_soon_as_the_command_has_started_is_forwarded_too() {
    // Once the command runs, a SIGTERM to leasehold must reach the command: if it killed
    // leasehold instead, the command would go on unsupervised after the lease expired. The
    // command itself sends the signal to leasehold (the parent of its parent, the keeper)
    // as its first act, the earliest moment an outside SIGTERM could arrive once the
    // command has started.
    const ROUNDS: usize = 20;
    let server = RedisServer::start();
    let dir = TempDir::new("sigterm-early");
    let mut failures = Vec::new();
    // A busy machine (as on CI) is when the window shows: keep every core busy meanwhile.
    let _load = CpuLoad::start();
    for round in 0..ROUNDS {
        let pidfile = dir.path(&format!("cmd{round}.pid"));
        let mut cmd = run_cmd(&server, &format!("early-{round}"));
        cmd.args(["--ttl", "2s", "--", "sh", "-c"])
            .arg(
                r#"trap "exit 7" TERM; echo $$ > "$1"; kill -TERM "$(cut -d' ' -f4 /proc/$PPID/stat)"
                   n=0; while [ "$n" -lt 200 ]; do sleep 0.05; n=$((n+1)); done; exit 99"#,
            )
            .arg("sh")
            .arg(&pidfile);
        let mut run = Running::spawn(cmd, &dir, &format!("run{round}"));
        let done = run.finish_within(Duration::from_secs(15), "run signalled by its command");
        if let Ok(text) = fs::read_to_string(&pidfile)
            && let Ok(pid) = text.trim().parse()
        {
            // Killed by PID on drop if it survived leasehold.
            run.also_kill(pid);
        }
        if done.code() != Some(7) {
            let orphan = fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .is_some_and(is_alive);
            failures.push(format!(
                "round {round}: exit {:?}, signal {:?}, command still running: {orphan}",
                done.status.code(),
                done.status.signal()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "SIGTERM right after the command started was not forwarded in {} of {ROUNDS} rounds \
         (leasehold died of it; the command ran on, the lease left to expire):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn leasehold_paused_past_its_validity_stops_the_command_and_exits_124_on_resume() {
    let server = RedisServer::start();
    let dir = TempDir::new("paused");
    let pidfile = dir.path("cmd.pid");
    let mut cmd = run_cmd(&server, "paused");
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
    assert!(send_signal(run.pid(), "STOP"), "kill -STOP leasehold");
    thread::sleep(Duration::from_secs(2));
    let resumed_at = Instant::now();
    assert!(send_signal(run.pid(), "CONT"), "kill -CONT leasehold");
    let done = run.finish_within(Duration::from_secs(20), "run after SIGCONT");
    let delay = done.ended_at - resumed_at;
    FaultLine::new("holder-paused/cli", 1)
        .ms("paused_ms", Duration::from_secs(2))
        .ms("ttl_ms", Duration::from_secs(1))
        .with("exit", exit_text(&done))
        .ms("took_ms_after_resume", delay)
        .print();
    done.assert_code(124, "run paused past its validity");
    assert!(
        delay < Duration::from_secs(3),
        "leasehold took {delay:?} after SIGCONT"
    );
    assert_gone_soon(command_pid, "the command");
}

#[test]
fn run_help_lists_every_exit_status_and_option() {
    let dir = TempDir::new("help");
    let mut cmd = bare();
    cmd.args(["run", "--help"]);
    let help = finish(cmd, &dir, "help");
    help.assert_code(0, "run --help");
    let words: Vec<&str> = help
        .stdout
        .split(|c: char| c.is_whitespace() || c == '/')
        .collect();
    for status in ["75", "124", "125", "126", "127", "128+N"] {
        assert!(
            words.contains(&status),
            "--help does not mention exit status {status}:\n{}",
            help.stdout
        );
    }
    for option in [
        "--redis",
        "--namespace",
        "--purpose",
        "--resource",
        "--ttl",
        "--wait",
        "--renew-every",
        "--grace",
        "--kill-after",
        "--wait-for-descendants",
        "--resource-file",
        "LEASEHOLD_NAMESPACE",
        "LEASEHOLD_RESOURCE",
        "--replicas",
        "--replica-wait",
        "--require-replicas",
        "--operation-id",
    ] {
        assert!(
            help.stdout.contains(option),
            "--help does not mention {option}:\n{}",
            help.stdout
        );
    }
}

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
    let fence = keys_of("durable").fence;
    let on_replica: i64 = replica.query(&["EXISTS", &fence]);
    assert_eq!(on_replica, 1, "{fence} is not on the replica");
}
