//! Measuring helpers: samples and quantiles, process and server CPU, RSS, the machine's
//! load, and the one `RESULT` row every workload prints.

use super::*;

/// One workload accumulated over its slices.
#[derive(Default)]
pub(crate) struct Part {
    /// Per-cycle (W1, W2) or per-try (W3) latencies.
    pub(crate) samples: Samples,
    /// Cycles (W1, W2) or successful acquisitions (W3).
    pub(crate) ops: u64,
    /// Refused tries (W3).
    pub(crate) refused: u64,
    pub(crate) used: Used,
}

impl Part {
    pub(crate) fn add(&mut self, other: Part) {
        self.samples.extend(other.samples);
        self.ops += other.ops;
        self.refused += other.refused;
        self.used.add(&other.used);
    }

    pub(crate) fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.used.wall.max(1e-9)
    }
}

/// What one timed call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// It counts as one operation (a cycle, or a won try).
    Done,
    /// A refused try.
    Refused,
}

/// The clock of one timed call: its sample runs from the call's start to [`Lap::stop`], or
/// to its end if it never stops it (a call that times its try but not the release after).
pub(crate) struct Lap {
    started: Instant,
    stopped: Option<Duration>,
}

impl Lap {
    pub(crate) fn start() -> Lap {
        Lap {
            started: Instant::now(),
            stopped: None,
        }
    }

    /// Ends the sample here; the first call counts.
    pub(crate) fn stop(&mut self) -> Duration {
        *self.stopped.get_or_insert_with(|| self.started.elapsed())
    }
}

/// The one timing loop of the workloads: runs `body` back to back until `deadline`, one
/// latency sample per run, counted by the [`Step`] it evaluates to; `i` is the number of
/// operations done so far (to name a fresh key), `lap` the run's [`Lap`]. A macro, not a
/// function taking an async closure: a spawned task's loop must be `Send`, which a closure
/// that borrows its captures across an await cannot yet promise.
macro_rules! timed_until {
    ($deadline:expr, |$i:ident, $lap:ident| $body:expr) => {{
        let deadline: Instant = $deadline;
        let mut part = Part::default();
        while Instant::now() < deadline {
            #[allow(unused_mut)]
            let mut $lap = Lap::start();
            let $i = part.ops;
            let step: Step = $body;
            part.samples.push($lap.stop());
            match step {
                Step::Done => part.ops += 1,
                Step::Refused => part.refused += 1,
            }
        }
        part
    }};
}
pub(crate) use timed_until;

/// `work` (a workload's slice), with the process and Redis CPU it used.
pub(crate) async fn with_cpu(
    info: &mut MultiplexedConnection,
    work: impl Future<Output = Part>,
) -> Part {
    let cpu = CpuMeter::start(info).await;
    let mut part = work.await;
    part.used = cpu.finish(info).await;
    part
}

/// One slice of a many-task workload: `tasks` tasks, each started by `spawn(task,
/// deadline)` and timing its own loop until `deadline` (`d` from now), joined into one part
/// with the CPU of the whole slice.
pub(crate) async fn timed_tasks(
    info: &mut MultiplexedConnection,
    tasks: usize,
    d: Duration,
    what: &str,
    mut spawn: impl FnMut(usize, Instant) -> tokio::task::JoinHandle<Part>,
) -> Part {
    with_cpu(info, async {
        let deadline = Instant::now() + d;
        // Every task is spawned before the first join waits.
        let handles: Vec<_> = (0..tasks).map(|task| spawn(task, deadline)).collect();
        let mut part = Part::default();
        for handle in handles {
            let done = handle.await.unwrap_or_else(|e| panic!("{what} task: {e}"));
            part.add(done);
        }
        part
    })
    .await
}

/// Latency samples in nanoseconds.
#[derive(Default)]
pub(crate) struct Samples(pub(crate) Vec<u64>);

impl Samples {
    pub(crate) fn push(&mut self, d: Duration) {
        self.0.push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub(crate) fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    /// (p50, p99) in µs, nearest rank.
    pub(crate) fn p50_p99(&mut self) -> (f64, f64) {
        assert!(!self.0.is_empty(), "no samples");
        self.0.sort_unstable();
        (self.quantile_us(0.50), self.quantile_us(0.99))
    }

    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        let n = self.0.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.0[rank - 1] as f64 / 1000.0
    }

    pub(crate) fn total(&self) -> Duration {
        Duration::from_nanos(self.0.iter().sum())
    }
}

pub(crate) fn quantiles_us(mut seconds: Vec<f64>) -> (f64, f64) {
    assert!(!seconds.is_empty(), "no samples");
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    let at = |q: f64| seconds[((q * n as f64).ceil() as usize).clamp(1, n) - 1] * 1e6;
    (at(0.50), at(0.99))
}

/// Process CPU time (all threads, user + system) from `/proc/self/stat`.
pub(crate) fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // Fields after the command name (which may hold spaces): state is field 3, utime 14.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64)
}

/// `AT_CLKTCK` from the auxiliary vector (what `sysconf(_SC_CLK_TCK)` returns).
pub(crate) fn clock_ticks_per_second() -> u64 {
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

pub(crate) fn rss_kb() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Redis server CPU (user + sys, all its threads) in seconds, from `INFO cpu`.
pub(crate) async fn server_cpu(con: &mut MultiplexedConnection) -> f64 {
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
pub(crate) fn machine_busy() -> f64 {
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
pub(crate) struct CpuMeter {
    pub(crate) wall: Instant,
    pub(crate) client: Duration,
    pub(crate) server: f64,
    pub(crate) machine: f64,
}

/// What one phase used, in seconds.
#[derive(Default)]
pub(crate) struct Used {
    pub(crate) wall: f64,
    pub(crate) client: f64,
    pub(crate) server: f64,
    pub(crate) machine: f64,
}

impl CpuMeter {
    pub(crate) async fn start(info: &mut MultiplexedConnection) -> Self {
        Self {
            server: server_cpu(info).await,
            client: process_cpu(),
            machine: machine_busy(),
            wall: Instant::now(),
        }
    }

    pub(crate) async fn finish(self, info: &mut MultiplexedConnection) -> Used {
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
    pub(crate) fn add(&mut self, other: &Used) {
        self.wall += other.wall;
        self.client += other.client;
        self.server += other.server;
        self.machine += other.machine;
    }

    /// (client µs, server µs) per op.
    pub(crate) fn per(&self, ops: u64) -> (f64, f64) {
        let ops = ops.max(1) as f64;
        (self.client * 1e6 / ops, self.server * 1e6 / ops)
    }

    /// CPUs kept busy by other processes on the machine (not this child, not the
    /// benchmark's redis-server) during the phase, on average: non-zero means the numbers
    /// were taken on a shared, loaded machine. Resolution: one clock tick per CPU.
    pub(crate) fn bg_cores(&self) -> String {
        let other = (self.machine - self.client - self.server).max(0.0);
        format!("{:.2}", other / self.wall.max(1e-9))
    }
}

/// One RESULT line.
pub(crate) struct Row {
    pub(crate) workload: String,
    pub(crate) flavor: String,
    pub(crate) ops_per_s: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) ratio: (&'static str, Option<f64>),
    pub(crate) extra: Vec<(&'static str, String)>,
}

impl Row {
    pub(crate) fn print(&self) {
        let ratio = self.ratio.1.map_or("na".to_owned(), |r| format!("{r:.3}"));
        let mut line = format!(
            "RESULT workload={} flavor={} ops_per_s={:.0} p50_us={:.1} p99_us={:.1} {}={ratio}",
            self.workload, self.flavor, self.ops_per_s, self.p50_us, self.p99_us, self.ratio.0,
        );
        for (k, v) in &self.extra {
            line.push_str(&format!(" {k}={v}"));
        }
        line.push_str(&format!(" server={}", server_label()));
        println!("{line}");
        let _ = std::io::stdout().flush();
    }
}

pub(crate) fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}
