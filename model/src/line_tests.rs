//! The line's branches (README.md, "Actions"): W, A and K against a line, one test each.

use crate::config::Config;
use crate::line::{AliveKey, WaitReply};
use crate::server::{AcquireReply, Attempt, Call, Data};

const A: Attempt = Attempt { client: 0, op: 0 };
const B: Attempt = Attempt { client: 1, op: 0 };
const C: Attempt = Attempt { client: 2, op: 0 };

fn call<'a>(config: &'a Config, data: &'a mut Data, now: u8) -> Call<'a> {
    Call { config, data, now }
}

fn refused(rank: u8) -> WaitReply {
    let (reply, rank, turn) = (AcquireReply::Contended, Some(rank), None);
    WaitReply { reply, rank, turn }
}

#[test]
fn waiters_join_in_order_and_a_replay_keeps_its_place() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A);
    assert_eq!(call(&config, &mut data, 1).wait(B), refused(0));
    assert_eq!(call(&config, &mut data, 1).wait(C), refused(1));
    // Scored `tail + 1 µs`: within the tick C joined, so its join keeps it as long as B's.
    assert_eq!(data.line[1].joined, 1);
    assert_eq!(call(&config, &mut data, 2).wait(B), refused(0));
    assert!(
        data.alive.is_empty(),
        "a look writes nothing: K keeps the place"
    );
}

#[test]
fn a_free_slot_goes_to_the_head_which_tells_the_next() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A);
    call(&config, &mut data, 1).wait(B);
    call(&config, &mut data, 1).wait(C);
    call(&config, &mut data, 1).release(0, A);
    assert_eq!(call(&config, &mut data, 1).wait(C), refused(1));
    assert_eq!(
        call(&config, &mut data, 1).acquire(A),
        AcquireReply::Contended
    );
    let granted = call(&config, &mut data, 1).wait(B);
    let reply = AcquireReply::Acquired { token: 2, slot: 0 };
    assert_eq!(
        granted,
        WaitReply {
            reply,
            rank: None,
            turn: Some(C)
        }
    );
    assert_eq!(data.rank_of(B), None);
}

#[test]
fn dead_entries_ahead_are_pruned() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A);
    call(&config, &mut data, 1).wait(B);
    call(&config, &mut data, 2).wait(C);
    call(&config, &mut data, 3).keep_alive(C);
    call(&config, &mut data, 3).release(0, A);
    // B joined at 1 and never kept alive: dead at 3; C's keep-alive holds it to 5.
    let granted = call(&config, &mut data, 3).wait(C);
    assert!(matches!(granted.reply, AcquireReply::Acquired { .. }));
    assert!(data.line.is_empty());
}

#[test]
fn a_try_never_joins_nor_jumps_a_live_waiter() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A);
    assert_eq!(
        call(&config, &mut data, 1).acquire(C),
        AcquireReply::Contended
    );
    call(&config, &mut data, 1).wait(B);
    call(&config, &mut data, 1).release(0, A);
    assert_eq!(
        call(&config, &mut data, 2).acquire(C),
        AcquireReply::Contended
    );
    assert_eq!(data.line.len(), 1);
    let taken = call(&config, &mut data, 3).acquire(C);
    assert!(matches!(taken, AcquireReply::Acquired { .. }));
    assert!(data.line.is_empty());
}

#[test]
fn a_keep_alive_keeps_its_sessions_place_and_joins_nothing() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    // K before the join (a W still on its way): the session's key, no entry.
    call(&config, &mut data, 1).keep_alive(B);
    assert!(data.line.is_empty());
    let until = 1 + config.keep;
    assert_eq!(data.alive, vec![AliveKey { attempt: B, until }]);
    call(&config, &mut data, 1).acquire(A);
    call(&config, &mut data, 1).wait(B);
    call(&config, &mut data, 2).keep_alive(B);
    call(&config, &mut data, 1).release(0, A);
    // B joined at 1: past its join's KEEP at 3, kept by K until 4: a try may not jump it.
    assert_eq!(
        call(&config, &mut data, 3).acquire(C),
        AcquireReply::Contended
    );
    data.expire(4);
    assert!(data.alive.is_empty());
    let taken = call(&config, &mut data, 4).acquire(C);
    assert!(matches!(taken, AcquireReply::Acquired { .. }));
}

/// `lua/line.lua` `entitled`: the walk stops at the caller's entry, whose call shows it
/// alive, so a waiter whose keep-alives were lost keeps its place when it looks.
#[test]
fn a_waiter_that_looks_keeps_its_place_though_its_entry_is_dead() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A);
    call(&config, &mut data, 1).wait(B);
    call(&config, &mut data, 2).wait(C);
    call(&config, &mut data, 3).keep_alive(C);
    call(&config, &mut data, 3).release(0, A);
    // B joined at 1 and was never kept alive: dead at 3, but its own look is granted.
    let granted = call(&config, &mut data, 3).wait(B);
    assert!(matches!(granted.reply, AcquireReply::Acquired { .. }));
    assert_eq!(granted.turn, Some(C));
    assert_eq!(data.line.len(), 1);
}

/// The walk removes the dead met before the caller's entry (or the `free`-th live one),
/// never those behind it.
#[test]
fn the_walk_leaves_dead_entries_behind_the_caller() {
    let config = Config::counted_line();
    let mut data = Data::empty(&config);
    let (d0, d1, e) = (
        Attempt { client: 3, op: 0 },
        Attempt { client: 4, op: 0 },
        Attempt { client: 5, op: 0 },
    );
    call(&config, &mut data, 1).acquire(A);
    call(&config, &mut data, 1).acquire(e);
    for waiter in [d0, B, d1] {
        call(&config, &mut data, 1).wait(waiter);
    }
    call(&config, &mut data, 2).wait(C);
    call(&config, &mut data, 3).keep_alive(B);
    call(&config, &mut data, 3).keep_alive(C);
    call(&config, &mut data, 3).release(0, A);
    // d0 and d1 joined at 1 and were never kept alive: dead at 3. B's walk removes d0,
    // ahead of it, and stops at its own entry: d1 stays, and C, now at rank 1, is told.
    let granted = call(&config, &mut data, 3).wait(B);
    assert!(matches!(granted.reply, AcquireReply::Acquired { .. }));
    assert_eq!(granted.turn, Some(C));
    let left: Vec<Attempt> = data.line.iter().map(|e| e.attempt).collect();
    assert_eq!(left, vec![d1, C]);
}

#[test]
fn a_counted_grant_tells_the_entry_that_came_within_the_permits() {
    let config = Config::counted_line();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A);
    let (reply, rank, turn) = (AcquireReply::Acquired { token: 2, slot: 1 }, None, None);
    assert_eq!(
        call(&config, &mut data, 1).wait(B),
        WaitReply { reply, rank, turn }
    );
    let d = Attempt { client: 3, op: 0 };
    let e = Attempt { client: 4, op: 0 };
    call(&config, &mut data, 1).wait(C);
    call(&config, &mut data, 1).wait(d);
    call(&config, &mut data, 1).wait(e);
    call(&config, &mut data, 1).release(0, A);
    let granted = call(&config, &mut data, 1).wait(C);
    assert_eq!(granted.turn, Some(e));
}

/// The replay's view of the line's commands: `line_step` names W and K and answers them
/// as the steps do; `server_step`, which the replay of the configurations without
/// waiters calls, leaves them to it.
#[test]
fn line_steps_are_named_for_the_replay() {
    use crate::model::{Acquisition, Action, LeaseModel};
    use crate::replay::{LineAnswer, LineSent};
    use stateright::Model as _;
    let model = LeaseModel::new(Config::line());
    let mut state = model.init_states().remove(0);
    for action in [Action::Acquire(Acquisition::Try(2)), Action::Deliver(2)] {
        state = model.next_state(&state, action).unwrap();
    }
    state = model
        .next_state(&state, Action::Acquire(Acquisition::Wait(0)))
        .unwrap();
    let wait = model.line_step(&state, Action::Deliver(0)).unwrap();
    assert_eq!(model.server_step(&state, Action::Deliver(0)), None);
    assert_eq!((wait.attempt, wait.sent), (A, LineSent::Wait));
    assert_eq!(wait.answer, LineAnswer::Wait(refused(0)));
    state = model.next_state(&state, Action::Deliver(0)).unwrap();
    let keep = model.line_step(&state, Action::Renew(0)).unwrap();
    assert_eq!(
        (keep.attempt, keep.sent, keep.answer),
        (A, LineSent::KeepAlive, LineAnswer::Kept)
    );
    assert_eq!(model.line_step(&state, Action::Renew(2)), None);
}
