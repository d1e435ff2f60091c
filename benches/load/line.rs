//! H<W>: many waiters on one lease. W waiters over W/4 clients, 100 at most (as that many
//! processes would be), each waiting with the library's own wait (leasehold: `acquire`, 60
//! s wait; rslock: `acquire_no_guard`, its retry loop at its default settings;
//! async-redis-lock: its `acquire_with_options`, retrying every 100 ms by default), holding
//! 2 ms, releasing and queueing again, until `grants` grants (800, and at least 2 W). The
//! run starts on a full line: the lease is held while the waiters queue (leasehold: until
//! its line counts all W; the peers, which have none: one second), then released. Per row:
//! grants/s (`ops_per_s`), the handoff gap (a release's call to the next grant) p50/p99,
//! Redis commands per grant (`INFO stats` `total_commands_processed`, which counts a
//! script's own calls; keep-alives and retries included) against an uncontended cycle's
//! measured the same way in the same child, the longest single wait against the fair bound
//! (the waiters ahead × the measured cycle: what first come, first served would give; a
//! first wait counts from the run's start), and grants per waiter over the run's first
//! `grants` grants.

use std::sync::atomic::AtomicUsize;

use super::*;

/// How long a waiter holds the lease.
const HOLD: Duration = Duration::from_millis(2);
/// The longest a waiter waits in one call.
const WAIT: Duration = Duration::from_secs(60);
/// Uncontended cycles measured for the baseline.
const SOLO_CYCLES: usize = 50;
/// Clients at most (W/4 up to this): 200 waiters over 50, 1,000 over 100, as the processes
/// of a fleet would be.
const MAX_CLIENTS: usize = 100;
/// Grants a full run counts at least; and twice the waiters, so that every waiter is
/// served and queues again behind the whole line (the keep-alives and looks of a full
/// line's waiters are in the count, not only the first lap's).
const GRANTS: usize = 800;

/// A lock one waiter waits for with the crate's own wait, then releases.
trait Waiting: Send + Sync + 'static {
    type Held: Send;

    /// Waits until it holds `key` (its own retry loop); panics on anything but that.
    fn wait_for(&self, key: &str) -> impl Future<Output = Self::Held> + Send;

    /// Releases what [`wait_for`](Self::wait_for) took; panics unless it did.
    fn release(&self, held: Self::Held) -> impl Future<Output = ()> + Send;

    /// How many wait for `key`, if the crate can say (only a crate with a line can).
    fn waiting(&self, _key: &str) -> impl Future<Output = Option<u64>> + Send {
        async { None }
    }
}

struct Leasehold(LeaseClient);

impl Waiting for Leasehold {
    type Held = leasehold::LeaseHandle;

    async fn wait_for(&self, key: &str) -> Self::Held {
        let req = request(&self.0, key, LOCK_TTL, WAIT);
        match self.0.acquire(&req).await.expect("valid request") {
            AcquireOutcome::Acquired(lease) => lease,
            other => panic!("H: acquire was {} ({other:?})", other.as_str()),
        }
    }

    async fn release(&self, mut held: Self::Held) {
        assert_eq!(held.release().await, ReleaseOutcome::Released, "H: release");
    }

    async fn waiting(&self, key: &str) -> Option<u64> {
        let req = request(&self.0, key, LOCK_TTL, WAIT);
        self.0.inspect_with_line(&req).await.waiting
    }
}

struct RslockLine(rslock::LockManager);

impl Waiting for RslockLine {
    type Held = rslock::Lock;

    async fn wait_for(&self, key: &str) -> Self::Held {
        self.0
            .acquire_no_guard(key.as_bytes(), LOCK_TTL)
            .await
            .expect("rslock: acquire")
    }

    async fn release(&self, held: Self::Held) {
        self.0.unlock(&held).await;
    }
}

struct AsyncRedisLockLine(AsyncRedisLock);

impl Waiting for AsyncRedisLockLine {
    type Held = async_redis_lock::Lock;

    async fn wait_for(&self, key: &str) -> Self::Held {
        self.0
            .locker
            .acquire_with_options(&self.0.options, key)
            .await
            .expect("async-redis-lock: acquire")
    }

    async fn release(&self, held: Self::Held) {
        held.release().await.expect("async-redis-lock: release");
    }
}

/// One grant as its waiter saw it.
#[derive(Clone, Copy)]
struct Grant {
    waiter: usize,
    entered: Instant,
    acquired: Instant,
    /// When its release was called.
    released: Instant,
}

/// What the waiters share.
#[derive(Default)]
struct Line {
    granted: AtomicUsize,
    grants: Mutex<Vec<Grant>>,
}

/// The `line` child: `system` with `waiters` waiters on one key.
pub(crate) async fn line(env: Env, waiters: usize, system: &str) {
    let clients = (waiters / 4).clamp(1, MAX_CLIENTS);
    let grants = if env.quick {
        100
    } else {
        GRANTS.max(2 * waiters)
    };
    let row = match system {
        "leasehold" => {
            let made: Vec<_> = (0..clients).map(|_| Leasehold(env.client())).collect();
            measure(&env, made, waiters, grants, "H").await
        }
        "rslock" => {
            let made = (0..clients)
                .map(|_| RslockLine(rslock::LockManager::new(vec![env.url.clone()])))
                .collect();
            measure(&env, made, waiters, grants, "rslock-H").await
        }
        "async-redis-lock" => {
            let mut made = Vec::new();
            for _ in 0..clients {
                let mut peer = AsyncRedisLock::new(&env).await;
                peer.options = peer.options.timeout(Some(WAIT));
                made.push(AsyncRedisLockLine(peer));
            }
            measure(&env, made, waiters, grants, "async-redis-lock-H").await
        }
        other => panic!("unknown line system {other}"),
    };
    row.print();
}

/// `INFO stats` `total_commands_processed`.
async fn commands(info: &mut MultiplexedConnection) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(info)
        .await
        .expect("INFO stats");
    text.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_commands_processed in INFO stats")
}

/// Redis commands per uncontended cycle (wait, hold, release) on `system`, alone.
async fn solo<S: Waiting>(system: &S, key: &str, info: &mut MultiplexedConnection) -> f64 {
    let before = commands(info).await;
    for _ in 0..SOLO_CYCLES {
        let held = system.wait_for(key).await;
        tokio::time::sleep(HOLD).await;
        system.release(held).await;
    }
    // The INFO call itself counts once.
    (commands(info).await - before).saturating_sub(1) as f64 / SOLO_CYCLES as f64
}

async fn measure<S: Waiting>(
    env: &Env,
    clients: Vec<S>,
    waiters: usize,
    target: usize,
    prefix: &str,
) -> Row {
    let mut info = env.connection().await;
    let clients: Vec<Arc<S>> = clients.into_iter().map(Arc::new).collect();
    let solo_cmds = solo(&*clients[0], &format!("{}:solo", env.run), &mut info).await;
    let key = Arc::new(format!("{}:line", env.run));
    let line = Arc::new(Line::default());
    // The run starts on a full line: one holds the lease while every waiter queues, so the
    // first lap is in the order the waiters came, not a race between early waiters coming
    // back and late ones arriving.
    let starter = clients[0].wait_for(&key).await;
    let tasks: Vec<_> = (0..waiters)
        .map(|waiter| {
            let system = Arc::clone(&clients[waiter % clients.len()]);
            let (key, line) = (Arc::clone(&key), Arc::clone(&line));
            tokio::spawn(async move {
                loop {
                    let entered = Instant::now();
                    let held = system.wait_for(&key).await;
                    let acquired = Instant::now();
                    tokio::time::sleep(HOLD).await;
                    let released = Instant::now();
                    system.release(held).await;
                    line.grants.lock().expect("grants").push(Grant {
                        waiter,
                        entered,
                        acquired,
                        released,
                    });
                    line.granted.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    full_line(&*clients[0], &key, waiters, prefix).await;
    let before = commands(&mut info).await;
    let cpu = CpuMeter::start(&mut info).await;
    let start = Instant::now();
    clients[0].release(starter).await;
    let deadline = Instant::now() + env.pick(Duration::from_secs(20), Duration::from_secs(60));
    while line.granted.load(Ordering::SeqCst) < target && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let commands_used = commands(&mut info).await - before;
    let mut grants = line.grants.lock().expect("grants").clone();
    let used = cpu.finish(&mut info).await;
    for task in &tasks {
        task.abort();
    }
    summarize(
        env,
        prefix,
        (waiters, clients.len(), target, start),
        &mut grants,
        commands_used,
        solo_cmds,
        &used,
    )
}

/// Waits until `waiters` wait for `key`: as `system`'s line says, or, for a crate without
/// one, long enough for every waiter to have tried once.
async fn full_line<S: Waiting>(system: &S, key: &str, waiters: usize, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match system.waiting(key).await {
            Some(n) if n >= waiters as u64 => return,
            Some(n) => assert!(
                Instant::now() < deadline,
                "{prefix}: {n} of {waiters} waiters in line after 30 s"
            ),
            None => return tokio::time::sleep(Duration::from_secs(1)).await,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn summarize(
    env: &Env,
    prefix: &str,
    (waiters, clients, target, start): (usize, usize, usize, Instant),
    grants: &mut [Grant],
    commands_used: u64,
    solo_cmds: f64,
    used: &Used,
) -> Row {
    assert!(grants.len() > 1, "{prefix}: fewer than two grants");
    grants.sort_by_key(|g| g.acquired);
    let n = grants.len();
    let mut gaps = Samples::default();
    for pair in grants.windows(2) {
        gaps.push(pair[1].acquired.saturating_duration_since(pair[0].released));
    }
    let (p50, p99) = gaps.p50_p99();
    let window = used.wall;
    let cycle = window / n as f64;
    let fair = cycle * (waiters - 1) as f64;
    // A first wait counts from the run's start: before it the line was filling.
    let longest = grants
        .iter()
        .map(|g| (g.acquired - g.entered.max(start)).as_secs_f64())
        .fold(0.0, f64::max);
    // Over the run's first `target` grants: those granted after it were cut short by the
    // stop, some waiters' but not others'.
    let mut per_waiter = vec![0usize; waiters];
    for g in grants.iter().take(target) {
        per_waiter[g.waiter] += 1;
    }
    let cmds_per_grant = commands_used as f64 / n as f64;
    let (_, srv_us) = used.per(n as u64);
    env.row(
        &format!("{prefix}{waiters}"),
        n as f64 / window,
        (p50, p99),
        ("wait_to_fair", ratio(longest, fair)),
        vec![
            ("waiters", waiters.to_string()),
            ("clients", clients.to_string()),
            ("grants", n.to_string()),
            ("cmds_per_grant", format!("{cmds_per_grant:.1}")),
            ("uncontended_cmds_per_grant", format!("{solo_cmds:.1}")),
            (
                "cmds_ratio_to_uncontended",
                ratio(cmds_per_grant, solo_cmds).map_or("na".to_owned(), |r| format!("{r:.2}")),
            ),
            ("longest_wait_ms", format!("{:.0}", longest * 1e3)),
            ("fair_bound_ms", format!("{:.0}", fair * 1e3)),
            (
                "grants_min",
                per_waiter.iter().min().unwrap_or(&0).to_string(),
            ),
            (
                "grants_max",
                per_waiter.iter().max().unwrap_or(&0).to_string(),
            ),
            ("srv_cpu_us_per_grant", format!("{srv_us:.1}")),
            ("bg_cores", used.bg_cores()),
        ],
    )
}
