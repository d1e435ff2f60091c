//! Each deliberate breakage makes the checker find a counterexample for the property it
//! breaks; breadth first, the counterexample is a shortest one.

use leasehold_model::properties::*;
use leasehold_model::{Bugs, Config, LeaseModel, counterexample};

fn breaks(config: Config, property: &'static str) {
    let path = counterexample(LeaseModel::new(config), property)
        .unwrap_or_else(|| panic!("no counterexample for {property}"));
    let actions = path.into_actions();
    println!("{property}: {} steps: {actions:?}", actions.len());
}

fn bugs(f: impl FnOnce(&mut Bugs)) -> Bugs {
    let mut bugs = Bugs::default();
    f(&mut bugs);
    bugs
}

#[test]
fn no_time_floor_repeats_a_token_after_eviction() {
    let config = Config::faults().with_bugs(bugs(|b| b.no_time_floor = true));
    breaks(config, TOKENS_INCREASE);
}

#[test]
fn renew_without_owner_check_backs_a_belief_with_another_key() {
    let config = Config::faults().with_bugs(bugs(|b| b.renew_without_owner_check = true));
    breaks(config, BACKED);
}

#[test]
fn release_without_owner_check_lets_two_hold() {
    let config = Config::plain().with_bugs(bugs(|b| b.release_without_owner_check = true));
    breaks(config, AT_MOST_PERMITS);
}

#[test]
fn owner_check_without_operation_id_lets_two_hold() {
    let config = Config::plain().with_bugs(bugs(|b| b.owner_only = true));
    breaks(config, AT_MOST_PERMITS);
}

#[test]
fn slot_scan_past_the_last_slot_lets_permits_plus_one_hold() {
    let config = Config::counted().with_bugs(bugs(|b| b.slot_scan_extra = true));
    breaks(config, AT_MOST_PERMITS);
}

#[test]
fn replay_issuing_a_new_token_grants_an_attempt_twice() {
    let config = Config::plain().with_bugs(bugs(|b| b.replay_new_token = true));
    breaks(config, ONE_GRANT_PER_ATTEMPT);
}

#[test]
fn lock_delay_ignored_grants_during_the_delay() {
    let config = Config::lock_delay().with_bugs(bugs(|b| b.ignore_lock_delay = true));
    breaks(config, LOCK_DELAY);
}

#[test]
fn lock_delay_ignored_by_the_slot_scan_grants_during_the_delay() {
    let config = Config::counted_lock_delay().with_bugs(bugs(|b| b.ignore_lock_delay = true));
    breaks(config, LOCK_DELAY);
}

#[test]
fn late_renewal_reviving_a_handle_breaks_its_state_machine() {
    let config = Config::plain().with_bugs(bugs(|b| b.revive_handle = true));
    breaks(config, TERMINAL_STAYS);
}

/// Not a bug but a limit of (a): a promoted replica whose clock is ahead of the old
/// primary's expires a lease before its holder's validity ends.
#[test]
fn failover_to_a_clock_ahead_ends_a_lease_early() {
    let config = Config {
        replica_ahead: 1,
        faults: 2,
        ..Config::faults()
    };
    breaks(config, AT_MOST_PERMITS);
}

/// Not a bug but the limit of the TIME floor: a counter lost while it is ahead of the
/// clock (several grants within one tick of `TIME`) lets the next grant repeat a token.
#[test]
fn counter_lost_ahead_of_the_clock_repeats_a_token() {
    let config = Config {
        time_past_counter: false,
        ..Config::faults()
    };
    breaks(config, TOKENS_INCREASE);
}

#[test]
fn line_ignored_grants_past_a_live_waiter() {
    let config = Config::line().with_bugs(bugs(|b| b.line_ignored = true));
    breaks(config, FIRST_COME);
}

#[test]
fn try_jumping_the_line_grants_past_a_live_waiter() {
    let config = Config::line().with_bugs(bugs(|b| b.try_jumps = true));
    breaks(config, FIRST_COME);
}

#[test]
fn dead_entries_never_pruned_keep_a_free_slot_from_the_line() {
    let config = Config::line().with_bugs(bugs(|b| b.no_prune = true));
    breaks(config, DEAD_WAITER_LEAVES);
}

#[test]
fn dead_entries_never_pruned_keep_a_free_slot_from_the_counted_line() {
    let config = Config::counted_line().with_bugs(bugs(|b| b.no_prune = true));
    breaks(config, DEAD_WAITER_LEAVES);
}

/// Not a bug of the model but a limit of a line scored by the server's `TIME`: after a
/// failover to a replica whose clock is behind, a newcomer's score is below those of the
/// waiters already in the line, and it joins ahead of them.
#[test]
fn join_at_time_puts_a_newcomer_ahead_after_a_failover_to_a_clock_behind() {
    let config = Config {
        faults: 1,
        replica_behind: 1,
        ..Config::line()
    }
    .with_bugs(bugs(|b| b.join_at_time = true));
    breaks(config, JOINS_BEHIND);
}

/// Not a bug of the scripts but of a wait loop that looks only at the head: K never
/// prunes, so a waiter behind a dead head hears rank 1 for ever while the slot is free.
#[test]
fn waiters_looking_only_at_the_head_leave_a_free_slot_behind_a_dead_head() {
    let config = Config {
        head_looks_only: true,
        ..Config::line()
    };
    breaks(config, FIRST_LIVE_LOOKS);
}
