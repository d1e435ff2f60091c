//! The children: each group of workloads runs in a child process of this binary, on a
//! hand-built tokio runtime of one flavour; what they share (the environment, requests,
//! one lease cycle, the raw-redis floor).

use super::*;

pub(crate) fn child_main(args: &[String]) {
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
            // `short`: the TTL is `SHORT_TTL` (rows `R<n>-short`).
            let short = args.get(5).map(String::as_str) == Some("short");
            runtime.block_on(async move {
                tokio::spawn(renewals(env, n, short))
                    .await
                    .expect("renewal workload");
            });
        }
        "renew-peer" => {
            let n: usize = args
                .get(4)
                .and_then(|n| n.parse().ok())
                .expect("lock count");
            let peer = args.get(5).expect("peer name").clone();
            runtime.block_on(async move {
                tokio::spawn(async move { peer_renewals(env, n, &peer).await })
                    .await
                    .expect("peer renewal workload");
            });
        }
        "actor-floor" => {
            let n: usize = args
                .get(4)
                .and_then(|n| n.parse().ok())
                .expect("actor count");
            runtime.block_on(async move {
                tokio::spawn(actor_floor(env, n))
                    .await
                    .expect("actor floor");
            });
        }
        "line" => {
            let waiters: usize = args
                .get(4)
                .and_then(|n| n.parse().ok())
                .expect("waiter count");
            let system = args.get(5).expect("system name").clone();
            runtime.block_on(async move {
                tokio::spawn(async move { line(env, waiters, &system).await })
                    .await
                    .expect("line workload");
            });
        }
        other => panic!("unknown child role {other}"),
    }
    // Leftover background tasks (connection drivers) end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
}

#[derive(Clone)]
pub(crate) struct Env {
    pub(crate) flavor: String,
    pub(crate) url: String,
    pub(crate) quick: bool,
    /// Prefix of every key of this child.
    pub(crate) run: String,
}

impl Env {
    pub(crate) fn pick(&self, quick: Duration, full: Duration) -> Duration {
        if self.quick { quick } else { full }
    }

    pub(crate) fn row(
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

    /// leasehold's client; with `LEASEHOLD_BENCH_SCRIPTS` set, on the script alone whatever
    /// the server can do (`RedisConfig::native_commands(false)`), for an A/B of the two
    /// paths on one server.
    /// The bench's client: 2 s command timeout, so a busy machine's slow replies are not
    /// failures.
    pub(crate) fn client(&self) -> LeaseClient {
        self.client_with(LeaseSettings::default().with_command_timeout(Duration::from_secs(2)))
    }

    pub(crate) fn client_with(&self, settings: LeaseSettings) -> LeaseClient {
        let config = RedisConfig::new(self.url.as_str()).native_commands(!crate::scripts_only());
        let backend = RedisBackend::new(config).expect("RedisBackend::new");
        LeaseClient::new(backend, settings).expect("LeaseClient::new")
    }

    pub(crate) async fn connection(&self) -> MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis-server")
    }
}

pub(crate) fn purpose() -> Purpose {
    Purpose::new("bench").expect("purpose")
}

pub(crate) fn request(
    client: &LeaseClient,
    resource: &str,
    ttl: Duration,
    wait: Duration,
) -> LeaseRequest {
    client
        .request(purpose().as_str(), resource)
        .expect("request")
        .ttl(ttl)
        .wait_timeout(wait)
        .build()
        .expect("request")
}

/// One acquire (waiting up to the request's wait) that must be `Acquired`, then a release
/// that must be `Released`.
pub(crate) async fn lease_cycle(client: &LeaseClient, req: &LeaseRequest, what: &str) {
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
pub(crate) struct Floor {
    pub(crate) con: MultiplexedConnection,
    pub(crate) release: Arc<redis::Script>,
    pub(crate) token_prefix: Arc<str>,
    pub(crate) next_token: Arc<AtomicU64>,
}

impl Floor {
    pub(crate) async fn new(env: &Env) -> Self {
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

    pub(crate) fn token(&self) -> String {
        let n = self.next_token.fetch_add(1, Ordering::Relaxed);
        format!("{}{n}", self.token_prefix)
    }

    /// `SET key token NX PX ttl`: whether it was set.
    pub(crate) async fn try_lock(&mut self, key: &str, token: &str) -> bool {
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
    pub(crate) async fn unlock(&mut self, key: &str, token: &str) {
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut self.con)
            .await
            .expect("floor release script");
        assert_eq!(deleted, 1, "floor release of {key} deleted nothing");
    }
}
