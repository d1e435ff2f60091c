//! `leasehold run` never lets the command run outside its lease, whatever the process tree
//! does and whatever happens to leasehold: real processes, real `redis-server`.
//!
//! Each test prints one `measured:` line with the figure it bounds (run with
//! `--nocapture` to read them). Bounds are upper bounds with a wide margin for a loaded
//! machine; the timing-sensitive ones run with every core kept busy.

mod common;

use std::fs;
use std::os::unix::process::CommandExt as _;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::observe::CpuLoad;
use common::tree::*;
use leasehold::{LeaseKeys, LeaseSettings, Purpose, ResourceDigest};

/// Starts `leasehold run <args> -- sh -c <script>` where the script starts a backgrounded
/// `sleep` and a `setsid` one (a session of its own, out of the command's process group),
/// writes their pids and its own, then runs `tail`. Returns leasehold and the three pids.
fn start_tree(
    server: &RedisServer,
    dir: &TempDir,
    args: &[&str],
    tail: &str,
) -> (Running, [(u32, &'static str); 3]) {
    start_tree_with(server, dir, args, tail, &[])
}

/// [`start_tree`] with these variables in leasehold's environment.
fn start_tree_with(
    server: &RedisServer,
    dir: &TempDir,
    args: &[&str],
    tail: &str,
    env: &[(&str, &str)],
) -> (Running, [(u32, &'static str); 3]) {
    let script = format!(
        r#"echo $$ > "{main}"; sleep 300 & echo $! > "{bg}"; setsid {daemon_cmd} & echo $! > "{daemon}"; {tail}"#,
        main = dir.path("main.pid").display(),
        bg = dir.path("bg.pid").display(),
        daemon = dir.path("daemon.pid").display(),
        // The setsid descendant ignores SIGTERM (an ignored signal stays ignored across
        // exec): only SIGKILL ends it. One process, so the count left behind is exact.
        daemon_cmd = r#"sh -c 'trap "" TERM; exec sleep 300'"#,
    );
    let mut cmd = run_cmd(server, "tree");
    cmd.envs(env.iter().copied())
        .args(args)
        .args(["--", "sh", "-c", &script]);
    // A job of its own, as a shell with job control starts it: its process group (leasehold
    // and the keeper) has a parent in another group of the session, so it is not orphaned
    // and a ^Z stops it — the kernel discards SIGTSTP sent to an orphaned group, which the
    // test binary's own group is whenever it was started outside a shell's job control.
    cmd.process_group(0);
    let mut run = Running::spawn(cmd, dir, "run");
    let pids = [
        (
            pid_in(&mut run, &dir.path("main.pid"), "command"),
            "the command",
        ),
        (
            pid_in(&mut run, &dir.path("bg.pid"), "bg"),
            "a backgrounded child",
        ),
        (
            pid_in(&mut run, &dir.path("daemon.pid"), "daemon"),
            "a setsid descendant ignoring SIGTERM",
        ),
    ];
    (run, pids)
}

#[test]
fn sigkill_of_leasehold_ends_every_process_of_the_command_before_anyone_else_can_hold() {
    let server = RedisServer::start();
    let dir = TempDir::new("sigkill");
    let _load = CpuLoad::start();
    let (mut run, pids) = start_tree(&server, &dir, &["--ttl", "3s"], "sleep 300");
    let key = wait_for_lease_key(&server);
    assert!(send_signal(run.pid(), "KILL"), "kill -KILL leasehold");
    let took = assert_all_gone_within(&pids, STOP_LIMIT, "leasehold was SIGKILLed");
    // Nobody else can hold yet: the lease only expires at its TTL.
    let ttl_left: i64 = server.query(&["PTTL", &key]);
    assert!(
        ttl_left > 0,
        "the lease expired before the command's processes were gone"
    );
    println!(
        "measured: SIGKILL of leasehold → all 3 processes gone in {took:?} ({ttl_left} ms of TTL left)"
    );
    let _ = run.finish_within(EXIT_TIMEOUT, "killed leasehold");
}

#[test]
fn a_killed_keeper_takes_the_command_with_it_and_leasehold_says_so() {
    let server = RedisServer::start();
    let dir = TempDir::new("keeper-killed");
    let (mut run, pids) = start_tree(&server, &dir, &["--ttl", "3s"], "sleep 300");
    wait_for_lease_key(&server);
    let stat = fs::read_to_string(format!("/proc/{}/stat", pids[0].0)).expect("command stat");
    let keeper: u32 = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .expect("the command's parent");
    assert_ne!(
        keeper,
        run.pid(),
        "the command's parent is the keeper, not leasehold"
    );
    assert!(send_signal(keeper, "KILL"), "kill -KILL keeper");
    let took = assert_all_gone_within(&pids, STOP_LIMIT, "the keeper was SIGKILLed");
    let done = run.finish_within(EXIT_TIMEOUT, "run after its keeper died");
    done.assert_code(125, "run after its keeper died");
    assert!(
        done.stderr.contains("keeper died"),
        "stderr: {}",
        done.stderr
    );
    assert!(lease_keys(&server).is_empty(), "the lease is still held");
    println!("measured: SIGKILL of the keeper → all 3 processes gone in {took:?}");
}

#[test]
fn processes_the_command_left_behind_are_stopped_before_the_lease_is_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("left-behind");
    let (mut run, pids) = start_tree(
        &server,
        &dir,
        &["--ttl", "2s", "--grace", "100ms"],
        "exit 3",
    );
    let done = run.finish_within(EXIT_TIMEOUT, "run whose command left processes");
    // Everything was gone when leasehold exited: the release came after.
    for (pid, what) in pids {
        assert!(!is_alive(pid), "{what} (pid {pid}) outlived leasehold");
    }
    done.assert_code(3, "the command's own status");
    assert_eq!(
        done.stderr_lines().len(),
        1,
        "one line about the processes left behind: {}",
        done.stderr
    );
    assert!(
        done.stderr.contains("left 2 process(es) behind"),
        "{}",
        done.stderr
    );
    assert!(lease_keys(&server).is_empty(), "the lease is still held");
}

#[test]
fn wait_for_descendants_keeps_the_lease_renewed_until_the_last_one_ends() {
    let server = RedisServer::start();
    let dir = TempDir::new("wait-descendants");
    let done_file = dir.path("done");
    let child = dir.path("child.pid");
    let mut cmd = run_cmd(&server, "wait-descendants");
    // The command exits at once; a setsid grandchild works on until the test says so,
    // longer than the TTL, so the lease must be renewed meanwhile.
    cmd.args(["--ttl", "1s", "--wait-for-descendants", "--", "sh", "-c"])
        .arg(format!(
            r#"setsid sh -c 'echo $$ > "{child}"; {UNTIL_DONE}' & exit 4"#,
            child = child.display()
        ))
        .env("DONE", &done_file);
    let mut run = Running::spawn(cmd, &dir, "run");
    let grandchild = pid_in(&mut run, &child, "grandchild");
    let key = wait_for_lease_key(&server);
    let token: String = server.query(&["GET", &key]);
    thread::sleep(Duration::from_millis(2500));
    assert!(is_alive(grandchild), "the grandchild was stopped");
    assert_eq!(
        server.query::<String>(&["GET", &key]),
        token,
        "the lease changed hands while the grandchild ran"
    );
    fs::write(&done_file, "").expect("write done file");
    let finished = run.finish_within(EXIT_TIMEOUT, "run waiting for descendants");
    finished.assert_code(4, "the command's own status");
    assert!(
        finished.stderr.contains("holding the lease until they end"),
        "{}",
        finished.stderr
    );
    assert!(lease_keys(&server).is_empty(), "the lease is still held");
}

#[test]
fn a_lost_lease_stops_every_descendant_whatever_its_group() {
    let server = RedisServer::start();
    let dir = TempDir::new("lost-tree");
    let _load = CpuLoad::start();
    let (mut run, pids) = start_tree(
        &server,
        &dir,
        &["--ttl", "3s", "--grace", "200ms"],
        "sleep 300",
    );
    let key = wait_for_lease_key(&server);
    let deleted_at = Instant::now();
    let _: i64 = server.query(&["DEL", &key]);
    // Lost at the next renewal (every second), then SIGKILL 200 ms after SIGTERM.
    let took = assert_all_gone_within(&pids, Duration::from_secs(3), "the lease key was deleted");
    let done = run.finish_within(EXIT_TIMEOUT, "run after the lease was lost");
    done.assert_code(124, "run after the lease was lost");
    println!(
        "measured: lease deleted → every process gone {:?} later (renewal every 1 s, grace 200 ms; {took:?} of waiting)",
        deleted_at.elapsed().min(took + Duration::from_secs(3))
    );
}

#[test]
fn leasehold_paused_past_validity_cannot_keep_its_command_running() {
    let server = RedisServer::start();
    let dir = TempDir::new("paused-tree");
    // The kill at local validity's end lands late by the scheduling delay, which the drift
    // budget must cover: 300 ms of it under a loaded CI (the default 10 ms left 9-23 ms of
    // TTL on a quiet machine), as the other frozen-process tests take.
    let (mut run, pids) = start_tree_with(
        &server,
        &dir,
        &["--ttl", "2s"],
        "sleep 300",
        &[("LEASEHOLD_DRIFT_BUDGET", "300ms")],
    );
    let key = wait_for_lease_key(&server);
    let stopped_at = Instant::now();
    assert!(send_signal(run.pid(), "STOP"), "kill -STOP leasehold");
    // While leasehold is stopped, the keeper kills at local validity's end, before the TTL
    // in Redis runs out and someone else can acquire.
    let took = assert_all_gone_within(&pids, Duration::from_secs(3), "leasehold was stopped");
    let pttl: i64 = server.query(&["PTTL", &key]);
    assert!(send_signal(run.pid(), "CONT"), "kill -CONT leasehold");
    let done = run.finish_within(EXIT_TIMEOUT, "run after SIGCONT");
    done.assert_code(124, "run paused past its validity");
    assert!(
        pttl > 0,
        "the tree outlived the lease's TTL in Redis: PTTL {pttl} (-2: the key expired, -1: no expiry)"
    );
    println!(
        "measured: leasehold stopped → command tree killed after {:?} (TTL 2 s, drift budget 300 ms; {pttl} ms of TTL left then)",
        took.min(stopped_at.elapsed())
    );
}

#[test]
fn leasehold_namespace_is_honoured_as_the_library_honours_it() {
    let server = RedisServer::start();
    let dir = TempDir::new("namespace-env");
    let mut cmd = run_cmd(&server, "shared-job");
    cmd.env("LEASEHOLD_NAMESPACE", "tenant-a")
        .args(["--ttl", "2s", "--", "sh", "-c", "sleep 0.3"]);
    let mut run = Running::spawn(cmd, &dir, "run");
    let key = wait_for_lease_key(&server);
    let settings = LeaseSettings::from_lookup(|var| {
        (var == "LEASEHOLD_NAMESPACE").then(|| "tenant-a".to_owned())
    })
    .expect("settings");
    let library = LeaseKeys::new(
        &settings.namespace,
        &Purpose::new("run").expect("purpose"),
        &ResourceDigest::of(b"shared-job"),
    );
    assert_eq!(
        key,
        library.lease(),
        "the CLI and the library take different keys"
    );
    run.finish_within(EXIT_TIMEOUT, "run").assert_code(0, "run");
    // The flag overrides the variable.
    let mut cmd = run_cmd(&server, "shared-job");
    cmd.env("LEASEHOLD_NAMESPACE", "tenant-a").args([
        "--namespace",
        "tenant-b",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        "sleep 0.3",
    ]);
    let mut run = Running::spawn(cmd, &dir, "flag");
    let key = wait_for_lease_key(&server);
    assert!(key.starts_with("tenant-b:"), "{key}");
    run.finish_within(EXIT_TIMEOUT, "run").assert_code(0, "run");
}

#[test]
fn a_stopped_keeper_cannot_keep_the_command_running_past_validity() {
    let server = RedisServer::start();
    let dir = TempDir::new("keeper-stopped");
    let (mut run, pids) = start_tree(&server, &dir, &["--ttl", "1s"], "sleep 300");
    let keeper = keeper_of(pids[0].0);
    assert!(send_signal(keeper, "STOP"), "kill -STOP keeper");
    // leasehold cannot renew for ever with nobody answering... it can: the lease is fine.
    // Take the lease away; the keeper never hears of it, leasehold kills the tree itself
    // when local validity ends.
    let key = wait_for_lease_key(&server);
    let _: i64 = server.query(&["DEL", &key]);
    let took = assert_all_gone_within(&pids, Duration::from_secs(3), "the keeper was stopped");
    // Resumed, the keeper finds the tree gone and says so; leasehold then exits 124. (In a
    // PID namespace leasehold's kill ended the keeper with the tree: nothing to resume.)
    let _ = send_signal(keeper, "CONT");
    let done = run.finish_within(EXIT_TIMEOUT, "run after its keeper resumed");
    done.assert_code(124, "run whose keeper was stopped");
    println!("measured: keeper stopped, lease deleted → tree killed by leasehold in {took:?}");
}

#[test]
fn ctrl_z_stops_leasehold_but_never_the_keeper_so_the_deadline_still_holds() {
    let server = RedisServer::start();
    let dir = TempDir::new("ctrl-z");
    let (mut run, pids) = start_tree(&server, &dir, &["--ttl", "1s"], "sleep 300");
    let keeper = keeper_of(pids[0].0);
    wait_for_lease_key(&server);
    // What a terminal's ^Z does: SIGTSTP to leasehold's process group (the keeper has a
    // session of its own, the command a group of its own).
    assert!(send_group_signal(run.pid(), "TSTP"), "kill -TSTP -group");
    assert!(
        wait_for_state(run.pid(), 'T', Duration::from_secs(5)),
        "leasehold did not stop on SIGTSTP; {}",
        process_report(run.pid())
    );
    assert!(
        !wait_for_state(keeper, 'T', Duration::ZERO),
        "the keeper ignores SIGTSTP; {}",
        process_report(keeper)
    );
    let took = assert_all_gone_within(&pids, Duration::from_secs(3), "^Z");
    assert!(send_signal(run.pid(), "CONT"), "kill -CONT leasehold");
    let done = run.finish_within(EXIT_TIMEOUT, "run after fg");
    done.assert_code(124, "run suspended past its validity");
    println!("measured: ^Z → the keeper killed the tree at the deadline, {took:?} later (TTL 1 s)");
}
