//! One seed, one history: a run replays exactly.

use leasehold::__simulation::Bugs;
use leasehold_sim::driver;
use leasehold_sim::schedule::Schedule;

#[test]
fn a_seed_run_twice_records_the_same_history() {
    let mut differ = Vec::new();
    for seed in 0..200 {
        let schedule = Schedule::from_seed(seed);
        let first = driver::run(&schedule, Bugs::default());
        let second = driver::run(&schedule, Bugs::default());
        if first != second {
            let at = first.iter().zip(&second).position(|(a, b)| a != b);
            differ.push((seed, at.map(|i| (first[i].clone(), second[i].clone()))));
        }
    }
    assert!(
        differ.is_empty(),
        "{} seeds differ: {differ:#?}",
        differ.len()
    );
}
