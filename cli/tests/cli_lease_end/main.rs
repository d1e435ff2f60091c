//! No process of the command runs past its lease, whatever reaches leasehold's process
//! group and whatever Redis says: real processes, a witness in every process of the
//! command's tree (`common::witness`), a next holder waiting for the lease, and the lease's
//! end as Redis states it (`PEXPIRETIME`).
//!
//! Each test prints one `measured:` line (run with `--nocapture`). The machine is kept busy
//! on every core while it matters; bounds are generous and still mean what they say.

#[path = "../common/mod.rs"]
mod common;
mod killed_together;
mod runs;
mod stalled;

use std::fs;
use std::os::unix::process::CommandExt as _;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::observe::CpuLoad;
use common::tree::*;
use common::witness::*;
use runs::*;
use stalled::*;

#[test]
fn sigkill_of_leaseholds_process_group_leaves_nothing_of_the_command_to_overlap_the_next_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("group-kill");
    let _load = CpuLoad::start();
    let mut old = Witnessed::start(&server, &dir, "group-kill", &["--ttl", "2s"], false);
    let key = wait_for_lease_key(&server);
    let next = Next::start(&server, &dir, "group-kill");
    let keeper = keeper_of(old.pids[2]);
    assert_ne!(
        session_of(keeper),
        session_of(old.run.pid()),
        "the keeper left leasehold's session"
    );
    // What `timeout -s KILL`, `kill -9 %1` and supervisord's killasgroup do.
    let killed_at = Instant::now();
    assert!(
        send_group_signal(old.run.pid(), "KILL"),
        "kill -KILL -group"
    );
    let expiry = expiry_micros(&server, &key).expect("the lease outlives leasehold until its TTL");
    let mut everyone = old.named();
    everyone.push((keeper, "the keeper"));
    assert_all_gone_within(&everyone, STOP_LIMIT, "leasehold's group was SIGKILLed");
    let took = killed_at.elapsed();
    let _ = old.run.finish_within(EXIT_TIMEOUT, "killed leasehold");
    let last = old.last_write();
    let first = next.first_write();
    assert_tree_ended_first(last, expiry, first);
    println!(
        "measured: SIGKILL of leasehold's group → the tree and the keeper gone in {took:?}; last \
         write {:.1} ms before the lease's end, {:.1} ms before the next holder's first",
        ms(expiry - last),
        ms(first - last)
    );
}

#[test]
fn sigstop_of_leaseholds_process_group_cannot_keep_the_command_past_the_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("group-stop");
    let _load = CpuLoad::start();
    // The keeper kills at local validity's end, which the drift budget puts before the
    // lease's end in Redis: 300 ms of it, rather than the default 10, for a machine whose
    // cores are oversubscribed (as CI's are, and as the load below makes them), where the
    // kill can land a hundred milliseconds after its timer. Without the keeper the tree
    // would run for as long as leasehold stays stopped.
    let mut old = Witnessed::spawn(
        &server,
        &dir,
        "group-stop",
        &["--ttl", "2s"],
        false,
        &[("LEASEHOLD_DRIFT_BUDGET", "300ms")],
    )
    .ready();
    let key = wait_for_lease_key(&server);
    let next = Next::start(&server, &dir, "group-stop");
    let keeper = keeper_of(old.pids[2]);
    // `kill -STOP %1`: every process of the group stops, the keeper is not in it.
    assert!(
        send_group_signal(old.run.pid(), "STOP"),
        "kill -STOP -group"
    );
    assert!(
        wait_for_state(old.run.pid(), 'T', Duration::from_secs(5)),
        "leasehold did not stop; {}",
        process_report(old.run.pid())
    );
    // Read once leasehold is stopped: no renewal can move it earlier.
    let expiry = expiry_micros(&server, &key).expect("the lease is held");
    let took = assert_all_gone_within(
        &old.named(),
        Duration::from_secs(3),
        "leasehold's group was stopped",
    );
    assert!(
        !wait_for_state(keeper, 'T', Duration::ZERO),
        "the keeper was stopped"
    );
    let last = old.last_write();
    let first = next.first_write();
    assert!(
        send_group_signal(old.run.pid(), "CONT"),
        "kill -CONT -group"
    );
    old.run
        .finish_within(EXIT_TIMEOUT, "leasehold resumed")
        .assert_code(124, "leasehold stopped past its lease");
    assert_tree_ended_first(last, expiry, first);
    println!(
        "measured: SIGSTOP of leasehold's group → the keeper killed the tree after {took:?} (TTL \
         2 s, drift budget 300 ms); last write {:.1} ms before the lease's end, {:.1} ms before \
         the next holder's first",
        ms(expiry - last),
        ms(first - last)
    );
}

#[test]
fn sigterm_to_leaseholds_process_group_reaches_the_command_through_leasehold() {
    let server = RedisServer::start();
    let dir = TempDir::new("group-term");
    let pidfile = dir.path("cmd.pid");
    let mut cmd = run_cmd(&server, "group-term");
    cmd.args(["--ttl", "2s", "--", "sh", "-c"])
        .arg(r#"trap "exit 7" TERM; echo $$ > "$1"; while :; do sleep 0.05; done"#)
        .arg("sh")
        .arg(&pidfile)
        .process_group(0);
    let mut run = Running::spawn(cmd, &dir, "run");
    let command = run.wait_for_command_pid(&pidfile);
    wait_until_catching(run.pid(), 15);
    // The command has a process group of its own and the keeper a session: only leasehold
    // gets this, and forwards it.
    assert!(send_group_signal(run.pid(), "TERM"), "kill -TERM -group");
    run.finish_within(Duration::from_secs(10), "run after SIGTERM to its group")
        .assert_code(7, "the command's own status after the forwarded SIGTERM");
    assert_gone_soon(command, "the command");
    assert!(lease_keys(&server).is_empty(), "the lease is still held");
}

#[test]
fn a_deleted_lease_ends_a_command_that_ignores_sigterm_within_a_renewal_period() {
    let server = RedisServer::start();
    let dir = TempDir::new("deleted");
    let _load = CpuLoad::start();
    let mut old = Witnessed::start(&server, &dir, "deleted", LONG_LEASE, true);
    let key = wait_for_lease_key(&server);
    let next = Next::start(&server, &dir, "deleted");
    let deleted_at = now_micros();
    let _: i64 = server.query(&["DEL", &key]);
    let limit = RENEW_EVERY + Duration::from_secs(1);
    let took = assert_all_gone_within(&old.named(), limit, "the lease key was deleted");
    let done = old
        .run
        .finish_within(EXIT_TIMEOUT, "run whose lease was deleted");
    done.assert_code(124, "run whose lease was deleted");
    // Absent at the next renewal, or the next holder's already.
    assert!(
        done.stderr.contains("lost (absent)") || done.stderr.contains("lost (not_owner)"),
        "{}",
        done.stderr
    );
    let last = old.last_write();
    let first = next.first_write();
    // Redis said the lease is gone at the next renewal; SIGKILL followed within one more
    // renewal period (no --grace: the default would have waited out local validity).
    assert!(
        last - deleted_at < i64::try_from(limit.as_micros()).unwrap_or(i64::MAX),
        "the tree wrote {} ms after the DEL",
        ms(last - deleted_at)
    );
    println!(
        "measured: DEL → the SIGTERM-ignoring tree gone {took:?} later (renewal every 500 ms); \
         its last write {:.1} ms after the DEL, {:.1} ms after the next holder's first",
        ms(last - deleted_at),
        ms(last - first)
    );
}

#[test]
fn redis_restarted_empty_ends_a_command_that_ignores_sigterm_within_a_renewal_period() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("restarted");
    let _load = CpuLoad::start();
    let mut old = Witnessed::start(&server, &dir, "restarted", LONG_LEASE, true);
    wait_for_lease_key(&server);
    // Without persistence: the lease (and every other key) is gone once it answers again.
    server.restart();
    let back_at = now_micros();
    let next = Next::start(&server, &dir, "restarted");
    let took = assert_all_gone_within(
        &old.named(),
        RENEW_EVERY + Duration::from_secs(1),
        "Redis restarted empty",
    );
    let done = old
        .run
        .finish_within(EXIT_TIMEOUT, "run whose Redis restarted");
    done.assert_code(124, "run whose Redis restarted");
    // A renewal found it absent, or the next holder's already; or, when a renewal fell
    // into the restart (unknown), Redis said so when asked again.
    assert!(
        [
            "lost (absent)",
            "lost (not_owner)",
            "Redis says the lease is gone"
        ]
        .iter()
        .any(|said| done.stderr.contains(said)),
        "{}",
        done.stderr
    );
    let last = old.last_write();
    let first = next.first_write();
    println!(
        "measured: Redis restarted empty → the SIGTERM-ignoring tree gone {took:?} after it \
         answered again (renewal every 500 ms); its last write {:.1} ms after that, {:.1} ms \
         after the next holder's first",
        ms(last - back_at),
        ms(last - first)
    );
}

#[test]
fn an_unknown_lease_redis_then_says_is_gone_ends_within_a_renewal_period() {
    let server = RedisServer::start();
    let dir = TempDir::new("unknown-then-gone");
    let mut old = Witnessed::start(&server, &dir, "unknown-then-gone", LONG_LEASE, true);
    let key = wait_for_lease_key(&server);
    // A renewal none of whose three tries (500 ms each) gets a reply: the lease becomes
    // unknown (it may still be ours), so --grace — here what is left of 6 s of validity —
    // would govern. The pause lasts until the test lifts it.
    server.cmd(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    let deadline = Instant::now() + READY_TIMEOUT;
    while !fs::read_to_string(&old.run.stderr)
        .unwrap_or_default()
        .contains("lease unknown")
    {
        if Instant::now() >= deadline {
            server.cmd(&["CLIENT", "UNPAUSE"]);
            panic!(
                "the lease never became unknown: {}",
                old.run.output_so_far()
            );
        }
        thread::sleep(POLL);
    }
    // The renewal's tries run first (they were sent first), then the deletion.
    server.cmd(&["CLIENT", "UNPAUSE"]);
    let _: i64 = server.query(&["DEL", &key]);
    let deleted_at = now_micros();
    let limit = RENEW_EVERY + Duration::from_secs(1);
    let took = assert_all_gone_within(&old.named(), limit, "the unknown lease was deleted");
    let done = old
        .run
        .finish_within(EXIT_TIMEOUT, "run whose lease became unknown");
    done.assert_code(124, "run whose lease became unknown");
    assert!(
        done.stderr
            .contains("Redis says the lease is gone (absent)"),
        "{}",
        done.stderr
    );
    println!(
        "measured: lease unknown, then deleted → the SIGTERM-ignoring tree gone {took:?} later \
         (renewal every 500 ms; validity left then: over 4 s); last write {:.1} ms after the DEL",
        ms(old.last_write() - deleted_at)
    );
}
#[test]
fn a_stopped_keeper_and_stalled_renewals_never_let_the_tree_write_after_the_next_grant() {
    const TRIALS: usize = 20;
    let server = RedisServer::start();
    let dir = TempDir::new("keeper-stopped-paused");
    let _load = CpuLoad::start();
    let trials = stalled_trials(&server, &dir, TRIALS);
    let late: Vec<String> = trials
        .iter()
        .enumerate()
        .filter(|(_, t)| t.after_grant >= 0 || t.after_next >= 0)
        .map(|(i, t)| {
            format!(
                "trial {i}: last write {:.1} ms after the pause's end, {:.1} ms after the next \
                 holder's first",
                ms(t.after_grant),
                ms(t.after_next)
            )
        })
        .collect();
    assert!(
        late.is_empty(),
        "{} of {} trees wrote after the next grant:\n{}",
        late.len(),
        trials.len(),
        late.join("\n")
    );
    let mut before_end: Vec<i64> = trials.iter().filter_map(|t| t.before_end).collect();
    before_end.sort_unstable();
    let closest = trials.iter().map(|t| -t.after_grant).min().unwrap_or(0);
    println!(
        "measured: keeper stopped, renewals stalled, {} trials → 0 writes after the next grant \
         (closest {:.1} ms before the earliest grant); last write before the lease's end in \
         Redis: min {:.1} ms, median {:.1} ms, max {:.1} ms ({} after it)",
        trials.len(),
        ms(closest),
        before_end.first().copied().map_or(f64::NAN, ms),
        before_end
            .get(before_end.len() / 2)
            .copied()
            .map_or(f64::NAN, ms),
        before_end.last().copied().map_or(f64::NAN, ms),
        before_end.iter().filter(|&&b| b < 0).count(),
    );
}

#[test]
fn doctor_and_the_debug_log_say_how_the_process_tree_is_kept() {
    let server = RedisServer::start();
    let dir = TempDir::new("enforcement");
    let doctor = finish(leasehold("doctor", &server), &dir, "doctor");
    doctor.assert_code(0, "doctor on a healthy server");
    // This host (root, as CI runs) gives the command a PID namespace.
    assert!(
        doctor
            .stdout
            .contains("ok    process tree: a PID namespace of its own"),
        "{}",
        doctor.stdout
    );
    let said = |wanted: Option<&str>| {
        let mut cmd = run_cmd(&server, "enforcement");
        cmd.env_remove("LEASEHOLD_PID_NAMESPACE");
        if let Some(wanted) = wanted {
            cmd.args(["--pid-namespace", wanted]);
        }
        cmd.args(["--log-level", "debug", "--", "true"]);
        let run = finish(cmd, &dir, "run");
        run.assert_code(0, "run");
        let lines: Vec<String> = run
            .stderr_lines()
            .into_iter()
            .filter(|l| l.contains("process_tree="))
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), 1, "{}", run.stderr);
        assert!(lines[0].contains("a session of its own"), "{}", lines[0]);
        lines[0].clone()
    };
    let by_default = said(None);
    assert!(
        by_default.contains("a PID namespace of its own"),
        "{by_default}"
    );
    let off = said(Some("off"));
    assert!(off.contains("the keeper alone (no PID namespace)"), "{off}");
}
