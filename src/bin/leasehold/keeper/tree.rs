//! A process's live descendants, from the parent links in `/proc/<pid>/stat`.
//!
//! Reading every process's parent (rather than `/proc/<pid>/task/*/children`) needs no
//! kernel option and finds a descendant whatever its process group or session — `setsid`,
//! a double fork — as long as it is re-parented inside the tree, which the keeper being a
//! child subreaper guarantees. Outside Linux there is no `/proc` to read: the walk finds
//! nothing, and signalling falls back to the command's process group.

use std::collections::HashMap;
use std::fs;

use super::wire::Signal;

/// The parent of every live process (zombies excluded: they run nothing).
fn parents() -> HashMap<u32, u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, live_parent(pid)?)))
        .collect()
}

/// `pid (comm) S ppid …`: the state and parent follow the last `)`, since `comm` may hold
/// anything, spaces and parentheses included.
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

/// Every live descendant of `root`, parents before their children.
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let parents = parents();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|&(_, &p)| p == parent)
                .map(|(&child, _)| child),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// Sends `signal` to every live descendant of `root` and to the process group `group`
/// (which also reaches members the walk cannot see). Returns how many descendants it found.
pub(crate) fn signal_all(root: u32, group: Option<u32>, signal: Signal) -> usize {
    if let Some(group) = group.and_then(|g| i32::try_from(g).ok()) {
        // SAFETY: kill(2) with a negative pid signals a process group; it reads no memory.
        unsafe {
            libc::kill(-group, signal.raw());
        }
    }
    let found = descendants(root);
    for &pid in &found {
        if let Ok(pid) = i32::try_from(pid) {
            // SAFETY: as above, for one process.
            unsafe {
                libc::kill(pid, signal.raw());
            }
        }
    }
    found.len()
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
        signal_all(child.id(), None, Signal::Kill);
        while descendants(me).contains(&grandchild) {
            assert!(Instant::now() < deadline, "{grandchild} survived SIGKILL");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
