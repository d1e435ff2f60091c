//! Signals and `leasehold run`: each forwarded signal reaches the command, from its first
//! moment on; `--kill-after` follows an ignored one with SIGKILL; one that arrives before
//! the command started (waiting for the lease or for replicas) releases what was acquired
//! and exits 128+N; and a paused (SIGSTOP) leasehold cannot keep its command running past
//! the lease.

mod common;

use std::fs;
use std::os::unix::process::ExitStatusExt as _;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::fault::FaultLine;
use common::observe::CpuLoad;

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
fn every_forwarded_signal_reaches_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("forwarded");
    let signals = ["HUP", "INT", "QUIT", "TERM", "USR1", "USR2", "ALRM"];
    let mut runs: Vec<_> = signals
        .iter()
        .enumerate()
        .map(|(i, sig)| {
            let pidfile = dir.path(&format!("{sig}.pid"));
            let mut cmd = run_cmd(&server, &format!("forwarded-{sig}"));
            cmd.args(["--ttl", "2s", "--", "sh", "-c"])
                .arg(format!(
                    r#"trap 'exit {code}' {sig}; echo $$ > "$1"; while :; do sleep 0.05; done"#,
                    code = 10 + i
                ))
                .arg("sh")
                .arg(&pidfile);
            let mut run = Running::spawn(cmd, &dir, sig);
            run.wait_for_command_pid(&pidfile);
            (sig, 10 + i, run)
        })
        .collect();
    for (sig, code, run) in &mut runs {
        assert!(send_signal(run.pid(), sig), "kill -{sig} leasehold");
        let done = run.finish_within(Duration::from_secs(10), sig);
        done.assert_code(
            i32::try_from(*code).expect("small"),
            &format!("SIG{sig} forwarded"),
        );
    }
    assert!(lease_keys(&server).is_empty(), "a lease is still held");
}

#[test]
fn kill_after_sigkills_a_command_that_ignores_the_forwarded_signal() {
    let server = RedisServer::start();
    let dir = TempDir::new("kill-after");
    let pidfile = dir.path("cmd.pid");
    let mut cmd = run_cmd(&server, "kill-after");
    cmd.args(["--ttl", "3s", "--kill-after", "300ms", "--", "sh", "-c"])
        .arg(r#"trap '' TERM; echo $$ > "$1"; while :; do sleep 0.05; done"#)
        .arg("sh")
        .arg(&pidfile);
    let mut run = Running::spawn(cmd, &dir, "run");
    let pid = run.wait_for_command_pid(&pidfile);
    assert!(send_signal(run.pid(), "TERM"), "kill -TERM leasehold");
    let sent = Instant::now();
    let done = run.finish_within(Duration::from_secs(10), "run with --kill-after");
    done.assert_code(128 + 9, "killed by SIGKILL");
    assert!(!is_alive(pid));
    println!(
        "measured: --kill-after 300ms → exit {:?} after SIGTERM",
        sent.elapsed()
    );
}

#[test]
fn a_signal_while_waiting_for_a_held_lease_exits_at_once_holding_nothing() {
    let server = RedisServer::start();
    let dir = TempDir::new("signal-waiting");
    let holder = Holder::start(&server, &dir, "busy", "30s");
    let marker = dir.path("ran");
    let mut cmd = run_cmd(&server, "busy");
    cmd.args(["--wait", "30s", "--", "sh", "-c", r#"echo > "$1""#, "sh"])
        .arg(&marker);
    let mut run = Running::spawn(cmd, &dir, "waiter");
    wait_until_catching(run.pid(), 2);
    // Handlers come just before the acquisition: give it time to be waiting (a signal a
    // moment earlier must give the same result).
    thread::sleep(Duration::from_millis(300));
    assert!(send_signal(run.pid(), "INT"), "kill -INT leasehold");
    let sent = Instant::now();
    let done = run.finish_within(Duration::from_secs(10), "waiter after SIGINT");
    done.assert_code(130, "waiter after SIGINT");
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "took {:?}",
        sent.elapsed()
    );
    assert!(!marker.exists(), "the command ran");
    assert!(
        done.stderr.contains("SIGINT before the command started"),
        "{}",
        done.stderr
    );
    assert_eq!(holder.release().code(), Some(0));
    assert!(lease_keys(&server).is_empty(), "a lease is still held");
}

#[test]
fn a_signal_during_the_replica_wait_releases_the_lease_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("signal-replicas");
    let marker = dir.path("ran");
    let mut cmd = run_cmd(&server, "replica-wait");
    // A standalone server has no replica: WAIT blocks for the whole --replica-wait.
    cmd.args([
        "--replicas",
        "1",
        "--replica-wait",
        "8s",
        "--",
        "sh",
        "-c",
        r#"echo > "$1""#,
        "sh",
    ])
    .arg(&marker);
    let mut run = Running::spawn(cmd, &dir, "run");
    wait_for_lease_key(&server);
    assert!(send_signal(run.pid(), "TERM"), "kill -TERM leasehold");
    let sent = Instant::now();
    let done = run.finish_within(Duration::from_secs(10), "run after SIGTERM in the wait");
    let took = sent.elapsed();
    done.assert_code(143, "run after SIGTERM in the replica wait");
    assert!(
        took < Duration::from_secs(3),
        "took {took:?} of an 8 s wait"
    );
    assert!(!marker.exists(), "the command ran");
    assert!(lease_keys(&server).is_empty(), "the lease is still held");
    println!(
        "measured: SIGTERM during an 8 s replica wait → exit 143, lease released, in {took:?}"
    );
}
