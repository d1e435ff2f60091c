//! The checker on hand-written histories: each property kept, and each broken.

use super::*;

fn s(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn facts() -> Facts {
    Facts {
        permits: vec![1, 2],
        kill: vec![true, false],
        ttl: s(3000),
        command_timeout: s(200),
        renew_every: s(1000),
    }
}

fn ev(ms: u64, what: What) -> Event {
    Event { at: s(ms), what }
}

fn started(
    ms: u64,
    worker: WorkerId,
    client: usize,
    resource: usize,
    token: u64,
    stop_by: u64,
) -> Event {
    ev(
        ms,
        What::Started {
            worker,
            client,
            resource,
            slot: 0,
            token,
            stop_by: s(stop_by),
        },
    )
}

fn ended(ms: u64, worker: WorkerId) -> Event {
    ev(ms, What::Ended { worker })
}

fn told(ms: u64, worker: WorkerId, reason: CancelReason, stop_by: u64) -> Event {
    ev(
        ms,
        What::Told {
            worker,
            reason,
            stop_by: s(stop_by),
        },
    )
}

fn fault(ms: u64, client: Option<usize>) -> Event {
    ev(
        ms,
        What::Fault {
            client,
            fault: "LoseReply".into(),
        },
    )
}

#[test]
fn handover_after_an_end_is_kept() {
    let h = [
        started(0, 1, 0, 0, 1, 2900),
        ended(500, 1),
        started(600, 2, 1, 0, 2, 3500),
        ended(700, 2),
    ];
    assert_eq!(check(&h, &facts()), Ok(()));
}

#[test]
fn two_holders_of_one_permit_break_it() {
    let h = [started(0, 1, 0, 0, 1, 2900), started(600, 2, 1, 0, 2, 3500)];
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::TooMany { resource: 0, .. })
    ));
}

#[test]
fn two_holders_of_two_permits_are_kept_and_three_break_it() {
    let two = [started(0, 1, 1, 1, 1, 2900), started(10, 2, 1, 1, 2, 2900)];
    assert_eq!(check(&two, &facts()), Ok(()));
    let three = [
        started(0, 1, 1, 1, 1, 2900),
        started(10, 2, 1, 1, 2, 2900),
        started(20, 3, 1, 1, 3, 2900),
    ];
    assert!(matches!(
        check(&three, &facts()),
        Err(Violation::TooMany { resource: 1, .. })
    ));
}

#[test]
fn a_holder_past_its_validity_does_not_count() {
    // Client 1 runs NotifyOnly: told, it may run past its validity.
    let h = [
        fault(100, Some(1)),
        started(0, 1, 1, 0, 1, 2900),
        told(2700, 1, CancelReason::RenewalUnconfirmed, 2900),
        started(3000, 2, 0, 0, 2, 6000),
        ended(3100, 1),
        ended(3200, 2),
    ];
    let mut sorted = h.to_vec();
    sorted.sort_by_key(|e| e.at);
    assert_eq!(check(&sorted, &facts()), Ok(()));
}

#[test]
fn a_tell_at_validity_end_is_late() {
    let h = [
        started(0, 1, 0, 0, 1, 2900),
        fault(100, None),
        told(2900, 1, CancelReason::RenewalUnconfirmed, 2900),
        ended(2900, 1),
    ];
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::ToldLate { worker: 1, .. })
    ));
}

#[test]
fn running_past_validity_untold_breaks_it() {
    let h = [started(0, 1, 0, 0, 1, 2900), ended(3000, 1)];
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::Untold { worker: 1, .. })
    ));
    // At the history's end too.
    let h = [started(0, 1, 0, 0, 1, 2900), ev(5000, What::OutageOver)];
    assert!(check(&h, &facts()).is_err());
}

#[test]
fn a_killed_worker_must_end_by_its_validity() {
    let h = [
        fault(100, Some(0)),
        started(0, 1, 0, 0, 1, 2900),
        told(2700, 1, CancelReason::Unknown, 2900),
        ended(2950, 1),
    ];
    let mut h = h.to_vec();
    h.sort_by_key(|e| e.at);
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::NotStopped { worker: 1, .. })
    ));
}

#[test]
fn a_cancellation_without_a_fault_or_drain_is_wrong() {
    let h = [
        started(0, 1, 0, 0, 1, 2900),
        told(1000, 1, CancelReason::Unknown, 2900),
        ended(1000, 1),
    ];
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::WrongReason { .. })
    ));
    // A fault on another client explains nothing either.
    let h = [
        started(0, 1, 0, 0, 1, 2900),
        fault(500, Some(1)),
        told(1000, 1, CancelReason::Unknown, 2900),
        ended(1000, 1),
    ];
    assert!(check(&h, &facts()).is_err());
    let h = [
        started(0, 1, 0, 0, 1, 2900),
        ev(900, What::DrainBegan { client: 0 }),
        told(1000, 1, CancelReason::Shutdown, 2900),
        ended(1000, 1),
    ];
    assert_eq!(check(&h, &facts()), Ok(()));
}

#[test]
fn a_repeated_token_breaks_it() {
    let h = [
        started(0, 1, 0, 0, 5, 2900),
        ended(10, 1),
        started(20, 2, 1, 0, 5, 2900),
        ended(30, 2),
    ];
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::TokenNotIncreasing { token: 5, .. })
    ));
}

#[test]
fn a_lease_left_after_the_final_drain_breaks_it() {
    let h = [ev(
        10,
        What::DrainEnded {
            client: 0,
            held: 1,
            keys_left: Some(1),
        },
    )];
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::LeftAfterDrain { .. })
    ));
}

#[test]
fn no_leader_within_a_renewal_of_an_outage_s_end_breaks_it() {
    let late = [
        ev(10_000, What::OutageOver),
        started(11_500, 1, 0, 0, 1, 14_000),
        ended(11_600, 1),
    ];
    assert!(matches!(
        check(&late, &facts()),
        Err(Violation::NoLeader { .. })
    ));
    let soon = [
        ev(10_000, What::OutageOver),
        started(10_300, 1, 0, 0, 1, 13_000),
        ended(10_400, 1),
    ];
    assert_eq!(check(&soon, &facts()), Ok(()));
}

#[test]
fn a_holder_whose_key_was_deleted_does_not_count() {
    let h = [
        started(0, 1, 0, 0, 1, 2900),
        ev(500, What::Deleted { key: Some((0, 0)) }),
        started(600, 2, 1, 0, 2, 3500),
        told(
            1000,
            1,
            CancelReason::Lost(leasehold::LostReason::Absent),
            2900,
        ),
        ended(1000, 1),
        ended(1100, 2),
    ];
    assert_eq!(check(&h, &facts()), Ok(()));
}

#[test]
fn an_observer_going_back_to_an_older_token_breaks_it() {
    let observed =
        |ms: u64, client: usize, token: Option<u64>| ev(ms, What::Observed { client, token });
    // Each observer on its own; nobody holding between two holders is no going back.
    let kept = [
        observed(0, 0, Some(3)),
        observed(10, 1, Some(2)),
        observed(20, 0, None),
        observed(30, 0, Some(4)),
        observed(40, 0, Some(4)),
    ];
    assert_eq!(check(&kept, &facts()), Ok(()));
    let back = [
        observed(0, 0, Some(3)),
        observed(10, 0, None),
        observed(20, 0, Some(2)),
    ];
    assert_eq!(
        check(&back, &facts()),
        Err(Violation::ObservedGoingBack {
            client: 0,
            token: 2,
            previous: 3
        })
    );
}

fn paused(ms: u64, client: usize) -> Event {
    ev(ms, What::Paused { client })
}

fn resumed(ms: u64, client: usize) -> Event {
    ev(ms, What::Resumed { client })
}

/// Client 1 (NotifyOnly) holds resource 0 until 2.9 s and is paused from 1 s to 5 s; client
/// 0 takes the resource at 3 s. Then `rest`, in time order.
fn paused_holder(rest: &[Event]) -> Vec<Event> {
    let mut h = vec![
        started(0, 1, 1, 0, 1, 2900),
        paused(1000, 1),
        started(3000, 2, 0, 0, 2, 6000),
        resumed(5000, 1),
    ];
    h.extend_from_slice(rest);
    h.sort_by_key(|e| e.at);
    h
}

#[test]
fn a_paused_holder_told_at_the_resume_is_kept() {
    // Past its local validity while paused: it does not count beside the next holder, and
    // the pause explains its reason.
    let h = paused_holder(&[
        told(5000, 1, CancelReason::RenewalUnconfirmed, 2900),
        ended(5200, 1),
    ]);
    assert_eq!(check(&h, &facts()), Ok(()));
    // Or it ends at the resume, before it hears.
    assert_eq!(check(&paused_holder(&[ended(5000, 1)]), &facts()), Ok(()));
}

#[test]
fn a_paused_holder_not_told_at_the_resume_breaks_it() {
    let h = paused_holder(&[ended(5200, 1)]);
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::Untold { worker: 1, .. })
    ));
    // A millisecond after the resume is too late: it ran on, untold.
    let h = paused_holder(&[
        told(5001, 1, CancelReason::RenewalUnconfirmed, 2900),
        ended(5200, 1),
    ]);
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::Untold { worker: 1, .. })
    ));
}

#[test]
fn a_paused_holder_under_kill_stops_at_the_resume() {
    // Client 0 (Kill) holds resource 1's one slot in this history and is paused past its
    // validity's end.
    let run = |end: u64| {
        let mut h = vec![
            started(0, 1, 0, 1, 1, 2900),
            paused(1000, 0),
            resumed(5000, 0),
            told(5000, 1, CancelReason::RenewalUnconfirmed, 2900),
            ended(end, 1),
        ];
        h.sort_by_key(|e| e.at);
        check(&h, &facts())
    };
    assert_eq!(run(5000), Ok(()));
    assert!(matches!(
        run(5001),
        Err(Violation::NotStopped { worker: 1, .. })
    ));
}

#[test]
fn a_paused_holder_still_valid_counts() {
    // The pause is no excuse while its validity lasts: the store granted too early.
    let mut h = vec![
        started(0, 1, 1, 0, 1, 4000),
        paused(1000, 1),
        started(3000, 2, 0, 0, 2, 6000),
        resumed(5000, 1),
    ];
    h.sort_by_key(|e| e.at);
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::TooMany { resource: 0, .. })
    ));
}

#[test]
fn a_holder_made_valid_again_after_its_validity_breaks_it() {
    let h = paused_holder(&[ev(
        5000,
        What::Validity {
            worker: 1,
            stop_by: s(7990),
        },
    )]);
    assert!(matches!(
        check(&h, &facts()),
        Err(Violation::Revived { worker: 1, .. })
    ));
}

#[test]
fn a_drain_paused_past_its_grace_may_leave_a_lease() {
    let drain = |pause: bool| {
        let mut h = vec![
            ev(500, What::DrainBegan { client: 1 }),
            ev(
                5000,
                What::DrainEnded {
                    client: 1,
                    held: 1,
                    keys_left: None,
                },
            ),
        ];
        if pause {
            h.extend([paused(1000, 1), resumed(5000, 1)]);
        }
        h.sort_by_key(|e| e.at);
        check(&h, &facts())
    };
    assert_eq!(drain(true), Ok(()));
    assert!(matches!(
        drain(false),
        Err(Violation::LeftAfterDrain { .. })
    ));
}
