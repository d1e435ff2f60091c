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

use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{LeaseClient, LeaseSettings, RedisBackend, RedisConfig};

use super::{Proxy, RedisServer};

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

const NOT_FOUND: &str = "redis-sentinel not found: install the Debian package redis-sentinel; \
                         sentinel tests never skip";

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);
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
        let binary = find_sentinel_binary();
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
    let (name, rest) = args.split_first().expect("a command");
    let mut cmd = redis::cmd(name);
    for arg in rest {
        cmd.arg(*arg);
    }
    let mut conn = node.conn();
    cmd.query(&mut conn)
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

/// A `redis-sentinel` child process bound to `127.0.0.1:<port>`.
struct SentinelProcess {
    master_name: String,
    child: Child,
    pid: u32,
    port: u16,
    dir: PathBuf,
}

impl SentinelProcess {
    fn start(binary: &Path, master_name: &str, monitored: u16, down_after_ms: u64) -> Self {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let dir = make_temp_dir();
            let port = free_port();
            let conf = dir.join("sentinel.conf");
            let text = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 daemonize no\n\
                 protected-mode no\n\
                 dir {dir}\n\
                 logfile {log}\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor {master_name} 127.0.0.1 {monitored} {QUORUM}\n\
                 sentinel down-after-milliseconds {master_name} {down_after_ms}\n\
                 sentinel failover-timeout {master_name} {FAILOVER_TIMEOUT_MS}\n",
                dir = dir.display(),
                log = dir.join("sentinel.log").display(),
            );
            std::fs::write(&conf, text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
            let child = Command::new(binary)
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
            let mut process = Self {
                master_name: master_name.to_owned(),
                pid: child.id(),
                child,
                port,
                dir,
            };
            match process.wait_ready() {
                Ok(()) => return process,
                // Lost the port to another process, or failed to start: try another port.
                Err(msg) => failures.push(format!("port {port}: {msg}\n{}", process.log_tail())),
            }
        }
        panic!(
            "redis-sentinel failed to start after {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    /// Waits until this very process answers `PING` as a sentinel.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("redis-sentinel exited with {status}"));
            }
            if let Ok(info) = self.query::<String>(&["INFO", "server"]) {
                let pid = info
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse::<u32>().ok());
                if pid != Some(self.pid) {
                    return Err(format!("port {} is served by another process", self.port));
                }
                if info.contains("redis_mode:sentinel") {
                    return Ok(());
                }
                return Err("answered, but not as a sentinel".to_owned());
            }
            if Instant::now() >= deadline {
                return Err(format!("no answer within {READY_TIMEOUT:?}"));
            }
            thread::sleep(POLL);
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One command on a fresh connection (sentinel state is polled rarely).
    fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_connection_with_timeout(CONN_TIMEOUT)?;
        conn.set_read_timeout(Some(CONN_TIMEOUT))?;
        let (name, rest) = args.split_first().expect("a command");
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn)
    }

    /// The port this sentinel names for its master.
    fn primary_port(&self) -> Option<u16> {
        self.query::<Option<(String, u16)>>(&[
            "SENTINEL",
            "get-master-addr-by-name",
            &self.master_name,
        ])
        .ok()
        .flatten()
        .map(|(_, port)| port)
    }

    /// Replicas this sentinel lists with the plain `slave` flag (not down, not
    /// disconnected).
    fn healthy_replicas(&self) -> usize {
        self.query::<Vec<std::collections::HashMap<String, String>>>(&[
            "SENTINEL",
            "replicas",
            &self.master_name,
        ])
        .map(|replicas| {
            replicas
                .iter()
                .filter(|r| r.get("flags").map(String::as_str) == Some("slave"))
                .count()
        })
        .unwrap_or(0)
    }

    /// Other sentinels this one knows for its master.
    fn known_sentinels(&self) -> usize {
        self.query::<Vec<redis::Value>>(&["SENTINEL", "sentinels", &self.master_name])
            .map(|s| s.len())
            .unwrap_or(0)
    }

    fn log_tail(&self) -> String {
        match std::fs::read_to_string(self.dir.join("sentinel.log")) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(25)..].join("\n")
            }
            Err(e) => format!("(cannot read sentinel.log: {e})"),
        }
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        // `Child::kill` signals this process by its PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-sentinel` on `PATH`, else `/usr/bin/redis-sentinel`; panics naming the package.
fn find_sentinel_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("redis-sentinel"))
            .find(|candidate| candidate.is_file())
    });
    on_path
        .or_else(|| {
            let fallback = PathBuf::from("/usr/bin/redis-sentinel");
            fallback.is_file().then_some(fallback)
        })
        .unwrap_or_else(|| panic!("{NOT_FOUND}"))
}

fn make_temp_dir() -> PathBuf {
    let base = std::env::temp_dir();
    loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!(
            "leasehold-sentinel-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create temp dir {}: {e}", dir.display()),
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

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
