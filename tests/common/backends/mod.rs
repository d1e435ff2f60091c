//! One harness over every backend, so a contract test is written once and run five times:
//! on `MemoryBackend` under paused tokio time, and in real time on a real `redis-server`
//! behind a controllable proxy — once as it comes, and once with every operation sharing
//! its script call with others (`redis_batched`) — on a primary found through Sentinel
//! (behind a proxy), and on a three-primary Redis Cluster (each node behind a proxy whose
//! port it announces).
//!
//! The companions that keep a `redis_batched` backend busy are in `companions`.

use std::time::Duration;

use leasehold::{
    LeaseBackend, LeaseClient, LeaseKeys, LeaseSettings, MemoryBackend, MemoryFault, RedisBackend,
    RedisConfig,
};

use super::cluster::{ClusterNode, ClusterTopology};
use super::sentinel::SentinelTopology;
use super::{Proxy, ProxyMode, RedisServer};

pub mod companions;

pub use companions::Companions;

/// A fault the harness can inject on either backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Everything works.
    None,
    /// Commands reach the store and run; replies never come back.
    LoseReplies,
}

// One harness per test, never in a hot path: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Memory(MemoryBackend),
    Redis {
        server: RedisServer,
        proxy: Proxy,
    },
    /// A redis-server behind a proxy, every client on one backend (one connection, one
    /// queue of calls) that companions keep busy, so the test's operations travel in script
    /// calls with theirs.
    Batched {
        server: RedisServer,
        proxy: Proxy,
        backend: RedisBackend,
        companions: Companions,
    },
    /// The primary behind a proxy, found through three sentinels.
    Sentinel(SentinelTopology),
    /// Three cluster primaries, each behind a proxy whose port it announces.
    Cluster(ClusterTopology),
}

/// The Redis node that holds a lease: a plain server, or a cluster's slot owner.
enum Node<'a> {
    Server(&'a RedisServer),
    Cluster(&'a ClusterNode),
}

impl Node<'_> {
    fn cmd(&self, args: &[&str]) -> redis::Value {
        match self {
            Node::Server(server) => server.cmd(args),
            Node::Cluster(node) => node.cmd(args),
        }
    }

    fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        match self {
            Node::Server(server) => server.query(args),
            Node::Cluster(node) => node.query(args),
        }
    }
}

pub struct Harness {
    pub backend: Backend,
    pub client: LeaseClient,
}

/// Settings for real-Redis tests: a command timeout generous enough for a CI machine whose
/// two cores are shared with the compiler and redis-server, so no test fails on a
/// spurious timeout.
pub fn redis_settings() -> LeaseSettings {
    LeaseSettings::default().with_command_timeout(Duration::from_secs(2))
}

/// Connect and command timeouts far longer than an answer takes even on a starved machine,
/// for tests that show something does not wait for a timeout: their bound is a fraction of
/// this, so "fast" means "no timeout was waited out", not "the machine was quiet".
pub const LONG_TIMEOUT: Duration = Duration::from_secs(20);

/// [`redis_settings`] with both timeouts [`LONG_TIMEOUT`].
pub fn long_timeouts() -> LeaseSettings {
    redis_settings()
        .with_connect_timeout(LONG_TIMEOUT)
        .with_command_timeout(LONG_TIMEOUT)
}

impl Harness {
    /// MemoryBackend with default settings; use under `start_paused = true`.
    pub fn memory() -> Self {
        let backend = MemoryBackend::new();
        let client = LeaseClient::new(backend.clone(), LeaseSettings::default())
            .expect("default settings are valid");
        Self {
            backend: Backend::Memory(backend),
            client,
        }
    }

    /// A fresh redis-server, with the client connected through a proxy in `Pass` mode.
    pub fn redis() -> Self {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.addr());
        let client = LeaseClient::redis(&proxy.url(), redis_settings()).expect("valid url");
        Self {
            backend: Backend::Redis { server, proxy },
            client,
        }
    }

    /// A fresh redis-server behind a proxy; every client of the harness shares one backend
    /// with [`Companions`], so each operation of the test shares a script call with
    /// theirs.
    pub fn redis_batched() -> Self {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.addr());
        let backend = RedisBackend::new(RedisConfig::new(proxy.url())).expect("valid url");
        let client = LeaseClient::new(backend.clone(), redis_settings()).expect("valid settings");
        let companions = Companions::start(&client);
        Self {
            backend: Backend::Batched {
                server,
                proxy,
                backend,
                companions,
            },
            client,
        }
    }

    /// A primary behind a proxy and three sentinels; the client finds it through them.
    pub fn sentinel() -> Self {
        let topology = SentinelTopology::start_proxied();
        let client = topology.client(redis_settings());
        Self {
            backend: Backend::Sentinel(topology),
            client,
        }
    }

    /// Three cluster primaries behind proxies; the client finds them through the proxies.
    pub fn cluster() -> Self {
        let topology = ClusterTopology::start_proxied();
        let client = topology.client(redis_settings());
        Self {
            backend: Backend::Cluster(topology),
            client,
        }
    }

    /// The backend's name in reports, as the contract suite's module is named: `memory`,
    /// `redis`, `redis_batched`, `sentinel` or `cluster`.
    pub fn name(&self) -> &'static str {
        match self.backend {
            Backend::Memory(_) => "memory",
            Backend::Redis { .. } => "redis",
            Backend::Batched { .. } => "redis_batched",
            Backend::Sentinel(_) => "sentinel",
            Backend::Cluster(_) => "cluster",
        }
    }

    pub fn is_redis(&self) -> bool {
        !matches!(self.backend, Backend::Memory(_))
    }

    /// The Redis node that holds `keys`, for direct reads and writes.
    fn node(&self, keys: &LeaseKeys) -> Option<Node<'_>> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Redis { server, .. } | Backend::Batched { server, .. } => {
                Some(Node::Server(server))
            }
            Backend::Sentinel(topology) => Some(Node::Server(topology.primary())),
            Backend::Cluster(topology) => Some(Node::Cluster(topology.owner(keys.lease()))),
        }
    }

    /// Every proxy between the client and the store.
    fn proxies(&self) -> Vec<&Proxy> {
        match &self.backend {
            Backend::Memory(_) => Vec::new(),
            Backend::Redis { proxy, .. } | Backend::Batched { proxy, .. } => vec![proxy],
            Backend::Sentinel(topology) => vec![topology.proxy()],
            Backend::Cluster(topology) => topology.proxies().iter().collect(),
        }
    }

    /// Another client (another "process") on the same store, with `settings`.
    pub fn client_with(&self, settings: LeaseSettings) -> LeaseClient {
        match &self.backend {
            Backend::Memory(m) => LeaseClient::new(m.clone(), settings).expect("valid settings"),
            Backend::Redis { proxy, .. } => {
                LeaseClient::redis(&proxy.url(), settings).expect("valid url")
            }
            Backend::Batched { backend, .. } => {
                LeaseClient::new(backend.clone(), settings).expect("valid settings")
            }
            Backend::Sentinel(topology) => topology.client(settings),
            Backend::Cluster(topology) => topology.client(settings),
        }
    }

    /// A backend on the same store, for a test that calls its operations itself (one
    /// script call each, no handle): a renewal or a release by an attempt of its choosing.
    pub fn backend(&self) -> Box<dyn LeaseBackend> {
        let redis = |config: RedisConfig| RedisBackend::new(config).expect("valid config");
        match &self.backend {
            Backend::Memory(m) => Box::new(m.clone()),
            Backend::Redis { proxy, .. } => Box::new(redis(RedisConfig::new(proxy.url()))),
            Backend::Batched { backend, .. } => Box::new(backend.clone()),
            Backend::Sentinel(topology) => Box::new(redis(topology.config())),
            Backend::Cluster(topology) => Box::new(redis(topology.config())),
        }
    }

    /// Another client on the same store with this backend's test settings.
    pub fn other_client(&self) -> LeaseClient {
        self.client_with(self.client.settings().clone())
    }

    /// Injects `fault` (or clears it). With companions, they are paused while a fault is on
    /// — once everything they sent has been answered — so the test's operation under the
    /// fault is the one that meets it (`tests/batching/certainty.rs` covers faults in shared
    /// calls).
    pub async fn fault(&self, fault: Fault) {
        let mode = match fault {
            Fault::None => ProxyMode::Pass,
            Fault::LoseReplies => ProxyMode::DropReplies,
        };
        if let (Backend::Batched { companions, .. }, Fault::LoseReplies) = (&self.backend, fault) {
            companions.pause().await;
        }
        match (&self.backend, fault) {
            (Backend::Memory(m), Fault::None) => m.set_fault(None),
            (Backend::Memory(m), Fault::LoseReplies) => m.set_fault(Some(MemoryFault::LoseReply)),
            _ => {
                let proxies = self.proxies();
                assert!(!proxies.is_empty(), "every Redis backend has a proxy");
                for proxy in proxies {
                    proxy.set_mode(mode);
                }
            }
        }
        if let (Backend::Batched { companions, .. }, Fault::None) = (&self.backend, fault) {
            companions.resume();
        }
    }

    /// Deletes the lease key behind the holder's back (`DEL`).
    pub fn delete(&self, keys: &LeaseKeys) {
        match (&self.backend, self.node(keys)) {
            (Backend::Memory(m), _) => {
                m.delete(keys);
            }
            (_, Some(node)) => {
                node.cmd(&["DEL", keys.lease()]);
            }
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// Deletes the fencing counter, as an eviction would.
    pub fn delete_fence(&self, keys: &LeaseKeys) {
        match (&self.backend, self.node(keys)) {
            (Backend::Memory(m), _) => m.delete_fence(keys),
            (_, Some(node)) => {
                node.cmd(&["DEL", keys.fence()]);
            }
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// Memory only: moves the paused clock on by `by`. Every TTL the store holds and every
    /// handle's local validity run down together, as real time would.
    pub async fn advance_clock(&self, by: Duration) {
        assert!(
            !self.is_redis(),
            "a Redis server keeps real time: shorten a key's TTL instead"
        );
        tokio::time::advance(by).await;
    }

    /// Redis only: rewrites the lease key's PTTL to `by` less (`PEXPIRE`), as if `by` had
    /// passed for this key alone; no handle's local validity changes.
    pub fn shorten_server_ttl(&self, keys: &LeaseKeys, by: Duration) {
        let Some(node) = self.node(keys) else {
            panic!("the memory backend has no server: advance its clock instead")
        };
        let pttl: i64 = node.query(&["PTTL", keys.lease()]);
        let left = pttl - i64::try_from(by.as_millis()).expect("small");
        assert!(left > 0, "shortened past expiry");
        node.cmd(&["PEXPIRE", keys.lease(), &left.to_string()]);
    }

    /// Redis only: lets the lease key's TTL run out (not a `DEL`), and checks it is gone; no
    /// handle's local validity changes.
    pub async fn run_out_server_ttl(&self, keys: &LeaseKeys) {
        let Some(node) = self.node(keys) else {
            panic!("the memory backend has no server: advance its clock instead")
        };
        node.cmd(&["PEXPIRE", keys.lease(), "1"]);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let exists: i64 = node.query(&["EXISTS", keys.lease()]);
        assert_eq!(exists, 0);
    }

    /// Whether the store holds the lease key now.
    pub fn held(&self, keys: &LeaseKeys) -> bool {
        match (&self.backend, self.node(keys)) {
            (Backend::Memory(m), _) => m.remaining(keys).is_some(),
            (_, Some(node)) => node.query::<i64>(&["EXISTS", keys.lease()]) == 1,
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// The server-side remaining time of the lease.
    pub fn pttl(&self, keys: &LeaseKeys) -> Option<Duration> {
        match (&self.backend, self.node(keys)) {
            (Backend::Memory(m), _) => m.remaining(keys),
            (_, Some(node)) => {
                let ms: i64 = node.query(&["PTTL", keys.lease()]);
                u64::try_from(ms).ok().map(Duration::from_millis)
            }
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// A count of backend operations so far (memory: calls; Redis: commands executed on the
    /// node; under Sentinel without the sentinels' own `PUBLISH` hellos to the primary;
    /// under Cluster summed over the primaries, without `CLUSTER` commands). With
    /// companions, the first call stops them for the rest of the test, once everything
    /// they sent has been answered.
    pub async fn commands(&self) -> u64 {
        match &self.backend {
            Backend::Memory(m) => m.calls(),
            Backend::Redis { server, .. } => server.command_calls(),
            Backend::Batched {
                server, companions, ..
            } => {
                companions.stop().await;
                server.command_calls()
            }
            Backend::Cluster(topology) => topology
                .nodes()
                .iter()
                .map(ClusterNode::command_calls)
                .sum(),
            Backend::Sentinel(topology) => {
                let node = topology.primary();
                node.command_calls() - node.calls_of("publish")
            }
        }
    }
}

/// Generates one `#[tokio::test]` per backend for each listed `async fn(Harness)`.
#[macro_export]
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(super::common::backends::Harness::memory()).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::backends::Harness::redis()).await
                }
            )*
        }
        mod redis_batched {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::backends::Harness::redis_batched()).await
                }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::backends::Harness::sentinel()).await
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::backends::Harness::cluster()).await
                }
            )*
        }
    };
}

/// Starts `waiter` acquiring `holder`'s lease (5 s wait), releases
/// `holder` 300 ms later, and asserts the waiter acquired within 250 ms of the release — the
/// holder had ~30 s left, and a waiter that did not hear the notice looks again no sooner
/// than 600 ms after its last try (at least 300 ms after the release), so only the release
/// notice can explain it.
pub async fn assert_waiter_wakes_on_release(
    holder: &mut leasehold::LeaseHandle,
    waiter: LeaseClient,
) {
    use leasehold::{AcquireOutcome, LeaseRequest, ReleaseOutcome};
    let req = LeaseRequest::builder(
        holder.purpose().clone(),
        *holder.resource(),
        waiter.new_attempt("waiter").expect("valid operation id"),
    )
    .wait_timeout(Duration::from_secs(5))
    .build()
    .expect("valid request");
    let task = tokio::spawn(async move { waiter.acquire(&req).await.expect("valid request") });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = tokio::time::Instant::now();
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
    let outcome = task.await.expect("waiter task");
    let woke = released_at.elapsed();
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    assert!(
        woke < Duration::from_millis(250),
        "woke {woke:?} after the release: the notice did not wake it"
    );
}

/// Starts `waiter` acquiring `holder`'s lease (20 s wait, once its first try is answered),
/// lets `lose` make the next release notice miss it, releases `holder`, and asserts the
/// waiter acquired within 1 s of the release although the holder had ~30 s left: a waiter
/// looks again within 750 ms whatever it heard. Returns how long it took.
pub async fn assert_waiter_finds_an_unheard_release<F>(
    holder: &mut leasehold::LeaseHandle,
    waiter: LeaseClient,
    lose: F,
) -> Duration
where
    F: std::future::Future<Output = ()>,
{
    use leasehold::{AcquireOutcome, LeaseRequest, ReleaseOutcome};
    let req = LeaseRequest::builder(
        holder.purpose().clone(),
        *holder.resource(),
        waiter.new_attempt("waiter").expect("valid operation id"),
    )
    .wait_timeout(Duration::from_secs(20))
    .build()
    .expect("valid request");
    let task = tokio::spawn(async move { waiter.acquire(&req).await.expect("valid request") });
    tokio::time::sleep(Duration::from_millis(300)).await;
    lose.await;
    let released_at = tokio::time::Instant::now();
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
    let outcome = task.await.expect("waiter task");
    let found = released_at.elapsed();
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    assert!(
        found < Duration::from_secs(1),
        "found {found:?} after the release, the holder's TTL being 30 s"
    );
    found
}
