//! A real `redis-server` process, started fresh for one test.
//!
//! Every server gets its own loopback port and its own temporary directory
//! (removed on drop). The process is killed by PID on drop, so a panicking
//! test does not leave a server behind.
//!
//! [`RedisServer::start_tls`] starts a server that speaks only TLS (`--port 0
//! --tls-port P`) with a self-signed certificate made by the `openssl` CLI;
//! `cmd`, `query` and `conn` then connect over TLS (`tls_url`).
//!
//! This file holds the type and its lifecycle; starting a process (`spawn`), TLS
//! (`tls`), process plumbing (`process`) and command helpers (`commands`) live beside
//! it in `redis_server/`. Those submodules are named by `#[path]` because
//! `benches/load` includes this file by path, and a file included that way looks for
//! its submodules beside itself, not in `redis_server/`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

#[path = "redis_server/commands.rs"]
pub mod commands;
#[path = "redis_server/process.rs"]
pub mod process;
#[path = "redis_server/spawn.rs"]
mod spawn;
#[path = "redis_server/tls.rs"]
mod tls;

use commands::{HARNESS_COMMANDS, command, parse_command_calls};
use process::{free_port, log_tail, make_temp_dir, signal, wait_exit};
pub use spawn::find_binary;
use spawn::{SpawnError, spawn_and_wait};
use tls::{TLS_DIR, make_self_signed_cert};

/// How long to wait for a freshly started server to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Polling interval while waiting for `PING`.
const READY_POLL: Duration = Duration::from_millis(20);
/// How many different ports `start` tries when redis cannot bind.
const START_ATTEMPTS: usize = 5;
/// How long `restart` keeps trying to bind the same port again.
const REBIND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `stop` waits after SIGTERM before falling back to SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Read/write timeout of connections returned by `conn` and used by `cmd`.
const CONN_TIMEOUT: Duration = Duration::from_secs(5);
/// How many lines of `redis.log` a failure message shows.
const LOG_TAIL_LINES: usize = 30;

/// A `redis-server` child process bound to `127.0.0.1:<port>`.
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    persistent: bool,
    child: Mutex<Option<Child>>,
    pid: u32,
    paused: AtomicBool,
    /// Serves TLS only (`--port 0 --tls-port <port>`), see `start_tls`.
    tls: bool,
    /// Connection cached by `cmd` / `try_cmd`.
    cached: Mutex<Option<redis::Connection>>,
}

impl RedisServer {
    /// Starts a non-persistent server (`--save "" --appendonly no`).
    pub fn start() -> RedisServer {
        Self::launch(false, false)
    }

    /// Starts a non-persistent server that accepts only TLS connections, on
    /// `--tls-port <port>` with plain TCP disabled (`--port 0`), a fresh
    /// self-signed certificate for `127.0.0.1`/`localhost` (made with the
    /// `openssl` CLI in the server's directory) and `--tls-auth-clients no`.
    /// Readiness is checked over TLS with `redis-cli --tls --insecure`.
    ///
    /// Connect with [`tls_url`](Self::tls_url); [`url`](Self::url) is the
    /// plain-text URL to the same port, which a TLS server does not answer.
    /// `cmd`, `query`, `conn` and `restart` work as for a plain server (over
    /// TLS, without certificate verification).
    pub fn start_tls() -> RedisServer {
        Self::launch(false, true)
    }

    /// Starts a server with `--appendonly yes --appendfsync always`, so every
    /// acknowledged write survives `kill` + `restart` as well as `restart`.
    pub fn start_persistent() -> RedisServer {
        Self::launch(true, false)
    }

    fn launch(persistent: bool, tls: bool) -> RedisServer {
        let binary = find_binary();
        let dir = make_temp_dir("redis");
        if tls && let Err(msg) = make_self_signed_cert(&dir.join(TLS_DIR)) {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("{msg}");
        }
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            match spawn_and_wait(&binary, port, &dir, persistent, tls, READY_TIMEOUT) {
                Ok(child) => {
                    return RedisServer {
                        binary,
                        port,
                        dir,
                        persistent,
                        pid: child.id(),
                        child: Mutex::new(Some(child)),
                        paused: AtomicBool::new(false),
                        tls,
                        cached: Mutex::new(None),
                    };
                }
                Err(SpawnError::Exited(msg)) => failures.push(format!("port {port}: {msg}")),
                Err(SpawnError::NotReady(msg)) => {
                    let log = log_tail(&dir, "redis.log", LOG_TAIL_LINES);
                    let _ = std::fs::remove_dir_all(&dir);
                    panic!(
                        "redis-server on port {port} did not answer PING within {READY_TIMEOUT:?}: \
                         {msg}\n--- tail of redis.log ---\n{log}"
                    );
                }
            }
        }
        let log = log_tail(&dir, "redis.log", LOG_TAIL_LINES);
        let _ = std::fs::remove_dir_all(&dir);
        panic!(
            "redis-server failed to start after {START_ATTEMPTS} attempts:\n{}\n\
             --- tail of redis.log ---\n{log}",
            failures.join("\n")
        );
    }

    /// `redis://127.0.0.1:<port>` (for a `start_tls` server: plain text to
    /// the TLS port, which the server does not answer).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:<port>/#insecure`: TLS without certificate
    /// verification (the redis crate honours `#insecure` only with its
    /// `tls-rustls-insecure` feature, enabled for tests in Cargo.toml).
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/#insecure", self.port)
    }

    /// Whether this server was started with `start_tls`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The URL the harness's own connections use: `tls_url` or `url`.
    fn client_url(&self) -> String {
        if self.tls { self.tls_url() } else { self.url() }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates the ACL user `leaser` (password `s3cret`), confined to the default
    /// namespace's keys and channels (`leasehold:*`); returns its URL.
    pub fn namespace_user_url(&self) -> String {
        self.cmd(&[
            "ACL",
            "SETUSER",
            "leaser",
            "on",
            ">s3cret",
            "~leasehold:*",
            // Redis 6.2 gives a new user every channel (acl-pubsub-default allchannels)
            // and refuses a channel pattern on top of it; 7.0 starts with none.
            "resetchannels",
            "&leasehold:*",
            "+@all",
        ]);
        format!("redis://leaser:s3cret@127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// PID of the current process (changes after `restart`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's working directory (holds `redis.log` and the AOF).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new synchronous connection with 5 s connect/read/write timeouts.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn()
            .unwrap_or_else(|e| panic!("cannot connect to redis at {}: {e}", self.client_url()))
    }

    /// Like `conn`, but returns the error.
    pub fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let conn =
            redis::Client::open(self.client_url())?.get_connection_with_timeout(CONN_TIMEOUT)?;
        conn.set_read_timeout(Some(CONN_TIMEOUT))?;
        conn.set_write_timeout(Some(CONN_TIMEOUT))?;
        Ok(conn)
    }

    /// Runs one command (on a cached connection) and panics on any error,
    /// including a Redis error reply.
    pub fn cmd(&self, args: &[&str]) -> redis::Value {
        self.try_cmd(args).unwrap_or_else(|e| {
            panic!(
                "redis command {args:?} failed on {}: {e}",
                self.client_url()
            )
        })
    }

    /// Runs one command and converts the reply, panicking on error, e.g.
    /// `server.query::<Option<String>>(&["GET", "k"])`.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let value = self.cmd(args);
        redis::from_redis_value(value.clone()).unwrap_or_else(|e| {
            panic!("reply {value:?} to redis command {args:?} has unexpected type: {e}")
        })
    }

    /// Runs one command on a cached connection. A Redis error reply is
    /// returned as `Err`. The cached connection is discarded after any
    /// error that is not a plain error reply (it is reconnected next time).
    pub fn try_cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let cmd = command(args);
        let mut guard = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.try_conn()?);
        }
        let conn = guard.as_mut().expect("connection was just set");
        let result = cmd.query::<redis::Value>(conn);
        if let Err(e) = &result
            && (e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || !redis::ConnectionLike::is_open(conn))
        {
            *guard = None;
        }
        result
    }

    /// Makes this server a replica of `primary` (`REPLICAOF 127.0.0.1 <port>`) and returns
    /// once its link to it is up, or panics after 10 s. Sets the primary's
    /// `repl-diskless-sync-delay` to 0 first: Redis 7 otherwise waits 5 s for more replicas
    /// before the full sync.
    pub fn make_replica_of(&self, primary: &RedisServer) {
        primary.cmd(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        self.cmd(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let info: String = self.query(&["INFO", "replication"]);
            if info.contains("master_link_status:up") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replica on port {} never linked to its primary on port {} within \
                 {READY_TIMEOUT:?}:\n{info}",
                self.port,
                primary.port
            );
            thread::sleep(READY_POLL);
        }
    }

    /// Total number of commands executed by the server (sum of `calls` and
    /// `rejected_calls` in `INFO commandstats`) excluding `info`, `config`,
    /// `ping`, `hello`, `client` and `select`, which the harness and the
    /// redis crate's connection setup send themselves.
    ///
    /// Commands issued by Lua scripts through `redis.call` are counted too,
    /// as are commands the test sends with `cmd`. Use `reset_stats` after
    /// setting up to assert on what the code under test sent.
    pub fn command_calls(&self) -> u64 {
        let info: String = self.query(&["INFO", "commandstats"]);
        parse_command_calls(&info, HARNESS_COMMANDS)
    }

    /// How many times the server ran `command` (lower case, as `INFO commandstats` names
    /// it: `evalsha`, `pttl`), scripts' `redis.call`s included.
    pub fn calls_of(&self, command: &str) -> u64 {
        self.command_stat(command, "calls")
    }

    /// How many times the server refused to run `command` before running it (an ACL, say:
    /// `rejected_calls` of `INFO commandstats`).
    pub fn rejected_calls_of(&self, command: &str) -> u64 {
        self.command_stat(command, "rejected_calls")
    }

    /// Field `field` of `command`'s line in `INFO commandstats`; 0 if it has none.
    fn command_stat(&self, command: &str, field: &str) -> u64 {
        let info: String = self.query(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:");
        let Some(line) = info.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
            return 0;
        };
        line.trim()
            .split(',')
            .find_map(|pair| pair.strip_prefix(field)?.strip_prefix('='))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// `CONFIG RESETSTAT`: zeroes `command_calls`.
    pub fn reset_stats(&self) {
        self.cmd(&["CONFIG", "RESETSTAT"]);
    }

    /// SIGKILL the server and reap it. Data not in the AOF is lost.
    pub fn kill(&mut self) {
        self.drop_cached();
        if let Some(mut child) = self.take_child() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    /// SIGTERM the server and wait up to 10 s for it to exit (then SIGKILL).
    pub fn stop(&mut self) {
        self.drop_cached();
        let Some(mut child) = self.take_child() else {
            return;
        };
        if self.paused.swap(false, Ordering::SeqCst) {
            signal(self.pid, "CONT");
        }
        if let Ok(None) = child.try_wait() {
            signal(self.pid, "TERM");
            if wait_exit(&mut child, STOP_TIMEOUT).is_none() {
                let _ = child.kill();
            }
        }
        let _ = child.wait();
    }

    /// Stops the server gracefully (if running) and starts it again on the
    /// same port and directory with the same options, waiting for `PING`.
    /// A persistent server reloads its data from the AOF.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + REBIND_TIMEOUT;
        loop {
            match spawn_and_wait(
                &self.binary,
                self.port,
                &self.dir,
                self.persistent,
                self.tls,
                READY_TIMEOUT,
            ) {
                Ok(child) => {
                    self.pid = child.id();
                    *self.child.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(child);
                    return;
                }
                Err(SpawnError::Exited(_)) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(50));
                }
                Err(SpawnError::Exited(msg)) | Err(SpawnError::NotReady(msg)) => panic!(
                    "redis-server did not restart on port {}: {msg}\n--- tail of redis.log ---\n{}",
                    self.port,
                    log_tail(&self.dir, "redis.log", LOG_TAIL_LINES)
                ),
            }
        }
    }

    /// SIGSTOP: the process keeps its sockets (connects still succeed, the
    /// kernel queues requests) but answers nothing until `resume`.
    pub fn pause(&self) {
        if self.is_running() && signal(self.pid, "STOP") {
            self.paused.store(true, Ordering::SeqCst);
        }
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        if self.is_running() && signal(self.pid, "CONT") {
            self.paused.store(false, Ordering::SeqCst);
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Whether the process exists (a paused process counts as running).
    pub fn is_running(&self) -> bool {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            None => false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        }
    }

    fn take_child(&mut self) -> Option<Child> {
        self.child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn drop_cached(&self) {
        let mut guard = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        *guard = None;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.drop_cached();
        if let Some(mut child) = self.take_child() {
            if self.paused.load(Ordering::SeqCst) {
                signal(self.pid, "CONT");
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid)
            .field("persistent", &self.persistent)
            .field("tls", &self.tls)
            .field("dir", &self.dir)
            .finish()
    }
}
