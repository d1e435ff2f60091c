//! Each bug put in on purpose is found within the CI run's seeds, and its report names the
//! seed that replays it.

use std::io::Write as _;

use leasehold::__simulation::Bugs;
use leasehold_sim::checker::Violation;
use leasehold_sim::explore::{self, Found};
use leasehold_sim::schedule::Schedule;

/// The CI run's seed budget.
const SEEDS: u64 = 1_000;

fn finds(bugs: Bugs) -> Found {
    let summary = explore::explore(0, SEEDS, bugs, 1);
    let found = summary
        .found
        .unwrap_or_else(|| panic!("{bugs:?}: nothing found in {} seeds", summary.seeds));
    let report = found.report();
    // Past the harness's capture: CI's log shows what was found, and how fast.
    let _ = writeln!(
        std::io::stderr().lock(),
        "simulation with {bugs:?}: found after {} seeds in {:.1?}:\n{report}",
        summary.seeds,
        summary.took
    );
    assert!(report.contains(&format!("seed {}", found.seed)));
    assert!(report.contains(&format!("LEASEHOLD_SIM_SEED={}", found.seed)));
    // The seed replays it: the same history, the same violation.
    let schedule = Schedule::from_seed(found.seed);
    let (first, verdict) = explore::run(&schedule, bugs);
    let (again, _) = explore::run(&schedule, bugs);
    assert!(verdict.is_err(), "seed {} did not fail again", found.seed);
    assert_eq!(first, again);
    found
}

#[test]
fn a_watchdog_cancelling_at_validity_s_end_is_found() {
    let found = finds(Bugs {
        cancel_at_validity_end: true,
        ..Bugs::default()
    });
    assert!(
        matches!(found.violation, Violation::ToldLate { .. }),
        "{:?}",
        found.violation
    );
}

#[test]
fn a_drain_forgetting_a_lease_is_found() {
    let found = finds(Bugs {
        drain_forgets_a_lease: true,
        ..Bugs::default()
    });
    assert!(
        matches!(found.violation, Violation::LeftAfterDrain { .. }),
        "{:?}",
        found.violation
    );
}

/// After a store outage longer than the TTL whose replies were lost, a supervisor that
/// abandons its unsettled acquisition waits out the lease it took: no leader within one
/// renewal period of the resume.
#[test]
fn a_supervisor_abandoning_its_unsettled_attempt_is_found() {
    let found = finds(Bugs {
        forget_unsettled: true,
        ..Bugs::default()
    });
    assert!(
        matches!(found.violation, Violation::NoLeader { .. }),
        "{:?}",
        found.violation
    );
}

/// A store that reads each client's own clock — one that stood still while its client was
/// paused — lets a lease taken or renewed after a pause expire early for the others: two
/// holders within their validity. Only a paused client shows it.
#[test]
fn a_store_on_a_paused_client_s_clock_is_found() {
    let found = finds(Bugs {
        store_on_client_clock: true,
        ..Bugs::default()
    });
    assert!(
        matches!(found.violation, Violation::TooMany { .. }),
        "{:?}",
        found.violation
    );
    assert!(Schedule::from_seed(found.seed).pauses());
}
