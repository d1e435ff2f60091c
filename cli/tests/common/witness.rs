//! A witness for "no process of the command runs past the lease": every process of a
//! command's tree appends its pid and the wall clock (`$EPOCHREALTIME`, µs) to a log every
//! 5 milliseconds, so the last line of the log says when the tree last ran code; the
//! next holder's command writes the same clock once, when it starts. Overlaps are counted
//! afterwards against that and against what Redis says (`PEXPIRETIME`).
//!
//! The writers are bash loops that never fork (`read -t` on a pipe nobody writes is the
//! sleep), so a loaded machine does not make them miss their turns by much, and a SIGKILL
//! ends them between two lines.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::RedisServer;
use super::cli::{EXIT_TIMEOUT, Running, TempDir, run_cmd};

/// How often each process of a witnessed tree writes, in seconds (for `read -t`).
const PERIOD: &str = "0.005";

/// A bash function `witness` that writes `<pid> <µs since the epoch>` to `$W` for ever.
fn witness_function() -> String {
    [
        r#"witness() { exec 3<> <(:); exec 4>>"$W"; "#,
        r#"while :; do echo "$BASHPID $EPOCHREALTIME" >&4; "#,
        &format!("read -t {PERIOD} -u 3; done; }}"),
    ]
    .concat()
}

/// The processes of a witnessed tree, in the order [`tree_script`] names them.
pub const ROLES: [&str; 4] = ["bg", "setsid", "command", "daemon"];

/// A bash script for `bash -c`: a tree of four witnessing processes — the command itself,
/// a backgrounded child, a `setsid` grandchild (out of the command's process group and
/// session) and a daemon (double-forked, `setsid`, its standard streams closed) — each
/// writing to the log `$W`. Each writes `<role> <pid>` (a [`ROLES`] name and its pid as it
/// sees it) to `pidfile`, a line each, before it starts witnessing. With `ignore_term`, all
/// four ignore SIGTERM (an ignored signal stays ignored across fork and exec): only SIGKILL
/// ends them.
pub fn tree_script(pidfile: &Path, ignore_term: bool) -> String {
    let function = witness_function();
    let quoted = function.replace('\'', r"'\''");
    format!(
        r#"{trap}{function}
witness & echo "bg $!" >> "{pids}"
setsid bash -c '{quoted}; witness' & echo "setsid $!" >> "{pids}"
(setsid bash -c '{quoted}; echo "daemon $BASHPID" >> "{pids}"; exec 0<&- 1>&- 2>&-; witness' &)
echo "command $$" >> "{pids}"
witness"#,
        trap = if ignore_term { "trap '' TERM\n" } else { "" },
        pids = pidfile.display(),
    )
}

/// The pids `tree_script` wrote, in [`ROLES`] order, once all four are there.
pub fn tree_pids(pidfile: &Path) -> Option<Vec<u32>> {
    let text = fs::read_to_string(pidfile).ok()?;
    if !text.ends_with('\n') {
        return None;
    }
    let lines: Vec<(&str, u32)> = text
        .lines()
        .filter_map(|line| {
            let (role, pid) = line.split_once(' ')?;
            Some((role, pid.trim().parse().ok()?))
        })
        .collect();
    ROLES
        .iter()
        .map(|role| lines.iter().find(|(r, _)| r == role).map(|&(_, pid)| pid))
        .collect()
}

/// A bash script for the next holder: it writes the wall clock once to `$W`, and exits.
pub const FIRST_WRITE: &str = r#"echo "$EPOCHREALTIME" > "$W""#;

/// Microseconds since the epoch now, on the clock the witnesses read.
pub fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `1796420022.005504` → µs.
fn parse_micros(text: &str) -> Option<i64> {
    let (secs, frac) = text.trim().split_once('.')?;
    let secs: i64 = secs.parse().ok()?;
    let frac: i64 = format!("{frac:0<6}").get(..6)?.parse().ok()?;
    Some(secs * 1_000_000 + frac)
}

/// Every write in a tree's log: (pid, µs). A line cut short by a SIGKILL is skipped.
pub fn writes(log: &Path) -> Vec<(u32, i64)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (pid, at) = line.split_once(' ')?;
            Some((pid.parse().ok()?, parse_micros(at)?))
        })
        .collect()
}

/// The last write in a tree's log, in µs.
pub fn last_write(log: &Path) -> Option<i64> {
    writes(log).into_iter().map(|(_, at)| at).max()
}

/// The next holder's first write, in µs.
pub fn first_write(file: &Path) -> Option<i64> {
    parse_micros(&fs::read_to_string(file).ok()?)
}

/// When Redis will expire `key`, in µs since the epoch (`PEXPIRETIME`, Redis 7); `None`
/// if the key is gone or has no expiry. No one else can be granted the lease before then
/// unless the key is deleted: a lower bound on the next holder's grant.
pub fn expiry_micros(server: &RedisServer, key: &str) -> Option<i64> {
    let at: i64 = server.query(&["PEXPIRETIME", key]);
    (at > 0).then(|| at * 1000)
}

/// A `leasehold run --wait` for the same resource whose command writes the clock once.
pub struct Next {
    pub run: Running,
    pub first: PathBuf,
}

impl Next {
    pub fn start(server: &RedisServer, dir: &TempDir, resource: &str) -> Next {
        let first = dir.path(&format!("{resource}.next"));
        let mut cmd = run_cmd(server, resource);
        // A TTL to spare: granted through a replay of a try that waited behind a paused
        // server, its validity counts from that try's send (conservatively short).
        cmd.args([
            "--wait",
            "20s",
            "--ttl",
            "3s",
            "--",
            "bash",
            "-c",
            FIRST_WRITE,
        ])
        .env("W", &first)
        .env("LC_ALL", "C");
        let run = Running::spawn(cmd, dir, &format!("{resource}-next"));
        Next { run, first }
    }

    /// Waits for it to run its command and exit; its first write (µs).
    #[track_caller]
    pub fn first_write(mut self) -> i64 {
        self.run
            .finish_within(EXIT_TIMEOUT, "the next holder")
            .assert_code(0, "the next holder");
        first_write(&self.first).expect("the next holder wrote")
    }
}
