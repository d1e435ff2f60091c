//! The core child: W1, W2, W3, PING, H (handoff) and A (actors).

use super::*;

/// `slices` slices of `slice` each, quick or not.
pub(crate) struct Slicing {
    pub(crate) slices: usize,
    pub(crate) slice: Duration,
}

impl Env {
    pub(crate) fn slicing(&self, quick: (usize, u64), full: (usize, u64)) -> Slicing {
        let (slices, ms) = if self.quick { quick } else { full };
        Slicing {
            slices,
            slice: Duration::from_millis(ms),
        }
    }
}

pub(crate) async fn core(env: Env) {
    let client = env.client();
    let mut floor = Floor::new(&env).await;
    let mut fenced = FloorFenced::new(&env).await;
    let peers = Peers::new(&env).await;
    let (rs, arl) = (&peers.rslock, &peers.async_redis_lock);
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
        fenced
            .cycle(&format!("floor-fenced:{}:warm:{i}", env.run))
            .await;
    }

    // Each workload runs leasehold, the floor and the peers in alternating slices, so all
    // see the same background load. W1: 2 s each in 250 ms slices (quick: 0.3 s).
    let s = env.slicing((3, 100), (8, 250));
    let mut parts = Parts::default();
    for k in 0..s.slices {
        parts
            .floor
            .add(w1_baseline(&env, &floor, &mut info, s.slice, k).await);
        parts
            .fenced
            .add(w1_baseline(&env, &fenced, &mut info, s.slice, k).await);
        parts
            .rslock
            .add(w1_baseline(&env, rs, &mut info, s.slice, k).await);
        parts
            .arl
            .add(w1_baseline(&env, arl, &mut info, s.slice, k).await);
        parts
            .lease
            .add(w1_lease(&env, &client, &mut info, s.slice, k).await);
    }
    parts.cycle_rows(&env, "W1", None);

    // W2: 10 s each in 1 s slices (quick: 1 s).
    let s = env.slicing((2, 500), (10, 1000));
    let mut parts = Parts::default();
    for k in 0..s.slices {
        parts
            .floor
            .add(w2_baseline(&env, &floor, &mut info, s.slice, k).await);
        parts
            .fenced
            .add(w2_baseline(&env, &fenced, &mut info, s.slice, k).await);
        parts
            .rslock
            .add(w2_baseline(&env, rs, &mut info, s.slice, k).await);
        parts
            .arl
            .add(w2_baseline(&env, arl, &mut info, s.slice, k).await);
        parts
            .lease
            .add(w2_lease(&env, &client, &mut info, s.slice, k).await);
    }
    parts.cycle_rows(&env, "W2", Some(W2_TASKS));

    // W3: 2 s each in 500 ms slices (quick: 0.5 s).
    let s = env.slicing((2, 250), (4, 500));
    let mut parts = Parts::default();
    let mut counted = Part::default();
    for k in 0..s.slices {
        parts
            .floor
            .add(w3_baseline(&env, &floor, &mut info, s.slice, k).await);
        parts
            .rslock
            .add(w3_baseline(&env, rs, &mut info, s.slice, k).await);
        parts
            .arl
            .add(w3_baseline(&env, arl, &mut info, s.slice, k).await);
        parts
            .lease
            .add(w3_lease(&env, &client, &mut info, s.slice, k, 1).await);
        counted.add(w3_lease(&env, &client, &mut info, s.slice, k, W3_PERMITS).await);
    }
    // The counted lease's row, beside the plain one: what reading and choosing among
    // W3_PERMITS slots costs per try.
    let to_plain = ratio(counted.ops_per_s(), parts.lease.ops_per_s());
    let to_floor = ratio(counted.ops_per_s(), parts.floor.ops_per_s());
    parts.contention_rows(&env, "W3");
    let mut row = contention_row(&env, &format!("W3-permits{W3_PERMITS}"), counted, to_floor);
    let to_plain = to_plain.map_or("na".to_owned(), |r| format!("{r:.3}"));
    row.extra.push(("ratio_to_plain", to_plain));
    row.print();

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

pub(crate) fn field_of_row(row: &Row, name: &str) -> f64 {
    row.extra
        .iter()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// One workload's parts: leasehold's, the floor's and each peer's, added up over its slices.
#[derive(Default)]
pub(crate) struct Parts {
    pub(crate) lease: Part,
    pub(crate) floor: Part,
    /// The fenced floor's (W1, W2; W3 has none: empty).
    pub(crate) fenced: Part,
    pub(crate) rslock: Part,
    pub(crate) arl: Part,
}

impl Parts {
    /// `ratio_to_rslock` and `ratio_to_async_redis_lock` of leasehold's row: its rate over
    /// each peer's (> 1: leasehold does more per second); `srv_cpu_ratio_to_…`: Redis CPU per
    /// operation over each peer's (> 1: leasehold costs Redis more).
    fn peer_ratios(&self) -> [(&'static str, String); 4] {
        let lease = self.lease.ops_per_s();
        let srv = |part: &Part| part.used.per(part.ops).1;
        let text = |r: Option<f64>| r.map_or("na".to_owned(), |r| format!("{r:.3}"));
        [
            (
                "ratio_to_rslock",
                text(ratio(lease, self.rslock.ops_per_s())),
            ),
            (
                "ratio_to_async_redis_lock",
                text(ratio(lease, self.arl.ops_per_s())),
            ),
            (
                "srv_cpu_ratio_to_rslock",
                text(ratio(srv(&self.lease), srv(&self.rslock))),
            ),
            (
                "srv_cpu_ratio_to_async_redis_lock",
                text(ratio(srv(&self.lease), srv(&self.arl))),
            ),
        ]
    }

    /// The rows of a lock-cycle workload (W1, W2): the floor, the fenced floor, each peer,
    /// then leasehold.
    pub(crate) fn cycle_rows(self, env: &Env, workload: &str, tasks: Option<usize>) {
        self.print_rows(workload, |name, part, ratio_to_floor| {
            cycle_row(env, name, part, tasks, ratio_to_floor)
        });
    }

    /// The rows of a contention workload (W3): the floor, each peer, then leasehold.
    pub(crate) fn contention_rows(self, env: &Env, workload: &str) {
        self.print_rows(workload, |name, part, ratio_to_floor| {
            contention_row(env, name, part, ratio_to_floor)
        });
    }

    /// `ratio_to_floor_fenced` of leasehold's row: its rate over the fenced floor's in the
    /// same run (> 1: leasehold does more per second), and `srv_cpu_ratio_to_floor_fenced`,
    /// its Redis CPU per operation over the fenced floor's (> 1: leasehold costs Redis
    /// more). None when the workload has no fenced floor (W3).
    fn fenced_ratios(&self) -> Option<[(&'static str, String); 2]> {
        if self.fenced.ops == 0 {
            return None;
        }
        let srv = |part: &Part| part.used.per(part.ops).1;
        let text = |r: Option<f64>| r.map_or("na".to_owned(), |r| format!("{r:.3}"));
        Some([
            (
                "ratio_to_floor_fenced",
                text(ratio(self.lease.ops_per_s(), self.fenced.ops_per_s())),
            ),
            (
                "srv_cpu_ratio_to_floor_fenced",
                text(ratio(srv(&self.lease), srv(&self.fenced))),
            ),
        ])
    }

    fn print_rows(self, workload: &str, row: impl Fn(&str, Part, Option<f64>) -> Row) {
        let peer_ratios = self.peer_ratios();
        let fenced_ratios = self.fenced_ratios();
        let floor = self.floor.ops_per_s();
        let srv = |part: &Part| part.used.per(part.ops).1;
        // The fenced floor's Redis CPU over the floor's: what the token and the notice cost.
        let fenced_srv = ratio(srv(&self.fenced), srv(&self.floor))
            .map_or("na".to_owned(), |r| format!("{r:.3}"));
        let to_floor = |part: &Part| ratio(part.ops_per_s(), floor);
        let (rs, arl) = (to_floor(&self.rslock), to_floor(&self.arl));
        let lease = to_floor(&self.lease);
        let fenced = to_floor(&self.fenced);
        row(&format!("floor-{workload}"), self.floor, Some(1.0)).print();
        if fenced_ratios.is_some() {
            let mut floor_fenced = row(&format!("floor-fenced-{workload}"), self.fenced, fenced);
            floor_fenced
                .extra
                .push(("srv_cpu_ratio_to_floor", fenced_srv));
            floor_fenced.print();
        }
        row(&format!("rslock-{workload}"), self.rslock, rs).print();
        row(&format!("async-redis-lock-{workload}"), self.arl, arl).print();
        let mut leasehold = row(workload, self.lease, lease);
        leasehold.extra.extend(peer_ratios);
        leasehold.extra.extend(fenced_ratios.into_iter().flatten());
        leasehold.print();
    }
}

pub(crate) fn cycle_row(
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

/// W1 baseline slice: one task, lock → unlock on distinct keys.
pub(crate) async fn w1_baseline<B: Baseline>(
    env: &Env,
    base: &B,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let mut base = base.clone();
    with_cpu(info, async {
        timed_until!(Instant::now() + d, |i, _lap| {
            let key = format!("{}:{}:w1:{slice}:{i}", base.name(), env.run);
            base.cycle(&key).await;
            Step::Done
        })
    })
    .await
}

/// W1 slice: one task, request (digest, fresh attempt, builder) → acquire → release.
pub(crate) async fn w1_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    with_cpu(info, async {
        timed_until!(Instant::now() + d, |i, _lap| {
            let key = format!("{}:w1:{slice}:k{i}", env.run);
            let req = request(client, &key, LOCK_TTL, Duration::ZERO);
            lease_cycle(client, &req, "W1").await;
            Step::Done
        })
    })
    .await
}

pub(crate) const W2_TASKS: usize = 64;

/// W2 baseline slice: 64 tasks, each doing W1 on its own keys.
pub(crate) async fn w2_baseline<B: Baseline>(
    env: &Env,
    base: &B,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let what = format!("{}-W2", base.name());
    timed_tasks(info, W2_TASKS, d, &what, |task, deadline| {
        let mut base = base.clone();
        let run = env.run.clone();
        tokio::spawn(async move {
            timed_until!(deadline, |i, _lap| {
                let key = format!("{}:{run}:w2:{slice}:{task}:{i}", base.name());
                base.cycle(&key).await;
                Step::Done
            })
        })
    })
    .await
}

pub(crate) async fn w2_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    timed_tasks(info, W2_TASKS, d, "W2", |task, deadline| {
        let client = client.clone();
        let run = env.run.clone();
        tokio::spawn(async move {
            timed_until!(deadline, |i, _lap| {
                let key = format!("{run}:w2:{slice}:{task}:k{i}");
                let req = request(&client, &key, LOCK_TTL, Duration::ZERO);
                lease_cycle(&client, &req, "W2").await;
                Step::Done
            })
        })
    })
    .await
}

pub(crate) const W3_TASKS: usize = 16;
/// Permits of W3's counted lease row.
pub(crate) const W3_PERMITS: u32 = 4;

/// W3 baseline slice: 16 tasks, one try per iteration on one key (for the floor a `SET NX
/// PX`); the winner unlocks at once. Only the try is timed.
pub(crate) async fn w3_baseline<B: Baseline>(
    env: &Env,
    base: &B,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let key: Arc<str> = format!("{}:{}:w3:{slice}", base.name(), env.run).into();
    let what = format!("{}-W3", base.name());
    timed_tasks(info, W3_TASKS, d, &what, |_, deadline| {
        let mut base = base.clone();
        let key = key.clone();
        tokio::spawn(async move {
            timed_until!(deadline, |_i, lap| {
                let held = base.try_lock_once(&key).await;
                lap.stop();
                match held {
                    Some(held) => {
                        base.unlock_held(held).await;
                        Step::Done
                    }
                    None => Step::Refused,
                }
            })
        })
    })
    .await
}

/// W3 slice: 16 tasks, one `try_acquire` per iteration on one key (a lease of `permits`);
/// the winner releases at once and takes a fresh attempt; a refused task tries the same
/// request again. Only the try is timed.
pub(crate) async fn w3_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
    permits: u32,
) -> Part {
    let key: Arc<str> = format!("{}:w3:{slice}:n{permits}", env.run).into();
    let what = format!("W3-permits{permits}");
    let request = move |client: &LeaseClient, key: &str| {
        client
            .request(purpose().as_str(), key)
            .expect("request")
            .ttl(LOCK_TTL)
            .permits(permits)
            .build()
            .expect("request")
    };
    timed_tasks(info, W3_TASKS, d, &what, |_, deadline| {
        let client = client.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let mut req = request(&client, &key);
            timed_until!(deadline, |_i, lap| {
                let outcome = client.try_acquire(&req).await.expect("valid request");
                lap.stop();
                match outcome {
                    AcquireOutcome::Acquired(mut lease) => {
                        let released = lease.release().await;
                        assert_eq!(released, ReleaseOutcome::Released, "W3: release");
                        req = request(&client, &key);
                        Step::Done
                    }
                    AcquireOutcome::Contended { .. } => Step::Refused,
                    other => panic!("W3: try_acquire was {} ({other:?})", other.as_str()),
                }
            })
        })
    })
    .await
}

pub(crate) fn contention_row(
    env: &Env,
    workload: &str,
    mut part: Part,
    ratio_to_floor: Option<f64>,
) -> Row {
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
pub(crate) async fn ping(env: &Env, floor: &Floor, info: &mut MultiplexedConnection) -> Row {
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
