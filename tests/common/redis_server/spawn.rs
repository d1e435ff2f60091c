//! Starting one `redis-server` process and knowing it is *ours* that answers: a port taken
//! by another process between `free_port` and the bind must read as "try another port",
//! never as a ready server.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::READY_POLL;
use super::process::find_on_path;
use super::tls::{TLS_DIR, find_redis_cli, ping_pid_tls};

const NOT_FOUND: &str = "redis-server not found: install the Debian package redis-server \
                         (.ci/run does this); tests that need Redis never skip";

pub enum SpawnError {
    /// The process exited before answering (typically: port in use).
    Exited(String),
    /// The process kept running but never answered `PING`.
    NotReady(String),
}

/// `$LEASEHOLD_REDIS_SERVER`, else `redis-server` on `PATH`, else in `/usr/bin`.
pub fn find_binary() -> PathBuf {
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
    find_on_path("redis-server").unwrap_or_else(|| panic!("{NOT_FOUND}"))
}

/// Whether `binary` gates `DEBUG` behind `enable-debug-command` (Redis 7.0 and later, every
/// Valkey), from its `--version` (`Redis server v=6.2.14 …`), asked once per binary. Redis
/// 6.2 always allows `DEBUG` and refuses to start on the option it does not know.
fn gates_debug_command(binary: &Path) -> bool {
    static FOUND: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());
    let mut found = FOUND
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, gates)) = found.iter().find(|(path, _)| path == binary) {
        return *gates;
    }
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", binary.display()));
    let text = String::from_utf8_lossy(&output.stdout);
    let major = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .and_then(|version| version.split('.').next()?.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("{} --version: no v=<version> in {text:?}", binary.display()));
    let gates = major >= 7;
    found.push((binary.to_owned(), gates));
    gates
}

/// Runs `binary` on `port` in `dir` and waits up to `timeout` for it to answer `PING`
/// with its own PID.
pub fn spawn_and_wait(
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
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log);
    if gates_debug_command(binary) {
        cmd.args(["--enable-debug-command", "local"]);
    }
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
