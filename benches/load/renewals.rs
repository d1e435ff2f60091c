//! The renew child: R<n> — n held leases renewing on the grid.

use super::*;

/// Acquisitions in flight at once while the leases are taken (and releases at the end).
pub(crate) const R_IN_FLIGHT: usize = 256;

/// The TTL of the `-short` R rows (`R100k-short`): renewals every second, so a process
/// that falls behind by about 1.8 s cancels leases.
pub(crate) const SHORT_TTL: Duration = Duration::from_secs(3);

/// R's TTL and renewal cadence, which the peers' R rows use too; `short`: [`SHORT_TTL`].
pub(crate) fn r_schedule(env: &Env, client: &LeaseClient, short: bool) -> (Duration, Duration) {
    let ttl = if short {
        SHORT_TTL
    } else {
        env.pick(Duration::from_secs(4), Duration::from_secs(30))
    };
    let settings = client.settings();
    // The lease actor renews every `renew_every` from the previous renewal's start, or
    // half-way to its cancellation deadline (validity end − safety margin) if that is
    // sooner: with the quick run's 4 s TTL and 2 s command timeout (= safety margin), that
    // is ~1 s, not ttl/3.
    let to_cancel = ttl - settings.drift_budget - settings.safety_margin();
    (ttl, settings.renewal_cadence(ttl).min(to_cancel / 2))
}

/// `R10k`, `R100k`, or `R<n>` when n is not whole thousands; `-short` for [`SHORT_TTL`].
pub(crate) fn r_workload(n: usize, short: bool) -> String {
    let size = if n.is_multiple_of(1000) {
        format!("R{}k", n / 1000)
    } else {
        format!("R{n}")
    };
    if short { format!("{size}-short") } else { size }
}

pub(crate) async fn renewals(env: Env, n: usize, short: bool) {
    // A short TTL needs the default settings (200 ms command timeout and safety margin):
    // with the bench's 2 s timeout a 3 s lease could not renew at all.
    let client = if short {
        env.client_with(LeaseSettings::default())
    } else {
        env.client()
    };
    let mut info = env.connection().await;
    let settings = client.settings();
    let (ttl, renew_every) = r_schedule(&env, &client, short);
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
        let held = hold(&runtime, req).await.unwrap_or_else(|e| panic!("{e}"));
        held.release().await.unwrap_or_else(|e| panic!("{e}"));
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
    // A `-short` row reports what it could not hold instead of stopping the run: it
    // measures how many leases one process keeps renewed at a short TTL.
    let mut not_taken = 0usize;
    let mut took = |done: Result<Held, String>, jobs: &mut Vec<Held>| match done {
        Ok(held) => jobs.push(held),
        Err(e) if short => {
            not_taken += 1;
            if not_taken == 1 {
                eprintln!("{e}");
            }
        }
        Err(e) => panic!("{e}"),
    };
    let mut starting = tokio::task::JoinSet::new();
    for i in 0..n {
        if starting.len() >= R_IN_FLIGHT
            && let Some(done) = starting.join_next().await
        {
            took(done.expect("R: start task"), &mut jobs);
        }
        let runtime = runtime.clone();
        let req = request(&client, &format!("{}:r:{i}", env.run), ttl, Duration::ZERO);
        starting.spawn(async move { hold(&runtime, req).await });
    }
    while let Some(done) = starting.join_next().await {
        took(done.expect("R: start task"), &mut jobs);
    }
    let acquire_s = acquiring.elapsed().as_secs_f64();
    if !short {
        assert_eq!(runtime.held(), n, "R: leases held");
    }
    let rss_after = rss_kb();

    let renewals_before: Vec<u64> = jobs.iter().map(|j| j.context.status().renewals).collect();
    let cpu = CpuMeter::start(&mut info).await;
    let window_start = Instant::now();
    PROBES.in_window.store(true, Ordering::SeqCst);
    tokio::time::sleep(window).await;
    PROBES.in_window.store(false, Ordering::SeqCst);
    let window_s = window_start.elapsed().as_secs_f64();
    let per_lease: Vec<u64> = jobs
        .iter()
        .zip(&renewals_before)
        .map(|(j, before)| j.context.status().renewals - before)
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
            let status = j.context.status();
            status.state != LeaseState::Active || status.cancelled.is_some()
        })
        .count();
    let cancelled = PROBES.cancellations.load(Ordering::SeqCst);
    let lone_us = unbatched_renew_us(&env, &mut info, n.min(10_000), 1).await;
    let stream_us = unbatched_renew_us(&env, &mut info, n.min(10_000), 32).await;

    let releasing = Instant::now();
    let mut ended_early = 0usize;
    let mut jobs = jobs.into_iter();
    loop {
        let batch: Vec<_> = jobs.by_ref().take(R_IN_FLIGHT).collect();
        if batch.is_empty() {
            break;
        }
        let releases: Vec<_> = batch.into_iter().map(Held::release).collect();
        for released in futures_util::future::join_all(releases).await {
            match released {
                Ok(()) => {}
                Err(_) if short => ended_early += 1,
                Err(e) => panic!("{e}"),
            }
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
    let workload = r_workload(n, short);
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
            ("not_taken", not_taken.to_string()),
            ("ended_early", ended_early.to_string()),
            (
                "on_time",
                (not_taken == 0 && cancelled == 0 && not_active == 0 && fewest >= 1).to_string(),
            ),
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
    if short {
        return;
    }
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
pub(crate) async fn unbatched_renew_us(
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

/// One lease R holds, the cheapest way to hold one: `run_under_lease` (its lease actor and
/// one task) with work that waits until it is told to end, or cancelled.
pub(crate) struct Held {
    context: LeaseContext,
    end: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<Result<RunOutcome<bool>, RuntimeError>>,
}

impl Held {
    /// Ends the work, so the lease is released at once; `Err` says how it ended if the
    /// work did not end as told or the lease was not released.
    pub(crate) async fn release(self) -> Result<(), String> {
        let _ = self.end.send(());
        match self.run.await.expect("R: run task") {
            Ok(RunOutcome::Ran { output, report })
                if output == Some(true)
                    && report.end == JobEnd::Completed
                    && report.release == ReleaseOutcome::Released =>
            {
                Ok(())
            }
            other => Err(format!("R: run_under_lease ended {other:?}")),
        }
    }
}

/// Holds `req`'s lease; `Err` says why it was not taken.
pub(crate) async fn hold(runtime: &LeaseRuntime, req: LeaseRequest) -> Result<Held, String> {
    let (context_tx, context_rx) = tokio::sync::oneshot::channel();
    let (end, ended) = tokio::sync::oneshot::channel::<()>();
    // The future borrows neither the runtime nor the request: spawned as it is, the task
    // keeps no copy of either while the lease is held.
    let run = tokio::spawn(
        runtime.run_under_lease(&req, CancelPolicy::Kill, move |ctx| {
            let _ = context_tx.send(ctx.clone());
            async move {
                tokio::select! {
                    () = ctx.cancelled() => false,
                    _ = ended => true,
                }
            }
        }),
    );
    match context_rx.await {
        Ok(context) => Ok(Held { context, end, run }),
        Err(_) => Err(format!(
            "R: run_under_lease did not start: {:?}",
            run.await.expect("R: run task")
        )),
    }
}
