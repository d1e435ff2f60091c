//! One worker: `leasehold run` in a loop, each run's command doing the fenced write, and
//! what the worker saw (exit codes, the write's outcome) for the checker to compare with
//! what the target recorded.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::processes::{command_groups_of, keepers_of, signal_group};
use crate::{POLL, RESOURCE, Rng, Shared, lock};

/// A `leasehold run` still running this long after it started is a straggler: killed, and
/// the test fails (its own bounds are --wait 5s, a 1 s TTL and a pause of at most 2 s).
const INVOCATION_BOUND: Duration = Duration::from_secs(30);
/// How long to wait for a finished invocation's stdout/stderr to reach EOF.
const PIPE_BOUND: Duration = Duration::from_secs(5);

/// Exit statuses of `leasehold run` that the faults may legitimately cause.
const EXIT_OK: i32 = 0;
const EXIT_CONTENDED: i32 = 75;
const EXIT_LEASE_LOST: i32 = 124;
const EXIT_UNAVAILABLE: i32 = 125;
const EXPECTED_EXITS: &[i32] = &[EXIT_OK, EXIT_CONTENDED, EXIT_LEASE_LOST, EXIT_UNAVAILABLE];

/// The fenced write. KEYS: target hash, attempted list, accepted list; ARGV[1]: the token.
/// The token is stored as the text it came as (a Lua number would print as 1.7e+15).
const FENCED_WRITE: &str = "\
local t = ARGV[1]
redis.call('RPUSH', KEYS[2], t)
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(t) > fence then
  redis.call('HSET', KEYS[1], 'fence', t)
  redis.call('RPUSH', KEYS[3], t)
  return 1
end
return 0";

/// The command run under the lease: `$1` sleep seconds, `$2` redis-cli, `$3` server port,
/// `$4` the script. It always exits 0 and reports the write on one stdout line, so
/// leasehold's exit status stays leasehold's own. Under a counted lease the target fences
/// each slot on its own (`target:<slot>`, `LEASEHOLD_SLOT`): each slot's tokens increase;
/// a plain lease is slot 0.
const COMMAND: &str = r#"sleep "$1"
slot=${LEASEHOLD_SLOT:-0}
out=$("$2" -h 127.0.0.1 -p "$3" EVAL "$4" 3 "target:$slot" "attempted:$slot" "accepted:$slot" "$LEASEHOLD_FENCING_TOKEN" 2>&1)
rc=$?
printf 'lh-write token=%s slot=%s rc=%s reply=%s\n' "$LEASEHOLD_FENCING_TOKEN" "$slot" "$rc" "$out" | head -n 1
exit 0"#;

const MARKER: &str = "lh-write ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    Accepted,
    Rejected,
    /// redis-cli failed or got an error reply (e.g. the server was restarting).
    Failed(String),
}

#[derive(Debug, Clone)]
pub struct WriteRecord {
    pub token: Option<u64>,
    pub slot: Option<u16>,
    pub outcome: WriteOutcome,
}

#[derive(Default)]
pub struct WorkerReport {
    pub invocations: usize,
    /// Exit code -> count; death by signal N is recorded as -N.
    pub exit_codes: BTreeMap<i32, usize>,
    pub writes: Vec<WriteRecord>,
    /// Exit 0 without a write report (the command printed nothing).
    pub ok_without_write: usize,
    /// Problems that fail the test.
    pub violations: Vec<String>,
}

pub struct Invocation<'a> {
    pub binary: &'a str,
    /// The lease's permits: 1 for a plain lease.
    pub permits: u32,
    pub proxy_url: &'a str,
    pub server_port: u16,
    pub redis_cli: &'a Path,
}

fn spawn_reader(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
    }
    rx
}

fn parse_write(stdout: &str) -> Option<WriteRecord> {
    let line = stdout.lines().find_map(|l| l.strip_prefix(MARKER))?;
    let (token_part, rest) = line.split_once(" slot=")?;
    let token = token_part
        .strip_prefix("token=")
        .and_then(|t| t.parse::<u64>().ok());
    let (slot, rest) = rest.split_once(" rc=")?;
    let slot = slot.parse::<u16>().ok();
    let (rc, reply) = rest.split_once(" reply=").unwrap_or((rest, ""));
    let outcome = match (rc, reply.trim()) {
        ("0", "1") => WriteOutcome::Accepted,
        ("0", "0") => WriteOutcome::Rejected,
        (rc, reply) => WriteOutcome::Failed(format!("rc={rc} {reply}")),
    };
    Some(WriteRecord {
        token,
        slot,
        outcome,
    })
}

pub fn worker(index: usize, shared: &Shared, inv: &Invocation<'_>, mut rng: Rng) -> WorkerReport {
    let mut report = WorkerReport::default();
    let lua = FENCED_WRITE;
    let port = inv.server_port.to_string();
    while Instant::now() < shared.deadline {
        let sleep = format!("0.{:03}", rng.range(50, 150));
        let mut cmd = Command::new(inv.binary);
        cmd.args(["run", "--redis", inv.proxy_url, "--resource", RESOURCE])
            .args(["--permits", &inv.permits.to_string()])
            .args([
                "--ttl", "1s", "--wait", "5s", "--", "sh", "-c", COMMAND, "sh",
            ])
            .arg(&sleep)
            .arg(inv.redis_cli)
            .args([port.as_str(), lua]);
        // Hermetic: no LEASEHOLD_REDIS_URL (nor any other LEASEHOLD_* tuning) from outside.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("LEASEHOLD_") {
                cmd.env_remove(key);
            }
        }
        // Its own process group: the nemesis stops it together with a command that has
        // not moved to its own group yet.
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = {
            let mut running = lock(&shared.running);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", inv.binary));
            running.insert(index, child.id());
            child
        };
        report.invocations += 1;
        let stdout = spawn_reader(child.stdout.take());
        let stderr = spawn_reader(child.stderr.take());
        let status = wait_bounded(index, shared, &mut child);
        let out = stdout.recv_timeout(PIPE_BOUND).unwrap_or_default();
        let err = stderr.recv_timeout(PIPE_BOUND).unwrap_or_default();
        let write = parse_write(&out);
        let code = match status {
            Some(status) => exit_key(status),
            None => {
                report.violations.push(format!(
                    "worker {index}: leasehold still running after {INVOCATION_BOUND:?}; \
                     killed. stderr: {}",
                    err.trim()
                ));
                continue;
            }
        };
        *report.exit_codes.entry(code).or_default() += 1;
        if !EXPECTED_EXITS.contains(&code) {
            report.violations.push(format!(
                "worker {index}: leasehold exited with {code} (expected one of \
                 {EXPECTED_EXITS:?}; negative = killed by that signal). stdout: {} stderr: {}",
                out.trim(),
                err.trim()
            ));
        }
        match write {
            Some(w) => report.writes.push(w),
            None if code == EXIT_OK => report.ok_without_write += 1,
            None => {}
        }
    }
    report
}

fn exit_key(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => -sig,
        (None, None) => i32::MIN,
    }
}

/// Waits for `child` at most `INVOCATION_BOUND`; reaps it under the `running` lock. A
/// straggler is killed with its command groups; returns `None` then.
fn wait_bounded(index: usize, shared: &Shared, child: &mut Child) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        {
            let mut running = lock(&shared.running);
            match child.try_wait() {
                Ok(Some(status)) => {
                    running.remove(&index);
                    return Some(status);
                }
                Ok(None) => {}
                Err(e) => panic!("waiting for leasehold: {e}"),
            }
            if started.elapsed() > INVOCATION_BOUND {
                let pid = child.id();
                signal_group("STOP", pid);
                let keepers = keepers_of(pid);
                for k in &keepers {
                    signal_group("STOP", *k);
                }
                for g in command_groups_of(pid).into_iter().chain(keepers) {
                    signal_group("KILL", g);
                }
                signal_group("KILL", pid);
                let _ = child.kill();
                let _ = child.wait();
                running.remove(&index);
                return None;
            }
        }
        thread::sleep(POLL);
    }
}
