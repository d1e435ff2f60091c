//! Processes and signals: the nemesis pauses a `leasehold` process together with its
//! keeper and the process group of the command it runs, and a worker kills a straggler with
//! everything it started, so both find those groups here; and the `redis-cli` the command
//! writes with.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `kill -s <sig> -- <target>`; `target` is a PID or `-<pgid>`.
pub fn send_signal(sig: &str, target: &str) -> bool {
    Command::new("kill")
        .args(["-s", sig, "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn signal_group(sig: &str, pgid: u32) -> bool {
    send_signal(sig, &format!("-{pgid}"))
}

/// `(pid, ppid, pgrp, session)` of every process, from `/proc/*/stat`.
fn processes() -> Vec<(u32, u32, u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp session …`; comm may contain spaces and
            // parentheses.
            let rest = &stat[stat.rfind(')')? + 1..];
            let fields: Vec<u32> = rest
                .split_whitespace()
                .skip(1)
                .take(3)
                .map_while(|f| f.parse().ok())
                .collect();
            match fields[..] {
                [ppid, pgrp, session] => Some((pid, ppid, pgrp, session)),
                _ => None,
            }
        })
        .collect()
}

/// Process -> the process groups led by its descendants (the commands leasehold started
/// with `process_group(0)`, under its keeper: a grandchild), from `/proc/*/stat`. Session
/// leaders are left out: the keeper leads a session of its own (see [`keepers_of`]).
pub fn command_groups() -> BTreeMap<u32, Vec<u32>> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut leaders: BTreeSet<u32> = BTreeSet::new();
    for (pid, ppid, pgrp, session) in processes() {
        children.entry(ppid).or_default().push(pid);
        if pgrp == pid && session != pid {
            leaders.insert(pid);
        }
    }
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &parent in children.keys() {
        // Init's and the test's own trees are searched too; the machine runs a few hundred
        // processes, so this stays cheap.
        let mut stack = children[&parent].clone();
        while let Some(pid) = stack.pop() {
            if leaders.contains(&pid) {
                groups.entry(parent).or_default().push(pid);
            }
            if let Some(more) = children.get(&pid) {
                stack.extend(more);
            }
        }
    }
    groups
}

/// The keepers of one `leasehold` process: its children that lead a session (and so a
/// process group) of their own. A command that has not called setpgid yet is still in its
/// keeper's group.
pub fn keepers_of(parent: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|&(pid, ppid, _, session)| ppid == parent && session == pid)
        .map(|(pid, ..)| pid)
        .collect()
}

/// The command groups of one parent (see [`command_groups`]).
pub fn command_groups_of(parent: u32) -> Vec<u32> {
    command_groups().remove(&parent).unwrap_or_default()
}

pub fn find_redis_cli() -> PathBuf {
    let fixed = Path::new("/usr/bin/redis-cli");
    if fixed.is_file() {
        return fixed.to_owned();
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("redis-cli"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "redis-cli not found: install the Debian package redis-tools \
                 (redis-server depends on it); this test never skips"
            )
        })
}
