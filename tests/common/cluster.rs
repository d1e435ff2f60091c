//! A Redis Cluster, started fresh for one test.
//!
//! [`ClusterTopology::start`]: three primaries and no replicas (`redis-server` with
//! `cluster-enabled yes`), each on its own free loopback port and in its own temporary
//! directory, persistence off; the slots are spread over them with
//! `redis-cli --cluster create … --cluster-yes`. `start` returns once every node's
//! `CLUSTER INFO` says `cluster_state:ok`.
//!
//! [`ClusterTopology::start_proxied`]: the same, with a [`Proxy`] in front of each node and
//! every node announcing its proxy's port (`cluster-announce-port`), so the slot map and
//! every `MOVED` name the proxies and a backend's replies can be dropped. Returns once
//! every node's `CLUSTER SLOTS` names the proxies only.
//!
//! Drop kills every process by PID and removes the temporary directories. Everything is
//! synchronous (std only), independent of the test's tokio runtime.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{LeaseClient, LeaseSettings, RedisBackend, RedisConfig};

use super::Proxy;

const PRIMARIES: usize = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);
const START_ATTEMPTS: usize = 5;
const CONN_TIMEOUT: Duration = Duration::from_secs(2);
const SERVER_NOT_FOUND: &str = "redis-server not found: install the Debian package \
                                redis-server; cluster tests never skip";
const CLI_NOT_FOUND: &str = "redis-cli not found: install the Debian package redis-tools; \
                             cluster tests never skip";

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// One cluster node: a `redis-server` child in cluster mode.
pub struct ClusterNode {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl ClusterNode {
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One command on a fresh connection; a Redis error reply is returned as `Err`.
    pub fn try_cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut conn =
            redis::Client::open(self.url())?.get_connection_with_timeout(CONN_TIMEOUT)?;
        conn.set_read_timeout(Some(CONN_TIMEOUT))?;
        let (name, rest) = args.split_first().expect("a command name");
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn)
    }

    /// One command after `ASKING`, on one fresh connection: what a node importing a slot
    /// holds for it (without `ASKING` it redirects with `MOVED`).
    pub fn asking_query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let run = || -> redis::RedisResult<T> {
            let mut conn =
                redis::Client::open(self.url())?.get_connection_with_timeout(CONN_TIMEOUT)?;
            conn.set_read_timeout(Some(CONN_TIMEOUT))?;
            redis::cmd("ASKING").query::<()>(&mut conn)?;
            let (name, rest) = args.split_first().expect("a command name");
            let mut cmd = redis::cmd(name);
            for arg in rest {
                cmd.arg(*arg);
            }
            cmd.query(&mut conn)
        };
        run().unwrap_or_else(|e| panic!("ASKING {args:?} failed on port {}: {e}", self.port))
    }

    /// Runs one command and converts the reply, panicking on any error.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let value = self
            .try_cmd(args)
            .unwrap_or_else(|e| panic!("{args:?} failed on port {}: {e}", self.port));
        redis::from_redis_value(value.clone())
            .unwrap_or_else(|e| panic!("reply {value:?} to {args:?} has unexpected type: {e}"))
    }

    /// This node's cluster id.
    pub fn id(&self) -> String {
        self.query(&["CLUSTER", "MYID"])
    }

    /// Runs one command, panicking on any error.
    pub fn cmd(&self, args: &[&str]) -> redis::Value {
        self.query(args)
    }

    /// Commands executed on this node (`calls` + `rejected_calls` of `INFO commandstats`),
    /// without those the harness and connection set-up send (`info`, `config`, `ping`,
    /// `hello`, `client`, `select`, `cluster`).
    pub fn command_calls(&self) -> u64 {
        const SKIP: &[&str] = &[
            "info", "config", "ping", "hello", "client", "select", "cluster",
        ];
        let info: String = self.query(&["INFO", "commandstats"]);
        let mut total = 0;
        for line in info.lines() {
            let Some((name, stats)) = line
                .trim()
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            else {
                continue;
            };
            let base = name.split('|').next().unwrap_or(name).to_ascii_lowercase();
            if SKIP.contains(&base.as_str()) {
                continue;
            }
            for field in stats.split(',') {
                if let Some((key, value)) = field.split_once('=')
                    && (key == "calls" || key == "rejected_calls")
                {
                    total += value.parse::<u64>().unwrap_or(0);
                }
            }
        }
        total
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three primaries sharing the 16384 slots; see the module docs.
pub struct ClusterTopology {
    nodes: Vec<ClusterNode>,
    /// `start_proxied` only: one per node, in `nodes`' order.
    proxies: Vec<Proxy>,
}

impl ClusterTopology {
    pub fn start() -> Self {
        let server = find_binary("redis-server", SERVER_NOT_FOUND);
        let cli = find_binary("redis-cli", CLI_NOT_FOUND);
        let nodes: Vec<ClusterNode> = (0..PRIMARIES).map(|_| start_node(&server)).collect();
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
        let topology = Self {
            nodes,
            proxies: Vec::new(),
        };
        topology.wait_ok();
        topology
    }

    /// Three primaries, each behind a proxy whose port it announces.
    pub fn start_proxied() -> Self {
        let mut topology = Self::start();
        for node in &topology.nodes {
            let proxy = Proxy::start((Ipv4Addr::LOCALHOST, node.port).into());
            let bus = (u32::from(node.port) + 10_000).to_string();
            let announced = proxy.addr().port().to_string();
            node.query::<()>(&["CONFIG", "SET", "cluster-announce-bus-port", &bus]);
            node.query::<()>(&["CONFIG", "SET", "cluster-announce-port", &announced]);
            topology.proxies.push(proxy);
        }
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

fn find_binary(name: &str, not_found: &str) -> PathBuf {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    let fallback = Path::new("/usr/bin").join(name);
    assert!(fallback.is_file(), "{not_found}");
    fallback
}

fn make_temp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    loop {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "leasehold-cluster-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create temp dir {}: {e}", dir.display()),
        }
    }
}

fn free_port() -> u16 {
    // The cluster bus listens on port + 10000: keep both in range.
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        if port < 55_535 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A cluster-mode `redis-server` answering `PING`, retried on another port if it fails.
fn start_node(binary: &Path) -> ClusterNode {
    let mut problems = Vec::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        let dir = make_temp_dir();
        let mut child = Command::new(binary)
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "5000"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let pid = child.id();
        let node = |child| ClusterNode {
            child: Some(child),
            port,
            dir: dir.clone(),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                problems.push(format!("port {port}: exited with {status}"));
                drop(node(child));
                break;
            }
            let candidate = node(child);
            match candidate.try_cmd(&["INFO", "server"]) {
                Ok(value) => {
                    let info: String = redis::from_redis_value(value).unwrap_or_default();
                    if info.contains(&format!("process_id:{pid}\r")) {
                        return candidate;
                    }
                    problems.push(format!("port {port}: served by another process"));
                    drop(candidate);
                    break;
                }
                Err(_) if Instant::now() < deadline => {
                    child = ClusterNode::into_child(candidate);
                    thread::sleep(POLL);
                }
                Err(e) => {
                    problems.push(format!("port {port}: {e}"));
                    drop(candidate);
                    break;
                }
            }
        }
    }
    panic!(
        "cluster node failed to start after {START_ATTEMPTS} attempts: {}",
        problems.join("; ")
    )
}

impl ClusterNode {
    /// Takes the child back without killing it (the directory stays).
    fn into_child(mut self) -> Child {
        let child = self.child.take().expect("a child");
        self.dir = PathBuf::new();
        child
    }
}
