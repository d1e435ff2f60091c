//! Processes by PID, as the CLI tests watch them: signals sent (to a process or a group),
//! liveness, and the signal dispositions `/proc` shows (whether a process catches one).
//! Re-exported by `common::cli`.

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Instant;

use super::cli::{GONE_TIMEOUT, POLL, READY_TIMEOUT};

/// `kill -<sig> <pid>`.
pub fn send_signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `kill -<sig> -- -<group>`: the signal to every process of a process group.
pub fn send_group_signal(group: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `pid` is a live process: one that may still run code of its own. A zombie
/// counts as gone: it runs nothing any more, and in a container whose PID 1 does not reap,
/// an orphaned zombie is never removed. So does a process with SIGKILL pending: the kernel
/// ends it the moment it is next scheduled, before it runs another instruction of its own —
/// on a starved machine that moment can come a second or more later (seen: a process
/// between `setsid()` and `exec`, SIGKILLed by the keeper, still runnable 1 s on, never
/// having been scheduled again).
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S …`: the state follows the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None) && !sigkill_pending(pid)
}

/// Whether SIGKILL (bit 9 of the pending masks in `/proc/<pid>/status`) awaits `pid`.
fn sigkill_pending(pid: u32) -> bool {
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status.lines().any(|line| {
        let mask = line
            .strip_prefix("SigPnd:")
            .or_else(|| line.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & SIGKILL_BIT != 0)
    })
}

/// Whether `pid` still runs one of the commands these tests start (`sh`, `bash`, or
/// `sleep` after `exec`, by name or path), so a PID reused by an unrelated process is never
/// signalled.
pub fn is_test_command(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        let name = argv0.rsplit(|&b| b == b'/').next().unwrap_or_default();
        matches!(name, b"sh" | b"bash" | b"sleep")
    })
}

#[track_caller]
pub fn assert_gone_soon(pid: u32, what: &str) {
    let deadline = Instant::now() + GONE_TIMEOUT;
    while is_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: process {pid} still alive {GONE_TIMEOUT:?} after leasehold exited"
        );
        thread::sleep(POLL);
    }
}

/// Whether `pid` has a handler installed for SIGTERM (`SigCgt` in `/proc/<pid>/status`).
pub fn catches_sigterm(pid: u32) -> bool {
    catches_signal(pid, 15)
}

/// Whether `pid` has a handler installed for signal number `signo`.
pub fn catches_signal(pid: u32, signo: u32) -> bool {
    let bit = 1u64 << (signo - 1);
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & bit != 0)
}

/// Waits until leasehold `pid` handles signal `signo` (it installs its handlers before it
/// sends anything to Redis; before then a signal ends it like any process).
#[track_caller]
pub fn wait_until_catching(pid: u32, signo: u32) {
    let deadline = Instant::now() + READY_TIMEOUT;
    while !catches_signal(pid, signo) {
        assert!(
            Instant::now() < deadline,
            "leasehold never handled signal {signo}"
        );
        thread::sleep(POLL);
    }
}

/// What [`host_pid`] returns for a process of a namespaced tree that is gone: a pid no
/// process has (so `is_alive` says no and a signal reaches nobody).
pub const GONE: u32 = u32::MAX;

/// The pid on this host of the process a command under `leasehold` (pid `leasehold`) knows
/// as `seen` — in a PID namespace of its own the command's `$$` and `$!` are the
/// namespace's pids, without one the host's. It is found among `leasehold`'s descendants by
/// the last pid of its `NSpid` line (the innermost namespace's: the host's when there is no
/// other), and is [`GONE`] if none has it: call it while the process cannot have left the
/// tree, which it could not have without leasehold and the keeper dying first.
pub fn host_pid(leasehold: u32, seen: u32) -> u32 {
    descendants_of(leasehold)
        .into_iter()
        .find(|pid| {
            let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status
                .lines()
                .find_map(|line| line.strip_prefix("NSpid:"))
                .and_then(|pids| pids.split_whitespace().last()?.parse::<u32>().ok())
                == Some(seen)
        })
        .unwrap_or(GONE)
}

/// Every live process under `root`, through the parent links in `/proc/<pid>/stat`.
pub fn descendants_of(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| {
                    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                    let (_, rest) = stat.rsplit_once(')')?;
                    let mut fields = rest.split_whitespace();
                    let state = fields.next()?;
                    let parent = fields.next()?.parse().ok()?;
                    (state != "Z").then_some((pid, parent))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|&&(_, p)| p == parent)
                .map(|&(pid, _)| pid),
        );
        i += 1;
    }
    found.remove(0);
    found
}
