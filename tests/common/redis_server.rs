//! A real `redis-server` process, started fresh for one test.
//!
//! Every server gets its own loopback port and its own temporary directory
//! (removed on drop). The process is killed by PID on drop, so a panicking
//! test does not leave a server behind.
//!
//! [`RedisServer::start_tls`] starts a server that speaks only TLS (`--port 0
//! --tls-port P`) with a self-signed certificate made by the `openssl` CLI;
//! `cmd`, `query` and `conn` then connect over TLS (`tls_url`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Commands the harness itself sends; `command_calls` leaves them out.
const HARNESS_COMMANDS: &[&str] = &["info", "config", "ping", "hello", "client", "select"];

const NOT_FOUND: &str = "redis-server not found: install the Debian package redis-server \
                         (.ci/run does this); tests that need Redis never skip";
const OPENSSL_NOT_FOUND: &str = "openssl not found (needed by RedisServer::start_tls to make a \
                                 self-signed certificate): install the Debian package openssl; \
                                 TLS tests never skip";
const REDIS_CLI_NOT_FOUND: &str = "redis-cli not found (needed by RedisServer::start_tls to wait \
                                   for the TLS port): install the Debian package redis-tools \
                                   (redis-server depends on it); TLS tests never skip";
/// Subdirectory of the server's directory holding `cert.pem` and `key.pem`.
const TLS_DIR: &str = "tls";

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

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
        let dir = make_temp_dir();
        if tls {
            if let Err(msg) = make_self_signed_cert(&dir.join(TLS_DIR)) {
                let _ = std::fs::remove_dir_all(&dir);
                panic!("{msg}");
            }
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
                    let log = log_tail(&dir);
                    let _ = std::fs::remove_dir_all(&dir);
                    panic!(
                        "redis-server on port {port} did not answer PING within {READY_TIMEOUT:?}: \
                         {msg}\n--- tail of redis.log ---\n{log}"
                    );
                }
            }
        }
        let log = log_tail(&dir);
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
        let (name, rest) = args
            .split_first()
            .expect("RedisServer::cmd needs at least a command name");
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
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
        parse_command_calls(&info)
    }

    /// How many times the server ran `command` (lower case, as `INFO commandstats` names
    /// it: `evalsha`, `pttl`), scripts' `redis.call`s included.
    pub fn calls_of(&self, command: &str) -> u64 {
        let info: String = self.query(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
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
                    log_tail(&self.dir)
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

enum SpawnError {
    /// The process exited before answering (typically: port in use).
    Exited(String),
    /// The process kept running but never answered `PING`.
    NotReady(String),
}

fn find_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("LEASEHOLD_REDIS_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return path;
        }
        panic!(
            "{NOT_FOUND} (LEASEHOLD_REDIS_SERVER={} does not exist)",
            path.display()
        );
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("redis-server");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    let fallback = PathBuf::from("/usr/bin/redis-server");
    if fallback.is_file() {
        return fallback;
    }
    panic!("{NOT_FOUND}");
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
            "leasehold-redis-{}-{n}-{nanos:08x}",
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
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

fn spawn_and_wait(
    binary: &Path,
    port: u16,
    dir: &Path,
    persistent: bool,
    tls: bool,
    timeout: Duration,
) -> Result<Child, SpawnError> {
    let port_s = port.to_string();
    let log = dir.join("redis.log");
    let mut cmd = Command::new(binary);
    if tls {
        let certs = dir.join(TLS_DIR);
        cmd.args(["--port", "0", "--tls-port", &port_s])
            .arg("--tls-cert-file")
            .arg(certs.join("cert.pem"))
            .arg("--tls-key-file")
            .arg(certs.join("key.pem"))
            // Self-signed: the certificate is its own CA.
            .arg("--tls-ca-cert-file")
            .arg(certs.join("cert.pem"))
            .args(["--tls-auth-clients", "no"]);
    } else {
        cmd.arg("--port").arg(&port_s);
    }
    cmd.args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--daemonize", "no"])
        .args(["--protected-mode", "no"])
        .args(["--enable-debug-command", "local"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log);
    if persistent {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let pid = child.id();
    let redis_cli = if tls {
        Some(find_redis_cli(binary))
    } else {
        None
    };
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(SpawnError::Exited(format!(
                "redis-server exited with {status}"
            )));
        }
        let answer = match &redis_cli {
            Some(cli) => ping_pid_tls(cli, port),
            None => ping_pid(port),
        };
        match answer {
            Some(Some(p)) if p == pid => return Ok(child),
            Some(other) => {
                // Somebody else answered on our port: ours cannot have bound it.
                let _ = child.kill();
                let _ = child.wait();
                return Err(SpawnError::Exited(format!(
                    "port {port} is served by another process ({other:?})"
                )));
            }
            None => {}
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SpawnError::NotReady(format!("pid {pid}")));
        }
        thread::sleep(READY_POLL);
    }
}

/// Sends `PING` and `INFO server` over a raw socket. `None`: not ready yet
/// (refused, `-LOADING`, ...). `Some(pid)`: answered PONG, with the
/// `process_id` from INFO if it could be parsed.
fn ping_pid(port: u16) -> Option<Option<u32>> {
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream
        .set_write_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream
        .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .ok()?;
    const PONG: &[u8] = b"+PONG\r\n";
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() < PONG.len() {
            if PONG.starts_with(&buf) {
                continue;
            }
            return None;
        }
        if !buf.starts_with(PONG) {
            // `-LOADING ...` and the like.
            return None;
        }
        // The INFO reply: `$<len>\r\n<text>\r\n`.
        let rest = &buf[PONG.len()..];
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            continue;
        };
        if rest.first() != Some(&b'$') {
            return Some(None);
        }
        let len: usize = match std::str::from_utf8(&rest[1..line_end])
            .ok()
            .and_then(|l| l.parse().ok())
        {
            Some(len) => len,
            None => return Some(None),
        };
        let body = &rest[line_end + 2..];
        if body.len() < len {
            continue;
        }
        let text = String::from_utf8_lossy(&body[..len]);
        let pid = text
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok());
        return Some(pid);
    }
}

/// `ping_pid` over TLS, with `redis-cli --tls --insecure` (`PING`, then
/// `INFO server`); `None` while the server does not answer `PONG`.
fn ping_pid_tls(redis_cli: &Path, port: u16) -> Option<Option<u32>> {
    let run = |args: &[&str]| -> Option<String> {
        let out = Command::new(redis_cli)
            .args([
                "--tls",
                "--insecure",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", redis_cli.display()));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    if run(&["PING"])?.trim() != "PONG" {
        return None;
    }
    let info = run(&["INFO", "server"]).unwrap_or_default();
    Some(
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok()),
    )
}

/// `redis-cli` next to `redis_server`, else on `PATH`, else `/usr/bin`.
fn find_redis_cli(redis_server: &Path) -> PathBuf {
    let sibling = redis_server.with_file_name("redis-cli");
    if sibling.is_file() {
        return sibling;
    }
    find_on_path("redis-cli").unwrap_or_else(|| panic!("{REDIS_CLI_NOT_FOUND}"))
}

/// `name` on `PATH`, else in `/usr/bin`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let fallback = Path::new("/usr/bin").join(name);
        fallback.is_file().then_some(fallback)
    })
}

/// Writes `cert.pem` (self-signed, P-256, SAN `IP:127.0.0.1, DNS:localhost`,
/// valid 2 days) and `key.pem` into `dir` with the `openssl` CLI.
fn make_self_signed_cert(dir: &Path) -> Result<(), String> {
    let openssl = find_on_path("openssl").ok_or_else(|| OPENSSL_NOT_FOUND.to_owned())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = Command::new(&openssl)
        .args(["req", "-x509", "-nodes", "-days", "2"])
        .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}; {OPENSSL_NOT_FOUND}", openssl.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} req -x509 failed with {}:\n{}",
            openssl.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// `kill -s <sig> <pid>` (std has no way to send signals other than SIGKILL).
fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn log_tail(dir: &Path) -> String {
    match std::fs::read_to_string(dir.join("redis.log")) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        }
        Err(e) => format!("(cannot read redis.log: {e})"),
    }
}

fn parse_command_calls(info: &str) -> u64 {
    let mut total = 0;
    for line in info.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, stats)) = rest.split_once(':') else {
            continue;
        };
        // Subcommands appear as `config|resetstat`, `client|setinfo`, ...
        let base = name.split('|').next().unwrap_or(name).to_ascii_lowercase();
        if HARNESS_COMMANDS.contains(&base.as_str()) {
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
