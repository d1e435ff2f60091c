//! A process's live descendants, from the parent links in `/proc/<pid>/stat`.
//!
//! Reading every process's parent (rather than `/proc/<pid>/task/*/children`) needs no
//! kernel option and finds a descendant whatever its process group or session — `setsid`,
//! a double fork — as long as it is re-parented inside the tree, which the keeper being a
//! child subreaper guarantees. Outside Linux there is no `/proc` to read: the walk finds
//! nothing, and signalling falls back to the command's process group.

use std::collections::HashSet;
use std::fs;

use super::wire::Signal;

/// Every process's pid, ascending from `root` and then from the lowest: a parent's pid is
/// below its children's unless pids wrapped around, so a walk in this order meets most
/// parents before their children, and `root`'s descendants before the processes older
/// than it.
fn pids_from(root: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect();
    pids.sort_unstable_by_key(|&pid| (pid < root, pid));
    pids
}

/// `pid (comm) S ppid …`: the state and parent follow the last `)`, since `comm` may hold
/// anything, spaces and parentheses included. `None` for a zombie (it runs nothing).
fn live_parent(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    fields.next()?.parse().ok()
}

/// Every live descendant of `root`, parents before their children, each handed to `found`
/// the moment the walk knows it is one: in one pass over `/proc` in pid order (from `root`
/// on) most are found as their line is read, so a caller that signals them does not wait
/// for the whole walk (hundreds of reads, slow on a starved machine) before the first
/// signal. The few met before their parent (pids wrapped around) are settled after the
/// pass.
fn walk(root: u32, mut found: impl FnMut(u32)) -> Vec<u32> {
    let mut known = HashSet::from([root]);
    let mut order = Vec::new();
    let mut unsettled = Vec::new();
    for pid in pids_from(root) {
        let Some(parent) = live_parent(pid) else {
            continue;
        };
        if known.contains(&parent) && known.insert(pid) {
            found(pid);
            order.push(pid);
        } else {
            unsettled.push((pid, parent));
        }
    }
    loop {
        let before = order.len();
        unsettled.retain(|&(pid, parent)| {
            if known.contains(&parent) && known.insert(pid) {
                found(pid);
                order.push(pid);
                false
            } else {
                true
            }
        });
        if order.len() == before {
            return order;
        }
    }
}

/// Every live descendant of `root`, parents before their children.
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    walk(root, |_| {})
}

/// What [`signal_all`] did.
#[derive(Debug, Default)]
pub(crate) struct Signalled {
    /// Every live descendant the walk found (`spare` included).
    pub(crate) found: Vec<u32>,
    /// Those the kernel refused to signal (EPERM): they run as a user this process may not
    /// signal — a setuid program run with `--allow-new-privileges`.
    pub(crate) refused: Vec<u32>,
}

/// Sends `signal` to the process group `group`, which reaches its members at once (and any
/// the walk cannot see), then to every live descendant of `root` but `spare`, each as the
/// walk finds it.
pub(crate) fn signal_all(
    root: u32,
    group: Option<u32>,
    spare: Option<u32>,
    signal: Signal,
) -> Signalled {
    if let Some(group) = group.and_then(|g| i32::try_from(g).ok()) {
        // SAFETY: kill(2) with a negative pid signals a process group; it reads no memory.
        unsafe {
            libc::kill(-group, signal.raw());
        }
    }
    let mut refused = Vec::new();
    let found = walk(root, |pid| {
        if Some(pid) != spare
            && let Ok(raw) = i32::try_from(pid)
        {
            // SAFETY: as above, for one process.
            let sent = unsafe { libc::kill(raw, signal.raw()) };
            if sent != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
                refused.push(pid);
            }
        }
    });
    Signalled { found, refused }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_setsid_grandchild_is_a_descendant_and_a_signal_reaches_it() {
        let _serial = super::super::TEST_SERIAL
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // sh starts a grandchild in a session of its own, prints its pid and waits.
        let mut child = Command::new("sh")
            .args(["-c", "setsid sleep 30 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("read pid");
        let grandchild: u32 = line.trim().parse().expect("a pid");
        let me = std::process::id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !descendants(me).contains(&grandchild) {
            assert!(
                Instant::now() < deadline,
                "{grandchild} never seen under {me}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(descendants(me).contains(&child.id()));
        let signalled = signal_all(child.id(), None, None, Signal::Kill);
        assert!(signalled.found.contains(&grandchild), "{signalled:?}");
        assert!(signalled.refused.is_empty(), "{signalled:?}");
        while descendants(me).contains(&grandchild) {
            assert!(Instant::now() < deadline, "{grandchild} survived SIGKILL");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
