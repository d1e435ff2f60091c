//! leasehold's own processes — leasehold, the fuse and the keeper — killed or frozen
//! together, in any order, at any phase of a run: the kernel ends the command's tree (its
//! PID namespace) whatever is left of them. Each trial is a witnessed tree with a daemon
//! in it and a next holder waiting; every trial's overlaps are counted.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::RedisServer;
use crate::common::cli::*;
use crate::common::observe::CpuLoad;
use crate::common::tree::*;
use crate::common::witness::*;
use crate::runs::*;

/// Short, so that a trial whose lease is never released ends soon.
const TTL: &[&str] = &["--ttl", "1s"];

/// When, in a run, the processes are killed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Phase {
    /// As soon as every process of the tree witnesses.
    Start,
    /// 200 ms later.
    MidRun,
    /// The moment Redis shows the first renewal (the lease's end moved).
    FirstRenewal,
}

pub(crate) const PHASES: [Phase; 3] = [Phase::Start, Phase::MidRun, Phase::FirstRenewal];

/// leasehold's processes for a run, found from its command: the keeper (the command's
/// parent), the fuse (the keeper's, when it is not leasehold) and leasehold.
pub(crate) fn leaseholds_processes(old: &Witnessed) -> Vec<(u32, &'static str)> {
    let keeper = keeper_of(old.pids[2]);
    let above = keeper_of(keeper);
    let mut found = vec![(old.run.pid(), "leasehold"), (keeper, "the keeper")];
    if above != old.run.pid() {
        found.push((above, "the fuse"));
    }
    found
}

/// `kill -<sig> <pids…>`: one command, the signals in the order given.
pub(crate) fn kill_all(pids: &[u32], sig: &str) {
    let targets: Vec<String> = pids.iter().map(u32::to_string).collect();
    kill_targets(&targets, sig);
}

/// `kill -<sig> -- <targets…>`: pids, and process groups as `-<pgid>`, in one command.
fn kill_targets(targets: &[String], sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg("--")
        .args(targets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(status.is_ok(), "kill -{sig} {targets:?}");
}

/// The session of `pid`, if it still runs.
fn session_if_alive(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// One trial as measured: how the attack ended the tree.
pub(crate) struct Trial {
    pub(crate) what: String,
    /// From the attack until every process of the tree was gone.
    pub(crate) gone_in: Duration,
    /// The tree's last write before the next holder's first write (µs; negative: overlap).
    pub(crate) before_next: i64,
    /// ... before the lease's end in Redis, when the lease was not released (µs).
    pub(crate) before_end: Option<i64>,
}

impl Trial {
    pub(crate) fn overlaps(&self) -> bool {
        self.before_next <= 0 || self.before_end.is_some_and(|b| b <= 0)
    }
}

/// Waits for the moment `phase` names in `old`'s run.
fn reach(server: &RedisServer, key: &str, phase: Phase) {
    match phase {
        Phase::Start => {}
        Phase::MidRun => thread::sleep(Duration::from_millis(200)),
        Phase::FirstRenewal => {
            let first = expiry_micros(server, key);
            let until = Instant::now() + Duration::from_secs(5);
            while expiry_micros(server, key) == first {
                assert!(Instant::now() < until, "no renewal within 5 s");
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// A witnessed run on `resource` with a next holder waiting; at `phase`, `attack` is given
/// leasehold's processes (named) and does its worst. Then: every process of the tree and of
/// leasehold gone within [`STOP_LIMIT`], and how the tree's last write stands against the
/// next holder's first write and the lease's end in Redis.
pub(crate) fn trial(
    server: &RedisServer,
    dir: &TempDir,
    resource: &str,
    phase: Phase,
    attack: impl FnOnce(&[(u32, &'static str)]),
) -> Trial {
    let _load = CpuLoad::start();
    let mut old = Witnessed::start(server, dir, resource, TTL, false);
    let key = keys_of(resource).lease().to_owned();
    let next = Next::start(server, dir, resource);
    let ours = leaseholds_processes(&old);
    reach(server, &key, phase);
    let attacked_at = Instant::now();
    attack(&ours);
    // Read once the attack is over: leasehold, if it lives on, may have released it.
    let expiry = expiry_micros(server, &key);
    let mut everyone = old.named();
    everyone.extend(ours.iter().copied());
    assert_all_gone_within(
        &old.named(),
        STOP_LIMIT,
        &format!("{resource}: the attack at {phase:?}"),
    );
    let gone_in = attacked_at.elapsed();
    let last = old.last_write();
    let first = next.first_write();
    // leasehold, if it lived on, has exited by the time the next holder could run.
    let _ = old
        .run
        .finish_within(EXIT_TIMEOUT, "the attacked leasehold");
    assert_all_gone_within(&everyone, STOP_LIMIT, "the next holder ran");
    Trial {
        what: format!("{resource} at {phase:?}"),
        gone_in,
        before_next: first - last,
        before_end: expiry.map(|end| end - last),
    }
}

/// Asserts no trial overlapped; prints one `measured:` line for them all.
pub(crate) fn assert_no_overlap(label: &str, trials: &[Trial]) {
    let overlapping: Vec<&str> = trials
        .iter()
        .filter(|t| t.overlaps())
        .map(|t| t.what.as_str())
        .collect();
    let slowest = trials.iter().map(|t| t.gone_in).max().unwrap_or_default();
    let closest_next = trials.iter().map(|t| t.before_next).min().unwrap_or(0);
    let closest_end = trials.iter().filter_map(|t| t.before_end).min();
    println!(
        "measured: {label}: {} trials, {} with an overlap, 0 survivors; tree gone within \
         {slowest:?} of the attack; last write at least {:.1} ms before the next holder's \
         first{}",
        trials.len(),
        overlapping.len(),
        ms(closest_next),
        closest_end.map_or(String::new(), |e| format!(
            " and {:.1} ms before the lease's end",
            ms(e)
        )),
    );
    for t in trials {
        println!(
            "  {}: gone in {:?}, {:.1} ms before the next holder, {} before the lease's end",
            t.what,
            t.gone_in,
            ms(t.before_next),
            t.before_end
                .map_or("released".to_owned(), |b| format!("{:.1} ms", ms(b)))
        );
    }
    assert!(
        overlapping.is_empty(),
        "{label}: overlaps in {overlapping:?}"
    );
}

#[test]
fn sigkill_of_leasehold_and_its_keeper_in_one_command_either_order_any_phase_leaves_nothing() {
    let server = RedisServer::start();
    let dir = TempDir::new("kill-both");
    let mut trials = Vec::new();
    for (i, phase) in PHASES.into_iter().enumerate() {
        for keeper_first in [false, true] {
            let resource = format!("kill-both-{i}-{keeper_first}");
            trials.push(trial(&server, &dir, &resource, phase, |ours| {
                let (leasehold, keeper) = (ours[0].0, ours[1].0);
                if keeper_first {
                    kill_all(&[keeper, leasehold], "KILL");
                } else {
                    kill_all(&[leasehold, keeper], "KILL");
                }
            }));
        }
    }
    assert_no_overlap(
        "kill -9 <leasehold> <keeper>, both orders, 3 phases",
        &trials,
    );
}

#[test]
fn sigkill_of_any_subset_of_leaseholds_processes_leaves_nothing_of_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("kill-subset");
    let mut trials = Vec::new();
    // Every non-empty subset of leasehold, the keeper and the fuse, each at a phase of
    // its own and in an order of its own (odd subsets backwards).
    for subset in 1u8..8 {
        let phase = PHASES[usize::from(subset) % PHASES.len()];
        let resource = format!("kill-subset-{subset}");
        trials.push(trial(&server, &dir, &resource, phase, |ours| {
            assert_eq!(
                ours.len(),
                3,
                "leasehold, the keeper and the fuse: {ours:?}"
            );
            let mut chosen: Vec<u32> = (0..3)
                .filter(|bit| subset & (1 << bit) != 0)
                .map(|bit| ours[bit].0)
                .collect();
            if subset % 2 == 1 {
                chosen.reverse();
            }
            kill_all(&chosen, "KILL");
        }));
    }
    assert_no_overlap("kill -9 of each subset of leasehold, keeper, fuse", &trials);
}

#[test]
fn pkill_by_name_of_leaseholds_processes_leaves_nothing_of_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("pkill");
    let mut trials = Vec::new();
    for (i, phase) in PHASES.into_iter().enumerate() {
        trials.push(trial(&server, &dir, &format!("pkill-{i}"), phase, |ours| {
            // What `pkill -9 leasehold` picks (a pattern on the process name), kept to this
            // run's processes so that the other tests' runs are spared.
            let picked: Vec<u32> = ours
                .iter()
                .map(|&(pid, _)| pid)
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|comm| comm.contains("leasehold"))
                })
                .collect();
            assert_eq!(picked.len(), ours.len(), "the pattern matches them all");
            kill_all(&picked, "KILL");
        }));
    }
    assert_no_overlap("pkill -9 leasehold", &trials);
}

#[test]
fn sigstop_then_sigkill_of_every_leasehold_process_leaves_nothing_of_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("stop-kill");
    let mut trials = Vec::new();
    for (i, phase) in PHASES.into_iter().enumerate() {
        trials.push(trial(
            &server,
            &dir,
            &format!("stop-kill-{i}"),
            phase,
            |ours| {
                let pids: Vec<u32> = ours.iter().map(|&(pid, _)| pid).collect();
                kill_all(&pids, "STOP");
                for &(pid, what) in ours {
                    assert!(
                        wait_for_state(pid, 'T', Duration::from_secs(5)),
                        "{what} did not stop"
                    );
                }
                kill_all(&pids, "KILL");
            },
        ));
    }
    assert_no_overlap(
        "kill -STOP, then -KILL, of every leasehold process",
        &trials,
    );
}

#[test]
fn sigkill_of_leaseholds_group_and_the_keepers_session_leaves_no_daemon_running() {
    let server = RedisServer::start();
    let dir = TempDir::new("group-session");
    let mut trials = Vec::new();
    for (i, phase) in PHASES.into_iter().enumerate() {
        trials.push(trial(
            &server,
            &dir,
            &format!("group-session-{i}"),
            phase,
            |ours| {
                let (leasehold, keeper) = (ours[0].0, ours[1].0);
                let session = session_of(keeper);
                let in_session: Vec<u32> = crate::common::pids::descendants_of(leasehold)
                    .into_iter()
                    .filter(|&pid| session_if_alive(pid) == Some(session))
                    .collect();
                // `kill -9 -<leasehold's group>` and every process of the keeper's session
                // (`pkill -9 -s <sid>`), in one command: the command and its backgrounded child
                // go with the session, the setsid grandchild and the daemon are in sessions of
                // their own.
                let mut targets = vec![format!("-{leasehold}")];
                targets.extend(in_session.iter().map(u32::to_string));
                kill_targets(&targets, "KILL");
            },
        ));
    }
    assert_no_overlap(
        "kill -9 of leasehold's group and the keeper's session",
        &trials,
    );
}

/// The fuse's SIGKILL is the kernel's, at local validity's end; the deaths that follow (the
/// fuse's, then the keeper's, which ends the namespace) each wait for a CPU. Under this
/// binary's load they came within a few milliseconds in most runs, 10 ms past a 10 ms
/// budget once in nine trials, and once, during a whole-suite run, 426 ms after the
/// fuse's instant: the drift budget must cover that delay, as it covers every kill. This
/// test checks the kernel's part — nothing of leasehold runs — with room for the rest.
const DRIFT: &[(&str, &str)] = &[("LEASEHOLD_DRIFT_BUDGET", "1s")];

#[test]
fn every_leasehold_process_frozen_cannot_keep_the_command_past_the_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("frozen");
    let mut trials = Vec::new();
    for (i, phase) in PHASES.into_iter().enumerate() {
        let resource = format!("frozen-{i}");
        let _load = CpuLoad::start();
        let mut old =
            Witnessed::spawn(&server, &dir, &resource, &["--ttl", "3s"], false, DRIFT).ready();
        let key = keys_of(&resource).lease().to_owned();
        let next = Next::start(&server, &dir, &resource);
        let ours = leaseholds_processes(&old);
        reach(&server, &key, phase);
        let pids: Vec<u32> = ours.iter().map(|&(pid, _)| pid).collect();
        let frozen_at = Instant::now();
        kill_all(&pids, "STOP");
        for &(pid, what) in &ours {
            assert!(
                wait_for_state(pid, 'T', Duration::from_secs(5)),
                "{what} did not stop"
            );
        }
        // Read once all are stopped: no renewal can move it any more.
        let expiry = expiry_micros(&server, &key).expect("the lease is held");
        // Nothing of leasehold runs: the fuse's kernel timer ends the namespace at local
        // validity's end, at most a TTL from now.
        assert_all_gone_within(
            &old.named(),
            Duration::from_secs(4),
            "every leasehold process froze",
        );
        let gone_in = frozen_at.elapsed();
        let last = old.last_write();
        let first = next.first_write();
        kill_all(&pids, "CONT");
        old.run
            .finish_within(EXIT_TIMEOUT, "leasehold thawed")
            .assert_code(124, "leasehold frozen past its lease");
        trials.push(Trial {
            what: format!("{resource} at {phase:?}"),
            gone_in,
            before_next: first - last,
            before_end: Some(expiry - last),
        });
    }
    assert_no_overlap("kill -STOP of leasehold, the fuse and the keeper", &trials);
}

/// The process leasehold forked as the fuse, once it has named itself.
fn fuse_of(leasehold: u32) -> u32 {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let fuse = crate::common::pids::descendants_of(leasehold)
            .into_iter()
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "leasehold-fuse")
            });
        if let Some(fuse) = fuse {
            return fuse;
        }
        assert!(
            Instant::now() < until,
            "no fuse under leasehold {leasehold}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// The fuse's timer is what ends the tree when every leasehold process is frozen, so the
/// command must not start before the fuse has armed it: a fuse frozen (or starved) from
/// before the grant — it never reads its first deadline — is the case where leasehold and
/// the keeper frozen next would leave the tree running for ever.
#[test]
fn the_command_does_not_start_before_the_fuse_has_armed_its_timer() {
    let server = RedisServer::start();
    let dir = TempDir::new("unarmed");
    let resource = "unarmed";
    let go = dir.path("go");
    let mut holder = run_cmd(&server, resource);
    holder
        .args(["--ttl", "3s", "--", "bash", "-c"])
        .arg(format!(
            "while [ ! -e {} ]; do sleep 0.01; done",
            go.display()
        ));
    let mut holder = Running::spawn(holder, &dir, "holder");
    let key = keys_of(resource).lease().to_owned();
    let until = Instant::now() + Duration::from_secs(10);
    while expiry_micros(&server, &key).is_none() {
        assert!(Instant::now() < until, "the holder did not acquire");
        thread::sleep(Duration::from_millis(5));
    }
    let mut old = Witnessed::spawn(
        &server,
        &dir,
        resource,
        &["--wait", "20s", "--ttl", "3s"],
        false,
        &[],
    );
    let fuse = fuse_of(old.run.pid());
    kill_all(&[fuse], "STOP");
    assert!(
        wait_for_state(fuse, 'T', Duration::from_secs(5)),
        "the fuse did not stop"
    );
    std::fs::write(&go, "").expect("the holder's signal");
    let released = Instant::now();
    holder
        .finish_within(EXIT_TIMEOUT, "the holder")
        .assert_code(0, "the holder");
    let until = Instant::now() + EXIT_TIMEOUT;
    let done = loop {
        assert!(
            !old.pidfile.exists(),
            "the command started though the fuse never armed its timer"
        );
        if let Some(done) = old.run.try_finish() {
            break done;
        }
        assert!(
            Instant::now() < until,
            "leasehold, its fuse frozen, still runs"
        );
        thread::sleep(Duration::from_millis(5));
    };
    println!(
        "measured: leasehold, its fuse frozen, exited {:?} after the holder released: {}",
        done.ended_at - released,
        done.stderr.trim_end()
    );
    done.assert_code(125, "leasehold, its fuse frozen");
    // It waited out local validity (under 3 s) for the fuse, then did not wait for it.
    assert!(
        done.ended_at - released < Duration::from_secs(6),
        "leasehold kept waiting for its frozen fuse"
    );
    assert!(
        done.stderr.contains("fuse"),
        "the reason names the fuse: {}",
        done.stderr
    );
    assert_eq!(expiry_micros(&server, &key), None, "the lease was released");
}
