//! Load benchmark: leasehold against a real redis-server, next to the cheapest correct lock
//! cycle done with the raw `redis` crate ("floor"), under both tokio flavours
//! (`current_thread`, and `multi_thread` with 2 workers; both built by hand).
//!
//! ```sh
//! cargo bench --bench load             # the full run (~3 minutes on 2 cores)
//! cargo bench --bench load -- --quick  # CI smoke run (~15 s)
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
//! RESULT workload=<W1|W2|W3|H|R10k|R100k|A|floor-…> flavor=<current_thread|multi_thread>
//!        ops_per_s=… p50_us=… p99_us=… ratio_to_floor=… <extra>=…
//! ```
//!
//! The floor is `SET key token NX PX ttl`, then an owner-checked `DEL` (a Lua script by
//! `EVALSHA`), on one multiplexed connection, like leasehold's.
//!
//! * `W1` one task, sequential `acquire` → `release` on distinct keys (the request — digest,
//!   fresh attempt, builder — is made inside the timed cycle); p50/p99 per cycle. 2 s.
//! * `W2` 64 tasks doing the same, each on its own keys. 10 s (quick: 1 s).
//! * `W3` 16 tasks contending for one key, one `try_acquire` per iteration (release at once
//!   when acquired): `ops_per_s` = successful acquisitions/s, p50/p99 per try, and
//!   `srv_cpu_us_per_refused`: the Redis CPU of the phase (`INFO cpu`, sys + user) divided by
//!   the refused tries — it includes the successes and their releases (`refused_share` of
//!   the commands were refusals). 2 s.
//! * `H` handoff: a waiter blocked in `acquire` (wait 5 s; blocked = refused before and after
//!   subscribing to release notices, then 5 ms idle) while a holder holds (30 s TTL); from
//!   just before the holder's `release()` is called to the waiter's `Acquired`, 200 times
//!   (quick: 20). `ratio_to_rtt` = p50 ÷ `floor-PING` p50 (back-to-back PINGs);
//!   `ratio_to_cold_rtt` against PINGs each sent after 5 ms idle, which is what the release
//!   is; `floor-H` does the same with the raw crate (waiter subscribed to a channel, release
//!   = owner-checked `DEL` + `PUBLISH` in one script, then `SET NX` again). `ops_per_s` =
//!   handoffs per second of handoff time.
//! * `R<n>` n = 10k (quick: 1k) and 100k (not in quick; skipped, with the reason printed, if
//!   it would not fit in memory or in the ~3 minute budget) leases held by
//!   `LeaseRuntime::spawn_under_lease` (an idle worker actor), 30 s TTL (quick: 4 s, so
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
//!   also the time from the acquisition's send to the actor's start).
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
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;
use leasehold::runtime::{CancelPolicy, JobEnd, LeaseCancelled, LeaseRuntime, RunOutcome};
use leasehold::runtime::{CancelReason, LeaseJob, SpawnOutcome};
use leasehold::telemetry::names;
use leasehold::{
    AcquireOutcome, LeaseClient, LeaseRequest, LeaseSettings, LeaseState, Purpose, ReleaseOutcome,
    ResourceDigest,
};
use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use redis::aio::MultiplexedConnection;

const FLAVORS: [&str; 2] = ["current_thread", "multi_thread"];
const REDIS_PACKAGE_HINT: &str = "redis-server not found: install the Debian package \
     `redis-server` (apt-get install redis-server), or point LEASEHOLD_REDIS_SERVER at a binary";
/// The owner-checked delete of the floor.
const FLOOR_RELEASE_LUA: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
     return redis.call('DEL',KEYS[1]) else return 0 end";
/// The floor's release for H: owner-checked `DEL`, then a notice on `ARGV[2]`.
const FLOOR_RELEASE_PUBLISH_LUA: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
     redis.call('DEL',KEYS[1]) redis.call('PUBLISH',ARGV[2],'released') return 1 \
     else return 0 end";
/// The un-batched renewal R is compared with (`unbatched_renew_us`): leasehold's renew
/// item as a script of its own. `ARGV[1]` is `"<owner> <op> "`, the value's prefix.
const FLOOR_RENEW_LUA: &str = "local held = redis.call('GET', KEYS[1]) \
     if not held then return {'ABSENT'} end \
     if string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then return {'NOT_OWNER'} end \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) return {'RENEWED'}";
/// TTL of the floor's and the W/H/A workloads' locks (they are released at once).
const LOCK_TTL: Duration = Duration::from_secs(30);
/// The whole non-quick run should stay under ~3 minutes; R100k is skipped past this.
const FULL_RUN_BUDGET: Duration = Duration::from_secs(185);

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
    println!(
        "# leasehold load bench: redis-server pid {} at {url}, quick={quick}, {} cores",
        server.pid(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let small = if quick { 1_000 } else { 10_000 };
    let mut r_small: Vec<(String, String)> = Vec::new();
    for flavor in FLAVORS {
        server.flush();
        run_child(&["core", flavor, &url, &quick.to_string()]);
        server.flush();
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
        r_small.push((flavor.to_owned(), line));
    }
    // R100k takes ~35 s per flavour: multi_thread (the usual server set-up) first, then
    // current_thread if the time budget still allows.
    for (flavor, small_line) in r_small.iter().rev() {
        match r100k_skip_reason(quick, started, small_line) {
            Some(reason) => println!("# SKIPPED workload=R100k flavor={flavor} reason={reason}"),
            None => {
                server.flush();
                run_child(&["renew", flavor, &url, "false", "100000"]);
            }
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
fn run_child(args: &[&str]) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    let child = Command::new(exe)
        .arg("__child")
        .args(args)
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

// ---------------------------------------------------------------------------------------
// redis-server

/// A redis-server of this benchmark; killed by PID and its directory removed on drop.
struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    fn start() -> Self {
        let binary = match std::env::var_os("LEASEHOLD_REDIS_SERVER") {
            Some(path) => PathBuf::from(path),
            None => PathBuf::from("/usr/bin/redis-server"),
        };
        assert!(binary.is_file(), "{REDIS_PACKAGE_HINT}");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "leasehold-bench-redis-{}-{nanos:08x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create the redis-server directory");
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new(&binary)
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .args(["--daemonize", "no"])
                .args(["--protected-mode", "no"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("redis.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
            let mut server = Self {
                child,
                port,
                dir: dir.clone(),
            };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            // Exited (port taken between probe and bind) or never ready: stop it (drop
            // kills it by PID) and try another port, keeping the directory.
            server.dir = PathBuf::new();
            drop(server);
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("redis-server did not start on a free loopback port (5 tries)");
    }

    /// PING answered by this very process (`INFO server` process_id).
    fn wait_ready(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Some(pid) = self.answering_pid() {
                return pid == self.child.id();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn answering_pid(&self) -> Option<u32> {
        let mut con = self.sync_connection().ok()?;
        let pong: String = redis::cmd("PING").query(&mut con).ok()?;
        if pong != "PONG" {
            return None;
        }
        let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
    }

    fn sync_connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(1))
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Empties the server between children, so each starts from the same state.
    fn flush(&self) {
        let mut con = self.sync_connection().expect("connect to redis-server");
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut con)
            .expect("FLUSHALL on the benchmark's redis-server");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

// ---------------------------------------------------------------------------------------
// The metrics recorder: the few series the benchmark reads; no-op handles for the rest.

struct Probes {
    /// `leasehold_wait_retries_total{cause="contended"}`: the handoff waiter is blocked
    /// once it counted two (the try before subscribing and the one after).
    contended_retries: Arc<AtomicU64>,
    /// `leasehold_cancellations_total` with any reason but `shutdown`.
    cancellations: Arc<AtomicU64>,
    /// `leasehold_renew_margin_seconds`: minimum (as f64 bits; they order like the values
    /// for non-negative floats) and count, over the child's whole life...
    margin: Arc<MarginProbe>,
    /// ... and only while `in_window` is set (R's measurement window).
    margin_window: Arc<MarginProbe>,
    in_window: Arc<AtomicBool>,
    /// `leasehold_operation_seconds{operation="renew"}` samples.
    renew_latency: Arc<LatencyProbe>,
}

static PROBES: LazyLock<Probes> = LazyLock::new(|| Probes {
    contended_retries: Arc::new(AtomicU64::new(0)),
    cancellations: Arc::new(AtomicU64::new(0)),
    margin: Arc::new(MarginProbe::default()),
    margin_window: Arc::new(MarginProbe::default()),
    in_window: Arc::new(AtomicBool::new(false)),
    renew_latency: Arc::new(LatencyProbe(Mutex::new(Vec::new()))),
});

struct MarginProbe {
    min_bits: AtomicU64,
    count: AtomicU64,
}

impl Default for MarginProbe {
    fn default() -> Self {
        Self {
            min_bits: AtomicU64::new(u64::MAX),
            count: AtomicU64::new(0),
        }
    }
}

impl MarginProbe {
    fn note(&self, value: f64) {
        self.min_bits
            .fetch_min(value.max(0.0).to_bits(), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// The margin histogram handle: feeds the whole-life probe, and the window probe while the
/// window is open.
struct MarginHistogram;

impl HistogramFn for MarginHistogram {
    fn record(&self, value: f64) {
        PROBES.margin.note(value);
        if PROBES.in_window.load(Ordering::Relaxed) {
            PROBES.margin_window.note(value);
        }
    }
}

impl MarginProbe {
    fn min_seconds(&self) -> Option<f64> {
        let bits = self.min_bits.load(Ordering::Relaxed);
        (bits != u64::MAX).then(|| f64::from_bits(bits))
    }
}

struct LatencyProbe(Mutex<Vec<f64>>);

impl HistogramFn for LatencyProbe {
    fn record(&self, value: f64) {
        if PROBES.in_window.load(Ordering::Relaxed) {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(value);
        }
    }
}

static MARGIN_HISTOGRAM: LazyLock<Arc<MarginHistogram>> =
    LazyLock::new(|| Arc::new(MarginHistogram));

struct ProbeRecorder;

fn label<'a>(key: &'a Key, name: &str) -> Option<&'a str> {
    key.labels().find(|l| l.key() == name).map(|l| l.value())
}

impl metrics::Recorder for ProbeRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let name = key.name();
        if name == names::WAIT_RETRIES_TOTAL && label(key, "cause") == Some("contended") {
            Counter::from_arc(PROBES.contended_retries.clone())
        } else if name == names::CANCELLATIONS_TOTAL && label(key, "reason") != Some("shutdown") {
            Counter::from_arc(PROBES.cancellations.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let name = key.name();
        if name == names::RENEW_MARGIN_SECONDS {
            Histogram::from_arc(MARGIN_HISTOGRAM.clone())
        } else if name == names::OPERATION_SECONDS && label(key, "operation") == Some("renew") {
            Histogram::from_arc(PROBES.renew_latency.clone())
        } else {
            Histogram::noop()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Measuring helpers

/// Latency samples in nanoseconds.
#[derive(Default)]
struct Samples(Vec<u64>);

impl Samples {
    fn push(&mut self, d: Duration) {
        self.0.push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    /// (p50, p99) in µs, nearest rank.
    fn p50_p99(&mut self) -> (f64, f64) {
        assert!(!self.0.is_empty(), "no samples");
        self.0.sort_unstable();
        (self.quantile_us(0.50), self.quantile_us(0.99))
    }

    fn quantile_us(&self, q: f64) -> f64 {
        let n = self.0.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.0[rank - 1] as f64 / 1000.0
    }

    fn total(&self) -> Duration {
        Duration::from_nanos(self.0.iter().sum())
    }
}

fn quantiles_us(mut seconds: Vec<f64>) -> (f64, f64) {
    assert!(!seconds.is_empty(), "no samples");
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    let at = |q: f64| seconds[((q * n as f64).ceil() as usize).clamp(1, n) - 1] * 1e6;
    (at(0.50), at(0.99))
}

/// Process CPU time (all threads, user + system) from `/proc/self/stat`.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // Fields after the command name (which may hold spaces): state is field 3, utime 14.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64)
}

/// `AT_CLKTCK` from the auxiliary vector (what `sysconf(_SC_CLK_TCK)` returns).
fn clock_ticks_per_second() -> u64 {
    static TCK: LazyLock<u64> = LazyLock::new(|| {
        const AT_CLKTCK: u64 = 17;
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        auxv.chunks_exact(16)
            .find_map(|pair| {
                let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
                let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
                (key == AT_CLKTCK).then_some(value)
            })
            .unwrap_or(100)
    });
    *TCK
}

fn rss_kb() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Redis server CPU (user + sys, all its threads) in seconds, from `INFO cpu`.
async fn server_cpu(con: &mut MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(con)
        .await
        .expect("INFO cpu");
    let value = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in INFO cpu"))
    };
    value("used_cpu_sys") + value("used_cpu_user")
}

/// Busy time of the whole machine (all CPUs, everything but idle and iowait; steal
/// included), in seconds, from `/proc/stat`.
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    let line = stat.lines().next().expect("cpu line in /proc/stat");
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().expect("/proc/stat tick count"))
        .collect();
    let (idle, iowait) = (ticks[3], ticks[4]);
    let busy = ticks.iter().sum::<u64>() - idle - iowait;
    busy as f64 / clock_ticks_per_second() as f64
}

/// Client, server and machine CPU over one phase.
struct CpuMeter {
    wall: Instant,
    client: Duration,
    server: f64,
    machine: f64,
}

/// What one phase used, in seconds.
#[derive(Default)]
struct Used {
    wall: f64,
    client: f64,
    server: f64,
    machine: f64,
}

impl CpuMeter {
    async fn start(info: &mut MultiplexedConnection) -> Self {
        Self {
            server: server_cpu(info).await,
            client: process_cpu(),
            machine: machine_busy(),
            wall: Instant::now(),
        }
    }

    async fn finish(self, info: &mut MultiplexedConnection) -> Used {
        let wall = self.wall.elapsed().as_secs_f64();
        let machine = machine_busy() - self.machine;
        let client = process_cpu().saturating_sub(self.client).as_secs_f64();
        let server = server_cpu(info).await - self.server;
        Used {
            wall,
            client,
            server,
            machine,
        }
    }
}

impl Used {
    fn add(&mut self, other: &Used) {
        self.wall += other.wall;
        self.client += other.client;
        self.server += other.server;
        self.machine += other.machine;
    }

    /// (client µs, server µs) per op.
    fn per(&self, ops: u64) -> (f64, f64) {
        let ops = ops.max(1) as f64;
        (self.client * 1e6 / ops, self.server * 1e6 / ops)
    }

    /// CPUs kept busy by other processes on the machine (not this child, not the
    /// benchmark's redis-server) during the phase, on average: non-zero means the numbers
    /// were taken on a shared, loaded machine. Resolution: one clock tick per CPU.
    fn bg_cores(&self) -> String {
        let other = (self.machine - self.client - self.server).max(0.0);
        format!("{:.2}", other / self.wall.max(1e-9))
    }
}

/// One RESULT line.
struct Row {
    workload: String,
    flavor: String,
    ops_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    ratio: (&'static str, Option<f64>),
    extra: Vec<(&'static str, String)>,
}

impl Row {
    fn print(&self) {
        let ratio = self.ratio.1.map_or("na".to_owned(), |r| format!("{r:.3}"));
        let mut line = format!(
            "RESULT workload={} flavor={} ops_per_s={:.0} p50_us={:.1} p99_us={:.1} {}={ratio}",
            self.workload, self.flavor, self.ops_per_s, self.p50_us, self.p99_us, self.ratio.0,
        );
        for (k, v) in &self.extra {
            line.push_str(&format!(" {k}={v}"));
        }
        println!("{line}");
        let _ = std::io::stdout().flush();
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

// ---------------------------------------------------------------------------------------
// Children

fn child_main(args: &[String]) {
    let role = args.first().map(String::as_str).expect("child role");
    let flavor = args.get(1).expect("child flavor").clone();
    let url = args.get(2).expect("child url").clone();
    let quick = args.get(3).map(String::as_str) == Some("true");
    metrics::set_global_recorder(ProbeRecorder).expect("install the probe recorder");
    let runtime = match flavor.as_str() {
        "current_thread" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        "multi_thread" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
        other => panic!("unknown flavor {other}"),
    }
    .expect("build the tokio runtime");
    let env = Env {
        flavor: flavor.clone(),
        url,
        quick,
        run: format!("{}{}", &flavor[..1], std::process::id()),
    };
    match role {
        "core" => runtime.block_on(async move {
            tokio::spawn(core(env)).await.expect("core workloads");
        }),
        "renew" => {
            let n: usize = args
                .get(4)
                .and_then(|n| n.parse().ok())
                .expect("lease count");
            runtime.block_on(async move {
                tokio::spawn(renewals(env, n))
                    .await
                    .expect("renewal workload");
            });
        }
        other => panic!("unknown child role {other}"),
    }
    // Leftover background tasks (connection drivers) end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
}

#[derive(Clone)]
struct Env {
    flavor: String,
    url: String,
    quick: bool,
    /// Prefix of every key of this child.
    run: String,
}

impl Env {
    fn pick(&self, quick: Duration, full: Duration) -> Duration {
        if self.quick { quick } else { full }
    }

    fn row(
        &self,
        workload: &str,
        ops_per_s: f64,
        (p50_us, p99_us): (f64, f64),
        ratio: (&'static str, Option<f64>),
        extra: Vec<(&'static str, String)>,
    ) -> Row {
        Row {
            workload: workload.to_owned(),
            flavor: self.flavor.clone(),
            ops_per_s,
            p50_us,
            p99_us,
            ratio,
            extra,
        }
    }

    fn client(&self) -> LeaseClient {
        let settings = LeaseSettings::default().with_command_timeout(Duration::from_secs(2));
        LeaseClient::redis(&self.url, settings).expect("LeaseClient::redis")
    }

    async fn connection(&self) -> MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis-server")
    }
}

fn purpose() -> Purpose {
    Purpose::new("bench").expect("purpose")
}

fn request(client: &LeaseClient, resource: &str, ttl: Duration, wait: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        purpose(),
        ResourceDigest::of(resource),
        client.new_attempt("bench").expect("attempt"),
    )
    .ttl(ttl)
    .wait_timeout(wait)
    .build()
    .expect("request")
}

/// One acquire (waiting up to the request's wait) that must be `Acquired`, then a release
/// that must be `Released`.
async fn lease_cycle(client: &LeaseClient, req: &LeaseRequest, what: &str) {
    match client.acquire(req).await.expect("valid request") {
        AcquireOutcome::Acquired(mut lease) => {
            let released = lease.release().await;
            assert_eq!(released, ReleaseOutcome::Released, "{what}: release");
        }
        other => panic!("{what}: acquire was {} ({other:?})", other.as_str()),
    }
}

/// The floor: the raw redis crate on one multiplexed connection.
#[derive(Clone)]
struct Floor {
    con: MultiplexedConnection,
    release: Arc<redis::Script>,
    token_prefix: Arc<str>,
    next_token: Arc<AtomicU64>,
}

impl Floor {
    async fn new(env: &Env) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            con: env.connection().await,
            release: Arc::new(redis::Script::new(FLOOR_RELEASE_LUA)),
            token_prefix: format!("{:x}-{nanos:x}-", std::process::id()).into(),
            next_token: Arc::new(AtomicU64::new(0)),
        }
    }

    fn token(&self) -> String {
        let n = self.next_token.fetch_add(1, Ordering::Relaxed);
        format!("{}{n}", self.token_prefix)
    }

    /// `SET key token NX PX ttl`: whether it was set.
    async fn try_lock(&mut self, key: &str, token: &str) -> bool {
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_TTL.as_millis() as u64)
            .query_async(&mut self.con)
            .await
            .expect("floor SET NX PX");
        match reply.as_deref() {
            Some("OK") => true,
            None => false,
            Some(other) => panic!("floor SET NX answered {other:?}"),
        }
    }

    /// The owner-checked DEL (EVALSHA, loaded on NOSCRIPT); must delete.
    async fn unlock(&mut self, key: &str, token: &str) {
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut self.con)
            .await
            .expect("floor release script");
        assert_eq!(deleted, 1, "floor release of {key} deleted nothing");
    }

    async fn cycle(&mut self, key: &str) {
        let token = self.token();
        assert!(
            self.try_lock(key, &token).await,
            "floor SET NX of fresh key {key} refused"
        );
        self.unlock(key, &token).await;
    }
}

// ---------------------------------------------------------------------------------------
// core child: W1, W2, W3, PING, H, A
//
// The machine may be shared (other builds and tests run on it), so each workload and its
// floor run in alternating slices: both see the same background load, and the ratio between
// them is worth more than either absolute number. `bg_cores` says how loaded it was.

/// One workload accumulated over its slices.
#[derive(Default)]
struct Part {
    /// Per-cycle (W1, W2) or per-try (W3) latencies.
    samples: Samples,
    /// Cycles (W1, W2) or successful acquisitions (W3).
    ops: u64,
    /// Refused tries (W3).
    refused: u64,
    used: Used,
}

impl Part {
    fn add(&mut self, other: Part) {
        self.samples.extend(other.samples);
        self.ops += other.ops;
        self.refused += other.refused;
        self.used.add(&other.used);
    }

    fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.used.wall.max(1e-9)
    }
}

/// `slices` slices of `slice` each, quick or not.
struct Slicing {
    slices: usize,
    slice: Duration,
}

impl Env {
    fn slicing(&self, quick: (usize, u64), full: (usize, u64)) -> Slicing {
        let (slices, ms) = if self.quick { quick } else { full };
        Slicing {
            slices,
            slice: Duration::from_millis(ms),
        }
    }
}

async fn core(env: Env) {
    let client = env.client();
    let mut floor = Floor::new(&env).await;
    let mut info = env.connection().await;
    // Warm up: connections made and scripts loaded before anything is timed.
    for i in 0..50 {
        lease_cycle(
            &client,
            &request(
                &client,
                &format!("{}:warm:{i}", env.run),
                LOCK_TTL,
                Duration::ZERO,
            ),
            "warm-up",
        )
        .await;
        floor.cycle(&format!("floor:{}:warm:{i}", env.run)).await;
    }

    // W1: 2 s each in 250 ms slices (quick: 0.3 s).
    let s = env.slicing((3, 100), (8, 250));
    let (mut f, mut l) = (Part::default(), Part::default());
    for k in 0..s.slices {
        f.add(w1_floor(&env, &floor, &mut info, s.slice, k).await);
        l.add(w1_lease(&env, &client, &mut info, s.slice, k).await);
    }
    let ratio_w1 = ratio(l.ops_per_s(), f.ops_per_s());
    cycle_row(&env, "floor-W1", f, None, Some(1.0)).print();
    cycle_row(&env, "W1", l, None, ratio_w1).print();

    // W2: 10 s each in 1 s slices (quick: 1 s).
    let s = env.slicing((2, 500), (10, 1000));
    let (mut f, mut l) = (Part::default(), Part::default());
    for k in 0..s.slices {
        f.add(w2_floor(&env, &floor, &mut info, s.slice, k).await);
        l.add(w2_lease(&env, &client, &mut info, s.slice, k).await);
    }
    let ratio_w2 = ratio(l.ops_per_s(), f.ops_per_s());
    cycle_row(&env, "floor-W2", f, Some(W2_TASKS), Some(1.0)).print();
    cycle_row(&env, "W2", l, Some(W2_TASKS), ratio_w2).print();

    // W3: 2 s each in 500 ms slices (quick: 0.5 s).
    let s = env.slicing((2, 250), (4, 500));
    let (mut f, mut l) = (Part::default(), Part::default());
    for k in 0..s.slices {
        f.add(w3_floor(&env, &floor, &mut info, s.slice, k).await);
        l.add(w3_lease(&env, &client, &mut info, s.slice, k).await);
    }
    let ratio_w3 = ratio(l.ops_per_s(), f.ops_per_s());
    contention_row(&env, "floor-W3", f, Some(1.0)).print();
    contention_row(&env, "W3", l, ratio_w3).print();

    let ping = ping(&env, &floor, &mut info).await;
    ping.print();
    let handoffs = if env.quick { 20 } else { 200 };
    let cold_rtt = field_of_row(&ping, "cold_p50_us");
    let f = handoff_floor(&env, &floor, &mut info, handoffs, ping.p50_us, cold_rtt).await;
    f.print();
    let mut l = handoff(&env, &client, &mut info, handoffs, ping.p50_us, cold_rtt).await;
    l.extra
        .push(("ratio_to_floor", format!("{:.3}", l.p50_us / f.p50_us)));
    l.print();

    actors(&env, &client, &mut info).await.print();
}

fn field_of_row(row: &Row, name: &str) -> f64 {
    row.extra
        .iter()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn cycle_row(
    env: &Env,
    workload: &str,
    mut part: Part,
    tasks: Option<usize>,
    ratio_to_floor: Option<f64>,
) -> Row {
    let ops_per_s = part.ops_per_s();
    let (client_us, server_us) = part.used.per(part.ops);
    let mut extra = vec![
        ("cycles", part.ops.to_string()),
        ("secs", format!("{:.2}", part.used.wall)),
        ("client_cpu_us_per_op", format!("{client_us:.1}")),
        ("srv_cpu_us_per_op", format!("{server_us:.1}")),
        ("bg_cores", part.used.bg_cores()),
    ];
    if let Some(tasks) = tasks {
        extra.insert(0, ("tasks", tasks.to_string()));
    }
    env.row(
        workload,
        ops_per_s,
        part.samples.p50_p99(),
        ("ratio_to_floor", ratio_to_floor),
        extra,
    )
}

/// W1 floor slice: one task, SET NX PX → owner-checked DEL on distinct keys.
async fn w1_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let mut floor = floor.clone();
    let mut part = Part::default();
    let cpu = CpuMeter::start(info).await;
    let start = Instant::now();
    while start.elapsed() < d {
        let t = Instant::now();
        floor
            .cycle(&format!("floor:{}:w1:{slice}:{}", env.run, part.ops))
            .await;
        part.samples.push(t.elapsed());
        part.ops += 1;
    }
    part.used = cpu.finish(info).await;
    part
}

/// W1 slice: one task, request (digest, fresh attempt, builder) → acquire → release.
async fn w1_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let mut part = Part::default();
    let cpu = CpuMeter::start(info).await;
    let start = Instant::now();
    while start.elapsed() < d {
        let t = Instant::now();
        let key = format!("{}:w1:{slice}:k{}", env.run, part.ops);
        let req = request(client, &key, LOCK_TTL, Duration::ZERO);
        lease_cycle(client, &req, "W1").await;
        part.samples.push(t.elapsed());
        part.ops += 1;
    }
    part.used = cpu.finish(info).await;
    part
}

const W2_TASKS: usize = 64;

/// Joins the tasks of one slice into a part.
async fn join_part(
    tasks: Vec<tokio::task::JoinHandle<Part>>,
    cpu: CpuMeter,
    info: &mut MultiplexedConnection,
    what: &str,
) -> Part {
    let mut part = Part::default();
    for task in tasks {
        let done = task.await.unwrap_or_else(|e| panic!("{what} task: {e}"));
        part.add(done);
    }
    part.used = cpu.finish(info).await;
    part
}

async fn w2_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let cpu = CpuMeter::start(info).await;
    let deadline = Instant::now() + d;
    let tasks: Vec<_> = (0..W2_TASKS)
        .map(|task| {
            let mut floor = floor.clone();
            let run = env.run.clone();
            tokio::spawn(async move {
                let mut part = Part::default();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let key = format!("floor:{run}:w2:{slice}:{task}:{}", part.ops);
                    floor.cycle(&key).await;
                    part.samples.push(t.elapsed());
                    part.ops += 1;
                }
                part
            })
        })
        .collect();
    join_part(tasks, cpu, info, "floor-W2").await
}

async fn w2_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let cpu = CpuMeter::start(info).await;
    let deadline = Instant::now() + d;
    let tasks: Vec<_> = (0..W2_TASKS)
        .map(|task| {
            let client = client.clone();
            let run = env.run.clone();
            tokio::spawn(async move {
                let mut part = Part::default();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let key = format!("{run}:w2:{slice}:{task}:k{}", part.ops);
                    let req = request(&client, &key, LOCK_TTL, Duration::ZERO);
                    lease_cycle(&client, &req, "W2").await;
                    part.samples.push(t.elapsed());
                    part.ops += 1;
                }
                part
            })
        })
        .collect();
    join_part(tasks, cpu, info, "W2").await
}

const W3_TASKS: usize = 16;

/// W3 floor slice: 16 tasks, one `SET NX PX` per iteration on one key; the winner deletes
/// (owner-checked) at once.
async fn w3_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let key: Arc<str> = format!("floor:{}:w3:{slice}", env.run).into();
    let cpu = CpuMeter::start(info).await;
    let deadline = Instant::now() + d;
    let tasks: Vec<_> = (0..W3_TASKS)
        .map(|_| {
            let mut floor = floor.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let mut part = Part::default();
                let mut token = floor.token();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let won = floor.try_lock(&key, &token).await;
                    part.samples.push(t.elapsed());
                    if won {
                        part.ops += 1;
                        floor.unlock(&key, &token).await;
                        token = floor.token();
                    } else {
                        part.refused += 1;
                    }
                }
                part
            })
        })
        .collect();
    join_part(tasks, cpu, info, "floor-W3").await
}

/// W3 slice: 16 tasks, one `try_acquire` per iteration on one key; the winner releases at
/// once and takes a fresh attempt; a refused task tries the same request again.
async fn w3_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let key: Arc<str> = format!("{}:w3:{slice}", env.run).into();
    let cpu = CpuMeter::start(info).await;
    let deadline = Instant::now() + d;
    let tasks: Vec<_> = (0..W3_TASKS)
        .map(|_| {
            let client = client.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let mut part = Part::default();
                let mut req = request(&client, &key, LOCK_TTL, Duration::ZERO);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let outcome = client.try_acquire(&req).await.expect("valid request");
                    part.samples.push(t.elapsed());
                    match outcome {
                        AcquireOutcome::Acquired(mut lease) => {
                            part.ops += 1;
                            let released = lease.release().await;
                            assert_eq!(released, ReleaseOutcome::Released, "W3: release");
                            req = request(&client, &key, LOCK_TTL, Duration::ZERO);
                        }
                        AcquireOutcome::Contended { .. } => part.refused += 1,
                        other => panic!("W3: try_acquire was {} ({other:?})", other.as_str()),
                    }
                }
                part
            })
        })
        .collect();
    join_part(tasks, cpu, info, "W3").await
}

fn contention_row(env: &Env, workload: &str, mut part: Part, ratio_to_floor: Option<f64>) -> Row {
    assert!(part.ops > 0, "{workload}: nobody ever acquired the key");
    let (_, server_us_per_refused) = part.used.per(part.refused);
    // Commands sent: every try, plus one release per success.
    let commands = part.ops + part.refused + part.ops;
    let ops_per_s = part.ops_per_s();
    env.row(
        workload,
        ops_per_s,
        part.samples.p50_p99(),
        ("ratio_to_floor", ratio_to_floor),
        vec![
            ("tasks", W3_TASKS.to_string()),
            ("tries", (part.ops + part.refused).to_string()),
            ("acquired", part.ops.to_string()),
            ("refused", part.refused.to_string()),
            ("secs", format!("{:.2}", part.used.wall)),
            (
                "srv_cpu_us_per_refused",
                format!("{server_us_per_refused:.2}"),
            ),
            (
                "refused_share",
                format!("{:.3}", part.refused as f64 / commands as f64),
            ),
            ("bg_cores", part.used.bg_cores()),
        ],
    )
}

/// `PING` round trips on the floor's connection: the RTT the handoff is compared with.
/// Back to back (`p50_us`), and each after 5 ms idle (`cold_p50_us`), as in H, where the
/// release is sent after a pause: on a VM, waking idle CPUs costs more than the round trip.
async fn ping(env: &Env, floor: &Floor, info: &mut MultiplexedConnection) -> Row {
    let mut con = floor.con.clone();
    let (n, cold_n) = if env.quick { (300, 20) } else { (3000, 200) };
    let mut samples = Samples::default();
    let mut cold = Samples::default();
    let cpu = CpuMeter::start(info).await;
    for i in 0..n + cold_n {
        if i >= n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let t = Instant::now();
        let pong: String = redis::cmd("PING")
            .query_async(&mut con)
            .await
            .expect("PING");
        let took = t.elapsed();
        assert_eq!(pong, "PONG");
        if i >= n {
            cold.push(took);
        } else {
            samples.push(took);
        }
    }
    let used = cpu.finish(info).await;
    let total = samples.total().as_secs_f64();
    let (cold_p50, cold_p99) = cold.p50_p99();
    env.row(
        "floor-PING",
        n as f64 / total,
        samples.p50_p99(),
        ("ratio_to_rtt", Some(1.0)),
        vec![
            ("pings", n.to_string()),
            ("cold_pings", cold_n.to_string()),
            ("cold_p50_us", format!("{cold_p50:.1}")),
            ("cold_p99_us", format!("{cold_p99:.1}")),
            ("bg_cores", used.bg_cores()),
        ],
    )
}

/// H: holder holds, a waiter blocks in `acquire`, holder releases; time to the waiter's
/// `Acquired`.
async fn handoff(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    n: usize,
    rtt_p50_us: f64,
    cold_rtt_p50_us: f64,
) -> Row {
    let wait = Duration::from_secs(5);
    let mut samples = Samples::default();
    let mut releases = Samples::default();
    let cpu = CpuMeter::start(info).await;
    for i in 0..n {
        let key = format!("{}:h:{i}", env.run);
        let holder_req = request(client, &key, LOCK_TTL, Duration::ZERO);
        let mut holder = match client
            .try_acquire(&holder_req)
            .await
            .expect("valid request")
        {
            AcquireOutcome::Acquired(lease) => lease,
            other => panic!("H: holder's try_acquire was {} ({other:?})", other.as_str()),
        };
        let retries_before = PROBES.contended_retries.load(Ordering::SeqCst);
        let waiter_req = request(client, &key, LOCK_TTL, wait);
        let waiter_client = client.clone();
        let waiter = tokio::spawn(async move {
            let outcome = waiter_client.acquire(&waiter_req).await;
            (outcome, Instant::now())
        });
        // Blocked: it was refused before and after subscribing to release notices.
        let blocked_by = Instant::now() + Duration::from_secs(2);
        while PROBES.contended_retries.load(Ordering::SeqCst) < retries_before + 2 {
            assert!(Instant::now() < blocked_by, "H: the waiter never blocked");
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released_at = Instant::now();
        let released = holder.release().await;
        releases.push(released_at.elapsed());
        assert_eq!(released, ReleaseOutcome::Released, "H: holder's release");
        let (outcome, acquired_at) = waiter.await.expect("H waiter task");
        match outcome.expect("valid request") {
            AcquireOutcome::Acquired(mut lease) => {
                samples.push(acquired_at - released_at);
                assert_eq!(
                    lease.release().await,
                    ReleaseOutcome::Released,
                    "H: waiter's release"
                );
            }
            other => panic!("H: waiter's acquire was {} ({other:?})", other.as_str()),
        }
    }
    let used = cpu.finish(info).await;
    handoff_row(
        env,
        "H",
        samples,
        releases,
        (rtt_p50_us, cold_rtt_p50_us),
        &used,
    )
}

fn handoff_row(
    env: &Env,
    workload: &str,
    mut samples: Samples,
    mut releases: Samples,
    (rtt_p50_us, cold_rtt_p50_us): (f64, f64),
    used: &Used,
) -> Row {
    let total = samples.total().as_secs_f64();
    let n = samples.0.len();
    let (p50, p99) = samples.p50_p99();
    let (release_p50, _) = releases.p50_p99();
    env.row(
        workload,
        n as f64 / total,
        (p50, p99),
        ("ratio_to_rtt", ratio(p50, rtt_p50_us)),
        vec![
            ("handoffs", n.to_string()),
            ("rtt_p50_us", format!("{rtt_p50_us:.1}")),
            ("p99_ratio_to_rtt", format!("{:.2}", p99 / rtt_p50_us)),
            ("cold_rtt_p50_us", format!("{cold_rtt_p50_us:.1}")),
            ("ratio_to_cold_rtt", format!("{:.2}", p50 / cold_rtt_p50_us)),
            ("release_call_p50_us", format!("{release_p50:.1}")),
            ("bg_cores", used.bg_cores()),
        ],
    )
}

/// The floor of H: the waiter is subscribed to a channel and was refused by `SET NX`; the
/// holder's release is one script (owner-checked `DEL` + `PUBLISH`); on the message the
/// waiter sends `SET NX` again. Timed from just before the holder's release is sent to the
/// waiter's `OK`.
async fn handoff_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    n: usize,
    rtt_p50_us: f64,
    cold_rtt_p50_us: f64,
) -> Row {
    let release = Arc::new(redis::Script::new(FLOOR_RELEASE_PUBLISH_LUA));
    let client = redis::Client::open(env.url.as_str()).expect("redis url");
    let mut samples = Samples::default();
    let mut releases = Samples::default();
    let cpu = CpuMeter::start(info).await;
    for i in 0..n {
        let key = format!("floor:{}:h:{i}", env.run);
        let channel = format!("{key}:released");
        let mut holder = floor.clone();
        let holder_token = holder.token();
        assert!(
            holder.try_lock(&key, &holder_token).await,
            "floor-H: holder refused"
        );
        let mut pubsub = client.get_async_pubsub().await.expect("floor-H: pubsub");
        pubsub
            .subscribe(&channel)
            .await
            .expect("floor-H: SUBSCRIBE");
        let (blocked_tx, blocked_rx) = tokio::sync::oneshot::channel();
        let mut waiter = floor.clone();
        let waiter_key = key.clone();
        let waiter_task = tokio::spawn(async move {
            let token = waiter.token();
            let mut messages = pubsub.into_on_message();
            assert!(
                !waiter.try_lock(&waiter_key, &token).await,
                "floor-H: waiter got a held lock"
            );
            let _ = blocked_tx.send(());
            loop {
                messages.next().await.expect("floor-H: release notice");
                if waiter.try_lock(&waiter_key, &token).await {
                    return (Instant::now(), waiter, token);
                }
            }
        });
        blocked_rx.await.expect("floor-H: waiter blocked");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released_at = Instant::now();
        let deleted: i64 = release
            .key(&key)
            .arg(&holder_token)
            .arg(&channel)
            .invoke_async(&mut holder.con)
            .await
            .expect("floor-H: release script");
        releases.push(released_at.elapsed());
        assert_eq!(deleted, 1, "floor-H: holder's release deleted nothing");
        let (acquired_at, mut waiter, token) = waiter_task.await.expect("floor-H waiter task");
        samples.push(acquired_at - released_at);
        waiter.unlock(&key, &token).await;
    }
    let used = cpu.finish(info).await;
    handoff_row(
        env,
        "floor-H",
        samples,
        releases,
        (rtt_p50_us, cold_rtt_p50_us),
        &used,
    )
}

/// A worker that stops as soon as it started (A), or stays until told the lease ends (R).
struct Worker {
    stop_at_once: bool,
}

enum WorkerMsg {
    Cancelled,
}

impl From<LeaseCancelled> for WorkerMsg {
    fn from(_: LeaseCancelled) -> Self {
        Self::Cancelled
    }
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(())
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if self.stop_at_once {
            myself.stop(None);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            WorkerMsg::Cancelled => myself.stop(None),
        }
        Ok(())
    }
}

/// A: spawn_under_lease (worker that stops at once) → report, and run_under_lease (empty
/// future), against the plain try_acquire → release cycle; sequential, interleaved slices.
async fn actors(env: &Env, client: &LeaseClient, info: &mut MultiplexedConnection) -> Row {
    let runtime = LeaseRuntime::new(client.clone());
    let s = env.slicing((2, 150), (6, 250));
    let (mut plain, mut spawned, mut ran) = (Part::default(), Part::default(), Part::default());
    for k in 0..s.slices {
        plain.add(a_plain(env, client, info, s.slice, k).await);
        spawned.add(a_spawn(env, &runtime, info, s.slice, k).await);
        ran.add(a_run(env, &runtime, info, s.slice, k).await);
    }
    let (plain_ops, spawn_ops, run_ops) = (plain.ops_per_s(), spawned.ops_per_s(), ran.ops_per_s());
    let (plain_p50, plain_p99) = plain.samples.p50_p99();
    let (run_p50, run_p99) = ran.samples.p50_p99();
    let (plain_cpu, _) = plain.used.per(plain.ops);
    let (spawn_cpu, _) = spawned.used.per(spawned.ops);
    let (run_cpu, _) = ran.used.per(ran.ops);
    let mut used = Used::default();
    for part in [&plain, &spawned, &ran] {
        used.add(&part.used);
    }
    env.row(
        "A",
        spawn_ops,
        spawned.samples.p50_p99(),
        ("ratio_to_plain", ratio(spawn_ops, plain_ops)),
        vec![
            ("cycles", spawned.ops.to_string()),
            ("client_cpu_us_per_op", format!("{spawn_cpu:.1}")),
            ("plain_ops_per_s", format!("{plain_ops:.0}")),
            ("plain_p50_us", format!("{plain_p50:.1}")),
            ("plain_p99_us", format!("{plain_p99:.1}")),
            ("plain_client_cpu_us_per_op", format!("{plain_cpu:.1}")),
            ("run_under_lease_ops_per_s", format!("{run_ops:.0}")),
            ("run_p50_us", format!("{run_p50:.1}")),
            ("run_p99_us", format!("{run_p99:.1}")),
            ("run_client_cpu_us_per_op", format!("{run_cpu:.1}")),
            ("run_ratio_to_plain", format!("{:.3}", run_ops / plain_ops)),
            ("bg_cores", used.bg_cores()),
        ],
    )
}

async fn a_plain(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let mut part = Part::default();
    let cpu = CpuMeter::start(info).await;
    let start = Instant::now();
    while start.elapsed() < d {
        let t = Instant::now();
        let key = format!("{}:a:{slice}:p{}", env.run, part.ops);
        let req = request(client, &key, LOCK_TTL, Duration::ZERO);
        match client.try_acquire(&req).await.expect("valid request") {
            AcquireOutcome::Acquired(mut lease) => {
                assert_eq!(
                    lease.release().await,
                    ReleaseOutcome::Released,
                    "A: plain release"
                );
            }
            other => panic!("A: plain try_acquire was {} ({other:?})", other.as_str()),
        }
        part.samples.push(t.elapsed());
        part.ops += 1;
    }
    part.used = cpu.finish(info).await;
    part
}

async fn a_spawn(
    env: &Env,
    runtime: &LeaseRuntime,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let client = runtime.client();
    let mut part = Part::default();
    let cpu = CpuMeter::start(info).await;
    let start = Instant::now();
    while start.elapsed() < d {
        let t = Instant::now();
        let key = format!("{}:a:{slice}:s{}", env.run, part.ops);
        let req = request(client, &key, LOCK_TTL, Duration::ZERO);
        let worker = Worker { stop_at_once: true };
        let job = match runtime
            .spawn_under_lease(&req, worker, |_ctx| (), CancelPolicy::Kill)
            .await
            .expect("A: spawn_under_lease")
        {
            SpawnOutcome::Started(job) => job,
            SpawnOutcome::NotAcquired(other) => {
                panic!("A: spawn_under_lease was {} ({other:?})", other.as_str())
            }
        };
        let report = job.wait().await;
        assert_eq!(report.end, JobEnd::Completed, "A: job end");
        assert_eq!(report.release, ReleaseOutcome::Released, "A: job release");
        part.samples.push(t.elapsed());
        part.ops += 1;
    }
    part.used = cpu.finish(info).await;
    part
}

async fn a_run(
    env: &Env,
    runtime: &LeaseRuntime,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let client = runtime.client();
    let mut part = Part::default();
    let cpu = CpuMeter::start(info).await;
    let start = Instant::now();
    while start.elapsed() < d {
        let t = Instant::now();
        let key = format!("{}:a:{slice}:r{}", env.run, part.ops);
        let req = request(client, &key, LOCK_TTL, Duration::ZERO);
        match runtime
            .run_under_lease(&req, CancelPolicy::Kill, |_ctx| async {})
            .await
            .expect("A: run_under_lease")
        {
            RunOutcome::Ran { output, report } => {
                assert!(output.is_some(), "A: run_under_lease future did not finish");
                assert_eq!(report.end, JobEnd::Completed, "A: run end");
                assert_eq!(report.release, ReleaseOutcome::Released, "A: run release");
            }
            RunOutcome::NotAcquired(other) => {
                panic!("A: run_under_lease was {} ({other:?})", other.as_str())
            }
        }
        part.samples.push(t.elapsed());
        part.ops += 1;
    }
    part.used = cpu.finish(info).await;
    part
}

// ---------------------------------------------------------------------------------------
// renew child: R<n>

/// Acquisitions in flight at once while the leases are taken (and releases at the end).
const R_IN_FLIGHT: usize = 256;

async fn renewals(env: Env, n: usize) {
    let client = env.client();
    let mut info = env.connection().await;
    let ttl = env.pick(Duration::from_secs(4), Duration::from_secs(30));
    let settings = client.settings();
    // The lease actor renews every `renew_every` from the previous renewal's start, or
    // half-way to its cancellation deadline (validity end − safety margin) if that is
    // sooner: with the quick run's 4 s TTL and 2 s command timeout (= safety margin), that
    // is ~1 s, not ttl/3.
    let to_cancel = ttl - settings.drift_budget - settings.safety_margin();
    let renew_every = settings.renew_every(ttl).min(to_cancel / 2);
    let window = renew_every * 2;
    let runtime = LeaseRuntime::new(client.clone()).with_max_leases(n + 16);
    // Warm up the connection, the scripts and the actor machinery.
    for i in 0..20 {
        let req = request(
            &client,
            &format!("{}:rwarm:{i}", env.run),
            ttl,
            Duration::ZERO,
        );
        let job = start_idle(&runtime, &req).await;
        job.shutdown();
        let _ = job.wait().await;
    }
    // What Redis burns with nothing to do (its timers, this measurement's INFO calls), per
    // second: subtracted from the window, whose renewals come in bursts with idle time
    // between them.
    let idle = CpuMeter::start(&mut info).await;
    tokio::time::sleep(env.pick(Duration::from_millis(500), Duration::from_secs(2))).await;
    let idle = idle.finish(&mut info).await;
    let idle_srv_per_s = idle.server / idle.wall;
    let rss_before = rss_kb();
    let acquiring = Instant::now();
    // At most R_IN_FLIGHT start tasks exist at once, so the RSS delta is the held leases,
    // not n pending futures.
    let mut jobs = Vec::with_capacity(n);
    let mut starting = tokio::task::JoinSet::new();
    for i in 0..n {
        if starting.len() >= R_IN_FLIGHT
            && let Some(done) = starting.join_next().await
        {
            jobs.push(done.expect("R: start task"));
        }
        let runtime = runtime.clone();
        let req = request(&client, &format!("{}:r:{i}", env.run), ttl, Duration::ZERO);
        starting.spawn(async move { start_idle(&runtime, &req).await });
    }
    while let Some(done) = starting.join_next().await {
        jobs.push(done.expect("R: start task"));
    }
    let acquire_s = acquiring.elapsed().as_secs_f64();
    assert_eq!(runtime.held(), n, "R: leases held");
    let rss_after = rss_kb();

    let renewals_before: Vec<u64> = jobs.iter().map(|j| j.context().status().renewals).collect();
    let cpu = CpuMeter::start(&mut info).await;
    let window_start = Instant::now();
    PROBES.in_window.store(true, Ordering::SeqCst);
    tokio::time::sleep(window).await;
    PROBES.in_window.store(false, Ordering::SeqCst);
    let window_s = window_start.elapsed().as_secs_f64();
    let per_lease: Vec<u64> = jobs
        .iter()
        .zip(&renewals_before)
        .map(|(j, before)| j.context().status().renewals - before)
        .collect();
    let renewals: u64 = per_lease.iter().sum();
    let fewest = per_lease.iter().copied().min().unwrap_or(0);
    let used = cpu.finish(&mut info).await;
    let (client_us, server_us) = used.per(renewals);
    let net_server_us =
        (used.server - idle_srv_per_s * used.wall).max(0.0) * 1e6 / renewals.max(1) as f64;
    let not_active = jobs
        .iter()
        .filter(|j| {
            let status = j.context().status();
            status.state != LeaseState::Active || status.cancelled.is_some()
        })
        .count();
    let cancelled = PROBES.cancellations.load(Ordering::SeqCst);
    let lone_us = unbatched_renew_us(&env, &mut info, n.min(10_000), 1).await;
    let stream_us = unbatched_renew_us(&env, &mut info, n.min(10_000), 32).await;

    let releasing = Instant::now();
    let mut jobs = jobs.into_iter();
    loop {
        let batch: Vec<_> = jobs.by_ref().take(R_IN_FLIGHT).collect();
        if batch.is_empty() {
            break;
        }
        for job in &batch {
            job.shutdown();
        }
        for job in batch {
            let report = job.wait().await;
            let shut_down = JobEnd::Cancelled {
                reason: CancelReason::Shutdown,
                killed: false,
            };
            assert_eq!(report.end, shut_down, "R: job end");
            assert_eq!(report.release, ReleaseOutcome::Released, "R: release");
        }
    }
    let release_s = releasing.elapsed().as_secs_f64();

    let latencies = std::mem::take(&mut *PROBES.renew_latency.0.lock().expect("latencies"));
    let confirmed = PROBES.margin.count.load(Ordering::SeqCst);
    let confirmed_in_window = PROBES.margin_window.count.load(Ordering::SeqCst);
    let min_margin_ms = PROBES
        .margin_window
        .min_seconds()
        .map_or(f64::NAN, |s| s * 1e3);
    let min_margin_all_ms = PROBES.margin.min_seconds().map_or(f64::NAN, |s| s * 1e3);
    let healthy_ms = (ttl - settings.drift_budget - renew_every).as_secs_f64() * 1e3;
    let quantiles = if latencies.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        quantiles_us(latencies)
    };
    let rss_per_lease = (rss_after as f64 - rss_before as f64) * 1024.0 / n as f64;
    let workload = if n % 1000 == 0 {
        format!("R{}k", n / 1000)
    } else {
        format!("R{n}")
    };
    let expected = n as f64 * window.as_secs_f64() / renew_every.as_secs_f64();
    env.row(
        &workload,
        renewals as f64 / window_s,
        quantiles,
        ("ratio_to_floor", None),
        vec![
            ("leases", n.to_string()),
            ("ttl_s", format!("{}", ttl.as_secs_f64())),
            ("cadence_s", format!("{:.3}", renew_every.as_secs_f64())),
            ("window_s", format!("{window_s:.2}")),
            ("renewals", renewals.to_string()),
            ("expected_renewals", format!("{expected:.0}")),
            ("fewest_per_lease", fewest.to_string()),
            ("client_cpu_us_per_renewal", format!("{client_us:.1}")),
            ("srv_cpu_us_per_renewal", format!("{server_us:.1}")),
            ("net_srv_cpu_us_per_renewal", format!("{net_server_us:.1}")),
            (
                "idle_srv_cpu_ms_per_s",
                format!("{:.2}", idle_srv_per_s * 1e3),
            ),
            ("unbatched_lone_srv_cpu_us", format!("{lone_us:.1}")),
            ("unbatched_stream_srv_cpu_us", format!("{stream_us:.1}")),
            (
                "net_srv_ratio_to_lone",
                format!("{:.3}", net_server_us / lone_us),
            ),
            (
                "net_srv_ratio_to_stream",
                format!("{:.3}", net_server_us / stream_us),
            ),
            ("rss_bytes_per_lease", format!("{rss_per_lease:.0}")),
            ("cancelled", cancelled.to_string()),
            ("not_active", not_active.to_string()),
            ("margins_in_window", confirmed_in_window.to_string()),
            ("min_renew_margin_ms", format!("{min_margin_ms:.1}")),
            ("healthy_margin_ms", format!("{healthy_ms:.1}")),
            ("max_late_ms", format!("{:.1}", healthy_ms - min_margin_ms)),
            ("confirmed_renewals_total", confirmed.to_string()),
            ("min_renew_margin_all_ms", format!("{min_margin_all_ms:.1}")),
            ("acquire_s", format!("{acquire_s:.2}")),
            ("release_s", format!("{release_s:.2}")),
            ("bg_cores", used.bg_cores()),
        ],
    )
    .print();
    assert_eq!(
        cancelled, 0,
        "{workload}: leases were cancelled during the run"
    );
    assert_eq!(
        not_active, 0,
        "{workload}: leases not ACTIVE at the end of the window"
    );
    // Renewals come in bursts (the leases were taken within `acquire_s`), so a burst at the
    // window's end may fall just outside it: the count is ~2 per lease, not exactly. Every
    // lease must have renewed within two periods, though, and none came near its deadline.
    assert!(
        fewest >= 1,
        "{workload}: a lease did not renew within two renewal periods"
    );
    let margin_floor_ms = settings.safety_margin().as_secs_f64() * 1e3;
    assert!(
        min_margin_all_ms > margin_floor_ms,
        "{workload}: a renewal was confirmed with {min_margin_all_ms:.1} ms of validity left, \
         inside the safety margin"
    );
}

/// The un-batched renewal R is compared with: one owner-checked `PEXPIRE` script call per
/// renewal (the same checks as leasehold's renew item, on the same value layout), on
/// `count` leases of their own, sent by `tasks` tasks on one multiplexed connection of the
/// raw crate. With one task each call finds Redis idle (what a lone renewal costs); with
/// 32 Redis is kept busy, as by a steady stream of renewals, and each call costs it the
/// least. Returns the Redis CPU per call, in µs.
async fn unbatched_renew_us(
    env: &Env,
    info: &mut MultiplexedConnection,
    count: usize,
    tasks: usize,
) -> f64 {
    let con = env.connection().await;
    let script = Arc::new(redis::Script::new(FLOOR_RENEW_LUA));
    let mine = "bench-owner-token-0000000000000000 bench ";
    let keys: Vec<String> = (0..count)
        .map(|i| format!("floor:{}:renew{tasks}:{i}", env.run))
        .collect();
    let ttl_ms = LOCK_TTL.as_millis() as u64;
    let mut setup = con.clone();
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(format!("{mine}1"))
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut setup)
            .await
            .expect("floor-R: SET");
    }
    // Loads the script, so the measured calls are all EVALSHA hits.
    let _: Vec<String> = script
        .key(&keys[0])
        .arg(mine)
        .arg(ttl_ms)
        .invoke_async(&mut setup)
        .await
        .expect("floor-R");
    let cpu = CpuMeter::start(info).await;
    let tasks: Vec<_> = (0..tasks)
        .map(|t| {
            let (mut con, script) = (con.clone(), script.clone());
            let mine_keys: Vec<String> = keys.iter().skip(t).step_by(tasks).cloned().collect();
            tokio::spawn(async move {
                for key in mine_keys {
                    let reply: Vec<String> = script
                        .key(&key)
                        .arg(mine)
                        .arg(ttl_ms)
                        .invoke_async(&mut con)
                        .await
                        .expect("floor-R");
                    assert_eq!(reply, ["RENEWED"], "floor-R: renew of {key}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("floor-R task");
    }
    let used = cpu.finish(info).await;
    used.per(count as u64).1
}

async fn start_idle(runtime: &LeaseRuntime, req: &LeaseRequest) -> LeaseJob<WorkerMsg> {
    let worker = Worker {
        stop_at_once: false,
    };
    match runtime
        .spawn_under_lease(req, worker, |_ctx| (), CancelPolicy::Kill)
        .await
        .expect("R: spawn_under_lease")
    {
        SpawnOutcome::Started(job) => job,
        SpawnOutcome::NotAcquired(other) => {
            panic!("R: spawn_under_lease was {} ({other:?})", other.as_str())
        }
    }
}
