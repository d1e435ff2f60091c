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
