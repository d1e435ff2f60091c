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

pub(crate) fn field_of_row(row: &Row, name: &str) -> f64 {
    row.extra
        .iter()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
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

/// W1 floor slice: one task, SET NX PX → owner-checked DEL on distinct keys.
pub(crate) async fn w1_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let mut floor = floor.clone();
    with_cpu(info, async {
        timed_until!(Instant::now() + d, |i, _lap| {
            floor
                .cycle(&format!("floor:{}:w1:{slice}:{i}", env.run))
                .await;
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

pub(crate) async fn w2_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    timed_tasks(info, W2_TASKS, d, "floor-W2", |task, deadline| {
        let mut floor = floor.clone();
        let run = env.run.clone();
        tokio::spawn(async move {
            timed_until!(deadline, |i, _lap| {
                floor
                    .cycle(&format!("floor:{run}:w2:{slice}:{task}:{i}"))
                    .await;
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

/// W3 floor slice: 16 tasks, one `SET NX PX` per iteration on one key; the winner deletes
/// (owner-checked) at once. Only the try is timed.
pub(crate) async fn w3_floor(
    env: &Env,
    floor: &Floor,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let key: Arc<str> = format!("floor:{}:w3:{slice}", env.run).into();
    timed_tasks(info, W3_TASKS, d, "floor-W3", |_, deadline| {
        let mut floor = floor.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let mut token = floor.token();
            timed_until!(deadline, |_i, lap| {
                let won = floor.try_lock(&key, &token).await;
                lap.stop();
                if won {
                    floor.unlock(&key, &token).await;
                    token = floor.token();
                    Step::Done
                } else {
                    Step::Refused
                }
            })
        })
    })
    .await
}

/// W3 slice: 16 tasks, one `try_acquire` per iteration on one key; the winner releases at
/// once and takes a fresh attempt; a refused task tries the same request again. Only the
/// try is timed.
pub(crate) async fn w3_lease(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let key: Arc<str> = format!("{}:w3:{slice}", env.run).into();
    timed_tasks(info, W3_TASKS, d, "W3", |_, deadline| {
        let client = client.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let mut req = request(&client, &key, LOCK_TTL, Duration::ZERO);
            timed_until!(deadline, |_i, lap| {
                let outcome = client.try_acquire(&req).await.expect("valid request");
                lap.stop();
                match outcome {
                    AcquireOutcome::Acquired(mut lease) => {
                        let released = lease.release().await;
                        assert_eq!(released, ReleaseOutcome::Released, "W3: release");
                        req = request(&client, &key, LOCK_TTL, Duration::ZERO);
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
