//! The simulation's CI run: a thousand seeds and more, every property held; or, with
//! `LEASEHOLD_SIM_SEED=<n>`, that one seed replayed, its history printed.

use std::io::Write as _;

use leasehold::__simulation::Bugs;
use leasehold_sim::explore::{self, SEED_VAR};
use leasehold_sim::schedule::Schedule;

/// Seeds the CI run explores (`LEASEHOLD_SIM_SEEDS` for more).
const SEEDS: u64 = 1_000;

/// Written past the test harness's capture, so CI's log shows what was explored.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

#[test]
fn every_seed_holds_every_property() {
    if let Ok(seed) = std::env::var(SEED_VAR) {
        let seed: u64 = seed.parse().expect("LEASEHOLD_SIM_SEED is a number");
        let schedule = Schedule::from_seed(seed);
        let bugs = explore::bugs_from_env();
        let (history, verdict) = explore::run(&schedule, bugs);
        say(&format!("simulation: replaying seed {seed}; schedule:"));
        for step in &schedule.steps {
            say(&format!("  {step}"));
        }
        say("history:");
        for event in &history {
            say(&format!("  {event}"));
        }
        if let Err(violation) = verdict {
            let found = explore::shorten(seed, violation, bugs);
            panic!("{}", found.report());
        }
        say(&format!("simulation: seed {seed} holds every property"));
        return;
    }
    let seeds = std::env::var("LEASEHOLD_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEEDS);
    let summary = explore::explore(0, seeds, Bugs::default(), 2);
    say(&format!(
        "simulation: {} seeds in {:.1?}: {} events recorded, {} faults, deletions, restarts, drains and pauses injected, {} store outages longer than the TTL each followed by a leader; {} seeds paused a client, {:.1?} of runs",
        summary.seeds,
        summary.took,
        summary.events,
        summary.faults,
        summary.outages,
        summary.paused,
        summary.paused_took
    ));
    if let Some(found) = summary.found {
        panic!("{}", found.report());
    }
}
