//! The peer renew children: R<n> for rslock, async-redis-lock and the fenced floor — n
//! locks held, each extended on leasehold's cadence the way that crate's user does it,
//! measured like leasehold's R (client and Redis CPU per renewal in a window of two
//! periods, RSS per held lock).
//!
//! * async-redis-lock extends each lock itself, from a task it spawns per lock.
//! * rslock does not renew: its user extends each lock from a task of their own
//!   (`sleep(cadence)` then `LockManager::extend`), which is what runs here.
//! * The fenced floor (`floor_fenced`) is held the same way: its fenced acquisitions, then a
//!   task per lease sending one owner-checked renewal each `cadence` (`PEXPIRE` by script,
//!   or `SET … IFEQ` where the server has it), un-batched.

use std::sync::atomic::AtomicUsize;

use super::*;

/// Renewals a peer made: its extension calls (`commands`, e.g. `EVALSHA` and `EVAL`, from
/// `INFO commandstats`), between two readings.
async fn renewal_calls(info: &mut MultiplexedConnection, commands: &[&str]) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(info)
        .await
        .expect("INFO commandstats");
    text.lines()
        .filter(|l| {
            commands.iter().any(|c| {
                l.strip_prefix("cmdstat_")
                    .and_then(|l| l.strip_prefix(c))
                    .is_some_and(|l| l.starts_with(':'))
            })
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The locks one peer holds, and how they end. A peer's failure (an extension or a
/// release it reports failed, a lock it could not take) is counted in its row, not a
/// panic: the run goes on and the other rows are measured.
enum Held {
    Rslock {
        manager: rslock::LockManager,
        locks: Vec<(Arc<rslock::Lock>, tokio::task::JoinHandle<()>)>,
        /// Locks whose extension failed (each stops renewing then).
        lost: Arc<AtomicUsize>,
        not_taken: usize,
    },
    AsyncRedisLock {
        locks: Vec<async_redis_lock::Lock>,
        not_taken: usize,
    },
    FloorFenced {
        floor: FloorFenced,
        /// Each lease's key and value, and its renewal task.
        locks: Vec<((String, String), tokio::task::JoinHandle<()>)>,
        /// Leases whose renewal failed or found them gone (each stops renewing then).
        lost: Arc<AtomicUsize>,
        not_taken: usize,
    },
}

impl Held {
    async fn acquire(env: &Env, peer: &str, n: usize, ttl: Duration, cadence: Duration) -> Self {
        let key = |i: usize| format!("{peer}:{}:r:{i}", env.run);
        match peer {
            "rslock" => {
                let Rslock(manager) = Rslock::new(env);
                let mut locks = Vec::with_capacity(n);
                let lost = Arc::new(AtomicUsize::new(0));
                let mut not_taken = 0;
                for i in 0..n {
                    let lock = match manager.lock(key(i).as_bytes(), ttl).await {
                        Ok(lock) => Arc::new(lock),
                        Err(e) => {
                            eprintln!("rslock-R: lock: {e}");
                            not_taken += 1;
                            continue;
                        }
                    };
                    let (manager, held, lost) = (manager.clone(), lock.clone(), lost.clone());
                    let renew = tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(cadence).await;
                            if let Err(e) = manager.extend(&held, ttl).await {
                                eprintln!("rslock-R: extend: {e}");
                                lost.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                        }
                    });
                    locks.push((lock, renew));
                }
                Held::Rslock {
                    manager,
                    locks,
                    lost,
                    not_taken,
                }
            }
            "async-redis-lock" => {
                let peer = AsyncRedisLock::new(env).await;
                let options = peer.options.clone().ttl(ttl).extend(cadence);
                let mut locks = Vec::with_capacity(n);
                let mut not_taken = 0;
                for i in 0..n {
                    match peer.locker.acquire_with_options(&options, key(i)).await {
                        Ok(lock) => locks.push(lock),
                        Err(e) => {
                            eprintln!("async-redis-lock-R: acquire: {e}");
                            not_taken += 1;
                        }
                    }
                }
                Held::AsyncRedisLock { locks, not_taken }
            }
            "floor-fenced" => {
                let mut floor = FloorFenced::new(env).await;
                let mut locks = Vec::with_capacity(n);
                let lost = Arc::new(AtomicUsize::new(0));
                let mut not_taken = 0;
                for i in 0..n {
                    let (lease, fence) = fenced_keys(&key(i));
                    let value = match floor.try_acquire(&lease, &fence, ttl).await {
                        Ok(Some(value)) => value,
                        Ok(None) => {
                            eprintln!("floor-fenced-R: {lease} was held");
                            not_taken += 1;
                            continue;
                        }
                        Err(e) => {
                            eprintln!("floor-fenced-R: acquire: {e}");
                            not_taken += 1;
                            continue;
                        }
                    };
                    let (mut floor, lost) = (floor.clone(), lost.clone());
                    let (held_lease, held_value) = (lease.clone(), value.clone());
                    let renew = tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(cadence).await;
                            match floor.try_renew(&held_lease, &held_value, ttl).await {
                                Ok(true) => {}
                                Ok(false) => {
                                    eprintln!("floor-fenced-R: {held_lease} was gone");
                                    lost.fetch_add(1, Ordering::SeqCst);
                                    return;
                                }
                                Err(e) => {
                                    eprintln!("floor-fenced-R: renew: {e}");
                                    lost.fetch_add(1, Ordering::SeqCst);
                                    return;
                                }
                            }
                        }
                    });
                    locks.push(((lease, value), renew));
                }
                Held::FloorFenced {
                    floor,
                    locks,
                    lost,
                    not_taken,
                }
            }
            other => panic!("unknown peer {other}"),
        }
    }

    /// How many locks are known lost: an extension failed (rslock), or the crate's own
    /// flag (async-redis-lock).
    fn lost(&self) -> usize {
        match self {
            Held::Rslock { lost, .. } | Held::FloorFenced { lost, .. } => {
                lost.load(Ordering::SeqCst)
            }
            Held::AsyncRedisLock { locks, .. } => locks.iter().filter(|l| l.is_lost()).count(),
        }
    }

    /// How many locks could not be taken at all.
    fn not_taken(&self) -> usize {
        match self {
            Held::Rslock { not_taken, .. }
            | Held::AsyncRedisLock { not_taken, .. }
            | Held::FloorFenced { not_taken, .. } => *not_taken,
        }
    }

    /// The commands one renewal is, as `INFO commandstats` names them.
    fn renewal_commands(&self) -> &'static [&'static str] {
        match self {
            Held::FloorFenced { floor, .. } if floor.renews_natively() => &["set"],
            _ => &["evalsha", "eval"],
        }
    }

    /// Releases every lock; how many releases failed.
    async fn release(self) -> usize {
        let mut failed = 0;
        match self {
            Held::Rslock { manager, locks, .. } => {
                for (lock, renew) in locks {
                    renew.abort();
                    manager.unlock(&lock).await;
                }
            }
            Held::AsyncRedisLock { locks, .. } => {
                for lock in locks {
                    if let Err(e) = lock.release().await {
                        eprintln!("async-redis-lock-R: release: {e}");
                        failed += 1;
                    }
                }
            }
            Held::FloorFenced {
                mut floor, locks, ..
            } => {
                for ((lease, value), renew) in locks {
                    renew.abort();
                    match floor.try_release(&lease, &value).await {
                        Ok(true) => {}
                        Ok(false) => {
                            eprintln!("floor-fenced-R: release of {lease} deleted nothing");
                            failed += 1;
                        }
                        Err(e) => {
                            eprintln!("floor-fenced-R: release: {e}");
                            failed += 1;
                        }
                    }
                }
            }
        }
        failed
    }
}

pub(crate) async fn peer_renewals(env: Env, n: usize, peer: &str) {
    let mut info = env.connection().await;
    let (ttl, cadence) = r_schedule(&env, &env.client(), false);
    let window = cadence * 2;
    let rss_before = rss_kb();
    let acquiring = Instant::now();
    let held = Held::acquire(&env, peer, n, ttl, cadence).await;
    let acquire_s = acquiring.elapsed().as_secs_f64();
    let rss_after = rss_kb();

    let commands = held.renewal_commands();
    let calls_before = renewal_calls(&mut info, commands).await;
    let cpu = CpuMeter::start(&mut info).await;
    let window_start = Instant::now();
    tokio::time::sleep(window).await;
    let window_s = window_start.elapsed().as_secs_f64();
    let used = cpu.finish(&mut info).await;
    // The two INFO calls themselves are not script calls.
    let renewals = renewal_calls(&mut info, commands).await - calls_before;
    let (client_us, server_us) = used.per(renewals);
    let lost = held.lost();
    let not_taken = held.not_taken();
    let release_failed = held.release().await;

    let rss_per_lease = (rss_after as f64 - rss_before as f64) * 1024.0 / n as f64;
    let expected = n as f64 * window.as_secs_f64() / cadence.as_secs_f64();
    env.row(
        &format!("{peer}-{}", r_workload(n, false)),
        renewals as f64 / window_s,
        (f64::NAN, f64::NAN),
        ("ratio_to_floor", None),
        vec![
            ("leases", n.to_string()),
            ("ttl_s", format!("{}", ttl.as_secs_f64())),
            ("cadence_s", format!("{:.3}", cadence.as_secs_f64())),
            ("window_s", format!("{window_s:.2}")),
            ("renewals", renewals.to_string()),
            ("expected_renewals", format!("{expected:.0}")),
            ("client_cpu_us_per_renewal", format!("{client_us:.1}")),
            ("srv_cpu_us_per_renewal", format!("{server_us:.1}")),
            ("rss_bytes_per_lease", format!("{rss_per_lease:.0}")),
            ("lost", lost.to_string()),
            ("not_taken", not_taken.to_string()),
            ("release_failed", release_failed.to_string()),
            ("acquire_s", format!("{acquire_s:.2}")),
            ("bg_cores", used.bg_cores()),
        ],
    )
    .print();
}

/// The line comparing leasehold's R row with the peers' (each `leasehold ÷ peer`: below 1,
/// leasehold spends less), from the rows the children printed.
pub(crate) fn r_peer_ratios(flavor: &str, leasehold: &str, peers: &[(&str, String)]) {
    let value = |line: &str, name: &str| -> f64 {
        field_of(line, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let workload = field_of(leasehold, "workload").unwrap_or("R");
    let mut line = format!("RESULT workload={workload}-vs-peers flavor={flavor}");
    for (peer, row) in peers {
        let peer = peer.replace('-', "_");
        for (field, short) in [
            ("client_cpu_us_per_renewal", "client_cpu"),
            ("srv_cpu_us_per_renewal", "srv_cpu"),
            ("rss_bytes_per_lease", "rss"),
        ] {
            let ratio = value(leasehold, field) / value(row, field);
            line.push_str(&format!(" {short}_ratio_to_{peer}={ratio:.3}"));
        }
    }
    println!("{line} server={}", server_label());
}
