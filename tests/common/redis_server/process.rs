//! Plumbing every local Redis process of the tests needs — a plain server, a sentinel, a
//! cluster node: finding its binary, a temporary directory and a free loopback port for
//! it, signalling it by PID, and the tail of its log for a failure message. Kept in one
//! place so the three harnesses start and clean up their processes the same way.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Distinguishes the directories one test process makes within the same nanosecond.
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// `name` on `PATH`, else in `/usr/bin`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
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

/// A new, empty directory `leasehold-<kind>-<pid>-<n>-<nanos>` under the system's temp
/// directory; the caller removes it.
pub fn make_temp_dir(kind: &str) -> PathBuf {
    let base = std::env::temp_dir();
    loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!(
            "leasehold-{kind}-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create temp dir {}: {e}", dir.display()),
        }
    }
}

/// A loopback port that was free a moment ago. Another process may take it before ours
/// binds it, which is why every harness retries on another port.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// The exit status of `child` once it exits, or `None` after `timeout`.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
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
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The last `lines` lines of the log file `name` in `dir`, for a failure message.
pub fn log_tail(dir: &Path, name: &str, lines: usize) -> String {
    match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {name}: {e})"),
    }
}
