//! The runs these tests start: a witnessed tree under a lease, the next holder waiting for
//! it, and the checks on what their witnesses wrote.

use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::RedisServer;
use crate::common::cli::*;
use crate::common::witness::*;

/// A lease whose local validity outlasts its renewal period many times over, so that
/// waiting out validity (5 s and more) and acting at the next renewal (0.5 s) tell apart.
pub(crate) const LONG_LEASE: &[&str] = &["--ttl", "6s", "--renew-every", "500ms"];

/// [`LONG_LEASE`]'s renewal period: how late a renewal learns the key is gone, and the
/// longest SIGTERM may precede SIGKILL then.
pub(crate) const RENEW_EVERY: Duration = Duration::from_millis(500);

/// A `leasehold run` whose command is a witnessed tree of four processes ([`ROLES`]).
pub(crate) struct Witnessed {
    pub(crate) run: Running,
    /// The backgrounded child, the `setsid` grandchild, the command itself, the daemon
    /// ([`ROLES`]), as this host knows them.
    pub(crate) pids: Vec<u32>,
    pub(crate) log: PathBuf,
}

/// A [`Witnessed`] started, its tree not yet seen.
pub(crate) struct Starting {
    pub(crate) run: Running,
    pub(crate) resource: String,
    pub(crate) pidfile: PathBuf,
    pub(crate) log: PathBuf,
}

impl Witnessed {
    /// Starts it as a job of its own (its own process group, as a shell starts a job), and
    /// waits until all four processes are witnessing.
    pub(crate) fn start(
        server: &RedisServer,
        dir: &TempDir,
        resource: &str,
        options: &[&str],
        ignore_term: bool,
    ) -> Witnessed {
        Witnessed::spawn(server, dir, resource, options, ignore_term, &[]).ready()
    }

    /// Starts it, with these variables in leasehold's environment, without waiting.
    pub(crate) fn spawn(
        server: &RedisServer,
        dir: &TempDir,
        resource: &str,
        options: &[&str],
        ignore_term: bool,
        env: &[(&str, &str)],
    ) -> Starting {
        let pidfile = dir.path(&format!("{resource}.pids"));
        let log = dir.path(&format!("{resource}.log"));
        let mut cmd = run_cmd(server, resource);
        cmd.envs(env.iter().copied());
        cmd.args(options)
            .args(["--", "bash", "-c"])
            .arg(tree_script(&pidfile, ignore_term))
            .env("W", &log)
            .env("LC_ALL", "C")
            .process_group(0);
        Starting {
            run: Running::spawn(cmd, dir, resource),
            resource: resource.to_owned(),
            pidfile,
            log,
        }
    }
}

impl Starting {
    /// Waits until all four processes of the tree are witnessing.
    #[track_caller]
    pub(crate) fn ready(self) -> Witnessed {
        let Starting {
            mut run,
            resource,
            pidfile,
            log,
        } = self;
        let deadline = Instant::now() + READY_TIMEOUT;
        let pids = loop {
            if let Some(pids) = tree_pids(&pidfile) {
                break pids;
            }
            if let Some(done) = run.try_finish() {
                panic!("{resource}: leasehold exited before its command started: {done:?}");
            }
            assert!(
                Instant::now() < deadline,
                "{resource}: no pids\n{}",
                run.output_so_far()
            );
            thread::sleep(POLL);
        };
        let pids: Vec<u32> = pids.into_iter().map(|seen| run.host_pid(seen)).collect();
        for &pid in &pids {
            run.also_kill(pid);
        }
        while writes(&log)
            .iter()
            .map(|&(pid, _)| pid)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            < ROLES.len()
        {
            assert!(
                Instant::now() < deadline,
                "{resource}: not every process witnesses"
            );
            thread::sleep(POLL);
        }
        Witnessed { run, pids, log }
    }
}

impl Witnessed {
    pub(crate) fn named(&self) -> Vec<(u32, &'static str)> {
        let names = [
            "a backgrounded child",
            "a setsid grandchild",
            "the command",
            "a daemon (double-forked, setsid, streams closed)",
        ];
        self.pids.iter().copied().zip(names).collect()
    }

    pub(crate) fn last_write(&self) -> i64 {
        last_write(&self.log).expect("the tree wrote")
    }
}

/// The session of `pid` (field 6 of `/proc/<pid>/stat`).
pub(crate) fn session_of(pid: u32) -> u32 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(3))
        .and_then(|s| s.parse().ok())
        .expect("a session id")
}

pub(crate) fn ms(micros: i64) -> f64 {
    micros as f64 / 1000.0
}

/// The old tree's last write (`last`) came before the lease's end in Redis (`expiry`) and
/// before the next holder's first write (`first`), all in microseconds of Redis time.
pub(crate) fn assert_tree_ended_first(last: i64, expiry: i64, first: i64) {
    assert!(
        last < expiry,
        "the tree wrote {} ms after the lease's end",
        ms(last - expiry)
    );
    assert!(
        last < first,
        "the tree wrote {} ms after the next holder",
        ms(last - first)
    );
}
