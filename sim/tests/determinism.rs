//! One seed, one history: a run replays exactly — one on a single runtime, and one that
//! pauses a client, on a runtime per client driven in lock-step, each clock started at
//! whatever real instant its runtime was built.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use leasehold::__simulation::Bugs;
use leasehold_sim::driver;
use leasehold_sim::history::Event;
use leasehold_sim::schedule::Schedule;

/// Seeds run twice: one in ten of them pauses a client.
const SEEDS: u64 = 200;

/// A seed whose two runs differ, and their first events that differ.
type Differs = (u64, Option<(Event, Event)>);

#[test]
fn a_seed_run_twice_records_the_same_history() {
    let paused = (0..SEEDS)
        .filter(|&seed| Schedule::from_seed(seed).pauses())
        .count();
    assert!(paused >= 10, "only {paused} of the seeds pause a client");
    let next = AtomicU64::new(0);
    let differ: Mutex<Vec<Differs>> = Mutex::new(Vec::new());
    // Two threads, each run on runtimes of its own.
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= SEEDS {
                        break;
                    }
                    let schedule = Schedule::from_seed(seed);
                    let first = driver::run(&schedule, Bugs::default());
                    let second = driver::run(&schedule, Bugs::default());
                    if first != second {
                        let at = first.iter().zip(&second).position(|(a, b)| a != b);
                        let pair = at.map(|i| (first[i].clone(), second[i].clone()));
                        let mut differ = differ.lock().unwrap_or_else(|e| e.into_inner());
                        differ.push((seed, pair));
                    }
                }
            });
        }
    });
    let mut differ = differ.into_inner().unwrap_or_else(|e| e.into_inner());
    differ.sort_by_key(|(seed, _)| *seed);
    assert!(
        differ.is_empty(),
        "{} seeds differ: {differ:#?}",
        differ.len()
    );
}
