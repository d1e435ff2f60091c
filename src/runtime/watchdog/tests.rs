//! The watchdog as a table: each row drives a fresh [`Watchdog`] (confirmed until
//! t0 + 3 s, renewing every 1 s, safety margin 200 ms) through some steps, checking each
//! step's output, then the timer it asks for. Times are milliseconds after t0.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
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

/// One thing that happens, with what it must answer.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A timer fired at this time; these actions.
    Timeout(u64, &'static [Action]),
    /// A renewal sent at the first time was confirmed until the second.
    Renewed(u64, u64),
    /// A renewal sent at this time did not confirm.
    Failed(u64),
    /// … and provably never reached Redis (seen at this time).
    Unavailable(u64),
    /// A cancellation for this reason at this time; whether it is the first, and whether
    /// the worker must be stopped at once.
    Cancel(CancelReason, u64, Option<bool>),
    /// Whether the worker must be stopped now.
    StopWorker(bool),
    /// A drain's deadline passed; these actions.
    DrainDeadline(&'static [Action]),
    /// The release begins.
    Finish,
}

/// The timer a row ends with: its kind and time, a renewal within one grid spacing before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    None,
    Renew(u64),
    /// Milliseconds after t0, or before it when negative.
    Cancel(i64),
    StopWorker(u64),
}

struct Row {
    name: &'static str,
    policy: CancelPolicy,
    worker: WorkerView,
    valid: u64,
    steps: &'static [Step],
    timer: Timer,
}

use Step::{Cancel, DrainDeadline, Failed, Finish, Renewed, StopWorker, Timeout, Unavailable};

const ROWS: &[Row] = &[
    Row {
        name: "confirmed: renew after the cadence",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[],
        timer: Timer::Renew(1000),
    },
    Row {
        name: "a short budget (a replay) renews half-way to the cancellation deadline",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: 1000,
        steps: &[],
        timer: Timer::Renew(400),
    },
    Row {
        name: "no budget left: the cancellation deadline comes first",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: 150,
        steps: &[Timeout(
            0,
            &[Action::Cancel(CancelReason::RenewalUnconfirmed)],
        )],
        timer: Timer::Cancel(-50),
    },
    Row {
        name: "a timer fired early does nothing",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Timeout(500, &[])],
        timer: Timer::Renew(1000),
    },
    Row {
        name: "renewal due → renew",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Timeout(1000, &[Action::Renew])],
        timer: Timer::Renew(1000),
    },
    Row {
        name: "renewed → the next one a cadence after its send",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Timeout(1000, &[Action::Renew]), Renewed(1000, 4000)],
        timer: Timer::Renew(2000),
    },
    Row {
        name: "unavailable → try again 100 ms later on the old budget",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Failed(1000), Unavailable(1000)],
        timer: Timer::Renew(1100),
    },
    Row {
        name: "unconfirmed until validity − margin → cancel",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[
            Failed(1000),
            Unavailable(2750),
            Timeout(2800, &[Action::Cancel(CancelReason::RenewalUnconfirmed)]),
        ],
        timer: Timer::Cancel(2800),
    },
    Row {
        name: "cancelled (Kill, child running) → stop it at validity end",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Cancel(LOST, 1000, Some(false))],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "a second cancellation is not sent",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[
            Cancel(LOST, 1000, Some(false)),
            Cancel(CancelReason::Unknown, 1500, None),
        ],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "cancelled: a timer before validity end does nothing",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Cancel(LOST, 1000, Some(false)), Timeout(2999, &[])],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "validity end, child still running → stop it, once",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[
            Cancel(LOST, 1000, Some(false)),
            Timeout(3000, &[Action::StopWorker]),
            Timeout(3001, &[]),
        ],
        timer: Timer::None,
    },
    Row {
        name: "notify-only: the child is never stopped, no timer",
        policy: CancelPolicy::NotifyOnly,
        worker: CHILD,
        valid: VALID,
        steps: &[Cancel(LOST, 1000, Some(false)), Timeout(3000, &[])],
        timer: Timer::None,
    },
    Row {
        name: "cancelled, the worker already stopped: no timer",
        policy: CancelPolicy::Kill,
        worker: GONE,
        valid: VALID,
        steps: &[Cancel(LOST, 1000, Some(false))],
        timer: Timer::None,
    },
    Row {
        name: "attached (Kill): stopped and let go of at validity end",
        policy: CancelPolicy::Kill,
        worker: ATTACHED,
        valid: VALID,
        steps: &[
            Cancel(LOST, 1000, Some(false)),
            Timeout(3000, &[Action::StopWorker, Action::FinishAttached]),
        ],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "attached (notify-only): let go of at validity end, not stopped",
        policy: CancelPolicy::NotifyOnly,
        worker: ATTACHED,
        valid: VALID,
        steps: &[
            Cancel(LOST, 1000, Some(false)),
            Timeout(3000, &[Action::FinishAttached]),
        ],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "a cancellation with no validity left stops the worker at once",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[
            Cancel(LOST, 3000, Some(true)),
            StopWorker(true),
            StopWorker(false),
        ],
        timer: Timer::None,
    },
    Row {
        name: "drained (Kill): the child is stopped at the drain's deadline, once",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[
            Cancel(CancelReason::Shutdown, 1000, Some(false)),
            DrainDeadline(&[Action::StopWorker]),
            DrainDeadline(&[]),
            Timeout(3000, &[]),
        ],
        timer: Timer::None,
    },
    Row {
        name: "drained (Kill): an attached worker is stopped and let go of",
        policy: CancelPolicy::Kill,
        worker: ATTACHED,
        valid: VALID,
        steps: &[
            Cancel(CancelReason::Shutdown, 1000, Some(false)),
            DrainDeadline(&[Action::StopWorker, Action::FinishAttached]),
        ],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "drained (notify-only): nothing at the drain's deadline; validity end as usual",
        policy: CancelPolicy::NotifyOnly,
        worker: ATTACHED,
        valid: VALID,
        steps: &[
            Cancel(CancelReason::Shutdown, 1000, Some(false)),
            DrainDeadline(&[]),
            Timeout(3000, &[Action::FinishAttached]),
        ],
        timer: Timer::StopWorker(3000),
    },
    Row {
        name: "drain deadline before the cancellation, or when finishing: nothing",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[DrainDeadline(&[]), Finish, DrainDeadline(&[])],
        timer: Timer::None,
    },
    Row {
        name: "watching: nothing to stop",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[StopWorker(false)],
        timer: Timer::Renew(1000),
    },
    Row {
        name: "finishing: no timer, no cancellation, nothing on a timer",
        policy: CancelPolicy::Kill,
        worker: CHILD,
        valid: VALID,
        steps: &[Finish, Timeout(3000, &[]), Cancel(LOST, 3000, None)],
        timer: Timer::None,
    },
];

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

#[test]
fn every_row_of_the_watchdog_table() {
    let t0 = Instant::now() + Duration::from_secs(1);
    for row in ROWS {
        let mut dog = Watchdog::new(at(t0, row.valid), t0, EVERY, MARGIN, row.policy);
        for step in row.steps {
            match *step {
                Timeout(ms, expected) => {
                    let actions = dog.on_timeout(at(t0, ms), row.worker);
                    assert_eq!(actions, expected, "{}: {step:?}", row.name);
                }
                Renewed(sent, until) => dog.on_renewed(at(t0, sent), Some(at(t0, until))),
                Failed(ms) => dog.on_renew_failed(at(t0, ms)),
                Unavailable(ms) => dog.on_unavailable(at(t0, ms)),
                Cancel(reason, ms, expected) => {
                    let got = dog.cancel(reason, at(t0, ms)).map(|c| c.stop_now);
                    assert_eq!(got, expected, "{}: {step:?}", row.name);
                }
                StopWorker(expected) => {
                    assert_eq!(dog.stop_worker(row.worker), expected, "{}", row.name);
                }
                DrainDeadline(expected) => {
                    let actions = dog.on_drain_deadline(row.worker);
                    assert_eq!(actions, expected, "{}: {step:?}", row.name);
                }
                Finish => dog.finish(),
            }
        }
        let spacing = RENEWAL_GRID.min(EVERY / 8);
        let deadline = dog.next_deadline(row.worker);
        let ok = match (row.timer, deadline) {
            (Timer::None, None) => true,
            (Timer::Renew(ms), Some(Deadline::Renew(t))) => {
                t <= at(t0, ms) && at(t0, ms) - t < spacing
            }
            (Timer::Cancel(ms), Some(Deadline::Cancel(t))) => t == signed(t0, ms),
            (Timer::StopWorker(ms), Some(Deadline::StopWorker(t))) => t == at(t0, ms),
            _ => false,
        };
        assert!(
            ok,
            "{}: timer {deadline:?}, expected {:?}",
            row.name, row.timer
        );
    }
}

#[test]
fn a_renewal_is_bounded_by_the_validity_left_before_the_margin() {
    let t0 = Instant::now();
    let dog = Watchdog::new(at(t0, VALID), t0, EVERY, MARGIN, CancelPolicy::Kill);
    assert_eq!(
        dog.renew_bound(Duration::from_secs(1)),
        Some(Duration::from_millis(800))
    );
    assert_eq!(dog.renew_bound(MARGIN), None);
    assert_eq!(dog.renew_bound(Duration::ZERO), None);
}

#[test]
fn the_cancellation_delay_counts_from_the_first_renewal_that_did_not_confirm() {
    let t0 = Instant::now();
    let mut dog = Watchdog::new(at(t0, VALID), t0, EVERY, MARGIN, CancelPolicy::Kill);
    assert_eq!(dog.failing_for(at(t0, 1500)), None);
    dog.on_renew_failed(at(t0, 1000));
    dog.on_renew_failed(at(t0, 1100));
    assert_eq!(dog.failing_for(at(t0, 1500)), Some(MS * 500));
    dog.on_renewed(at(t0, 1200), Some(at(t0, 4200)));
    assert_eq!(dog.failing_for(at(t0, 1500)), None);
    assert_eq!(dog.renewals(), 1);
    let cancellation = dog.cancel(CancelReason::Unknown, at(t0, 4000));
    assert_eq!(
        cancellation,
        Some(Cancellation {
            reason: CancelReason::Unknown,
            remaining: MS * 200,
            stop_now: false,
        })
    );
}

#[test]
fn renewals_due_within_one_grid_spacing_share_an_instant_no_later_than_due() {
    let now = Instant::now();
    let every = Duration::from_secs(10);
    let dues: Vec<Instant> = (0..100).map(|i| now + every + MS * i / 10).collect();
    let aligned: Vec<Instant> = dues
        .iter()
        .map(|&due| on_renewal_grid(due, now, every))
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
    let every = Duration::from_millis(40);
    for i in 0..50 {
        let due = now + every + MS * i / 7;
        let at = on_renewal_grid(due, now, every);
        assert!(at <= due && due - at < every / 8, "{at:?} for {due:?}");
    }
    // Due within a spacing of now: never moved to now or before it.
    for i in 1..20 {
        let due = now + MS * i / 4;
        let at = on_renewal_grid(due, now, every);
        assert!(at <= due && (at > now || at == due), "{at:?} for {due:?}");
    }
}
