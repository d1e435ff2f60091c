//! No process of the command runs past its lease, whatever reaches leasehold's process
//! group and whatever Redis says: real processes, a witness in every process of the
//! command's tree (`common::witness`), a next holder waiting for the lease, and the lease's
//! end as Redis states it (`PEXPIRETIME`).
//!
//! Each test prints one `measured:` line (run with `--nocapture`). The machine is kept busy
//! on every core while it matters; bounds are generous and still mean what they say.

mod common;

use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cli::*;
use common::observe::CpuLoad;
use common::tree::*;
use common::witness::*;

/// A lease whose local validity outlasts its renewal period many times over, so that
/// waiting out validity (5 s and more) and acting at the next renewal (0.5 s) tell apart.
const LONG_LEASE: &[&str] = &["--ttl", "6s", "--renew-every", "500ms"];

/// [`LONG_LEASE`]'s renewal period: how late a renewal learns the key is gone, and the
/// longest SIGTERM may precede SIGKILL then.
const RENEW_EVERY: Duration = Duration::from_millis(500);

/// A `leasehold run` whose command is a witnessed tree of three processes.
struct Witnessed {
    run: Running,
    /// The backgrounded child, the `setsid` grandchild, the command itself.
    pids: Vec<u32>,
    log: PathBuf,
}

/// A [`Witnessed`] started, its tree not yet seen.
struct Starting {
    run: Running,
    resource: String,
    pidfile: PathBuf,
    log: PathBuf,
}

impl Witnessed {
    /// Starts it as a job of its own (its own process group, as a shell starts a job), and
    /// waits until all three processes are witnessing.
    fn start(
        server: &RedisServer,
        dir: &TempDir,
        resource: &str,
        options: &[&str],
        ignore_term: bool,
    ) -> Witnessed {
        Witnessed::spawn(server, dir, resource, options, ignore_term, &[]).ready()
    }

    /// Starts it, with these variables in leasehold's environment, without waiting.
    fn spawn(
        server: &RedisServer,
        dir: &TempDir,
        resource: &str,
        options: &[&str],
        ignore_term: bool,
        env: &[(&str, &str)],
    ) -> Starting {
        let pidfile = dir.path(&format!("{resource}.pids"));
        let log = dir.path(&format!("{resource}.log"));
        let mut cmd = run_cmd(server, resource);
        cmd.envs(env.iter().copied());
        cmd.args(options)
            .args(["--", "bash", "-c"])
            .arg(tree_script(&pidfile, ignore_term))
            .env("W", &log)
            .env("LC_ALL", "C")
            .process_group(0);
        Starting {
            run: Running::spawn(cmd, dir, resource),
            resource: resource.to_owned(),
            pidfile,
            log,
        }
    }
}

impl Starting {
    /// Waits until all three processes of the tree are witnessing.
    #[track_caller]
    fn ready(self) -> Witnessed {
        let Starting {
            mut run,
            resource,
            pidfile,
            log,
        } = self;
        let deadline = Instant::now() + READY_TIMEOUT;
        let pids = loop {
            let text = fs::read_to_string(&pidfile).unwrap_or_default();
            let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() == 3 && text.ends_with('\n') {
                break pids;
            }
            if let Some(done) = run.try_finish() {
                panic!("{resource}: leasehold exited before its command started: {done:?}");
            }
            assert!(
                Instant::now() < deadline,
                "{resource}: no pids\n{}",
                run.output_so_far()
            );
            thread::sleep(POLL);
        };
        for &pid in &pids {
            run.also_kill(pid);
        }
        while writes(&log)
            .iter()
            .map(|&(pid, _)| pid)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            < 3
        {
            assert!(
                Instant::now() < deadline,
                "{resource}: not every process witnesses"
            );
            thread::sleep(POLL);
        }
        Witnessed { run, pids, log }
    }
}

impl Witnessed {
    fn named(&self) -> Vec<(u32, &'static str)> {
        let names = ["a backgrounded child", "a setsid grandchild", "the command"];
        self.pids.iter().copied().zip(names).collect()
    }

    fn last_write(&self) -> i64 {
        last_write(&self.log).expect("the tree wrote")
    }
}

/// A `leasehold run --wait` for the same resource whose command writes the clock once.
struct Next {
    run: Running,
    first: PathBuf,
}

impl Next {
    fn start(server: &RedisServer, dir: &TempDir, resource: &str) -> Next {
        let first = dir.path(&format!("{resource}.next"));
        let mut cmd = run_cmd(server, resource);
        // A TTL to spare: granted through a replay of a try that waited behind a paused
        // server, its validity counts from that try's send (conservatively short).
        cmd.args([
            "--wait",
            "20s",
            "--ttl",
            "3s",
            "--",
            "bash",
            "-c",
            FIRST_WRITE,
        ])
        .env("W", &first)
        .env("LC_ALL", "C");
        let run = Running::spawn(cmd, dir, &format!("{resource}-next"));
        Next { run, first }
    }

    /// Waits for it to run its command and exit; its first write (µs).
    #[track_caller]
    fn first_write(mut self) -> i64 {
        self.run
            .finish_within(EXIT_TIMEOUT, "the next holder")
            .assert_code(0, "the next holder");
        first_write(&self.first).expect("the next holder wrote")
    }
}

/// The session of `pid` (field 6 of `/proc/<pid>/stat`).
fn session_of(pid: u32) -> u32 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(3))
        .and_then(|s| s.parse().ok())
        .expect("a session id")
}

fn ms(micros: i64) -> f64 {
    micros as f64 / 1000.0
}

/// The old tree's last write (`last`) came before the lease's end in Redis (`expiry`) and
/// before the next holder's first write (`first`), all in microseconds of Redis time.
fn assert_tree_ended_first(last: i64, expiry: i64, first: i64) {
    assert!(
        last < expiry,
        "the tree wrote {} ms after the lease's end",
        ms(last - expiry)
    );
    assert!(
        last < first,
        "the tree wrote {} ms after the next holder",
        ms(last - first)
    );
}

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

/// One trial of the stalled-renewal test, as measured (µs).
struct Stalled {
    /// The old tree's last write after the end of the pause, before which no next holder
    /// can be granted the lease: positive is an overlap.
    after_grant: i64,
    /// ... after the next holder's first write.
    after_next: i64,
    /// ... before the lease's end in Redis (negative: after it).
    before_end: Option<i64>,
}

/// `trials` trees under a lease each, their keepers stopped; then every write Redis takes is
/// paused for longer than the TTL (renewals, releases, acquisitions), while a next holder
/// waits for each lease.
fn stalled_trials(server: &RedisServer, dir: &TempDir, trials: usize) -> Vec<Stalled> {
    /// A TTL that leaves every renewal 500 ms (its command timeout) on a starved machine.
    const TTL: &[&str] = &["--ttl", "2s"];
    /// Twenty connecting at once to one server on a starved machine.
    const CONNECT: &[(&str, &str)] = &[("LEASEHOLD_CONNECT_TIMEOUT", "5s")];
    /// Longer than the TTL: every trial's lease ends in Redis before the pause does, and a
    /// kill due at local validity's end has half a second to land on a starved machine
    /// before anyone can be granted the lease. (The release that preceded leasehold's own
    /// kill could only run after the pause: that kill came after the grant, however long.)
    const PAUSE: Duration = Duration::from_millis(2500);
    let resources: Vec<String> = (0..trials).map(|i| format!("stalled-{i}")).collect();
    // All started before any is waited for: on a starved machine each start takes a while.
    let starting: Vec<Starting> = resources
        .iter()
        .map(|resource| Witnessed::spawn(server, dir, resource, TTL, false, CONNECT))
        .collect();
    let mut olds: Vec<Witnessed> = starting.into_iter().map(Starting::ready).collect();
    let nexts: Vec<Next> = resources
        .iter()
        .map(|resource| Next::start(server, dir, resource))
        .collect();
    let keepers = Stopped(olds.iter().map(|old| keeper_of(old.pids[2])).collect());
    for &keeper in &keepers.0 {
        assert!(send_signal(keeper, "STOP"), "kill -STOP keeper");
    }
    let pause_end = pause_writes(server, PAUSE);
    // Read while paused: no renewal can move them any more.
    let ends: Vec<Option<i64>> = resources
        .iter()
        .map(|resource| expiry_micros(server, keys_of(resource).lease()))
        .collect();
    let firsts: Vec<i64> = nexts.into_iter().map(Next::first_write).collect();
    let mut trials_seen = Vec::new();
    for (i, old) in olds.iter_mut().enumerate() {
        old.run
            .finish_within(EXIT_TIMEOUT, "run whose keeper was stopped")
            .assert_code(124, "run whose keeper was stopped");
        let last = old.last_write();
        trials_seen.push(Stalled {
            after_grant: last - pause_end,
            after_next: last - firsts[i],
            before_end: ends[i].map(|end| end - last),
        });
    }
    trials_seen
}

/// Pauses every write Redis takes for `pause` (`CLIENT PAUSE … WRITE`) and returns when
/// the pause ends at the earliest, in µs since the epoch by Redis's clock (the machine's,
/// which the witnesses read): `TIME` and the pause run in one transaction, nothing between
/// them, so a test that was slow to send the pause cannot make the bound early.
fn pause_writes(server: &RedisServer, pause: Duration) -> i64 {
    let mut conn = server.conn();
    let (time, _): (Vec<i64>, String) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis().to_string())
        .arg("WRITE")
        .query(&mut conn)
        .expect("TIME and CLIENT PAUSE");
    let [secs, micros] = time[..] else {
        panic!("TIME answered {time:?}");
    };
    secs * 1_000_000 + micros + i64::try_from(pause.as_micros()).unwrap_or(i64::MAX)
}

/// Keepers the test stopped: resumed when it ends, however it ends (leasehold SIGKILLs a
/// stopped keeper once it saw the tree gone; after a failure one may be left).
struct Stopped(Vec<u32>);

impl Drop for Stopped {
    fn drop(&mut self) {
        for &keeper in &self.0 {
            if is_alive(keeper) {
                send_signal(keeper, "CONT");
            }
        }
    }
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
    assert!(
        doctor
            .stdout
            .contains("ok    process tree: the keeper runs in a session of its own"),
        "{}",
        doctor.stdout
    );
    let mut cmd = run_cmd(&server, "enforcement");
    cmd.args(["--log-level", "debug", "--", "true"]);
    let run = finish(cmd, &dir, "run");
    run.assert_code(0, "run");
    let said: Vec<&str> = run
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("process_tree="))
        .collect();
    assert_eq!(said.len(), 1, "{}", run.stderr);
    assert!(said[0].contains("a session of its own"), "{}", said[0]);
}
