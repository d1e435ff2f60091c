//! The watchdog as a table: each row drives a fresh [`Watchdog`] (confirmed until
//! t0 + 3 s, renewing every 1 s, safety margin 200 ms, its renewal grid starting at t0)
//! through some steps, checking each step's output, then the timer it asks for. Times are
//! milliseconds after t0. A renewal's end counts only while one is in flight: a row starts
//! it with the `Timeout` that asks for it.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    Action, CancelPolicy, CancelReason, Cancellation, Deadline, LeaseState, RENEWAL_GRID,
    RenewOutcome, Renewal, Watchdog, WorkerView, on_renewal_grid,
};
use crate::backend::{FailureDetail, FailureKind};
use crate::lease::LostReason;

const MS: Duration = Duration::from_millis(1);
const EVERY: Duration = Duration::from_secs(1);
const MARGIN: Duration = Duration::from_millis(200);
const VALID: u64 = 3000;

const CHILD: WorkerView = WorkerView {
    attached: false,
    alive: true,
};
const GONE: WorkerView = WorkerView {
    attached: false,
    alive: false,
};
const ATTACHED: WorkerView = WorkerView {
    attached: true,
    alive: true,
};
const LOST: CancelReason = CancelReason::Lost(LostReason::Absent);

/// What an action is, for the table (the timer's instants and the cancellation's details
/// are checked apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Did {
    Renew,
    Confirmed,
    Cancel(CancelReason),
    KillWorker,
    FinishAttached,
}

fn did(actions: &[Action]) -> Vec<Did> {
    actions
        .iter()
        .map(|action| match action {
            Action::Renew { .. } => Did::Renew,
            Action::Confirmed => Did::Confirmed,
            Action::Cancel(c) => Did::Cancel(c.reason),
            Action::KillWorker => Did::KillWorker,
            Action::FinishAttached => Did::FinishAttached,
        })
        .collect()
}

/// How a renewal ended, for the table.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Lost(LostReason),
    Indeterminate,
    Refused(LeaseState),
}

/// One thing that happens, with what it must answer.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A timer fired at this time; these actions.
    Timeout(u64, &'static [Did]),
    /// A timer fired at this time, the renewal in flight having maybe reached Redis; these
    /// actions.
    TimeoutReached(u64, &'static [Did]),
    /// The renewal in flight was confirmed until the second time, seen at the first.
    Renewed(u64, u64),
    /// The renewal in flight was confirmed until the first time, seen at the second (late,
    /// after a cancellation or validity's end); these actions.
    RenewedLate(u64, u64, &'static [Did]),
    /// The renewal in flight provably never reached Redis, seen at the second time (the
    /// first is when it was asked for, for the reader).
    Unavailable(u64, u64),
    /// The renewal in flight ended so, seen at this time; these actions.
    Ended(Ended, u64, &'static [Did]),
    /// A cancellation for this reason at this time; these actions (none if one was sent).
    Cancel(CancelReason, u64, &'static [Did]),
    /// Whether the worker must be stopped now.
    KillWorker(bool),
    /// A drain's deadline passed at this time; these actions.
    DrainDeadline(u64, &'static [Did]),
    /// The release begins.
    Finish,
}

/// The timer a row ends with: its kind and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    None,
    Renew(u64),
    /// Milliseconds after t0, or before it when negative.
    Cancel(i64),
    KillWorker(u64),
}

struct Row {
    name: &'static str,
    policy: CancelPolicy,
    worker: WorkerView,
    valid: u64,
    steps: &'static [Step],
    timer: Timer,
}

use Step::{
    Cancel, DrainDeadline, Ended as End, Finish, KillWorker, Renewed, RenewedLate, Timeout,
    TimeoutReached, Unavailable,
};

mod rows;
use rows::ROWS;

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX)
}

fn signed(t0: Instant, ms: i64) -> Instant {
    let magnitude = MS * u32::try_from(ms.unsigned_abs()).unwrap_or(u32::MAX);
    if ms < 0 {
        t0 - magnitude
    } else {
        t0 + magnitude
    }
}

/// A renewal confirmed until `until` (ms after t0).
fn confirmed(t0: Instant, until: u64) -> Renewal {
    Renewal::Confirmed {
        valid_until: at(t0, until),
    }
}

fn detail() -> FailureDetail {
    FailureDetail::new(FailureKind::Timeout, "test")
}

fn outcome(ended: Ended) -> Renewal {
    Renewal::Unconfirmed(match ended {
        Ended::Lost(reason) => RenewOutcome::Lost { reason },
        Ended::Indeterminate => RenewOutcome::Indeterminate { detail: detail() },
        Ended::Refused(state) => RenewOutcome::Refused { state },
    })
}

fn unavailable(remaining: Duration) -> Renewal {
    Renewal::Unconfirmed(RenewOutcome::Unavailable {
        detail: detail(),
        remaining,
    })
}

fn watchdog(t0: Instant, valid: u64, policy: CancelPolicy) -> Watchdog {
    Watchdog::new(at(t0, valid), t0, EVERY, MARGIN, policy, t0)
}

/// Runs `step` on `dog`, checking what it answers.
fn run(dog: &mut Watchdog, t0: Instant, row: &Row, step: Step) {
    let what = format!("{}: {step:?}", row.name);
    let worker = row.worker;
    match step {
        Timeout(ms, expected) => {
            assert_eq!(
                did(&dog.handle_timeout(at(t0, ms), worker, false)),
                expected,
                "{what}"
            );
        }
        TimeoutReached(ms, expected) => {
            assert_eq!(
                did(&dog.handle_timeout(at(t0, ms), worker, true)),
                expected,
                "{what}"
            );
        }
        Renewed(seen, until) => {
            let actions = dog.handle_renewal(&confirmed(t0, until), at(t0, seen), worker);
            assert_eq!(did(&actions), [Did::Confirmed], "{what}");
        }
        RenewedLate(until, seen, expected) => {
            let valid_until = dog.valid_until();
            let actions = dog.handle_renewal(&confirmed(t0, until), at(t0, seen), worker);
            assert_eq!(did(&actions), expected, "{what}");
            // Never taken: the worker's end stays where it was told it is.
            assert_eq!(dog.valid_until(), valid_until, "{what}: validity moved");
        }
        Unavailable(_asked, ms) => {
            let now = at(t0, ms);
            let left = dog.valid_until().saturating_duration_since(now);
            let actions = dog.handle_renewal(&unavailable(left), now, worker);
            assert_eq!(did(&actions), [], "{what}");
        }
        End(ended, ms, expected) => {
            let actions = dog.handle_renewal(&outcome(ended), at(t0, ms), worker);
            assert_eq!(did(&actions), expected, "{what}");
        }
        Cancel(reason, ms, expected) => {
            assert_eq!(
                did(&dog.handle_cancel(reason, at(t0, ms), worker)),
                expected,
                "{what}"
            );
        }
        KillWorker(expected) => assert_eq!(dog.kill_worker(worker), expected, "{what}"),
        DrainDeadline(ms, expected) => {
            let actions = dog.handle_drain_deadline(at(t0, ms), worker);
            assert_eq!(did(&actions), expected, "{what}");
        }
        Finish => dog.finish(),
    }
}

#[test]
fn every_row_of_the_watchdog_table() {
    let t0 = Instant::now() + Duration::from_secs(1);
    for row in ROWS {
        let mut dog = watchdog(t0, row.valid, row.policy);
        for step in row.steps {
            run(&mut dog, t0, row, *step);
        }
        let deadline = dog.poll_timeout(row.worker);
        let expected = match row.timer {
            Timer::None => None,
            Timer::Renew(ms) => Some(Deadline::Renew(at(t0, ms))),
            Timer::Cancel(ms) => Some(Deadline::Cancel(signed(t0, ms))),
            Timer::KillWorker(ms) => Some(Deadline::KillWorker(at(t0, ms))),
        };
        assert_eq!(deadline, expected, "{}: timer", row.name);
    }
}

#[test]
fn a_renewal_is_bounded_by_the_validity_left_before_the_margin() {
    let t0 = Instant::now();
    let renew_at = |ms| {
        let mut dog = watchdog(t0, VALID, CancelPolicy::Kill);
        dog.handle_timeout(at(t0, ms), CHILD, false).to_vec()
    };
    // 1 s of validity left: 800 ms to renew in.
    assert_eq!(
        renew_at(2000),
        [Action::Renew {
            until: at(t0, 2000) + Duration::from_millis(800)
        }]
    );
    // No more than the margin left, or nothing: no renewal, the cancellation.
    for ms in [VALID - 200, VALID] {
        let actions = renew_at(ms);
        assert!(!did(&actions).contains(&Did::Renew), "{ms}: {actions:?}");
        assert_eq!(
            did(&actions)[0],
            Did::Cancel(CancelReason::RenewalUnconfirmed)
        );
    }
}

#[test]
fn the_cancellation_delay_counts_from_the_first_renewal_that_did_not_confirm() {
    let t0 = Instant::now();
    let mut dog = watchdog(t0, VALID, CancelPolicy::Kill);
    assert_eq!(dog.failing_for(at(t0, 1500)), None);
    // Unavailable at 1000, asked again half-way to the cancellation deadline (1900).
    for ms in [1000, 1900] {
        let now = at(t0, ms);
        assert_eq!(
            did(&dog.handle_timeout(now, CHILD, false)),
            [Did::Renew],
            "{ms}"
        );
        dog.handle_renewal(&unavailable(MS * 1000), now, CHILD);
    }
    assert_eq!(dog.failing_for(at(t0, 2000)), Some(MS * 1000));
    // Then half-way again (2350), confirmed.
    assert_eq!(
        did(&dog.handle_timeout(at(t0, 2350), CHILD, false)),
        [Did::Renew]
    );
    dog.handle_renewal(&confirmed(t0, 5350), at(t0, 2400), CHILD);
    assert_eq!(dog.failing_for(at(t0, 2500)), None);
    assert_eq!(dog.renewals(), 1);
    let cancellation = dog
        .handle_cancel(CancelReason::Unknown, at(t0, 5150), CHILD)
        .to_vec();
    assert_eq!(
        cancellation,
        [Action::Cancel(Cancellation {
            reason: CancelReason::Unknown,
            remaining: MS * 200,
            stop_by: at(t0, 5350),
            unconfirmed_for: None,
        })]
    );
}

#[test]
fn a_cancellation_after_failed_renewals_says_since_when() {
    let t0 = Instant::now();
    let mut dog = watchdog(t0, VALID, CancelPolicy::Kill);
    dog.handle_timeout(at(t0, 1000), CHILD, false);
    let lost = Renewal::Unconfirmed(RenewOutcome::Lost {
        reason: LostReason::NotOwner,
    });
    let actions = dog.handle_renewal(&lost, at(t0, 1250), CHILD).to_vec();
    assert_eq!(
        actions,
        [Action::Cancel(Cancellation {
            reason: CancelReason::Lost(LostReason::NotOwner),
            remaining: MS * 1750,
            stop_by: at(t0, VALID),
            unconfirmed_for: Some(MS * 250),
        })]
    );
}

/// A renewal still in flight at the cancellation deadline is one that did not confirm: the
/// cancellation's delay counts from when it was asked for.
#[test]
fn a_renewal_in_flight_at_the_deadline_counts_from_when_it_was_asked_for() {
    let t0 = Instant::now();
    let mut dog = watchdog(t0, VALID, CancelPolicy::Kill);
    dog.handle_timeout(at(t0, 1000), CHILD, false);
    assert_eq!(
        dog.handle_timeout(at(t0, 2800), CHILD, true).to_vec(),
        [Action::Cancel(Cancellation {
            reason: CancelReason::Unknown,
            remaining: MS * 200,
            stop_by: at(t0, VALID),
            unconfirmed_for: Some(MS * 1800),
        })]
    );
}

/// A renewal confirmed after the watchdog gave up on it moves nothing: the worker keeps the
/// end it was told, and is stopped then.
#[test]
fn a_confirmation_after_the_cancellation_does_not_move_the_worker_s_end() {
    let t0 = Instant::now();
    let mut dog = watchdog(t0, VALID, CancelPolicy::Kill);
    dog.handle_timeout(at(t0, 1000), CHILD, false);
    dog.handle_renewal(&outcome(Ended::Indeterminate), at(t0, 1100), CHILD);
    // A stray end (none in flight) and a late confirmation: nothing.
    assert_eq!(
        dog.handle_renewal(&confirmed(t0, 9000), at(t0, 1200), CHILD)
            .to_vec(),
        []
    );
    assert_eq!(dog.valid_until(), at(t0, VALID));
    assert_eq!(
        dog.poll_timeout(CHILD),
        Some(Deadline::KillWorker(at(t0, VALID)))
    );
}

#[test]
fn renewals_due_within_one_grid_spacing_share_an_instant_no_later_than_due() {
    let now = Instant::now();
    // An origin off the instants the renewals fall due.
    let origin = now - MS * 37;
    let every = Duration::from_secs(10);
    let dues: Vec<Instant> = (0..100).map(|i| now + every + MS * i / 10).collect();
    let aligned: Vec<Instant> = dues
        .iter()
        .map(|&due| on_renewal_grid(due, now, every, origin))
        .collect();
    for (due, at) in dues.iter().zip(&aligned) {
        assert!(at <= due && *due - *at < RENEWAL_GRID, "{at:?} for {due:?}");
        assert!(*at > now);
    }
    let mut distinct = aligned.clone();
    distinct.dedup();
    // 100 renewals due over 10 ms land on at most two grid points.
    assert!(distinct.len() <= 2, "{} instants", distinct.len());
}

#[test]
fn a_short_cadence_gets_a_finer_grid_and_nothing_moves_into_the_past() {
    let now = Instant::now();
    let origin = now - MS * 3;
    let every = Duration::from_millis(40);
    for i in 0..50 {
        let due = now + every + MS * i / 7;
        let at = on_renewal_grid(due, now, every, origin);
        assert!(at <= due && due - at < every / 8, "{at:?} for {due:?}");
    }
    // Due within a spacing of now: never moved to now or before it.
    for i in 1..20 {
        let due = now + MS * i / 4;
        let at = on_renewal_grid(due, now, every, origin);
        assert!(at <= due && (at > now || at == due), "{at:?} for {due:?}");
    }
}

#[test]
fn the_grid_counts_from_its_origin() {
    let origin = Instant::now() + Duration::from_secs(1);
    let every = Duration::from_secs(10);
    let now = origin + MS * 50;
    // Spacing 100 ms from the origin: due at 1,234 ms, renewed at 1,200.
    assert_eq!(
        on_renewal_grid(origin + MS * 1234, now, every, origin),
        origin + MS * 1200
    );
    // A cadence of 400 ms: spacing 50 ms.
    let short = Duration::from_millis(400);
    assert_eq!(
        on_renewal_grid(origin + MS * 449, now, short, origin),
        origin + MS * 400
    );
    // The grid point is not after `now`: due as it is; due before the origin too.
    assert_eq!(
        on_renewal_grid(origin + MS * 99, now, every, origin),
        origin + MS * 99
    );
    assert_eq!(
        on_renewal_grid(origin - MS * 10, origin - MS * 20, every, origin),
        origin - MS * 10
    );
}
