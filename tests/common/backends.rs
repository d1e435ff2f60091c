//! One harness over both backends, so a contract test is written once and run twice:
//! on `MemoryBackend` under paused tokio time, and on a real `redis-server` behind a
//! controllable proxy in real time.

use std::time::Duration;

use leasehold::{LeaseClient, LeaseKeys, LeaseSettings, MemoryBackend, MemoryFault};

use super::sentinel::SentinelTopology;
use super::{Proxy, ProxyMode, RedisServer};

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
    /// The primary behind a proxy, found through three sentinels.
    Sentinel(SentinelTopology),
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

    /// A primary behind a proxy and three sentinels; the client finds it through them.
    pub fn sentinel() -> Self {
        let topology = SentinelTopology::start_proxied();
        let client = topology.client(redis_settings());
        Self {
            backend: Backend::Sentinel(topology),
            client,
        }
    }

    pub fn is_redis(&self) -> bool {
        !matches!(self.backend, Backend::Memory(_))
    }

    /// The Redis node that holds the leases, for direct reads and writes.
    fn node(&self) -> Option<&RedisServer> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Redis { server, .. } => Some(server),
            Backend::Sentinel(topology) => Some(topology.primary()),
        }
    }

    fn proxy(&self) -> Option<&Proxy> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Redis { proxy, .. } => Some(proxy),
            Backend::Sentinel(topology) => Some(topology.proxy()),
        }
    }

    /// Another client (another "process") on the same store, with `settings`.
    pub fn client_with(&self, settings: LeaseSettings) -> LeaseClient {
        match &self.backend {
            Backend::Memory(m) => LeaseClient::new(m.clone(), settings).expect("valid settings"),
            Backend::Redis { proxy, .. } => {
                LeaseClient::redis(&proxy.url(), settings).expect("valid url")
            }
            Backend::Sentinel(topology) => topology.client(settings),
        }
    }

    /// Another client on the same store with this backend's test settings.
    pub fn other_client(&self) -> LeaseClient {
        self.client_with(self.client.settings().clone())
    }

    pub fn fault(&self, fault: Fault) {
        match (&self.backend, self.proxy(), fault) {
            (Backend::Memory(m), _, Fault::None) => m.set_fault(None),
            (Backend::Memory(m), _, Fault::LoseReplies) => {
                m.set_fault(Some(MemoryFault::LoseReply))
            }
            (_, Some(proxy), Fault::None) => proxy.set_mode(ProxyMode::Pass),
            (_, Some(proxy), Fault::LoseReplies) => proxy.set_mode(ProxyMode::DropReplies),
            (_, None, _) => unreachable!("every Redis backend has a proxy"),
        }
    }

    /// Deletes the lease key behind the holder's back (`DEL`).
    pub fn delete(&self, keys: &LeaseKeys) {
        match (&self.backend, self.node()) {
            (Backend::Memory(m), _) => {
                m.delete(keys);
            }
            (_, Some(node)) => {
                node.cmd(&["DEL", &keys.lease]);
            }
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// Deletes the fencing counter, as an eviction would.
    pub fn delete_fence(&self, keys: &LeaseKeys) {
        match (&self.backend, self.node()) {
            (Backend::Memory(m), _) => m.delete_fence(keys),
            (_, Some(node)) => {
                node.cmd(&["DEL", &keys.fence]);
            }
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// Lets `by` pass for the server's view of the lease: memory advances the paused
    /// clock; Redis shortens the key's PTTL by `by`.
    pub async fn age(&self, keys: &LeaseKeys, by: Duration) {
        match self.node() {
            None => tokio::time::advance(by).await,
            Some(server) => {
                let pttl: i64 = server.query(&["PTTL", &keys.lease]);
                let left = pttl - i64::try_from(by.as_millis()).expect("small");
                assert!(left > 0, "aged past expiry");
                server.cmd(&["PEXPIRE", &keys.lease, &left.to_string()]);
            }
        }
    }

    /// Makes the lease expire on the server (not a `DEL`: the TTL runs out).
    pub async fn expire(&self, keys: &LeaseKeys) {
        match self.node() {
            None => tokio::time::advance(Duration::from_secs(3600)).await,
            Some(server) => {
                server.cmd(&["PEXPIRE", &keys.lease, "1"]);
                tokio::time::sleep(Duration::from_millis(5)).await;
                let exists: i64 = server.query(&["EXISTS", &keys.lease]);
                assert_eq!(exists, 0);
            }
        }
    }

    /// Whether the store holds the lease key now.
    pub fn held(&self, keys: &LeaseKeys) -> bool {
        match (&self.backend, self.node()) {
            (Backend::Memory(m), _) => m.remaining(keys).is_some(),
            (_, Some(node)) => node.query::<i64>(&["EXISTS", &keys.lease]) == 1,
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// The server-side remaining time of the lease.
    pub fn pttl(&self, keys: &LeaseKeys) -> Option<Duration> {
        match (&self.backend, self.node()) {
            (Backend::Memory(m), _) => m.remaining(keys),
            (_, Some(node)) => {
                let ms: i64 = node.query(&["PTTL", &keys.lease]);
                u64::try_from(ms).ok().map(Duration::from_millis)
            }
            (_, None) => unreachable!("every Redis backend has a node"),
        }
    }

    /// A count of backend operations so far (memory: calls; Redis: commands executed on the
    /// node; under Sentinel without the sentinels' own `PUBLISH` hellos to the primary).
    pub fn commands(&self) -> u64 {
        match (&self.backend, self.node()) {
            (Backend::Memory(m), _) => m.calls(),
            (Backend::Sentinel(_), Some(node)) => {
                let stats: String = node.query(&["INFO", "commandstats"]);
                let publish = stats
                    .lines()
                    .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                node.command_calls() - publish
            }
            (_, Some(node)) => node.command_calls(),
            (_, None) => unreachable!("every Redis backend has a node"),
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
        mod sentinel {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::backends::Harness::sentinel()).await
                }
            )*
        }
    };
}
