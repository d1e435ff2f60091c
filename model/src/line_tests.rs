//! The line's branches (README.md, "Actions"): W, A and K against a line, one test each.

use crate::config::Config;
use crate::line::{KeepAliveReply, WaitReply};
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
    assert_eq!(call(&config, &mut data, 2).wait(B), refused(0));
    assert_eq!(data.line[0].alive_until, Some(2 + config.keep));
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
fn a_keep_alive_refreshes_its_entry_and_joins_nothing() {
    let config = Config::line();
    let mut data = Data::empty(&config);
    let absent = call(&config, &mut data, 1).keep_alive(B);
    assert_eq!(
        absent,
        KeepAliveReply {
            rank: None,
            free: true
        }
    );
    assert!(data.line.is_empty());
    call(&config, &mut data, 1).acquire(A);
    call(&config, &mut data, 1).wait(B);
    let kept = call(&config, &mut data, 2).keep_alive(B);
    assert_eq!(
        kept,
        KeepAliveReply {
            rank: Some(0),
            free: false
        }
    );
    assert_eq!(data.line[0].alive_until, Some(2 + config.keep));
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
    let reply = KeepAliveReply {
        rank: Some(0),
        free: false,
    };
    assert_eq!(
        (keep.sent, keep.answer),
        (LineSent::KeepAlive, LineAnswer::KeepAlive(reply))
    );
    assert_eq!(model.line_step(&state, Action::Renew(2)), None);
}
