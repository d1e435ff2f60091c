//! One cluster-mode `redis-server`: starting it on a port whose bus port (+10000) is free
//! too, and the commands a test sends to one node. Kept apart from the topology, which
//! only decides which node holds which slots.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Instant;

use super::super::redis_server::commands::{HARNESS_COMMANDS, command, parse_command_calls};
use super::super::redis_server::process::{free_port, make_temp_dir};
use super::{CONN_TIMEOUT, POLL, READY_TIMEOUT, START_ATTEMPTS};

/// One cluster node: a `redis-server` child in cluster mode.
pub struct ClusterNode {
    child: Option<Child>,
    pub(super) port: u16,
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
        command(args).query(&mut conn)
    }

    /// One command after `ASKING`, on one fresh connection: what a node importing a slot
    /// holds for it (without `ASKING` it redirects with `MOVED`).
    pub fn asking_query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let run = || -> redis::RedisResult<T> {
            let mut conn =
                redis::Client::open(self.url())?.get_connection_with_timeout(CONN_TIMEOUT)?;
            conn.set_read_timeout(Some(CONN_TIMEOUT))?;
            redis::cmd("ASKING").query::<()>(&mut conn)?;
            command(args).query(&mut conn)
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
        // `CLUSTER …` too: the cluster client and this harness read the slot map themselves.
        let skip: Vec<&str> = HARNESS_COMMANDS
            .iter()
            .copied()
            .chain(["cluster"])
            .collect();
        let info: String = self.query(&["INFO", "commandstats"]);
        parse_command_calls(&info, &skip)
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

/// A free port whose cluster bus port (port + 10000) is free and in range too.
fn free_port_with_bus() -> u16 {
    loop {
        let port = free_port();
        if port < 55_535 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A cluster-mode `redis-server` answering `PING`, retried on another port if it fails.
///
/// `announce` is called with each attempt's port before the server starts; the port it
/// returns, if any, is the one the node announces to clients and the other nodes
/// (`--cluster-announce-port`, its bus port unchanged). It is given on the command line,
/// not by `CONFIG SET` once the node runs: Redis 6.2 keeps announcing, for its own slots in
/// its `CLUSTER SLOTS`, the port it started with.
pub fn start_node(binary: &Path, announce: &mut dyn FnMut(u16) -> Option<u16>) -> ClusterNode {
    let mut problems = Vec::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port_with_bus();
        let dir = make_temp_dir("cluster");
        let mut command = Command::new(binary);
        if let Some(announced) = announce(port) {
            let bus = (u32::from(port) + 10_000).to_string();
            command
                .args(["--cluster-announce-port", &announced.to_string()])
                .args(["--cluster-announce-bus-port", &bus]);
        }
        let mut child = command
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
