//! A Redis Cluster, started fresh for one test.
//!
//! [`ClusterTopology::start`]: three primaries and no replicas (`redis-server` with
//! `cluster-enabled yes`), each on its own free loopback port and in its own temporary
//! directory, persistence off; the slots are spread over them with
//! `redis-cli --cluster create … --cluster-yes`. `start` returns once every node's
//! `CLUSTER INFO` says `cluster_state:ok`.
//!
//! [`ClusterTopology::start_proxied`]: the same, with a [`Proxy`] in front of each node and
//! every node announcing its proxy's port (`--cluster-announce-port`, from its start), so
//! the slot map and every `MOVED` name the proxies and a backend's replies can be dropped.
//! Returns once every node's `CLUSTER SLOTS` names the proxies only.
//!
//! Drop kills every process by PID and removes the temporary directories. Everything is
//! synchronous (std only), independent of the test's tokio runtime.
//!
//! One node — its process, start-up and commands — is in `node`; this module spreads the
//! slots over three of them and moves slots between them.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LeaseClient, LeaseSettings, RedisBackend, RedisConfig};

use super::Proxy;
use super::redis_server::process::find_on_path;

mod node;

pub use node::ClusterNode;
use node::start_node;

const PRIMARIES: usize = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);
const START_ATTEMPTS: usize = 5;
const CONN_TIMEOUT: Duration = Duration::from_secs(2);
const CLI_NOT_FOUND: &str = "redis-cli not found: install the Debian package redis-tools; \
                             cluster tests never skip";

/// Three primaries sharing the 16384 slots; see the module docs.
pub struct ClusterTopology {
    nodes: Vec<ClusterNode>,
    /// `start_proxied` only: one per node, in `nodes`' order.
    proxies: Vec<Proxy>,
}

impl ClusterTopology {
    pub fn start() -> Self {
        Self::start_announcing(false)
    }

    /// Three primaries, each behind a proxy whose port it announces.
    pub fn start_proxied() -> Self {
        let topology = Self::start_announcing(true);
        let ports: Vec<i64> = topology
            .proxies
            .iter()
            .map(|p| i64::from(p.addr().port()))
            .collect();
        let deadline = Instant::now() + READY_TIMEOUT;
        while !topology
            .nodes
            .iter()
            .all(|node| slot_owner_ports(node).iter().all(|p| ports.contains(p)))
        {
            assert!(
                Instant::now() < deadline,
                "the nodes did not announce their proxies within {READY_TIMEOUT:?}"
            );
            thread::sleep(POLL);
        }
        topology
    }

    /// The nodes, with a proxy in front of each whose port it announces if `proxied`; the
    /// cluster is created on the nodes' own ports (its bus ports are the nodes').
    fn start_announcing(proxied: bool) -> Self {
        // The server the harness runs (`LEASEHOLD_REDIS_SERVER`: CI's matrix runs Valkey's
        // too); Debian's redis-cli creates the cluster for either.
        let server = super::redis_server::find_binary();
        let cli = find_binary("redis-cli", CLI_NOT_FOUND);
        let mut nodes = Vec::new();
        let mut proxies = Vec::new();
        for _ in 0..PRIMARIES {
            // The proxy is started before its node, so that the node can announce its port
            // from the start; one per attempt, since a failed attempt moves to another port.
            let mut proxy = None;
            let mut announce = |port: u16| {
                if !proxied {
                    return None;
                }
                let started = Proxy::start((Ipv4Addr::LOCALHOST, port).into());
                let announced = started.addr().port();
                proxy = Some(started);
                Some(announced)
            };
            nodes.push(start_node(&server, &mut announce));
            proxies.extend(proxy);
        }
        let mut create = Command::new(&cli);
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let output = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli.display()));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let topology = Self { nodes, proxies };
        topology.wait_ok();
        topology
    }

    /// `start_proxied` only: the proxies, in `nodes`' order.
    pub fn proxies(&self) -> &[Proxy] {
        &self.proxies
    }

    /// Waits until every node says `cluster_state:ok` and sees every primary.
    fn wait_ok(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ok = self.nodes.iter().all(|node| {
                node.try_cmd(&["CLUSTER", "INFO"])
                    .ok()
                    .and_then(|v| redis::from_redis_value::<String>(v).ok())
                    .is_some_and(|info| {
                        info.contains("cluster_state:ok")
                            && info.contains(&format!("cluster_known_nodes:{PRIMARIES}"))
                    })
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster did not reach cluster_state:ok within {READY_TIMEOUT:?}"
            );
            thread::sleep(POLL);
        }
    }

    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// The nodes' URLs, or under `start_proxied` the proxies'.
    pub fn seed_urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            self.nodes.iter().map(ClusterNode::url).collect()
        } else {
            self.proxies.iter().map(Proxy::url).collect()
        }
    }

    pub fn config(&self) -> RedisConfig {
        RedisConfig::cluster(self.seed_urls())
    }

    /// A client on the cluster, with `settings`' connect timeout.
    pub fn client(&self, settings: LeaseSettings) -> LeaseClient {
        let config = self.config().connect_timeout(settings.connect_timeout);
        let backend = RedisBackend::new(config).expect("valid cluster config");
        LeaseClient::new(backend, settings).expect("valid settings")
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &str) -> u16 {
        let slot: i64 = self.nodes[0].query(&["CLUSTER", "KEYSLOT", key]);
        u16::try_from(slot).expect("a slot")
    }

    /// Index of the node serving `key`'s slot, as node 0 sees it.
    pub fn owner_of(&self, key: &str) -> usize {
        let slot = i64::from(self.slot(key));
        let slots = self.nodes[0]
            .try_cmd(&["CLUSTER", "SLOTS"])
            .expect("CLUSTER SLOTS");
        let redis::Value::Array(ranges) = slots else {
            panic!("unreadable CLUSTER SLOTS: {slots:?}")
        };
        for range in ranges {
            let redis::Value::Array(fields) = range else {
                continue;
            };
            let (Some(redis::Value::Int(first)), Some(redis::Value::Int(last))) =
                (fields.first(), fields.get(1))
            else {
                continue;
            };
            if (*first..=*last).contains(&slot) {
                let Some(redis::Value::Array(primary)) = fields.get(2) else {
                    panic!("no primary in {fields:?}")
                };
                let Some(redis::Value::Int(port)) = primary.get(1) else {
                    panic!("no port in {primary:?}")
                };
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port) == *port)
                    .or_else(|| {
                        self.proxies
                            .iter()
                            .position(|p| i64::from(p.addr().port()) == *port)
                    })
                    .expect("a node of ours");
            }
        }
        panic!("no node serves slot {slot}")
    }

    /// The node serving `key`'s slot.
    pub fn owner(&self, key: &str) -> &ClusterNode {
        &self.nodes[self.owner_of(key)]
    }

    /// Moves `key`'s slot, with every key in it, to node `to` (`SETSLOT IMPORTING` /
    /// `MIGRATING`, `MIGRATE`, `SETSLOT NODE` on every node), as `redis-cli --cluster
    /// reshard` does. Returns once every node names `to` as the owner.
    pub fn move_slot(&self, key: &str, to: usize) {
        self.begin_migration(key, to);
        self.end_migration(key, to);
    }

    /// The first half of `move_slot`: `key`'s slot is migrating to node `to`, and every key
    /// in it is already there, while the source still owns the slot (it answers `ASK` for
    /// the keys it no longer has).
    pub fn begin_migration(&self, key: &str, to: usize) {
        let from = self.owner_of(key);
        assert_ne!(from, to, "the slot is already on node {to}");
        let slot = self.slot(key).to_string();
        let (source, target) = (&self.nodes[from], &self.nodes[to]);
        let (source_id, target_id) = (source.id(), target.id());
        target.query::<()>(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
        source.query::<()>(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
        loop {
            let keys: Vec<String> = source.query(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
            if keys.is_empty() {
                break;
            }
            let port = target.port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            source.query::<()>(&args);
        }
    }

    /// The second half of `move_slot`: every node names `to` as the owner of `key`'s slot.
    pub fn end_migration(&self, key: &str, to: usize) {
        let from = self.owner_of(key);
        let slot = self.slot(key).to_string();
        let (source, target) = (&self.nodes[from], &self.nodes[to]);
        let target_id = target.id();
        for node in [target, source] {
            node.query::<()>(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        }
        for node in &self.nodes {
            if node.port != source.port && node.port != target.port {
                node.query::<()>(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
            }
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        while self.owner_of(key) != to {
            assert!(Instant::now() < deadline, "slot {slot} did not move");
            thread::sleep(POLL);
        }
    }
}

/// The port of every slot range's primary in `node`'s `CLUSTER SLOTS`.
fn slot_owner_ports(node: &ClusterNode) -> Vec<i64> {
    let Ok(redis::Value::Array(ranges)) = node.try_cmd(&["CLUSTER", "SLOTS"]) else {
        return vec![-1];
    };
    ranges
        .iter()
        .map(|range| match range {
            redis::Value::Array(fields) => match fields.get(2) {
                Some(redis::Value::Array(primary)) => match primary.get(1) {
                    Some(redis::Value::Int(port)) => *port,
                    _ => -1,
                },
                _ => -1,
            },
            _ => -1,
        })
        .collect()
}

/// `name` on `PATH`, else in `/usr/bin`; panics with `not_found`.
fn find_binary(name: &str, not_found: &str) -> PathBuf {
    find_on_path(name).unwrap_or_else(|| panic!("{not_found}"))
}
