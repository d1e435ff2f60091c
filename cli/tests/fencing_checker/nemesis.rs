//! The nemesis: one fault at a time — pausing a holder past its TTL, dropping replies,
//! restarting Redis — so that stale holders get to write, and the fence must refuse them.

use std::collections::{BTreeMap, VecDeque};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{Proxy, ProxyMode, RedisServer};
use crate::processes::{command_groups, command_groups_of, keepers_of, signal_group};
use crate::{POLL, Rng, Shared, lock};

/// Probability (in percent) that a pause picks a process that is running its command (the
/// holder, or a holder that just lost the lease) rather than any running process.
const PREFER_HOLDER_PCT: u64 = 75;
/// How long a pause that prefers a holder looks for one before taking any process.
const HOLDER_SEARCH: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Pause,
    DropReplies,
    Restart,
}

const FAULTS: [Fault; 3] = [Fault::Pause, Fault::DropReplies, Fault::Restart];

#[derive(Default, Debug)]
pub struct NemesisReport {
    pub pauses: usize,
    /// Pauses that caught the process while it ran its command.
    pub holder_pauses: usize,
    pub reply_drops: usize,
    pub restarts: usize,
}

/// A `leasehold` process (PID = its process group) stopped with its command groups. Drop
/// resumes them, also when the nemesis panics.
struct Paused<'a> {
    shared: &'a Shared,
    worker: usize,
    pid: u32,
    /// Its keepers' groups: resumed with leasehold, so a resumed command is not stopped
    /// by its keeper before it could write.
    keepers: Vec<u32>,
    groups: Vec<u32>,
    /// Time between resuming the command and resuming leasehold.
    resume_gap: Duration,
}

impl Paused<'_> {
    /// Whether the process is still ours and un-reaped (a stopped process cannot exit;
    /// only a straggler kill could have taken it), so neither its PID nor its command
    /// groups can have been reused. Call with the `running` lock held.
    fn still_ours(&self, running: &BTreeMap<usize, u32>) -> bool {
        running.get(&self.worker) == Some(&self.pid)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        // The command first: a holder whose lease ran out while it was stopped gets to
        // write with its old token before leasehold wakes up and stops it (with no gap,
        // leasehold's SIGTERM usually wins that race).
        {
            let running = lock(&self.shared.running);
            if !self.still_ours(&running) {
                return;
            }
            for g in &self.groups {
                signal_group("CONT", *g);
            }
        }
        if !self.groups.is_empty() && !thread::panicking() {
            thread::sleep(self.resume_gap);
        }
        let running = lock(&self.shared.running);
        if self.still_ours(&running) {
            for k in &self.keepers {
                signal_group("CONT", *k);
            }
            signal_group("CONT", self.pid);
        }
    }
}

/// Stops one running `leasehold` process (preferring one that runs its command) and its
/// command's process group. `None` if nothing is running.
fn pause_one<'a>(shared: &'a Shared, rng: &mut Rng) -> Option<(Paused<'a>, bool)> {
    let want_holder = rng.range(1, 100) <= PREFER_HOLDER_PCT;
    let looking_since = Instant::now();
    let (running, worker, pid) = loop {
        // Scanned without the lock: it only guides the choice; the PID we signal is
        // taken from `running` under the lock.
        let parents = command_groups();
        let running = lock(&shared.running);
        let all: Vec<(usize, u32)> = running.iter().map(|(w, p)| (*w, *p)).collect();
        let holders: Vec<(usize, u32)> = all
            .iter()
            .copied()
            .filter(|(_, pid)| parents.contains_key(pid))
            .collect();
        let (worker, pid) = if want_holder && !holders.is_empty() {
            rng.pick(&holders)
        } else if (!want_holder || looking_since.elapsed() >= HOLDER_SEARCH) && !all.is_empty() {
            rng.pick(&all)
        } else if looking_since.elapsed() >= HOLDER_SEARCH {
            return None;
        } else {
            drop(running);
            thread::sleep(POLL);
            continue;
        };
        break (running, worker, pid);
    };
    // leasehold's group and its keeper's first: neither can start (or reap) a command any
    // more, and a command that has not moved to its own group yet stops with the keeper.
    signal_group("STOP", pid);
    let keepers = keepers_of(pid);
    for k in &keepers {
        signal_group("STOP", *k);
    }
    let groups = command_groups_of(pid);
    for g in &groups {
        signal_group("STOP", *g);
    }
    drop(running);
    let holder = !groups.is_empty();
    // Half the time leasehold resumes right after its command, half the time it is late
    // by 20-300 ms (still starved, say): the window in which only the fence protects.
    let resume_gap = if rng.range(0, 1) == 0 {
        Duration::ZERO
    } else {
        rng.millis(20, 300)
    };
    Some((
        Paused {
            shared,
            worker,
            pid,
            keepers,
            groups,
            resume_gap,
        },
        holder,
    ))
}

fn sleep_until_or(deadline: Instant, d: Duration) {
    let left = deadline.saturating_duration_since(Instant::now());
    thread::sleep(d.min(left));
}

pub fn nemesis(
    shared: &Shared,
    proxy: &Proxy,
    server: &mut RedisServer,
    mut rng: Rng,
) -> NemesisReport {
    let mut report = NemesisReport::default();
    // Every kind once, in random order, before random picks: each kind is injected at
    // least once even in a short run.
    let mut plan: VecDeque<Fault> = VecDeque::new();
    let mut kinds = FAULTS.to_vec();
    while !kinds.is_empty() {
        let i = usize::try_from(rng.next() % kinds.len() as u64).expect("small");
        plan.push_back(kinds.swap_remove(i));
    }
    loop {
        sleep_until_or(shared.deadline, rng.millis(300, 800));
        if Instant::now() >= shared.deadline {
            break;
        }
        let fault = plan.pop_front().unwrap_or_else(|| rng.pick(&FAULTS));
        match fault {
            Fault::Pause => match pause_one(shared, &mut rng) {
                Some((paused, holder)) => {
                    // Longer than the 1 s TTL, never cut short: the point is to outlive it.
                    thread::sleep(rng.millis(1200, 2000));
                    drop(paused);
                    report.pauses += 1;
                    report.holder_pauses += usize::from(holder);
                }
                // Nothing running right now: try again next time.
                None => plan.push_front(Fault::Pause),
            },
            Fault::DropReplies => {
                proxy.set_mode(ProxyMode::DropReplies);
                thread::sleep(rng.millis(200, 600));
                proxy.set_mode(ProxyMode::Pass);
                report.reply_drops += 1;
            }
            Fault::Restart => {
                server.restart();
                report.restarts += 1;
            }
        }
    }
    proxy.set_mode(ProxyMode::Pass);
    report
}
