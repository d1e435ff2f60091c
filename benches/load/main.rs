//! Load benchmark: leasehold against a real redis-server, next to the cheapest correct lock
//! cycle done with the raw `redis` crate ("floor") and the lock crates a Rust user would
//! otherwise pick (rslock, async-redis-lock: `peers`), under both tokio flavours
//! (`current_thread`, and `multi_thread` with 2 workers; both built by hand).
//!
//! Files: this one runs the children and prints; `children` what every child shares (the
//! environment, one lease cycle, the raw-redis floor); `floor_fenced` the fenced floor;
//! `peers` the floors and the peer crates behind one `Baseline` trait; `core` W1, W2, W3
//! and PING (`rows` their rows and ratios); `peer_renewals` R<n> of the peers and the fenced floor;
//! `handoff` H; `actors` A; `renewals` R<n>; `measure` and `probes` the measuring; the
//! redis-server is the tests' own harness (`tests/common/redis_server.rs`).
//!
//! ```sh
//! cargo bench -p leasehold-benches --bench load            # the full run (~8 minutes on 2 cores)
//! cargo bench -p leasehold-benches --bench load -- --quick  # CI smoke run (~15 s)
//! ```
//!
//! The process starts its own `redis-server` (Debian package `redis-server`; override the
//! binary with `LEASEHOLD_REDIS_SERVER`) on a free loopback port with `--save "" --appendonly
//! no`, and stops it by PID at the end (a `Drop` guard, so also on panic); `FLUSHALL` runs
//! between groups. Each group of workloads runs in a child process of this binary
//! (`__child …`), so process CPU time and RSS are measured per flavour and per renewal run,
//! without the leftovers of earlier runs.
//!
//! Every measured row is one line:
//!
//! ```text
//! RESULT workload=<W1|W2|W3|H|H<W>|R10k|R100k|R100k-short|A|floor-…|floor-fenced-…|floor-actor|<peer>-…>
//!        flavor=<current_thread|multi_thread>
//!        ops_per_s=… p50_us=… p99_us=… ratio_to_floor=… <extra>=… server=<kind>-<version>
//! ```
//!
//! The floor is `SET key token NX PX ttl`, then an owner-checked `DEL` (a Lua script by
//! `EVALSHA`), on one multiplexed connection, like leasehold's.
//!
//! The fenced floor (`floor-fenced-W1`, `floor-fenced-W2`, `floor-fenced-R10k`/`-R1k`) is the
//! leanest cycle leasehold's design allows, on the raw crate: acquire = one script call
//! (`GET` of the lease; the token `max(last + 1, server TIME µs)` by one `SET fence token
//! GET`; `SET lease "<owner> <token>" PX ttl`), release = owner-checked `DEL` + `PUBLISH` of
//! the notice in one script (on Valkey ≥ 9: `DELIFEQ` + `PUBLISH`), renew = owner-checked
//! `PEXPIRE` by script (on Valkey ≥ 8.1: `SET … IFEQ … PX`); the server's commands are read
//! from `INFO server` as leasehold reads them, and `LEASEHOLD_BENCH_SCRIPTS` keeps it on the
//! scripts. Its W rows carry `srv_cpu_ratio_to_floor` (its Redis CPU per cycle over the
//! floor's: what the token and the notice cost); leasehold's W1/W2 rows carry
//! `ratio_to_floor_fenced` (its rate over the fenced floor's, same child) and
//! `srv_cpu_ratio_to_floor_fenced` (its Redis CPU per cycle over the fenced floor's).
//!
//! W1, W2 and W3 run the same workload on rslock 0.10 and async-redis-lock 0.4 too (rows
//! `rslock-W…`, `async-redis-lock-W…`, one try per call, the same TTL), and leasehold's row
//! carries `ratio_to_rslock` and `ratio_to_async_redis_lock`: its `ops_per_s` over theirs,
//! > 1 when leasehold does more per second.
//!
//! * `W1` one task, sequential `acquire` → `release` on distinct keys (the request — digest,
//!   fresh attempt, builder — is made inside the timed cycle); p50/p99 per cycle. 2 s.
//!   Rows `floor-W1`, `floor-fenced-W1`, `rslock-W1`, `async-redis-lock-W1`, `W1`.
//! * `W2` 64 tasks doing the same, each on its own keys. 10 s (quick: 1 s). Rows as W1's.
//! * `W3` 16 tasks contending for one key, one `try_acquire` per iteration (release at once
//!   when acquired): `ops_per_s` = successful acquisitions/s, p50/p99 per try, and
//!   `srv_cpu_us_per_refused`: the Redis CPU of the phase (`INFO cpu`, sys + user) divided by
//!   the refused tries — it includes the successes and their releases (`refused_share` of
//!   the commands were refusals). 2 s.
//! * `W3-permits4` W3 on a counted lease of 4 permits (each try reads the four slots; up
//!   to four win at once): its row carries `ratio_to_plain`, its `ops_per_s` over W3's.
//! * `H` handoff: a waiter blocked in `acquire` (wait 5 s; blocked = refused before and after
//!   subscribing to release notices, then 5 ms idle) while a holder holds (30 s TTL); from
//!   just before the holder's `release()` is called to the waiter's `Acquired`, 200 times
//!   (quick: 20). `ratio_to_rtt` = p50 ÷ `floor-PING` p50 (back-to-back PINGs);
//!   `ratio_to_cold_rtt` against PINGs each sent after 5 ms idle, which is what the release
//!   is; `floor-H` does the same with the raw crate (waiter subscribed to a channel, release
//!   = owner-checked `DEL` + `PUBLISH` in one script, then `SET NX` again). `ops_per_s` =
//!   handoffs per second of handoff time.
//! * `R<n>` n = 10k (quick: 1k) and 100k (not in quick; skipped, with the reason printed, if
//!   it would not fit in memory or in the ~8 minute budget) leases held by
//!   `LeaseRuntime::run_under_lease` (work that waits to be told to end: one lease actor and
//!   the task its future is spawned as, the cheapest way to hold a lease), 30 s TTL (quick: 4 s, so
//!   renewals happen), for 2 renewal periods (`cadence_s`: ttl/3, or half-way to the
//!   cancellation deadline if sooner — with the quick TTL and the 2 s command timeout as
//!   safety margin, ~1 s). `ops_per_s` = confirmed renewals/s in the window (from
//!   `LeaseContext::status().renewals`); p50/p99 = renewal latency in the window (the
//!   library's `leasehold_operation_seconds{operation="renew"}`); client CPU
//!   (`/proc/self/stat`) and Redis CPU per renewal — raw, and net of what an idle Redis
//!   burns over the same time (`idle_srv_cpu_ms_per_s`, measured before the acquisitions),
//!   since the renewals come in bursts with idle time between them — against one
//!   un-batched renew script call (owner-checked `PEXPIRE`, same checks and layout) on the
//!   raw crate: `unbatched_lone_srv_cpu_us` sent one at a time (each finds Redis idle),
//!   `unbatched_stream_srv_cpu_us` from 32 tasks at once (Redis kept busy: the cheapest
//!   each call gets); RSS per held lease (`VmRSS` after all
//!   were acquired, at most 256 acquisitions in flight, minus before, ÷ n); cancellations
//!   (must be 0). leasehold has no per-renewal timestamps, so lateness is shown through the
//!   minimum `leasehold_renew_margin_seconds` in the window (validity left when a renewal
//!   was confirmed; `min_renew_margin_all_ms` over the whole child, ramp-up and releases
//!   included, which must stay above the safety margin):
//!   `max_late_ms` = (ttl − drift − cadence) − that minimum, i.e. how far behind its
//!   schedule the latest confirmation came (timer delay + round trip; for a first renewal
//!   also the time from the acquisition's send to the actor's start). The same n locks,
//!   TTL and cadence are held by rslock, async-redis-lock and the fenced floor, each in a
//!   child of its own (rows `rslock-R10k`, `async-redis-lock-R10k`, `floor-fenced-R10k`:
//!   renewals/s, client and Redis CPU per renewal, RSS per lock); a peer's failure (a
//!   renewal that failed or found its lock gone, a lock it could not take, a release that
//!   failed) is counted in its row (`lost`, `not_taken`, `release_failed`), not a panic of
//!   the run. `R10k-vs-peers` has leasehold's client CPU, Redis CPU and RSS over each's.
//! * `R100k-short` (after the current_thread R100k, when that ran): R100k on a
//!   current_thread runtime with a 3 s TTL and the library's default settings (200 ms
//!   command timeout and safety margin), so renewals every second: 100,000 renewals/s on
//!   one thread. It reports what it could not do instead of stopping the run:
//!   `not_taken` (acquisitions that failed, e.g. a grant whose reply came after its 3 s of
//!   validity), `cancelled`, `ended_early`, and `on_time` (all taken, none cancelled,
//!   every lease renewed in the window).
//! * `H<W>` many waiters on one lease (`line`): W = 200 and 1,000 (quick: 40) waiters over
//!   W/4 clients (100 at most: 1,000 waiters over 100), each waiting with its crate's own
//!   wait, holding 2 ms, releasing and queueing again, 800 grants and at least 2 W (quick:
//!   100); for leasehold, rslock and async-redis-lock, multi_thread only. `ops_per_s` = grants/s; p50/p99 = the handoff gap (a release's call
//!   to the next grant); `wait_to_fair` = the longest single wait ÷ the fair bound (the
//!   waiters ahead × the measured cycle); `cmds_per_grant` (`INFO stats`, a script's own
//!   calls counted) against `uncontended_cmds_per_grant`, measured the same way in the same
//!   child; `grants_min`/`grants_max` per waiter.
//! * `A` actor overhead: `spawn_under_lease` (a worker that stops at once) → `wait()`,
//!   sequential, against the plain `try_acquire` → `release` cycle (`ratio_to_plain`);
//!   `run_under_lease` with an empty future in the `run_*` fields. 1.5 s each.
//!
//! Outcomes are checked while measuring: anything unexpected (an acquire not `Acquired`, a
//! release not `Released`, a cancelled lease) panics, so the numbers are of correct runs.
//!
//! The machine may be shared with other builds and tests, so W1–W3 and A run their variants
//! in alternating slices (both see the same background load), and every row has `bg_cores`:
//! the CPUs other processes kept busy meanwhile (from `/proc/stat`, steal included). On a VM,
//! latency-bound rows (W1, H, PING) also move with how idle the CPUs are: waking an idle
//! vCPU costs more than the round trip itself, so compare ratios within a run.
//!
//! A metrics recorder is installed in every child: it keeps the four series the benchmark
//! reads and returns no-op handles for the rest (about the cost of having no recorder).
//! No tracing subscriber is installed.

use std::io::{BufRead as _, BufReader, Write as _};

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;
use leasehold::runtime::{CancelPolicy, JobEnd, LeaseCancelled, LeaseRuntime, RunOutcome};
use leasehold::runtime::{LeaseContext, RuntimeError, SpawnOutcome};
use leasehold::telemetry::names;
use leasehold::{
    AcquireOutcome, LeaseClient, LeaseRequest, LeaseSettings, LeaseState, Purpose, RedisBackend,
    RedisConfig, ReleaseOutcome, ServerCapabilities,
};
use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use redis::aio::MultiplexedConnection;

mod actor_floor;
mod actors;
mod children;
mod core;
mod floor_fenced;
mod handoff;
mod line;
mod measure;
mod peer_renewals;
mod peers;
mod probes;
#[path = "../../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;
mod renewals;
mod rows;

use actor_floor::*;
use actors::*;
use children::*;
use core::*;
use floor_fenced::*;
use handoff::*;
use line::*;
use measure::*;
use peer_renewals::*;
use peers::*;
use probes::*;
use redis_server::RedisServer;
use renewals::*;
use rows::*;

const FLAVORS: [&str; 2] = ["current_thread", "multi_thread"];
/// The owner-checked delete of the floor.
const FLOOR_RELEASE_LUA: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
     return redis.call('DEL',KEYS[1]) else return 0 end";
/// The floor's release for H: owner-checked `DEL`, then a notice on `ARGV[2]`.
const FLOOR_RELEASE_PUBLISH_LUA: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
     redis.call('DEL',KEYS[1]) redis.call('PUBLISH',ARGV[2],'released') return 1 \
     else return 0 end";
/// The fenced floor's acquisition (`floor_fenced`): the leanest fenced acquire leasehold's
/// design allows, one call. `KEYS[1]` the lease, `KEYS[2]` its group's fence counter;
/// `ARGV[1]` the owner, `ARGV[2]` the TTL in ms. Refused (nil) when the lease is held; else
/// the token `max(last + 1, server TIME in µs)`, read and written on the counter by one
/// `SET … GET` (a second `SET` only when the clock did not pass the counter), and the lease
/// set to `"<owner> <token>"` with its expiry. Replies the token.
const FLOOR_FENCED_ACQUIRE_LUA: &str = "if redis.call('GET',KEYS[1]) then return false end \
     local t=redis.call('TIME') local token=t[1]*1000000+t[2] \
     local text=string.format('%d',token) \
     local last=tonumber(redis.call('SET',KEYS[2],text,'GET')) \
     if last and last>=token then token=last+1 text=string.format('%d',token) \
     redis.call('SET',KEYS[2],text) end \
     redis.call('SET',KEYS[1],ARGV[1]..' '..text,'PX',ARGV[2]) return token";
/// The fenced floor's renewal (R) where the server has no `SET … IFEQ`: an owner-checked
/// `PEXPIRE`. `ARGV[1]` is the lease's whole value, `ARGV[2]` the TTL in ms.
const FLOOR_FENCED_RENEW_LUA: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
     return redis.call('PEXPIRE',KEYS[1],ARGV[2]) else return 0 end";
/// The un-batched renewal R is compared with (`unbatched_renew_us`): leasehold's renew
/// item as a script of its own. `ARGV[1]` is `"<owner> <op> "`, the value's prefix.
const FLOOR_RENEW_LUA: &str = "local held = redis.call('GET', KEYS[1]) \
     if not held then return {'ABSENT'} end \
     if string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then return {'NOT_OWNER'} end \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) return {'RENEWED'}";
/// TTL of the floor's and the W/H/A workloads' locks (they are released at once).
const LOCK_TTL: Duration = Duration::from_secs(30);
/// The whole non-quick run should stay under ~8 minutes; R100k is skipped past this.
const FULL_RUN_BUDGET: Duration = Duration::from_secs(480);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__child") {
        child_main(&args[2..]);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let started = Instant::now();
    let server = RedisServer::start();
    let url = server.url();
    let info: String = server.query(&["INFO", "server"]);
    let path = if scripts_only() { "/scripts" } else { "" };
    let _ = SERVER.set(format!("{}{path}", server_kind_version(&info)));
    println!(
        "# leasehold load bench: redis-server pid {} at {url}, quick={quick}, {} cores",
        server.pid(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let small = if quick { 1_000 } else { 10_000 };
    let mut r_small: Vec<(String, String)> = Vec::new();
    for flavor in FLAVORS {
        server.cmd(&["FLUSHALL"]);
        run_child(&["core", flavor, &url, &quick.to_string()]);
        server.cmd(&["FLUSHALL"]);
        let lines = run_child(&[
            "renew",
            flavor,
            &url,
            &quick.to_string(),
            &small.to_string(),
        ]);
        let line = lines
            .into_iter()
            .find(|l| l.starts_with("RESULT workload=R"))
            .expect("the renew child printed no RESULT line");
        // The same n locks, TTL and cadence on each peer and the fenced floor, each in a
        // child of its own.
        let mut peer_rows = Vec::new();
        for peer in ["rslock", "async-redis-lock", "floor-fenced"] {
            server.cmd(&["FLUSHALL"]);
            let args = [
                "renew-peer",
                flavor,
                &url,
                &quick.to_string(),
                &small.to_string(),
                peer,
            ];
            let row = run_child(&args)
                .into_iter()
                .find(|l| l.starts_with("RESULT workload="))
                .expect("the peer renew child printed no RESULT line");
            peer_rows.push((peer, row));
        }
        r_peer_ratios(flavor, &line, &peer_rows);
        // A bare actor's memory in the same run: the floor of a held lease's.
        let floor = run_child(&[
            "actor-floor",
            flavor,
            &url,
            &quick.to_string(),
            &small.to_string(),
        ])
        .into_iter()
        .find(|l| l.starts_with("RESULT workload=floor-actor"))
        .expect("the actor-floor child printed no RESULT line");
        rss_above_actor(flavor, &line, &floor);
        r_small.push((flavor.to_owned(), line));
    }
    // R100k takes ~35 s per flavour: multi_thread (the usual server set-up) first, then
    // current_thread if the time budget still allows.
    for (flavor, small_line) in r_small.iter().rev() {
        match r100k_skip_reason(quick, started, small_line) {
            Some(reason) => println!("# SKIPPED workload=R100k flavor={flavor} reason={reason}"),
            None => {
                server.cmd(&["FLUSHALL"]);
                run_child(&["renew", flavor, &url, "false", "100000"]);
            }
        }
    }
    // 100,000 leases on one thread at a 3 s TTL, when R100k ran there (it needs the same
    // memory and takes about as long).
    if let Some((flavor, small_line)) = r_small.iter().find(|(f, _)| f == "current_thread")
        && r100k_skip_reason(quick, started, small_line).is_none()
    {
        server.cmd(&["FLUSHALL"]);
        run_child(&["renew", flavor, &url, "false", "100000", "short"]);
    }
    // Many waiters on one lease, on the multi-threaded runtime (the usual server set-up).
    let lines: &[usize] = if quick { &[40] } else { &[200, 1000] };
    for &waiters in lines {
        for system in ["leasehold", "rslock", "async-redis-lock"] {
            server.cmd(&["FLUSHALL"]);
            run_child(&[
                "line",
                "multi_thread",
                &url,
                &quick.to_string(),
                &waiters.to_string(),
                system,
            ]);
        }
    }
    println!("# total wall time {:.1} s", started.elapsed().as_secs_f64());
    drop(server);
}

/// Why R100k does not run now, from the R10k line of the same flavour; `None`: run it.
fn r100k_skip_reason(quick: bool, started: Instant, small: &str) -> Option<String> {
    if quick {
        return Some("--quick".to_owned());
    }
    let field = |name: &str| -> f64 {
        field_of(small, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name}= in {small}"))
    };
    let factor = 100_000.0 / field("leases");
    let rss_need = field("rss_bytes_per_lease").max(0.0) * 100_000.0 * 1.5;
    let available = mem_available_bytes();
    if rss_need > available * 0.5 {
        return Some(format!(
            "memory:_needs_~{:.0}_MiB_of_{:.0}_MiB_available",
            rss_need / 1048576.0,
            available / 1048576.0
        ));
    }
    // Start-up, acquisitions and releases scale with n; the window is two renewal periods.
    let projected = factor * (field("acquire_s") + field("release_s")) + field("window_s") + 2.0;
    let left = FULL_RUN_BUDGET.as_secs_f64() - started.elapsed().as_secs_f64();
    if projected > left {
        return Some(format!(
            "time:_projected_{projected:.0}_s_but_{left:.0}_s_left_of_the_{}_s_budget",
            FULL_RUN_BUDGET.as_secs()
        ));
    }
    None
}

fn field_of<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

fn mem_available_bytes() -> f64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    let kb: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemAvailable in /proc/meminfo");
    kb * 1024.0
}

/// Runs this binary as a child, forwarding and returning its stdout lines. Panics when the
/// child fails (its panic message is on stderr).
/// The server every row was measured on, `<kind>-<version>` (`server=` of each RESULT line):
/// set by the parent from `INFO server`, handed to each child in [`SERVER_ENV`].
static SERVER: OnceLock<String> = OnceLock::new();
const SERVER_ENV: &str = "LEASEHOLD_BENCH_SERVER";

pub(crate) fn server_label() -> &'static str {
    SERVER.get_or_init(|| std::env::var(SERVER_ENV).unwrap_or_else(|_| "unknown".to_owned()))
}

/// Set (to anything): leasehold's rows run on the script alone, and every row's server
/// label ends `/scripts`.
const SCRIPTS_ENV: &str = "LEASEHOLD_BENCH_SCRIPTS";

pub(crate) fn scripts_only() -> bool {
    std::env::var_os(SCRIPTS_ENV).is_some()
}

/// `valkey-9.1.2` or `redis-7.0.15`, from `INFO server` (Valkey names itself in
/// `server_name` and reports its own version beside the Redis version it is compatible with).
fn server_kind_version(info: &str) -> String {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    match (field("server_name"), field("valkey_version")) {
        (Some("valkey"), Some(version)) => format!("valkey-{version}"),
        _ => format!("redis-{}", field("redis_version").unwrap_or("unknown")),
    }
}

fn run_child(args: &[&str]) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    let child = Command::new(exe)
        .arg("__child")
        .args(args)
        .env(SERVER_ENV, server_label())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the benchmark child");
    let mut guard = ChildGuard(child);
    let stdout = guard.0.stdout.take().expect("child stdout");
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child stdout");
        println!("{line}");
        let _ = std::io::stdout().flush();
        lines.push(line);
    }
    let status = guard.0.wait().expect("wait for the benchmark child");
    assert!(
        status.success(),
        "benchmark child {args:?} failed with {status}"
    );
    lines
}

/// Kills (by its PID, through its `Child`) a benchmark child still running when dropped.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
