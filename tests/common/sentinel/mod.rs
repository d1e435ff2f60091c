//! A Redis Sentinel topology, started fresh for one test.
//!
//! [`SentinelTopology::start`]: a primary and two replicas (`redis-server`, see
//! [`RedisServer`], made replicas with `REPLICAOF 127.0.0.1 <primary port>`) and three
//! sentinels (`redis-sentinel <conf>`), each on its own free loopback port and in its own
//! temporary directory, persistence off. Every sentinel monitors the topology's own
//! [`master_name`](SentinelTopology::master_name) with quorum 2, `down-after-milliseconds 1000`, `failover-timeout 5000` and
//! `resolve-hostnames no`. `start` returns once every sentinel names the primary and lists
//! both replicas; it takes well under a second.
//!
//! [`SentinelTopology::start_proxied`]: a primary and no replicas, with the sentinels
//! monitoring it *through* a [`Proxy`] — so the sentinels name the proxy, and a backend
//! that follows them can have its replies dropped. `down-after-milliseconds` is 60 s there,
//! so the sentinels' own pings, dropped too, start no failover during a test.
//!
//! Drop kills every process by PID (sentinels first, so none starts a failover while the
//! data nodes go) and removes the temporary directories. Everything is synchronous (std
//! only), independent of the test's tokio runtime: a test that needs tokio tasks to run
//! while it waits here (the backend's sentinel watcher) uses a multi-thread runtime.
//!
//! One `redis-sentinel` process — its configuration, readiness and queries — is in
//! `process`; this module puts a topology together from them and `RedisServer`s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LeaseClient, LeaseSettings, RedisBackend, RedisConfig};

use super::redis_server::commands::command;
use super::{Proxy, RedisServer};

mod process;

use process::SentinelProcess;

/// A master name for configurations without a topology. Each topology monitors its own
/// name (`master_name`), so that should a killed primary's port be reused by another
/// test's node, this topology's sentinels' hello messages there are ignored by the other
/// test's sentinels (a sentinel only takes hellos for the master names it monitors).
pub const MASTER_NAME: &str = "leasehold-test";
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
const FAILOVER_TIMEOUT_MS: u64 = 5000;
/// How long to wait for a process to answer, or the sentinels to agree at start-up.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `failover` and `kill_primary` wait for the sentinels to name a new primary.
const FAILOVER_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);
const START_ATTEMPTS: usize = 5;
const CONN_TIMEOUT: Duration = Duration::from_secs(2);
/// The key `wait_replicated` writes (outside every lease namespace).
const REPLICATION_MARKER: &str = "sentinel-harness:replication-marker";

static NEXT_TOPOLOGY: AtomicU64 = AtomicU64::new(0);

/// One primary, its replicas and three sentinels; see the module docs.
pub struct SentinelTopology {
    master_name: String,
    /// Data nodes; `nodes[0]` was the primary at start.
    nodes: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
    /// `start_proxied` only: what the sentinels monitor, in front of `nodes[0]`.
    proxy: Option<Proxy>,
}

impl SentinelTopology {
    /// A primary, two replicas and three sentinels (down-after 1 s).
    pub fn start() -> Self {
        Self::launch(2, false, 1000)
    }

    /// A primary behind a proxy and three sentinels monitoring the proxy (down-after 60 s).
    pub fn start_proxied() -> Self {
        Self::launch(0, true, 60_000)
    }

    fn launch(replicas: usize, proxied: bool, down_after_ms: u64) -> Self {
        let binary = process::find_sentinel_binary();
        let master_name = format!(
            "{MASTER_NAME}-{}-{}",
            std::process::id(),
            NEXT_TOPOLOGY.fetch_add(1, Ordering::Relaxed)
        );
        let node = || {
            let node = RedisServer::start();
            // Redis 7 waits 5 s for more replicas before a full sync; any node may become
            // the primary that syncs the others.
            node.cmd(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
            node
        };
        let mut nodes = vec![node()];
        for _ in 0..replicas {
            let replica = node();
            replica.make_replica_of(&nodes[0]);
            nodes.push(replica);
        }
        let proxy = proxied.then(|| Proxy::start(nodes[0].addr()));
        let monitored = proxy.as_ref().map_or(nodes[0].port(), |p| p.addr().port());
        let sentinels = (0..SENTINELS)
            .map(|_| SentinelProcess::start(&binary, &master_name, monitored, down_after_ms))
            .collect();
        let topology = Self {
            master_name,
            nodes,
            sentinels,
            proxy,
        };
        topology.wait_until_settled(monitored, replicas);
        topology
    }

    /// Every sentinel names `primary` and lists `replicas` healthy replicas.
    fn wait_until_settled(&self, primary: u16, replicas: usize) {
        let deadline = Instant::now() + READY_TIMEOUT;
        for sentinel in &self.sentinels {
            wait_for_or(
                deadline,
                || self.logs(),
                "sentinels to see the topology",
                || {
                    sentinel.primary_port() == Some(primary)
                        && sentinel.healthy_replicas() == replicas
                },
            );
        }
    }

    /// `redis://127.0.0.1:<port>` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.url()).collect()
    }

    /// The name this topology's sentinels monitor the primary under.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// `RedisConfig::sentinel` for this topology.
    pub fn config(&self) -> RedisConfig {
        RedisConfig::sentinel(self.sentinel_urls(), self.master_name.clone())
    }

    /// A client on a fresh sentinel-configured backend.
    pub fn client(&self, settings: LeaseSettings) -> LeaseClient {
        let config = self.config().connect_timeout(settings.connect_timeout);
        let backend = RedisBackend::new(config).expect("valid sentinel config");
        LeaseClient::new(backend, settings).expect("valid settings")
    }

    /// The primary's port as sentinel 0 names it (for `start_proxied`: the proxy's).
    pub fn primary_port(&self) -> u16 {
        self.sentinels[0]
            .primary_port()
            .expect("sentinel 0 names a primary")
    }

    /// The data node the sentinels name as primary (for `start_proxied`: the one behind
    /// the proxy).
    pub fn primary(&self) -> &RedisServer {
        match &self.proxy {
            Some(_) => &self.nodes[0],
            None => self.node(self.primary_port()),
        }
    }

    /// The data node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// Every data node, the dead included.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The running data nodes other than the current primary.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let primary = self.primary().port();
        self.nodes
            .iter()
            .filter(|n| n.port() != primary && n.is_running())
            .collect()
    }

    /// The proxy of `start_proxied`.
    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("started with start_proxied")
    }

    /// Returns once every write the primary has taken so far is on every running replica.
    ///
    /// `WAIT` counts acknowledgements of *its own connection's* writes only — on a
    /// connection that wrote nothing it returns at once, whatever other clients wrote. So
    /// this writes a marker and waits for it on the same connection: the marker comes after
    /// every earlier write in the replication stream.
    pub fn wait_replicated(&self) {
        let replicas = self.replicas().len();
        let mut conn = self.primary().conn();
        let _: i64 = redis::cmd("INCR")
            .arg(REPLICATION_MARKER)
            .query(&mut conn)
            .expect("INCR on the primary");
        let acked: i64 = redis::cmd("WAIT")
            .arg(replicas)
            .arg(5000)
            .query(&mut conn)
            .expect("WAIT on the primary");
        assert_eq!(
            acked as usize, replicas,
            "only {acked} of {replicas} replicas acknowledged within 5 s"
        );
    }

    /// `SENTINEL FAILOVER` on sentinel 0; returns the new primary's port once every
    /// sentinel names it and it answers `ROLE` as master. The old primary keeps running
    /// (and, until the sentinels demote it some seconds later, still says it is master).
    pub fn failover(&self) -> u16 {
        let old = self.primary_port();
        self.sentinels[0]
            .query::<String>(&["SENTINEL", "FAILOVER", &self.master_name])
            .unwrap_or_else(|e| panic!("SENTINEL FAILOVER refused: {e}\n{}", self.logs()));
        self.wait_for_new_primary(old)
    }

    /// SIGKILLs the primary; returns the new primary's port once every sentinel names it
    /// and it answers `ROLE` as master (down-after 1 s, then election and promotion).
    pub fn kill_primary(&mut self) -> u16 {
        let old = self.kill_primary_only();
        self.wait_for_new_primary(old)
    }

    /// SIGKILLs the primary once the sentinels know one another (so they can fail over);
    /// returns its port without waiting for the failover (see `wait_for_new_primary`).
    pub fn kill_primary_only(&mut self) -> u16 {
        // Agreeing that the primary is down, and electing a leader, needs the sentinels
        // to know one another (hello messages, every 2 s).
        let deadline = Instant::now() + READY_TIMEOUT;
        for sentinel in &self.sentinels {
            wait_for_or(
                deadline,
                || self.logs(),
                "sentinels to know each other",
                || sentinel.known_sentinels() == SENTINELS - 1,
            );
        }
        let old = self.primary_port();
        let index = self
            .nodes
            .iter()
            .position(|n| n.port() == old)
            .expect("the primary is a data node");
        self.nodes[index].kill();
        old
    }

    /// Waits until every sentinel names a primary other than `old` and it answers `ROLE`
    /// as master; returns its port.
    pub fn wait_for_new_primary(&self, old: u16) -> u16 {
        let deadline = Instant::now() + FAILOVER_WAIT;
        let mut new = None;
        wait_for_or(
            deadline,
            || self.logs(),
            "a new primary",
            || {
                let ports: Vec<_> = self.sentinels.iter().map(|s| s.primary_port()).collect();
                let Some(Some(first)) = ports.first().copied() else {
                    return false;
                };
                let agreed = first != old && ports.iter().all(|p| *p == Some(first));
                if agreed && role(self.node(first)) == "master" {
                    new = Some(first);
                }
                new.is_some()
            },
        );
        new.expect("checked above")
    }

    /// Waits until the node at `old` answers `ROLE` as a replica: from then on it refuses
    /// writes with `READONLY`, so no client can still land one there. Until then a write
    /// on a connection made before the failover reaches the old primary and is lost with it.
    pub fn wait_demoted(&self, old: u16) {
        wait_for_or(
            Instant::now() + FAILOVER_WAIT,
            || self.logs(),
            "the old primary to be demoted",
            || role(self.node(old)) == "slave",
        );
    }

    /// Tails of every sentinel's log, for failure messages.
    pub fn logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| format!("--- sentinel {} ---\n{}", s.port, s.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for SentinelTopology {
    fn drop(&mut self) {
        // Sentinels first: none may start a failover while the data nodes are killed.
        self.sentinels.clear();
        self.proxy = None;
        self.nodes.clear();
    }
}

/// One command on a new connection to `node`, panicking on error. Use it instead of
/// `RedisServer::query` on nodes a failover touched: Sentinel sends `CLIENT KILL TYPE
/// normal` to every node it reconfigures, which breaks `query`'s cached connection.
pub fn query<T: redis::FromRedisValue>(node: &RedisServer, args: &[&str]) -> T {
    let mut conn = node.conn();
    command(args)
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("{args:?} on node {} failed: {e}", node.port()))
}

/// `ROLE`'s first element on `node`, on a new connection: `master` or `slave`.
pub fn role(node: &RedisServer) -> String {
    let result = node
        .try_conn()
        .and_then(|mut conn| redis::cmd("ROLE").query::<redis::Value>(&mut conn));
    match result {
        Ok(redis::Value::Array(items)) => match items.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

/// Polls `done` until it holds; past `deadline`, panics with `what` and `context()`.
fn wait_for_or(
    deadline: Instant,
    context: impl Fn() -> String,
    what: &str,
    mut done: impl FnMut() -> bool,
) {
    while !done() {
        if Instant::now() >= deadline {
            panic!("timed out waiting for {what}\n{}", context());
        }
        thread::sleep(POLL);
    }
}
