//! Redis Cluster: one connection per primary, chosen by the hash slot of the lease's hash
//! tag.
//!
//! * The slot map comes from `CLUSTER SLOTS`, asked of every seed at once (the first
//!   answer wins) on first use and again after a `MOVED` (the map is then forgotten). A
//!   lease's keys share one `{…}` hash tag (`protocol::keys`), so every script touches
//!   one slot.
//! * A connection to the owner of a slot is made on first use, with the first seed's
//!   login (user, password, database 0, TLS) at the address the map names. Fetching the map
//!   and connecting are bounded together by the caller's bound; every failure is `NotSent`.
//! * The map is also forgotten when a node's connection is, or cannot be made (the node
//!   may have failed over to a replica), and on `CLUSTERDOWN`: the next call asks the
//!   seeds again. Only the configured seeds are asked, never nodes learnt from a map.
//! * A redirection is followed once within the call (`RedisBackend::follow`): the node
//!   refused before running anything, so nothing runs twice. After `MOVED` the map is
//!   forgotten (the next call fetches it) and the call goes to the node named. After `ASK`
//!   (the slot is migrating and the source no longer has the keys) it goes to the
//!   importing node after `ASKING`, in one write on that node's connection; the map stays,
//!   as the source owns the slot until the migration ends. So a lease whose keys moved
//!   renews, inspects and releases during the migration (an inspection refused with
//!   `TRYAGAIN`, its line not moved yet, reads the lease alone: `RedisBackend::inspect`).
//!   A second redirection in one
//!   call, or a `TRYAGAIN` (some of a call's keys moved, others not yet: an acquisition
//!   whose fence counter moved before its lease key exists), is `NotSent` (`classify`),
//!   for the caller to retry.
//! * Every node connection is forgotten like the shared connection of the other
//!   topologies: on an I/O error, a timeout, `READONLY`, `MASTERDOWN`.
//! * Connecting to any node waits on the backend's one connect gate: while one node is
//!   slow to connect, a call for another node's slot that has no connection yet waits too
//!   (within its own bound). Calls on nodes already connected do not wait.
//! * The redis crate's cluster client (which retries and follows redirections on its own,
//!   docs/design.md §12) is not used: every await here is bounded by the call's deadline.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::{Client, ConnectionAddr, ConnectionInfo, Value};
use tokio::time::Instant;

use super::sentinel::node_addr;
use super::{Connected, classify, connection_config, invalid_url, not_sent, open_client};
use crate::backend::SendFailure;
use crate::error::LeaseError;

/// Number of hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// `(first slot, last slot, host, port)` of every primary's ranges.
type SlotMap = Vec<(u16, u16, String, u16)>;

pub(super) struct Cluster {
    seeds: Vec<Seed>,
    /// Login for every node; its address is replaced by the one the slot map names.
    node_template: ConnectionInfo,
    state: Mutex<State>,
}

struct Seed {
    client: Client,
    /// `host:port`, for messages: never the URL, which may hold a password.
    label: String,
    host: String,
}

#[derive(Default)]
struct State {
    slots: Option<SlotMap>,
    /// The connection to each node, by `host:port`, with its generation.
    nodes: HashMap<String, (u64, Connected)>,
    generation: u64,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("seeds", &self.seeds.len())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Parses and checks every seed URL, without I/O.
    pub(super) fn new(urls: &[String]) -> Result<Self, LeaseError> {
        if urls.is_empty() {
            return Err(invalid_url(
                "a cluster configuration needs at least one seed URL",
            ));
        }
        let count = urls.len();
        let seeds = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let which = format!("cluster seed URL {} of {count}", i + 1);
                let client = open_client(url).map_err(|e| invalid_url(format!("{which}: {e}")))?;
                let info = client.get_connection_info();
                let host = match info.addr() {
                    ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => {
                        host.clone()
                    }
                    _ => {
                        return Err(invalid_url(format!(
                            "{which} must be redis:// or rediss://: cluster nodes are TCP"
                        )));
                    }
                };
                let db = info.redis_settings().db();
                if db != 0 {
                    return Err(invalid_url(format!(
                        "{which} names database {db}, but a cluster has only database 0"
                    )));
                }
                Ok(Seed {
                    label: info.addr().to_string(),
                    host,
                    client,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let node_template = seeds[0].client.get_connection_info().clone();
        Ok(Self {
            seeds,
            node_template,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state holds plain values replaced whole; a poisoned lock still holds valid ones.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection to the owner of `key`'s slot, if the map names one and it is open.
    pub(super) fn current(&self, key: &str) -> Option<(u64, Connected)> {
        let state = self.state();
        let (host, port) = owner(state.slots.as_deref()?, slot(key.as_bytes()))?;
        state.nodes.get(&endpoint(host, port)).cloned()
    }

    /// A connection to the owner of `key`'s slot, obtained by `bound`; the caller holds the
    /// backend's connect gate. Every failure is `NotSent`.
    pub(super) async fn connect(
        &self,
        key: &str,
        bound: Instant,
    ) -> Result<(u64, Connected), SendFailure> {
        let slot = slot(key.as_bytes());
        let map = self.map(bound).await?;
        let (host, port) =
            owner(&map, slot).ok_or_else(|| not_sent(format!("no node serves slot {slot}")))?;
        let (host, port) = (host.to_owned(), port);
        self.node(&host, port, bound).await
    }

    /// Every primary the slot map names (fetched by `bound` if there is none).
    pub(super) async fn primaries(
        &self,
        bound: Instant,
    ) -> Result<Vec<(String, u16)>, SendFailure> {
        let map = self.map(bound).await?;
        let mut primaries: Vec<(String, u16)> = map
            .into_iter()
            .map(|(_, _, host, port)| (host, port))
            .collect();
        primaries.sort();
        primaries.dedup();
        Ok(primaries)
    }

    /// The connection to the node at `host:port` (which an `ASK` named, say), if it is open.
    pub(super) fn current_node(&self, host: &str, port: u16) -> Option<(u64, Connected)> {
        self.state().nodes.get(&endpoint(host, port)).cloned()
    }

    /// A connection to the node at `host:port`, obtained by `bound`; the caller holds the
    /// backend's connect gate. Every failure is `NotSent`.
    pub(super) async fn node(
        &self,
        host: &str,
        port: u16,
        bound: Instant,
    ) -> Result<(u64, Connected), SendFailure> {
        // After a fresh map the owner may be a node already connected to.
        if let Some(current) = self.current_node(host, port) {
            return Ok(current);
        }
        let info =
            self.node_template
                .clone()
                .set_addr(node_addr(self.node_template.addr(), host, port));
        let client = Client::open(info).map_err(|e| classify::connect_failure(&e))?;
        let connection = tokio::time::timeout_at(
            bound,
            client.get_multiplexed_async_connection_with_config(&connection_config(bound)),
        )
        .await
        .map_err(|_| not_sent(format!("connect to {host}:{port} timed out")))
        .and_then(|r| r.map_err(|e| classify::connect_failure(&e)))
        .inspect_err(|_| self.forget_map())?;
        let connected = Connected::open(connection, client, bound)
            .await
            .inspect_err(|_| self.forget_map())?;
        let mut state = self.state();
        state.generation += 1;
        let generation = state.generation;
        state
            .nodes
            .insert(endpoint(host, port), (generation, connected.clone()));
        Ok((generation, connected))
    }

    /// The slot map, fetched by `bound` if there is none.
    async fn map(&self, bound: Instant) -> Result<SlotMap, SendFailure> {
        let known = self.state().slots.clone();
        match known {
            Some(map) => Ok(map),
            None => {
                let map = self.fetch_map(bound).await?;
                self.state().slots = Some(map.clone());
                Ok(map)
            }
        }
    }

    /// `CLUSTER SLOTS` from the first seed to answer by `bound`. Every seed is asked at
    /// once, so seeds that are down or silent cost nothing while another answers.
    async fn fetch_map(&self, bound: Instant) -> Result<SlotMap, SendFailure> {
        let mut asks: FuturesUnordered<_> =
            self.seeds
                .iter()
                .map(|seed| async move {
                    (seed, tokio::time::timeout_at(bound, ask(seed, bound)).await)
                })
                .collect();
        let mut problems = Vec::new();
        while let Some((seed, answer)) = asks.next().await {
            match answer {
                Ok(Ok(map)) if !map.is_empty() => return Ok(map),
                Ok(Ok(_)) => problems.push(format!("{}: no slots assigned", seed.label)),
                Ok(Err(e)) => problems.push(format!("{}: {e}", seed.label)),
                Err(_) => problems.push(format!("{}: timed out", seed.label)),
            }
        }
        Err(not_sent(format!(
            "no cluster seed gave a slot map: {}",
            problems.join("; ")
        )))
    }

    /// Forgets the connection `generation` to `endpoint`, if it is still the current one,
    /// and the slot map with it: the node may no longer serve its slots.
    pub(super) fn discard(&self, endpoint: &str, generation: u64) {
        let mut state = self.state();
        if state
            .nodes
            .get(endpoint)
            .is_some_and(|(g, _)| *g == generation)
        {
            state.nodes.remove(endpoint);
            state.slots = None;
        }
    }

    /// The next call fetches the slot map again.
    pub(super) fn forget_map(&self) {
        self.state().slots = None;
    }
}

/// `CLUSTER SLOTS` on a fresh connection to `seed`.
async fn ask(seed: &Seed, bound: Instant) -> Result<SlotMap, String> {
    let mut connection = seed
        .client
        .get_multiplexed_async_connection_with_config(&connection_config(bound))
        .await
        .map_err(|e| e.to_string())?;
    let value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Value>(&mut connection)
        .await
        .map_err(|e| e.to_string())?;
    parse_slots(value, &seed.host)
}

/// Whether `err` says the slot map is stale: a redirection (`MOVED`) or a cluster
/// that is down (`CLUSTERDOWN`, as while a failed primary's replica takes over).
pub(super) fn map_is_stale(err: &redis::RedisError) -> bool {
    matches!(err.code(), Some("MOVED" | "CLUSTERDOWN"))
}

fn endpoint(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

fn owner(map: &[(u16, u16, String, u16)], slot: u16) -> Option<(&str, u16)> {
    map.iter()
        .find(|(first, last, ..)| (*first..=*last).contains(&slot))
        .map(|(_, _, host, port)| (host.as_str(), *port))
}

/// The hash slot of `key`: CRC16/XMODEM of its hash tag (or of the whole key) mod 16384.
fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tag) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Parses `CLUSTER SLOTS`: `[[first, last, [host, port, id, …], replicas…], …]`. An empty
/// host means the node that answered (`seed_host`).
fn parse_slots(value: Value, seed_host: &str) -> Result<SlotMap, String> {
    let bad = || "unreadable CLUSTER SLOTS reply".to_owned();
    let Value::Array(ranges) = value else {
        return Err(bad());
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    ranges
        .iter()
        .map(|range| {
            let Value::Array(fields) = range else {
                return Err(bad());
            };
            let (Some(first), Some(last), Some(Value::Array(primary))) = (
                fields.first().and_then(int),
                fields.get(1).and_then(int),
                fields.get(2),
            ) else {
                return Err(bad());
            };
            let host = match primary.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => return Err(bad()),
            };
            let host = if host.is_empty() || host == "?" {
                seed_host.to_owned()
            } else {
                host
            };
            let port = primary.get(1).and_then(int).ok_or_else(bad)?;
            Ok((first, last, host, port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_redis_cluster_spec() {
        // Examples from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"a{b}c:fence"), slot(b"b"));
    }
}
