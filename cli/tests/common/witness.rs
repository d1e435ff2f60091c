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
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::RedisServer;

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

/// A bash script for `bash -c`: a tree of three witnessing processes — the command itself,
/// a backgrounded child and a `setsid` grandchild (out of the command's process group and
/// session) — each writing to the log `$W`. The command writes the two others' pids and its
/// own to `pidfile`, one a line, before it starts witnessing. With `ignore_term`, all three
/// ignore SIGTERM (an ignored signal stays ignored across fork and exec): only SIGKILL ends
/// them.
pub fn tree_script(pidfile: &Path, ignore_term: bool) -> String {
    let function = witness_function();
    format!(
        r#"{trap}{function}
witness & echo $! >> "{pids}"
setsid bash -c '{function_quoted}; witness' & echo $! >> "{pids}"
echo $$ >> "{pids}"
witness"#,
        trap = if ignore_term { "trap '' TERM\n" } else { "" },
        pids = pidfile.display(),
        function_quoted = function.replace('\'', r"'\''"),
    )
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
