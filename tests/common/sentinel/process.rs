//! One `redis-sentinel` child process: its configuration file, the wait until this very
//! process answers as a sentinel, and the few `SENTINEL` queries a topology polls. Kept
//! apart from the topology, which only combines sentinels and data nodes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Instant;

use super::super::redis_server::commands::command;
use super::super::redis_server::process::{find_on_path, free_port, log_tail, make_temp_dir};
use super::{CONN_TIMEOUT, FAILOVER_TIMEOUT_MS, POLL, QUORUM, READY_TIMEOUT, START_ATTEMPTS};

const NOT_FOUND: &str = "redis-sentinel not found: install the Debian package redis-sentinel; \
                         sentinel tests never skip";

/// A `redis-sentinel` child process bound to `127.0.0.1:<port>`.
pub struct SentinelProcess {
    master_name: String,
    child: Child,
    pid: u32,
    pub port: u16,
    dir: PathBuf,
}

impl SentinelProcess {
    pub fn start(binary: &Path, master_name: &str, monitored: u16, down_after_ms: u64) -> Self {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let dir = make_temp_dir("sentinel");
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

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One command on a fresh connection (sentinel state is polled rarely).
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_connection_with_timeout(CONN_TIMEOUT)?;
        conn.set_read_timeout(Some(CONN_TIMEOUT))?;
        command(args).query(&mut conn)
    }

    /// The port this sentinel names for its master.
    pub fn primary_port(&self) -> Option<u16> {
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
    pub fn healthy_replicas(&self) -> usize {
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
    pub fn known_sentinels(&self) -> usize {
        self.query::<Vec<redis::Value>>(&["SENTINEL", "sentinels", &self.master_name])
            .map(|s| s.len())
            .unwrap_or(0)
    }

    pub fn log_tail(&self) -> String {
        log_tail(&self.dir, "sentinel.log", 25)
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
pub fn find_sentinel_binary() -> PathBuf {
    find_on_path("redis-sentinel").unwrap_or_else(|| panic!("{NOT_FOUND}"))
}
