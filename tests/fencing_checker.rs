//! A bounded, Jepsen-style fencing checker for the `leasehold` CLI.
//!
//! Four worker threads each run `leasehold run --resource shared --ttl 1s --wait 5s -- sh -c …`
//! in a loop, as OS processes connecting through a fault-injecting [`Proxy`] to one persistent
//! (AOF) redis-server. The command sleeps 50–150 ms and then does a fenced write with
//! `redis-cli EVAL`, straight to the server (the effect target does not share the lease path):
//! one Lua script appends the token to `attempted` and, only if it is greater than
//! `HGET target fence`, stores it there and appends it to `accepted`.
//!
//! A nemesis thread meanwhile injects one fault at a time, every 300–800 ms:
//! * pause: SIGSTOP a running `leasehold` process together with the command it runs (its
//!   own process group) for 1.2–2 s, longer than the TTL, then SIGCONT, the command first
//!   and leasehold 0–300 ms later, so a holder that lost its lease wakes up and writes with
//!   its old token before leasehold can stop it;
//! * reply drop: the proxy drops replies for 200–600 ms;
//! * restart: a graceful restart of the redis-server (AOF, `appendfsync always`).
//!
//! At the end the checker replays `attempted` against `accepted`: accepted tokens strictly
//! increase, every attempted token above the maximum so far is the next accepted one, and
//! every other attempt (a stale holder's write) was refused. It also counts how many of
//! those stale writes an unfenced target would have taken.
//!
//! Runs 20 s by default; `LEASEHOLD_CHECKER_SECS=120` runs longer (at least 10 s), and
//! `LEASEHOLD_CHECKER_SEED` fixes the nemesis' and the workers' random choices (timing
//! still varies). Every wait is bounded; a `leasehold` process still running 30 s after it
//! started is killed (by PID and process group) and fails the test.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::fault::FaultLine;
use common::{Proxy, ProxyMode, RedisServer};
use leasehold::{LeaseKeys, Namespace, Purpose, ResourceDigest};

const WORKERS: usize = 4;
const RESOURCE: &str = "shared";
/// `leasehold run`'s default `--purpose`, for the fence counter key.
const PURPOSE: &str = "run";
const DEFAULT_SECS: u64 = 20;
const MIN_SECS: u64 = 10;
/// A `leasehold run` still running this long after it started is a straggler: killed, and
/// the test fails (its own bounds are --wait 5s, a 1 s TTL and a pause of at most 2 s).
const INVOCATION_BOUND: Duration = Duration::from_secs(30);
/// How long to wait for a finished invocation's stdout/stderr to reach EOF.
const PIPE_BOUND: Duration = Duration::from_secs(5);
/// Worker poll interval while its `leasehold` runs.
const POLL: Duration = Duration::from_millis(10);
/// The run must have done real work.
const MIN_ACCEPTED: usize = 10;
/// Probability (in percent) that a pause picks a process that is running its command (the
/// holder, or a holder that just lost the lease) rather than any running process.
const PREFER_HOLDER_PCT: u64 = 75;
/// How long a pause that prefers a holder looks for one before taking any process.
const HOLDER_SEARCH: Duration = Duration::from_millis(500);

/// Exit statuses of `leasehold run` that the faults may legitimately cause.
const EXIT_OK: i32 = 0;
const EXIT_CONTENDED: i32 = 75;
const EXIT_LEASE_LOST: i32 = 124;
const EXIT_UNAVAILABLE: i32 = 125;
const EXPECTED_EXITS: &[i32] = &[EXIT_OK, EXIT_CONTENDED, EXIT_LEASE_LOST, EXIT_UNAVAILABLE];

/// The fenced write. KEYS: target hash, attempted list, accepted list; ARGV[1]: the token.
/// The token is stored as the text it came as (a Lua number would print as 1.7e+15).
const FENCED_WRITE: &str = "\
local t = ARGV[1]
redis.call('RPUSH', KEYS[2], t)
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(t) > fence then
  redis.call('HSET', KEYS[1], 'fence', t)
  redis.call('RPUSH', KEYS[3], t)
  return 1
end
return 0";

/// The command run under the lease: `$1` sleep seconds, `$2` redis-cli, `$3` server port,
/// `$4` the script. It always exits 0 and reports the write on one stdout line, so
/// leasehold's exit status stays leasehold's own.
const COMMAND: &str = r#"sleep "$1"
out=$("$2" -h 127.0.0.1 -p "$3" EVAL "$4" 3 target attempted accepted "$LEASEHOLD_FENCING_TOKEN" 2>&1)
rc=$?
printf 'lh-write token=%s rc=%s reply=%s\n' "$LEASEHOLD_FENCING_TOKEN" "$rc" "$out" | head -n 1
exit 0"#;

const MARKER: &str = "lh-write ";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// SplitMix64: enough randomness for fault schedules, and reproducible from a printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[usize::try_from(self.next() % items.len() as u64).expect("small")]
    }
}

// ---------------------------------------------------------------------------------------
// Processes and signals
// ---------------------------------------------------------------------------------------

/// `kill -s <sig> -- <target>`; `target` is a PID or `-<pgid>`.
fn send_signal(sig: &str, target: &str) -> bool {
    Command::new("kill")
        .args(["-s", sig, "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn signal_group(sig: &str, pgid: u32) -> bool {
    send_signal(sig, &format!("-{pgid}"))
}

/// Parent PID -> its direct children that lead their own process group (the commands
/// leasehold started with `process_group(0)`), from `/proc/*/stat`. A child that has not
/// called setpgid yet is still in its parent's group, which we signal as a whole anyway.
fn command_groups() -> BTreeMap<u32, Vec<u32>> {
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return groups;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(ppid), Some(pgrp)) = (
            fields.get(1).and_then(|f| f.parse::<u32>().ok()),
            fields.get(2).and_then(|f| f.parse::<u32>().ok()),
        ) else {
            continue;
        };
        if pgrp == pid {
            groups.entry(ppid).or_default().push(pid);
        }
    }
    groups
}

/// The command groups of one parent (see [`command_groups`]).
fn command_groups_of(parent: u32) -> Vec<u32> {
    command_groups().remove(&parent).unwrap_or_default()
}

fn find_redis_cli() -> PathBuf {
    let fixed = Path::new("/usr/bin/redis-cli");
    if fixed.is_file() {
        return fixed.to_owned();
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("redis-cli"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "redis-cli not found: install the Debian package redis-tools \
                 (redis-server depends on it); this test never skips"
            )
        })
}

// ---------------------------------------------------------------------------------------
// Shared state between the workers and the nemesis
// ---------------------------------------------------------------------------------------

struct Shared {
    deadline: Instant,
    /// Worker index -> PID of its running, not yet reaped `leasehold` process (also its
    /// process group id). Workers reap and the nemesis signals only while holding this
    /// lock, so a PID in here can never have been reused.
    running: Mutex<BTreeMap<usize, u32>>,
}

// ---------------------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum WriteOutcome {
    Accepted,
    Rejected,
    /// redis-cli failed or got an error reply (e.g. the server was restarting).
    Failed(String),
}

#[derive(Debug, Clone)]
struct WriteRecord {
    token: Option<u64>,
    outcome: WriteOutcome,
}

#[derive(Default)]
struct WorkerReport {
    invocations: usize,
    /// Exit code -> count; death by signal N is recorded as -N.
    exit_codes: BTreeMap<i32, usize>,
    writes: Vec<WriteRecord>,
    /// Exit 0 without a write report (the command printed nothing).
    ok_without_write: usize,
    /// Problems that fail the test.
    violations: Vec<String>,
}

struct Invocation<'a> {
    binary: &'a str,
    proxy_url: &'a str,
    server_port: u16,
    redis_cli: &'a Path,
}

fn spawn_reader(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
    }
    rx
}

fn parse_write(stdout: &str) -> Option<WriteRecord> {
    let line = stdout.lines().find_map(|l| l.strip_prefix(MARKER))?;
    let (token_part, rest) = line.split_once(" rc=")?;
    let token = token_part
        .strip_prefix("token=")
        .and_then(|t| t.parse::<u64>().ok());
    let (rc, reply) = rest.split_once(" reply=").unwrap_or((rest, ""));
    let outcome = match (rc, reply.trim()) {
        ("0", "1") => WriteOutcome::Accepted,
        ("0", "0") => WriteOutcome::Rejected,
        (rc, reply) => WriteOutcome::Failed(format!("rc={rc} {reply}")),
    };
    Some(WriteRecord { token, outcome })
}

fn worker(index: usize, shared: &Shared, inv: &Invocation<'_>, mut rng: Rng) -> WorkerReport {
    let mut report = WorkerReport::default();
    let lua = FENCED_WRITE;
    let port = inv.server_port.to_string();
    while Instant::now() < shared.deadline {
        let sleep = format!("0.{:03}", rng.range(50, 150));
        let mut cmd = Command::new(inv.binary);
        cmd.args(["run", "--redis", inv.proxy_url, "--resource", RESOURCE])
            .args([
                "--ttl", "1s", "--wait", "5s", "--", "sh", "-c", COMMAND, "sh",
            ])
            .arg(&sleep)
            .arg(inv.redis_cli)
            .args([port.as_str(), lua]);
        // Hermetic: no LEASEHOLD_REDIS_URL (nor any other LEASEHOLD_* tuning) from outside.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("LEASEHOLD_") {
                cmd.env_remove(key);
            }
        }
        // Its own process group: the nemesis stops it together with a command that has
        // not moved to its own group yet.
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = {
            let mut running = lock(&shared.running);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", inv.binary));
            running.insert(index, child.id());
            child
        };
        report.invocations += 1;
        let stdout = spawn_reader(child.stdout.take());
        let stderr = spawn_reader(child.stderr.take());
        let status = wait_bounded(index, shared, &mut child);
        let out = stdout.recv_timeout(PIPE_BOUND).unwrap_or_default();
        let err = stderr.recv_timeout(PIPE_BOUND).unwrap_or_default();
        let write = parse_write(&out);
        let code = match status {
            Some(status) => exit_key(status),
            None => {
                report.violations.push(format!(
                    "worker {index}: leasehold still running after {INVOCATION_BOUND:?}; \
                     killed. stderr: {}",
                    err.trim()
                ));
                continue;
            }
        };
        *report.exit_codes.entry(code).or_default() += 1;
        if !EXPECTED_EXITS.contains(&code) {
            report.violations.push(format!(
                "worker {index}: leasehold exited with {code} (expected one of \
                 {EXPECTED_EXITS:?}; negative = killed by that signal). stdout: {} stderr: {}",
                out.trim(),
                err.trim()
            ));
        }
        match write {
            Some(w) => report.writes.push(w),
            None if code == EXIT_OK => report.ok_without_write += 1,
            None => {}
        }
    }
    report
}

fn exit_key(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => -sig,
        (None, None) => i32::MIN,
    }
}

/// Waits for `child` at most `INVOCATION_BOUND`; reaps it under the `running` lock. A
/// straggler is killed with its command groups; returns `None` then.
fn wait_bounded(index: usize, shared: &Shared, child: &mut Child) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        {
            let mut running = lock(&shared.running);
            match child.try_wait() {
                Ok(Some(status)) => {
                    running.remove(&index);
                    return Some(status);
                }
                Ok(None) => {}
                Err(e) => panic!("waiting for leasehold: {e}"),
            }
            if started.elapsed() > INVOCATION_BOUND {
                let pid = child.id();
                signal_group("STOP", pid);
                let groups = command_groups_of(pid);
                for g in &groups {
                    signal_group("KILL", *g);
                }
                signal_group("KILL", pid);
                let _ = child.kill();
                let _ = child.wait();
                running.remove(&index);
                return None;
            }
        }
        thread::sleep(POLL);
    }
}

// ---------------------------------------------------------------------------------------
// Nemesis
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Pause,
    DropReplies,
    Restart,
}

const FAULTS: [Fault; 3] = [Fault::Pause, Fault::DropReplies, Fault::Restart];

#[derive(Default, Debug)]
struct NemesisReport {
    pauses: usize,
    /// Pauses that caught the process while it ran its command.
    holder_pauses: usize,
    reply_drops: usize,
    restarts: usize,
}

/// A `leasehold` process (PID = its process group) stopped with its command groups. Drop
/// resumes them, also when the nemesis panics.
struct Paused<'a> {
    shared: &'a Shared,
    worker: usize,
    pid: u32,
    groups: Vec<u32>,
    /// Time between resuming the command and resuming leasehold.
    resume_gap: Duration,
}

impl Paused<'_> {
    /// Whether the process is still ours and un-reaped (a stopped process cannot exit;
    /// only a straggler kill could have taken it), so neither its PID nor its command
    /// groups can have been reused. Call with the `running` lock held.
    fn still_ours(&self, running: &BTreeMap<usize, u32>) -> bool {
        running.get(&self.worker) == Some(&self.pid)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        // The command first: a holder whose lease ran out while it was stopped gets to
        // write with its old token before leasehold wakes up and stops it (with no gap,
        // leasehold's SIGTERM usually wins that race).
        {
            let running = lock(&self.shared.running);
            if !self.still_ours(&running) {
                return;
            }
            for g in &self.groups {
                signal_group("CONT", *g);
            }
        }
        if !self.groups.is_empty() && !thread::panicking() {
            thread::sleep(self.resume_gap);
        }
        let running = lock(&self.shared.running);
        if self.still_ours(&running) {
            signal_group("CONT", self.pid);
        }
    }
}

/// Stops one running `leasehold` process (preferring one that runs its command) and its
/// command's process group. `None` if nothing is running.
fn pause_one<'a>(shared: &'a Shared, rng: &mut Rng) -> Option<(Paused<'a>, bool)> {
    let want_holder = rng.range(1, 100) <= PREFER_HOLDER_PCT;
    let looking_since = Instant::now();
    let (running, worker, pid) = loop {
        // Scanned without the lock: it only guides the choice; the PID we signal is
        // taken from `running` under the lock.
        let parents = command_groups();
        let running = lock(&shared.running);
        let all: Vec<(usize, u32)> = running.iter().map(|(w, p)| (*w, *p)).collect();
        let holders: Vec<(usize, u32)> = all
            .iter()
            .copied()
            .filter(|(_, pid)| parents.contains_key(pid))
            .collect();
        let (worker, pid) = if want_holder && !holders.is_empty() {
            rng.pick(&holders)
        } else if (!want_holder || looking_since.elapsed() >= HOLDER_SEARCH) && !all.is_empty() {
            rng.pick(&all)
        } else if looking_since.elapsed() >= HOLDER_SEARCH {
            return None;
        } else {
            drop(running);
            thread::sleep(POLL);
            continue;
        };
        break (running, worker, pid);
    };
    // leasehold's group first: it cannot start (or reap) a command any more, and a command
    // that has not moved to its own group yet stops with it.
    signal_group("STOP", pid);
    let groups = command_groups_of(pid);
    for g in &groups {
        signal_group("STOP", *g);
    }
    drop(running);
    let holder = !groups.is_empty();
    // Half the time leasehold resumes right after its command, half the time it is late
    // by 20-300 ms (still starved, say): the window in which only the fence protects.
    let resume_gap = if rng.range(0, 1) == 0 {
        Duration::ZERO
    } else {
        rng.millis(20, 300)
    };
    Some((
        Paused {
            shared,
            worker,
            pid,
            groups,
            resume_gap,
        },
        holder,
    ))
}

fn sleep_until_or(deadline: Instant, d: Duration) {
    let left = deadline.saturating_duration_since(Instant::now());
    thread::sleep(d.min(left));
}

fn nemesis(
    shared: &Shared,
    proxy: &Proxy,
    server: &mut RedisServer,
    mut rng: Rng,
) -> NemesisReport {
    let mut report = NemesisReport::default();
    // Every kind once, in random order, before random picks: each kind is injected at
    // least once even in a short run.
    let mut plan: VecDeque<Fault> = VecDeque::new();
    let mut kinds = FAULTS.to_vec();
    while !kinds.is_empty() {
        let i = usize::try_from(rng.next() % kinds.len() as u64).expect("small");
        plan.push_back(kinds.swap_remove(i));
    }
    loop {
        sleep_until_or(shared.deadline, rng.millis(300, 800));
        if Instant::now() >= shared.deadline {
            break;
        }
        let fault = plan.pop_front().unwrap_or_else(|| rng.pick(&FAULTS));
        match fault {
            Fault::Pause => match pause_one(shared, &mut rng) {
                Some((paused, holder)) => {
                    // Longer than the 1 s TTL, never cut short: the point is to outlive it.
                    thread::sleep(rng.millis(1200, 2000));
                    drop(paused);
                    report.pauses += 1;
                    report.holder_pauses += usize::from(holder);
                }
                // Nothing running right now: try again next time.
                None => plan.push_front(Fault::Pause),
            },
            Fault::DropReplies => {
                proxy.set_mode(ProxyMode::DropReplies);
                thread::sleep(rng.millis(200, 600));
                proxy.set_mode(ProxyMode::Pass);
                report.reply_drops += 1;
            }
            Fault::Restart => {
                server.restart();
                report.restarts += 1;
            }
        }
    }
    proxy.set_mode(ProxyMode::Pass);
    report
}

// ---------------------------------------------------------------------------------------
// Checker
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct History {
    /// Attempted writes whose token was not above the maximum accepted before them: the
    /// fence refused them.
    stale_rejected: usize,
    /// Of those, the ones below the maximum: a stale holder's write that an unfenced target
    /// (last write wins) would have taken, overwriting a newer holder's effect.
    would_have_landed: usize,
    /// Attempts with exactly the maximum token (the same token written twice).
    duplicates: usize,
    violations: Vec<String>,
}

fn check_history(attempted: &[u64], accepted: &[u64]) -> History {
    let mut h = History::default();
    for pair in accepted.windows(2) {
        if pair[1] <= pair[0] {
            h.violations.push(format!(
                "accepted tokens do not strictly increase: {} then {}",
                pair[0], pair[1]
            ));
        }
    }
    let mut max_so_far = 0u64;
    let mut next = 0usize;
    for (i, &t) in attempted.iter().enumerate() {
        if t > max_so_far {
            match accepted.get(next) {
                Some(&a) if a == t => {}
                Some(&a) => h.violations.push(format!(
                    "attempt #{i} (token {t}, above max {max_so_far}) should be accepted \
                     #{next}, which is {a}"
                )),
                None => h.violations.push(format!(
                    "attempt #{i} (token {t}, above max {max_so_far}) is missing from accepted"
                )),
            }
            next += 1;
            max_so_far = t;
        } else {
            h.stale_rejected += 1;
            if t < max_so_far {
                h.would_have_landed += 1;
            } else {
                h.duplicates += 1;
            }
        }
    }
    if next != accepted.len() {
        h.violations.push(format!(
            "accepted has {} tokens, the replay of attempted explains {next}",
            accepted.len()
        ));
    }
    h
}

fn checker_secs() -> u64 {
    match std::env::var("LEASEHOLD_CHECKER_SECS") {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("LEASEHOLD_CHECKER_SECS={text:?}: {e}"))
            .max(MIN_SECS),
        Err(_) => DEFAULT_SECS,
    }
}

fn seed() -> u64 {
    match std::env::var("LEASEHOLD_CHECKER_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("LEASEHOLD_CHECKER_SEED={text:?}: {e}")),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64 ^ u64::from(std::process::id())),
    }
}

fn read_tokens(server: &RedisServer, key: &str) -> (Vec<u64>, Vec<String>) {
    let raw: Vec<String> = server.query(&["LRANGE", key, "0", "-1"]);
    let mut tokens = Vec::with_capacity(raw.len());
    let mut bad = Vec::new();
    for r in raw {
        match r.parse::<u64>() {
            Ok(t) => tokens.push(t),
            Err(_) => bad.push(format!("{key} holds a non-token {r:?}")),
        }
    }
    (tokens, bad)
}

#[test]
fn fencing_tokens_refuse_every_stale_write_under_pauses_reply_drops_and_restarts() {
    let wall = Instant::now();
    let secs = checker_secs();
    let seed = seed();
    let mut server = RedisServer::start_persistent();
    let proxy = Proxy::start(server.addr());
    let proxy_url = proxy.url();
    let redis_cli = find_redis_cli();
    let inv = Invocation {
        binary: env!("CARGO_BIN_EXE_leasehold"),
        proxy_url: &proxy_url,
        server_port: server.port(),
        redis_cli: &redis_cli,
    };
    let shared = Shared {
        deadline: Instant::now() + Duration::from_secs(secs),
        running: Mutex::new(BTreeMap::new()),
    };
    let mut seeds = Rng(seed);

    let (workers, faults) = thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|i| {
                let rng = Rng(seeds.next());
                let (shared, inv) = (&shared, &inv);
                thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn_scoped(s, move || worker(i, shared, inv, rng))
                    .expect("spawn worker")
            })
            .collect();
        let nemesis_rng = Rng(seeds.next());
        let (shared, proxy, server) = (&shared, &proxy, &mut server);
        let nemesis = thread::Builder::new()
            .name("nemesis".into())
            .spawn_scoped(s, move || nemesis(shared, proxy, server, nemesis_rng))
            .expect("spawn nemesis");
        let workers: Vec<WorkerReport> = handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect();
        (workers, nemesis.join().expect("nemesis thread panicked"))
    });
    assert!(
        lock(&shared.running).is_empty(),
        "every leasehold process has been reaped"
    );

    let (attempted, mut violations) = read_tokens(&server, "attempted");
    let (accepted, bad) = read_tokens(&server, "accepted");
    violations.extend(bad);
    let history = check_history(&attempted, &accepted);
    violations.extend(history.violations.iter().cloned());

    // Tokens are per acquisition: no two attempts may carry the same one.
    let unique: BTreeSet<u64> = attempted.iter().copied().collect();
    if unique.len() != attempted.len() {
        violations.push(format!(
            "{} attempted writes share a token with another",
            attempted.len() - unique.len()
        ));
    }
    // Every token handed out is at most the resource's fence counter.
    let keys = LeaseKeys::new(
        &Namespace::default(),
        &Purpose::new(PURPOSE).expect("valid purpose"),
        &ResourceDigest::of(RESOURCE.as_bytes()),
    );
    let counter: Option<String> = server.query(&["GET", &keys.fence]);
    let counter: u64 = counter.and_then(|c| c.parse().ok()).unwrap_or(0);
    if let Some(&max) = attempted.iter().max()
        && max > counter
    {
        violations.push(format!(
            "attempted token {max} is above the fence counter {counter}"
        ));
    }

    // What the commands saw must match what the target recorded.
    let accepted_set: BTreeSet<u64> = accepted.iter().copied().collect();
    let mut exit_codes: BTreeMap<i32, usize> = BTreeMap::new();
    let (mut invocations, mut write_failures, mut ok_without_write) = (0, 0, 0);
    let mut reported_tokens = BTreeSet::new();
    for w in &workers {
        invocations += w.invocations;
        ok_without_write += w.ok_without_write;
        violations.extend(w.violations.iter().cloned());
        for (code, n) in &w.exit_codes {
            *exit_codes.entry(*code).or_default() += n;
        }
        for write in &w.writes {
            let Some(token) = write.token else {
                violations.push(format!(
                    "a command ran without a numeric LEASEHOLD_FENCING_TOKEN: {write:?}"
                ));
                continue;
            };
            if !reported_tokens.insert(token) {
                violations.push(format!("two commands ran with token {token}"));
            }
            match &write.outcome {
                WriteOutcome::Accepted if !accepted_set.contains(&token) => violations.push(
                    format!("redis-cli reported token {token} accepted; it is not in accepted"),
                ),
                WriteOutcome::Rejected if accepted_set.contains(&token) => violations.push(
                    format!("redis-cli reported token {token} refused; it is in accepted"),
                ),
                WriteOutcome::Rejected if !unique.contains(&token) => violations.push(format!(
                    "redis-cli reported token {token} refused; it is not in attempted"
                )),
                WriteOutcome::Failed(_) => write_failures += 1,
                _ => {}
            }
        }
    }

    if accepted.len() < MIN_ACCEPTED {
        violations.push(format!(
            "only {} accepted writes in {secs} s (at least {MIN_ACCEPTED} expected)",
            accepted.len()
        ));
    }
    for (kind, n) in [
        ("pause", faults.pauses),
        ("reply drop", faults.reply_drops),
        ("restart", faults.restarts),
    ] {
        if n == 0 {
            violations.push(format!("no {kind} was injected"));
        }
    }

    // Stale: at or below a token attempted before it (the replay's count). Refused: what
    // the target did not store. Equal when every stale write, and only those, was refused.
    let mut line = FaultLine::new(
        "fencing-checker/cli",
        faults.pauses + faults.reply_drops + faults.restarts,
    )
    .with("pauses", faults.pauses)
    .with("holder_pauses", faults.holder_pauses)
    .with("reply_drops", faults.reply_drops)
    .with("restarts", faults.restarts)
    .with("invocations", invocations)
    .with("attempted", attempted.len())
    .with("accepted", accepted.len())
    .with("stale_attempted", history.stale_rejected)
    .with(
        "stale_rejected",
        attempted.len().saturating_sub(accepted.len()),
    )
    .with("would_have_landed_without_fence", history.would_have_landed)
    .with("duplicate_tokens", history.duplicates)
    .with("write_failures", write_failures)
    .with("ok_without_write", ok_without_write)
    .with("violations", violations.len())
    .with("secs", secs)
    .with("seed", seed)
    .with("workers", WORKERS)
    .ms("took_ms", wall.elapsed());
    for (code, n) in &exit_codes {
        line = line.with(&format!("exit_{code}"), n);
    }
    line.print();
    // One mismatch in the replay shifts every later comparison: the first ones tell.
    const SHOWN: usize = 20;
    let more = violations.len().saturating_sub(SHOWN);
    assert!(
        violations.is_empty(),
        "fencing checker found {} problem(s) (seed {seed}):\n{}{}",
        violations.len(),
        violations[..violations.len().min(SHOWN)].join("\n"),
        if more > 0 {
            format!("\n… and {more} more")
        } else {
            String::new()
        }
    );
}

#[test]
fn the_replay_accepts_a_fenced_history_and_flags_an_unfenced_one() {
    // 5 accepted, 3 and 4 stale (refused), 5 again a duplicate, 7 accepted.
    let h = check_history(&[5, 3, 4, 5, 7], &[5, 7]);
    assert!(h.violations.is_empty(), "{:?}", h.violations);
    assert_eq!(
        (h.stale_rejected, h.would_have_landed, h.duplicates),
        (3, 2, 1)
    );
    // A target without the fence would have accepted everything.
    let h = check_history(&[5, 3, 7], &[5, 3, 7]);
    assert!(!h.violations.is_empty());
    // A refused write that should have landed.
    let h = check_history(&[5, 7], &[5]);
    assert!(!h.violations.is_empty());
}
