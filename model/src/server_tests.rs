//! One test per branch of the README's table: each script function answers as its Lua
//! branch does.

use crate::config::{Bugs, Config};
use crate::server::{AcquireReply, Attempt, Call, Data, InspectReply, Reply};

const A0: Attempt = Attempt { client: 0, op: 0 };
const A1: Attempt = Attempt { client: 0, op: 1 };
const B0: Attempt = Attempt { client: 1, op: 0 };

fn call<'a>(config: &'a Config, data: &'a mut Data, now: u8) -> Call<'a> {
    Call { config, data, now }
}

#[test]
fn acquire_branches_of_a_plain_lease() {
    let config = Config::plain();
    let mut data = Data::empty(&config);
    let first = call(&config, &mut data, 5).acquire(A0);
    assert_eq!(first, AcquireReply::Acquired { token: 5, slot: 0 });
    let replay = call(&config, &mut data, 6).acquire(A0);
    let (left, token, slot) = (2, 5, 0);
    assert_eq!(replay, AcquireReply::Replayed { left, token, slot });
    assert_eq!(
        call(&config, &mut data, 6).acquire(A1),
        AcquireReply::Conflict
    );
    assert_eq!(
        call(&config, &mut data, 6).acquire(B0),
        AcquireReply::Contended
    );
}

#[test]
fn tokens_take_the_counter_when_the_clock_is_behind_it() {
    let config = Config::plain();
    let mut data = Data::empty(&config);
    data.fence = Some(9);
    let reply = call(&config, &mut data, 3).acquire(B0);
    assert_eq!(reply, AcquireReply::Acquired { token: 10, slot: 0 });
    let bugs = Bugs {
        no_time_floor: true,
        ..Bugs::default()
    };
    let config = Config::plain().with_bugs(bugs);
    let mut data = Data::empty(&config);
    let reply = call(&config, &mut data, 3).acquire(B0);
    assert_eq!(reply, AcquireReply::Acquired { token: 1, slot: 0 });
}

#[test]
fn a_lock_delay_refuses_everyone_until_released() {
    let config = Config::lock_delay();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A0);
    // ttl 3, delay 2: the lease ends at 4, the key at 6.
    assert_eq!(
        call(&config, &mut data, 4).acquire(A0),
        AcquireReply::Delayed
    );
    assert_eq!(call(&config, &mut data, 4).renew(0, A0), Reply::Absent);
    let inspected = call(&config, &mut data, 5).inspect(0, B0);
    assert_eq!(inspected, InspectReply::Delayed(1));
    assert_eq!(call(&config, &mut data, 5).release(0, B0), Reply::NotOwner);
    assert_eq!(call(&config, &mut data, 5).release(0, A0), Reply::Done);
    assert!(matches!(
        call(&config, &mut data, 5).acquire(B0),
        AcquireReply::Acquired { .. }
    ));
}

#[test]
fn renew_and_release_check_the_whole_attempt() {
    let config = Config::plain();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A0);
    assert_eq!(call(&config, &mut data, 2).renew(0, A1), Reply::NotOwner);
    assert_eq!(call(&config, &mut data, 2).renew(0, A0), Reply::Done);
    assert_eq!(data.slots[0].map(|k| k.expires), Some(5));
    assert_eq!(call(&config, &mut data, 2).release(0, A1), Reply::NotOwner);
    assert_eq!(call(&config, &mut data, 2).release(0, A0), Reply::Done);
    assert_eq!(call(&config, &mut data, 2).release(0, A0), Reply::Absent);
    assert_eq!(call(&config, &mut data, 2).renew(0, A0), Reply::Absent);
}

#[test]
fn native_commands_fall_back_to_the_script_for_this_attempts_other_value() {
    let config = Config::plain();
    let mut data = Data::empty(&config);
    call(&config, &mut data, 1).acquire(A0);
    // The client knows token 1; a stale token 7 is this attempt's other value.
    assert_eq!(
        call(&config, &mut data, 2).renew_native(0, A0, 7),
        Reply::Done
    );
    assert_eq!(
        call(&config, &mut data, 2).renew_native(0, B0, 1),
        Reply::NotOwner
    );
    assert_eq!(
        call(&config, &mut data, 2).release_native(0, B0, 1),
        Reply::NotOwner
    );
    assert_eq!(
        call(&config, &mut data, 2).release_native(0, A0, 1),
        Reply::Done
    );
    assert_eq!(
        call(&config, &mut data, 2).renew_native(0, A0, 1),
        Reply::Absent
    );
}

#[test]
fn the_slot_scan_replays_then_refuses_a_conflict_then_takes_the_first_free() {
    let config = Config::counted();
    let mut data = Data::empty(&config);
    let c0 = Attempt { client: 2, op: 0 };
    assert_eq!(
        call(&config, &mut data, 1).acquire(B0),
        AcquireReply::Acquired { token: 1, slot: 0 }
    );
    assert_eq!(
        call(&config, &mut data, 1).acquire(A0),
        AcquireReply::Acquired { token: 2, slot: 1 }
    );
    let replay = call(&config, &mut data, 2).acquire(A0);
    let (left, token, slot) = (2, 2, 1);
    assert_eq!(replay, AcquireReply::Replayed { left, token, slot });
    assert_eq!(
        call(&config, &mut data, 2).acquire(A1),
        AcquireReply::Conflict
    );
    assert_eq!(
        call(&config, &mut data, 2).acquire(c0),
        AcquireReply::Contended
    );
}
