//! The correct model satisfies every property, in each configuration: the CI-sized run.
//! `LEASEHOLD_MODEL_DEPTH=<ticks>` runs each with that many more ticks of clock.

use std::io::Write as _;
use std::time::Instant;

use leasehold_model::{Config, LeaseModel, check};
use stateright::Checker;

fn holds(name: &str, config: Config) {
    let started = Instant::now();
    let checker = check(LeaseModel::new(config.deepened()));
    checker.assert_properties();
    // Straight to the process's stderr, past the test harness's capture: CI's log shows
    // what was explored.
    let _ = writeln!(
        std::io::stderr(),
        "model {name}: {} states, {} unique, properties hold (depth {}, {:.1?})",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
}

#[test]
fn plain_lease_with_lost_and_late_replies() {
    holds("plain", Config::plain());
}

#[test]
fn eviction_flush_and_failover() {
    holds("faults", Config::faults());
}

#[test]
fn counted_lease() {
    holds("counted", Config::counted());
}

#[test]
fn counted_lease_with_lock_delay() {
    holds("counted lock-delay", Config::counted_lock_delay());
}

#[test]
fn lock_delay() {
    holds("lock-delay", Config::lock_delay());
}

#[test]
fn native_commands_answer_as_the_script() {
    // One tick less than `plain`: the native path differs from the script only in what
    // it compares, which the first renewals and releases already reach.
    let native = Config {
        native: true,
        max_time: 3,
        ..Config::plain()
    };
    holds("native", native);
}

#[test]
fn line_of_waiters() {
    holds("line", Config::line());
}

#[test]
fn counted_line_of_waiters() {
    holds("counted line", Config::counted_line());
}

#[test]
fn line_of_waiters_under_faults() {
    holds("line faults", Config::line_faults());
}
