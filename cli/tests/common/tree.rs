//! The command's process tree as the CLI tests see it: processes in `/proc`, waits for
//! them to go (every wait bounded), the keeper found as the command's parent.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::cli::{Running, is_alive};

/// How long a process may take to disappear after the event that must end it.
pub const STOP_LIMIT: Duration = Duration::from_secs(1);

/// Polls until `pid` is gone; the time it took, or `None` after `limit`.
pub fn time_until_gone(pid: u32, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while is_alive(pid) {
        if start.elapsed() > limit {
            return None;
        }
        thread::sleep(Duration::from_millis(1));
    }
    Some(start.elapsed())
}

/// Asserts every pid is gone within `limit` of now; returns the longest wait.
#[track_caller]
pub fn assert_all_gone_within(pids: &[(u32, &str)], limit: Duration, after: &str) -> Duration {
    let start = Instant::now();
    for &(pid, what) in pids {
        let left = limit.saturating_sub(start.elapsed());
        assert!(
            time_until_gone(pid, left).is_some(),
            "{what} (pid {pid}) still runs {limit:?} after {after}; {}",
            process_report(pid)
        );
    }
    start.elapsed()
}

/// What `/proc` says about `pid` and its parent, for a failure message.
pub fn process_report(pid: u32) -> String {
    let stat = |pid: &str| fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let own = stat(&pid.to_string());
    let parent = own
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .map(stat)
        .unwrap_or_default();
    format!("its stat: {own:?}; its parent's: {parent:?}")
}

/// Waits until `/proc` shows `pid` in `state` (`T`: stopped); false after `limit`.
pub fn wait_for_state(pid: u32, state: char, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let now = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if now == Some(state) {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Reads a pid the command wrote to `file` — as this host knows it — registering it for
/// cleanup.
#[track_caller]
pub fn pid_in(run: &mut Running, file: &Path, what: &str) -> u32 {
    let text = run.wait_for_line(file, what);
    let seen = text
        .parse()
        .unwrap_or_else(|e| panic!("{what}: {file:?} holds {text:?}: {e}"));
    let pid = run.host_pid(seen);
    run.also_kill(pid);
    pid
}

/// The keeper's pid: the parent of the command `command`.
pub fn keeper_of(command: u32) -> u32 {
    let stat = fs::read_to_string(format!("/proc/{command}/stat")).expect("command stat");
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .expect("the command's parent")
}
