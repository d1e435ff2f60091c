//! `leasehold run --permits N`: a counted lease across processes. The observer is outside
//! leasehold — the commands' own log lines and Redis itself — so what is checked is what
//! ran, not what leasehold believes.
//!
//! Timing: every wait has a deadline and an upper bound only; nothing here depends on how
//! fast the machine is, only on the order the commands wrote their lines.

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;

/// `leasehold run <options>` of a command that logs `start <token> <slot>` and
/// `end <token> <slot>` to `log` around `body`.
fn logged(
    server: &RedisServer,
    options: &[&str],
    log: &std::path::Path,
    body: &str,
) -> std::process::Command {
    let mut cmd = run_cmd(server, "pool");
    cmd.args(["--ttl", "2s"])
        .args(options)
        .args(["--", "sh", "-c"])
        .arg(format!(
            r#"echo "start $LEASEHOLD_FENCING_TOKEN $LEASEHOLD_SLOT" >> "$1"
               {body}
               echo "end $LEASEHOLD_FENCING_TOKEN $LEASEHOLD_SLOT" >> "$1""#
        ))
        .arg("sh")
        .arg(log);
    cmd
}

/// The lines of `log`, once it has `count` of them (every deadline a test failure).
#[track_caller]
fn wait_for_lines(log: &std::path::Path, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{count} lines expected, log:\n{text}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// `start <token> <slot>` or `end <token> <slot>` → (token, slot).
#[track_caller]
fn token_and_slot(line: &str) -> (u64, u16) {
    let mut words = line.split_whitespace().skip(1);
    match (words.next().map(str::parse), words.next().map(str::parse)) {
        (Some(Ok(token)), Some(Ok(slot))) => (token, slot),
        _ => panic!("not a log line: {line:?}"),
    }
}

#[test]
fn three_permits_admit_three_runs_at_once_and_refuse_a_fourth() {
    let server = RedisServer::start();
    let dir = TempDir::new("permits");
    let (log, go) = (dir.path("log"), dir.path("go"));
    let body = format!(r#"while [ ! -e "{}" ]; do sleep 0.05; done"#, go.display());
    let mut holders: Vec<Running> = (0..3)
        .map(|i| {
            let cmd = logged(&server, &["--permits", "3"], &log, &body);
            Running::spawn(cmd, &dir, &format!("holder{i}"))
        })
        .collect();
    // All three hold at once: each wrote its start before any could end.
    let lines = wait_for_lines(&log, 3);
    assert!(lines.iter().all(|l| l.starts_with("start ")), "{lines:?}");

    let mut json = inspect_cmd(&server, "pool");
    json.args(["--permits", "3", "--json"]);
    let json = finish(json, &dir, "inspect");
    json.assert_code(0, "inspect --permits 3");
    let value: serde_json::Value = serde_json::from_str(json.stdout.trim()).expect("json");
    assert_eq!(value["held"], 3, "{value}");
    // Each command was told its own slot (LEASEHOLD_SLOT); inspect agrees on the token in
    // each, and no token is in two slots.
    let mut logged: Vec<(u64, u16)> = lines.iter().map(|l| token_and_slot(l)).collect();
    logged.sort_unstable_by_key(|&(_, slot)| slot);
    let slots: Vec<u16> = logged.iter().map(|&(_, slot)| slot).collect();
    assert_eq!(slots, [0, 1, 2], "{lines:?}");
    let by_slot: Vec<u64> = value["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .map(|s| s["fencing_token"].as_u64().expect("a held slot's token"))
        .collect();
    let mut tokens: Vec<u64> = logged.iter().map(|&(token, _)| token).collect();
    assert_eq!(by_slot, tokens, "inspect and the commands disagree");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "a token in two slots");

    let mut fourth = run_cmd(&server, "pool");
    fourth.args(["--permits", "3", "--", "true"]);
    finish(fourth, &dir, "fourth").assert_code(75, "a fourth run on three permits");
    // Another count is another lease: two permits on the same resource are free.
    let mut other = run_cmd(&server, "pool");
    other.args(["--permits", "2", "--", "true"]);
    finish(other, &dir, "other-count").assert_code(0, "a run on two permits");

    fs::write(&go, "").expect("write go");
    for (i, holder) in holders.iter_mut().enumerate() {
        holder
            .finish_within(Duration::from_secs(30), &format!("holder {i}"))
            .assert_code(0, &format!("holder {i}"));
    }
    assert!(lease_keys(&server).is_empty(), "a slot key remained");
}

#[test]
fn seven_runs_on_three_permits_never_hold_more_than_three_at_once() {
    const PERMITS: usize = 3;
    const RUNS: usize = PERMITS + 4;
    let server = RedisServer::start();
    let dir = TempDir::new("permits-many");
    let log = dir.path("log");
    let mut runs: Vec<Running> = (0..RUNS)
        .map(|i| {
            let cmd = logged(
                &server,
                &["--permits", "3", "--wait", "60s"],
                &log,
                "sleep 0.2",
            );
            Running::spawn(cmd, &dir, &format!("run{i}"))
        })
        .collect();
    for (i, run) in runs.iter_mut().enumerate() {
        run.finish_within(Duration::from_secs(90), &format!("run {i}"))
            .assert_code(0, &format!("run {i}"));
    }
    let text = fs::read_to_string(&log).expect("read log");
    // Replayed in the order the commands wrote: the slots held at each moment.
    let (mut holding, mut most) = (Vec::<u16>::new(), 0usize);
    let mut tokens = Vec::new();
    for line in text.lines() {
        let (token, slot) = token_and_slot(line);
        if line.starts_with("start ") {
            assert!(
                !holding.contains(&slot),
                "slot {slot} held twice; log:\n{text}"
            );
            holding.push(slot);
            most = most.max(holding.len());
            tokens.push(token);
        } else {
            assert!(
                line.starts_with("end "),
                "unexpected line {line:?}; log:\n{text}"
            );
            holding.retain(|&held| held != slot);
        }
        assert!(
            holding.len() <= PERMITS,
            "more than {PERMITS} at once; log:\n{text}"
        );
    }
    assert_eq!(tokens.len(), RUNS, "log:\n{text}");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), RUNS, "a token was given twice; log:\n{text}");
    eprintln!("at most {most} of {PERMITS} held at once");
    assert!(lease_keys(&server).is_empty(), "a slot key remained");
}

#[test]
fn permits_out_of_bounds_are_refused_before_redis_is_touched() {
    for (value, message) in [
        ("0", "permits 0 is invalid: must be 1 ..= 64"),
        ("65", "permits 65 is invalid: must be 1 ..= 64"),
        ("four", "\"four\" is not a whole number of permits"),
    ] {
        // A closed port: any I/O would fail differently.
        let mut cmd = bare();
        cmd.args([
            "run",
            "--redis",
            &format!("redis://127.0.0.1:{}", closed_port()),
            "--resource",
            "r",
            "--permits",
            value,
            "--",
            "true",
        ]);
        let dir = TempDir::new("permits-bad");
        let done = finish(cmd, &dir, "bad");
        done.assert_code(125, &format!("--permits {value}"));
        assert!(done.stderr.contains(message), "{value}: {}", done.stderr);
    }
}
