//! The watchdog as a table: each row drives a fresh [`Watchdog`] (confirmed until
//! t0 + 3 s, renewing every 1 s, safety margin 200 ms, its renewal grid starting at t0)
//! through some steps, checking each step's output, then the timer it asks for. Times are
//! milliseconds after t0.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    Action, CancelPolicy, CancelReason, Cancellation, Deadline, LeaseState, RENEWAL_GRID,
    RenewOutcome, ValidityBudget, Watchdog, WorkerView, on_renewal_grid,
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
    /// A renewal sent at the first time was confirmed until the second.
    Renewed(u64, u64),
    /// A renewal sent at the first time provably never reached Redis (seen at the second).
    Unavailable(u64, u64),
    /// A renewal sent at this time ended so, seen at once; these actions.
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
    Cancel, DrainDeadline, Ended as End, Finish, KillWorker, Renewed, Timeout, Unavailable,
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

/// A budget confirmed for a renewal sent at `sent`, valid until `until` (ms after t0).
fn budget(t0: Instant, sent: u64, until: u64) -> ValidityBudget {
    ValidityBudget::renewed(
        at(t0, sent),
        MS * u32::try_from(until - sent).unwrap_or(0),
        Duration::ZERO,
    )
}

fn detail() -> FailureDetail {
    FailureDetail::new(FailureKind::Timeout, "test")
}

fn outcome(ended: Ended) -> RenewOutcome {
    match ended {
        Ended::Lost(reason) => RenewOutcome::Lost { reason },
        Ended::Indeterminate => RenewOutcome::Indeterminate { detail: detail() },
        Ended::Refused(state) => RenewOutcome::Refused { state },
    }
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
                did(&dog.handle_timeout(at(t0, ms), worker)),
                expected,
                "{what}"
            );
        }
        Renewed(sent, until) => {
            let renewed = RenewOutcome::Renewed {
                remaining: MS * u32::try_from(until - sent).unwrap_or(0),
            };
            let (confirmed, sent) = (budget(t0, sent, until), at(t0, sent));
            let actions = dog.handle_renew_outcome(&renewed, confirmed, sent, sent, worker);
            assert_eq!(did(&actions), [Did::Confirmed], "{what}");
        }
        Unavailable(sent, ms) => {
            let unavailable = RenewOutcome::Unavailable {
                detail: detail(),
                remaining: dog.valid_until().saturating_duration_since(at(t0, ms)),
            };
            // The handle's budget is the old one: it is not taken.
            let stale = budget(t0, 0, 9000);
            let actions =
                dog.handle_renew_outcome(&unavailable, stale, at(t0, sent), at(t0, ms), worker);
            assert_eq!(did(&actions), [], "{what}");
        }
        End(ended, ms, expected) => {
            let (stale, now) = (budget(t0, 0, 9000), at(t0, ms));
            let actions = dog.handle_renew_outcome(&outcome(ended), stale, now, now, worker);
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
        dog.handle_timeout(at(t0, ms), CHILD)
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
    let unavailable = RenewOutcome::Unavailable {
        detail: detail(),
        remaining: MS * 2000,
    };
    let stale = budget(t0, 0, VALID);
    for ms in [1000, 1100] {
        let now = at(t0, ms);
        dog.handle_renew_outcome(&unavailable, stale, now, now, CHILD);
    }
    assert_eq!(dog.failing_for(at(t0, 1500)), Some(MS * 500));
    let renewed = RenewOutcome::Renewed {
        remaining: MS * 3000,
    };
    let (sent, confirmed) = (at(t0, 1200), budget(t0, 1200, 4200));
    dog.handle_renew_outcome(&renewed, confirmed, sent, sent, CHILD);
    assert_eq!(dog.failing_for(at(t0, 1500)), None);
    assert_eq!(dog.renewals(), 1);
    let cancellation = dog.handle_cancel(CancelReason::Unknown, at(t0, 4000), CHILD);
    assert_eq!(
        cancellation,
        [Action::Cancel(Cancellation {
            reason: CancelReason::Unknown,
            remaining: MS * 200,
            stop_by: at(t0, 4200),
            unconfirmed_for: None,
        })]
    );
}

#[test]
fn a_cancellation_after_failed_renewals_says_since_when() {
    let t0 = Instant::now();
    let mut dog = watchdog(t0, VALID, CancelPolicy::Kill);
    let lost = RenewOutcome::Lost {
        reason: LostReason::NotOwner,
    };
    let actions = dog.handle_renew_outcome(
        &lost,
        budget(t0, 0, 9000),
        at(t0, 1000),
        at(t0, 1250),
        CHILD,
    );
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
