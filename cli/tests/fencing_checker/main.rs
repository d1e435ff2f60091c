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
//! * pause: SIGSTOP a running `leasehold` process together with its keeper (a session of
//!   its own) and the command it runs (its own process group) for 1.2–2 s, longer than the
//!   TTL, then SIGCONT, the command first and leasehold with its keeper 0–300 ms later, so a
//!   holder that lost its lease wakes up and writes with its old token before leasehold can
//!   stop it;
//! * reply drop: the proxy drops replies for 200–600 ms;
//! * restart: a graceful restart of the redis-server (AOF, `appendfsync always`).
//!
//! It runs once on a plain lease and once on a counted lease of two permits (`--permits 2`),
//! where the target fences each slot on its own (`LEASEHOLD_SLOT`: `target:<slot>`,
//! `attempted:<slot>`, `accepted:<slot>`) and the replay judges each slot's history.
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
//!
//! The workers' side is in `worker`, the faults in `nemesis`, the replay in `history`, and
//! the process groups and signals both sides need in `processes`.

#[path = "../common/mod.rs"]
mod common;
mod history;
mod nemesis;
mod processes;
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::fault::FaultLine;
use common::{Proxy, RedisServer};
use history::{History, check_history, read_tokens};
use leasehold::{LeaseKeys, Namespace, Purpose, ResourceDigest};
use nemesis::nemesis;
use processes::find_redis_cli;
use worker::{Invocation, WorkerReport, WriteOutcome, worker};

const WORKERS: usize = 4;
const RESOURCE: &str = "shared";
/// `leasehold run`'s default `--purpose`, for the fence counter key.
const PURPOSE: &str = "run";
const DEFAULT_SECS: u64 = 20;
const MIN_SECS: u64 = 10;
/// Worker poll interval while its `leasehold` runs.
const POLL: Duration = Duration::from_millis(10);
/// The run must have done real work.
const MIN_ACCEPTED: usize = 10;

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

/// What the workers and the nemesis share.
struct Shared {
    deadline: Instant,
    /// Worker index -> PID of its running, not yet reaped `leasehold` process (also its
    /// process group id). Workers reap and the nemesis signals only while holding this
    /// lock, so a PID in here can never have been reused.
    running: Mutex<BTreeMap<usize, u32>>,
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

/// One checker at a time: each runs four workers' processes, a nemesis and a server.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn fencing_tokens_refuse_every_stale_write_under_pauses_reply_drops_and_restarts() {
    let _one = lock(&ONE_AT_A_TIME);
    check(1, "fencing-checker/cli");
}

/// The same on a counted lease of two permits: two holders at once, each slot fenced on
/// its own at the target (`LEASEHOLD_SLOT`), tokens never shared across slots.
#[test]
fn a_counted_lease_fences_each_slot_under_the_same_faults() {
    let _one = lock(&ONE_AT_A_TIME);
    check(2, "fencing-checker/cli-permits-2");
}

/// Runs the checker on a lease of `permits` and prints its `FAULT` line as `name`.
fn check(permits: u32, name: &str) {
    let wall = Instant::now();
    let secs = checker_secs();
    let seed = seed();
    let mut server = RedisServer::start_persistent();
    let proxy = Proxy::start(server.addr());
    let proxy_url = proxy.url();
    let redis_cli = find_redis_cli();
    let inv = Invocation {
        binary: env!("CARGO_BIN_EXE_leasehold"),
        permits,
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

    // Each slot's history on its own (a plain lease is slot 0): its fence is its own.
    let (mut attempted, mut accepted, mut violations) = (Vec::new(), Vec::new(), Vec::new());
    let mut history = History::default();
    for slot in 0..permits {
        let (slot_attempted, bad) = read_tokens(&server, &format!("attempted:{slot}"));
        violations.extend(bad);
        let (slot_accepted, bad) = read_tokens(&server, &format!("accepted:{slot}"));
        violations.extend(bad);
        let h = check_history(&slot_attempted, &slot_accepted);
        violations.extend(h.violations.iter().map(|v| format!("slot {slot}: {v}")));
        history.stale_rejected += h.stale_rejected;
        history.would_have_landed += h.would_have_landed;
        history.duplicates += h.duplicates;
        attempted.extend(slot_attempted);
        accepted.extend(slot_accepted);
    }

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
    let counter: Option<String> = server.query(&["GET", keys.fence()]);
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
            if write.slot.is_none_or(|slot| u32::from(slot) >= permits) {
                violations.push(format!(
                    "a command ran with slot {:?} under {permits} permit(s)",
                    write.slot
                ));
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
    let mut line = FaultLine::new(name, faults.pauses + faults.reply_drops + faults.restarts)
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
        .with("permits", permits)
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
