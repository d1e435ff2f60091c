//! Runs many seeds, stops at a violation, and shortens the failing schedule to the steps
//! it needs.

use std::mem::discriminant;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use leasehold::__simulation::Bugs;

use crate::checker::{Facts, Violation, check};
use crate::driver;
use crate::history::Event;
use crate::schedule::{Action, PERMITS, Schedule, TTL};

/// The variable that replays one seed.
pub const SEED_VAR: &str = "LEASEHOLD_SIM_SEED";
/// The variable that turns deliberate bugs on for a replay (names separated by commas):
/// `cancel_at_validity_end`, `drain_forgets_a_lease`, `forget_unsettled`,
/// `store_on_client_clock`.
pub const BUG_VAR: &str = "LEASEHOLD_SIM_BUG";

/// The bugs [`BUG_VAR`] names (none if unset).
pub fn bugs_from_env() -> Bugs {
    let named = std::env::var(BUG_VAR).unwrap_or_default();
    Bugs {
        cancel_at_validity_end: named.contains("cancel_at_validity_end"),
        drain_forgets_a_lease: named.contains("drain_forgets_a_lease"),
        forget_unsettled: named.contains("forget_unsettled"),
        store_on_client_clock: named.contains("store_on_client_clock"),
    }
}

/// How to turn `bugs` on again: the [`BUG_VAR`] setting, or nothing.
fn bug_setting(bugs: Bugs) -> String {
    let mut names = Vec::new();
    if bugs.cancel_at_validity_end {
        names.push("cancel_at_validity_end");
    }
    if bugs.drain_forgets_a_lease {
        names.push("drain_forgets_a_lease");
    }
    if bugs.forget_unsettled {
        names.push("forget_unsettled");
    }
    if bugs.store_on_client_clock {
        names.push("store_on_client_clock");
    }
    if names.is_empty() {
        String::new()
    } else {
        format!("{BUG_VAR}={} ", names.join(","))
    }
}

/// What the checker is told of every run.
pub fn facts(schedule: &Schedule) -> Facts {
    let settings = leasehold::LeaseSettings::default();
    Facts {
        permits: PERMITS.to_vec(),
        kill: schedule.kill.clone(),
        ttl: TTL,
        command_timeout: settings.command_timeout,
        renew_every: settings.renewal_cadence(TTL),
    }
}

/// One run of `schedule`: its history and the checker's verdict.
pub fn run(schedule: &Schedule, bugs: Bugs) -> (Vec<Event>, Result<(), Violation>) {
    let events = driver::run(schedule, bugs);
    let verdict = check(&events, &facts(schedule));
    (events, verdict)
}

/// A seed whose history breaks a property.
#[derive(Debug, Clone)]
pub struct Found {
    pub seed: u64,
    /// The deliberate bugs the run had on.
    pub bugs: Bugs,
    pub violation: Violation,
    /// The schedule shortened to steps it still fails without (same kind of violation).
    pub shortened: Schedule,
    /// The shortened schedule's history up to its violation.
    pub history: Vec<Event>,
}

impl Found {
    /// What a failure prints: the seed, how to replay it, the shortened schedule, the
    /// violation and the history's last events before it.
    pub fn report(&self) -> String {
        let mut out = format!(
            "simulation: seed {} breaks a property: {}\nreplay: {}{}={} cargo test -p leasehold-sim --test seeds\nshortened schedule ({} steps, clients' Kill: {:?}):\n",
            self.seed,
            self.violation,
            bug_setting(self.bugs),
            SEED_VAR,
            self.seed,
            self.shortened.steps.len(),
            self.shortened.kill,
        );
        for step in &self.shortened.steps {
            out += &format!("  {step}\n");
        }
        out += "its history's last events:\n";
        let from = self.history.len().saturating_sub(25);
        for event in &self.history[from..] {
            out += &format!("  {event}\n");
        }
        out
    }
}

/// What a search ran.
#[derive(Debug, Clone)]
pub struct Summary {
    pub seeds: u64,
    pub events: usize,
    pub faults: usize,
    /// Store outages longer than the TTL after which a leader was required.
    pub outages: usize,
    /// Seeds that paused a client (run on a runtime per client, in lock-step), and the
    /// time their runs took, summed over the threads.
    pub paused: u64,
    pub paused_took: std::time::Duration,
    pub took: std::time::Duration,
    /// The smallest failing seed among those run, if any failed.
    pub found: Option<Found>,
}

/// Runs seeds `from..from + count` with `bugs`, on `threads` threads (each seed on a
/// runtime of its own, so a seed's history does not depend on the others); stops early
/// once a seed fails.
pub fn explore(from: u64, count: u64, bugs: Bugs, threads: usize) -> Summary {
    let began = Instant::now();
    let next = AtomicU64::new(from);
    let (ran, events, faults) = (AtomicU64::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    let outages = AtomicUsize::new(0);
    let (paused, paused_micros) = (AtomicU64::new(0), AtomicU64::new(0));
    let failed = AtomicBool::new(false);
    let failures: Mutex<Vec<(u64, Violation)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= from + count {
                        break;
                    }
                    let schedule = Schedule::from_seed(seed);
                    let one = Instant::now();
                    let (history, verdict) = run(&schedule, bugs);
                    if schedule.pauses() {
                        paused.fetch_add(1, Ordering::Relaxed);
                        let micros = u64::try_from(one.elapsed().as_micros()).unwrap_or(u64::MAX);
                        paused_micros.fetch_add(micros, Ordering::Relaxed);
                    }
                    ran.fetch_add(1, Ordering::Relaxed);
                    events.fetch_add(history.len(), Ordering::Relaxed);
                    faults.fetch_add(schedule.faults(), Ordering::Relaxed);
                    let over = history
                        .iter()
                        .filter(|e| e.what == crate::history::What::OutageOver)
                        .count();
                    outages.fetch_add(over, Ordering::Relaxed);
                    if let Err(violation) = verdict {
                        failed.store(true, Ordering::Relaxed);
                        let mut list = failures.lock().unwrap_or_else(|e| e.into_inner());
                        list.push((seed, violation));
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    failures.sort_by_key(|(seed, _)| *seed);
    let found = failures
        .into_iter()
        .next()
        .map(|(seed, violation)| shorten(seed, violation, bugs));
    Summary {
        seeds: ran.into_inner(),
        events: events.into_inner(),
        faults: faults.into_inner(),
        outages: outages.into_inner(),
        paused: paused.into_inner(),
        paused_took: std::time::Duration::from_micros(paused_micros.into_inner()),
        took: began.elapsed(),
        found,
    }
}

/// Drops the steps of `seed`'s schedule one at a time (a fault with its heal), keeping each
/// drop after which the run still breaks the same kind of property.
pub fn shorten(seed: u64, violation: Violation, bugs: Bugs) -> Found {
    let full = Schedule::from_seed(seed);
    let (mut steps, mut found) = (full.steps.clone(), violation);
    let mut i = steps.len();
    while i > 0 {
        i -= 1;
        if i >= steps.len() {
            continue;
        }
        // A resume goes only with its pause (a client paused for good is not a run).
        if matches!(steps[i].action, Action::Resume { .. }) {
            continue;
        }
        let mut fewer = steps.clone();
        let step = fewer.remove(i);
        // A fault goes with its heal, a pause with its resume.
        let end = |s: &crate::schedule::Step| match (&step.action, &s.action) {
            (Action::Fault { client, .. }, Action::Heal { client: c, .. }) => c == client,
            (Action::Pause { client }, Action::Resume { client: c }) => c == client,
            _ => false,
        };
        if let Some(heal) = fewer[i..].iter().position(end) {
            fewer.remove(i + heal);
        }
        let candidate = Schedule::with_steps(seed, full.kill.clone(), fewer);
        if let (_, Err(v)) = run(&candidate, bugs)
            && discriminant(&v) == discriminant(&found)
        {
            steps = candidate.steps;
            found = v;
        }
    }
    let shortened = Schedule::with_steps(seed, full.kill.clone(), steps);
    let (history, _) = run(&shortened, bugs);
    let cut = upto_violation(&history, &facts(&shortened));
    Found {
        seed,
        bugs,
        violation: found,
        shortened,
        history: history[..cut].to_vec(),
    }
}

/// How many of `history`'s events come up to the violation: the shortest beginning of it
/// the checker finds a violation in (the whole history if none).
fn upto_violation(history: &[Event], facts: &Facts) -> usize {
    // A beginning that breaks a property is followed only by longer ones that do.
    let (mut low, mut high) = (0, history.len());
    while low < high {
        let mid = low + (high - low) / 2;
        if check(&history[..mid], facts).is_err() {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    low
}
