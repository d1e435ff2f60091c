//! A: a lease under the actor runtime (spawn_under_lease, run_under_lease) against a plain
//! acquire–release cycle.

use super::*;

/// A worker that stops as soon as it started (A).
pub(crate) struct Worker;

pub(crate) enum WorkerMsg {
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
        myself.stop(None);
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
pub(crate) async fn actors(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
) -> Row {
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

pub(crate) async fn a_plain(
    env: &Env,
    client: &LeaseClient,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    with_cpu(info, async {
        timed_until!(Instant::now() + d, |i, _lap| {
            let key = format!("{}:a:{slice}:p{i}", env.run);
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
            Step::Done
        })
    })
    .await
}

pub(crate) async fn a_spawn(
    env: &Env,
    runtime: &LeaseRuntime,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let client = runtime.client();
    with_cpu(info, async {
        timed_until!(Instant::now() + d, |i, _lap| {
            let key = format!("{}:a:{slice}:s{i}", env.run);
            let req = request(client, &key, LOCK_TTL, Duration::ZERO);
            let worker = Worker;
            let job = match runtime
                .spawn_under_lease(&req, worker, |_ctx| (), CancelPolicy::Kill)
                .await
                .expect("A: spawn_under_lease")
            {
                SpawnOutcome::Started(job) => job,
                SpawnOutcome::NotAcquired(other) => {
                    panic!("A: spawn_under_lease was {} ({other:?})", other.as_str())
                }
                _ => panic!("A: spawn_under_lease: an outcome this bench does not know"),
            };
            let report = job.wait().await;
            assert_eq!(report.end, JobEnd::Completed, "A: job end");
            assert_eq!(report.release, ReleaseOutcome::Released, "A: job release");
            Step::Done
        })
    })
    .await
}

pub(crate) async fn a_run(
    env: &Env,
    runtime: &LeaseRuntime,
    info: &mut MultiplexedConnection,
    d: Duration,
    slice: usize,
) -> Part {
    let client = runtime.client();
    with_cpu(info, async {
        timed_until!(Instant::now() + d, |i, _lap| {
            let key = format!("{}:a:{slice}:r{i}", env.run);
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
            Step::Done
        })
    })
    .await
}
