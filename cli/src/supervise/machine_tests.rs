//! The supervision machine as a table: each row feeds a fresh [`Supervision`] (renewals every
//! second, validity ending at 3 s) inputs at times, and checks every step's actions, the
//! instant of leasehold's own SIGKILL and when Redis is asked next.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use leasehold::LostReason;
use leasehold::runtime::CancelReason;
use tokio::time::Instant;

use super::CommandEnd;
use super::machine::{Action, Input, Note, Stopping, Supervision};
use crate::keeper::{Event, Killed, Leftovers, Order, Signal, Survivor};

const MS: Duration = Duration::from_millis(1);
const RENEW: Duration = Duration::from_secs(1);
/// Local validity's end when the command starts, in ms from t0.
const STOP_BY: u64 = 3000;

/// An input, its instants in ms from t0.
#[derive(Debug, Clone, Copy)]
enum I {
    Ev(Event),
    KeeperGone {
        fuse_burnt: bool,
    },
    KillDue,
    Cancel(Option<CancelReason>, u64),
    RecheckDue,
    Answer(Option<LostReason>, u64),
    Renewed(u64),
    Signal(Signal),
    WorkEnded,
    /// What leasehold's kill found: the most processes, how many were left, and a survivor
    /// (pid, refused).
    Killed(usize, usize, Option<(u32, bool)>),
}

/// An action, its instants in ms from t0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum A {
    Note(Note),
    Order(Order),
    Deadline(u64),
    Kill { close: bool },
    Ask,
    End(E),
}

/// An end, the command's status as the raw wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum E {
    Gone {
        status: Option<i32>,
        lost_before_exit: bool,
        lost_before_gone: bool,
        refused: Option<u32>,
    },
    SpawnFailed(i32),
    KeeperDied(usize),
    Survived(u32),
}

struct Step {
    at: u64,
    input: I,
    then: &'static [A],
    /// leasehold's own SIGKILL after this step (ms).
    kill_at: u64,
    /// The next question to Redis after this step (ms), if any.
    recheck_at: Option<u64>,
}

struct Row {
    name: &'static str,
    grace: Option<Duration>,
    steps: &'static [Step],
}

const fn step(
    at: u64,
    input: I,
    then: &'static [A],
    kill_at: u64,
    recheck_at: Option<u64>,
) -> Step {
    Step {
        at,
        input,
        then,
        kill_at,
        recheck_at,
    }
}

const fn gone(status: Option<i32>, lost_before_exit: bool, lost_before_gone: bool) -> A {
    A::End(E::Gone {
        status,
        lost_before_exit,
        lost_before_gone,
        refused: None,
    })
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const NANOS_PER_MS: u64 = 1_000_000;
const UNKNOWN: Option<CancelReason> = Some(CancelReason::Unknown);
const ABSENT: Option<CancelReason> = Some(CancelReason::Lost(LostReason::Absent));
const DEADLINE: A = A::Note(Note::DeadlinePassed);

#[rustfmt::skip]
const ROWS: &[Row] = &[
    Row { name: "a command that exits under a valid lease ends with its own status", grace: None, steps: &[
        step(10, I::Ev(Event::Started { pid: 2 }), &[A::Note(Note::Started)], STOP_BY, None),
        step(500, I::Ev(Event::Exited { status: 0 }), &[], STOP_BY, None),
        step(501, I::Ev(Event::Gone), &[gone(Some(0), false, false)], STOP_BY, None),
    ] },
    Row { name: "a renewal moves the fuse's and the keeper's deadline and leasehold's kill", grace: None, steps: &[
        step(1000, I::Renewed(4000), &[A::Deadline(4000)], 4000, None),
        step(2000, I::Renewed(5000), &[A::Deadline(5000)], 5000, None),
    ] },
    Row { name: "at validity's end leasehold kills the tree itself and says so once", grace: None, steps: &[
        step(STOP_BY, I::KillDue, &[A::Kill { close: true }], STOP_BY, None),
        step(STOP_BY + 5, I::Killed(3, 0, None), &[DEADLINE, gone(None, true, true)], STOP_BY, None),
    ] },
    Row { name: "a kill at validity's end that finds nothing says nothing", grace: None, steps: &[
        step(100, I::Ev(Event::Exited { status: 0 }), &[], STOP_BY, None),
        step(STOP_BY, I::KillDue, &[A::Kill { close: true }], STOP_BY, None),
        step(STOP_BY + 1, I::Killed(0, 0, None), &[gone(Some(0), false, true)], STOP_BY, None),
    ] },
    Row { name: "cancelled as unknown: SIGTERM now, SIGKILL at validity's end, Redis asked at once and every renewal period", grace: None, steps: &[
        step(500, I::Cancel(UNKNOWN, STOP_BY), &[
            A::Note(Note::Cancelled { reason: UNKNOWN, left: ms(2500) }),
            A::Order(Order::Stop { within: None }),
        ], STOP_BY, Some(500)),
        step(500, I::RecheckDue, &[A::Ask], STOP_BY, None),
        step(520, I::Answer(None, STOP_BY), &[], STOP_BY, Some(1520)),
        step(1520, I::RecheckDue, &[A::Ask], STOP_BY, None),
        step(1530, I::Answer(Some(LostReason::Absent), STOP_BY), &[
            A::Note(Note::FoundGone { reason: LostReason::Absent, left: ms(1000) }),
            A::Order(Order::Stop { within: Some(1000 * NANOS_PER_MS) }),
        ], 2530, None),
    ] },
    Row { name: "after a cancellation a renewal moves the deadline, not leasehold's kill", grace: None, steps: &[
        step(500, I::Cancel(ABSENT, STOP_BY), &[
            A::Note(Note::Cancelled { reason: ABSENT, left: ms(1000) }),
            A::Order(Order::Stop { within: Some(1000 * NANOS_PER_MS) }),
        ], 1500, None),
        step(600, I::Renewed(4000), &[A::Deadline(4000)], 1500, None),
        step(1500, I::KillDue, &[A::Kill { close: true }], 1500, None),
        // The SIGKILL was announced with the SIGTERM.
        step(1501, I::Killed(2, 0, None), &[gone(None, true, true)], 1500, None),
    ] },
    Row { name: "--grace bounds an unknown lease's SIGTERM, and Redis's answer never moves the kill later", grace: Some(ms(200)), steps: &[
        step(0, I::Cancel(UNKNOWN, STOP_BY), &[
            A::Note(Note::Cancelled { reason: UNKNOWN, left: ms(200) }),
            A::Order(Order::Stop { within: Some(200 * NANOS_PER_MS) }),
        ], 200, Some(0)),
        step(0, I::RecheckDue, &[A::Ask], 200, None),
        step(100, I::Answer(Some(LostReason::NotOwner), STOP_BY), &[
            A::Note(Note::FoundGone { reason: LostReason::NotOwner, left: ms(200) }),
            A::Order(Order::Stop { within: Some(200 * NANOS_PER_MS) }),
        ], 200, None),
    ] },
    Row { name: "validity ending before --grace does bounds the SIGKILL", grace: Some(ms(20_000)), steps: &[
        step(2000, I::Cancel(UNKNOWN, STOP_BY), &[
            A::Note(Note::Cancelled { reason: UNKNOWN, left: ms(1000) }),
            A::Order(Order::Stop { within: Some(20_000 * NANOS_PER_MS) }),
        ], STOP_BY, Some(2000)),
    ] },
    Row { name: "a signal is forwarded to the command", grace: None, steps: &[
        step(10, I::Signal(Signal::Term), &[A::Note(Note::Forwarding(Signal::Term)), A::Order(Order::Forward(Signal::Term))], STOP_BY, None),
    ] },
    Row { name: "the keeper died: leasehold kills what it left", grace: None, steps: &[
        step(10, I::KeeperGone { fuse_burnt: false }, &[A::Kill { close: false }], STOP_BY, None),
        step(11, I::Killed(2, 0, None), &[A::End(E::KeeperDied(2))], STOP_BY, None),
    ] },
    Row { name: "the fuse's timer ended the namespace: the run ends as at validity's end", grace: None, steps: &[
        step(STOP_BY, I::KeeperGone { fuse_burnt: true }, &[A::Kill { close: false }], STOP_BY, None),
        step(STOP_BY, I::Killed(0, 0, None), &[DEADLINE, gone(None, true, true)], STOP_BY, None),
    ] },
    Row { name: "a process that refuses SIGKILL: the run ends without a release", grace: None, steps: &[
        step(STOP_BY, I::KillDue, &[A::Kill { close: true }], STOP_BY, None),
        step(STOP_BY + 5000, I::Killed(1, 1, Some((77, true))), &[DEADLINE, A::Note(Note::Refused { pid: 77 }), A::End(E::Survived(77))], STOP_BY, None),
    ] },
    Row { name: "a process stuck in the kernel after SIGKILL: the run ends without a release", grace: None, steps: &[
        step(STOP_BY, I::KillDue, &[A::Kill { close: true }], STOP_BY, None),
        step(STOP_BY + 5000, I::Killed(1, 1, Some((77, false))), &[DEADLINE, A::Note(Note::Stuck { pid: 77 }), A::End(E::Survived(77))], STOP_BY, None),
    ] },
    Row { name: "the keeper died leaving a process that will not go", grace: None, steps: &[
        step(10, I::KeeperGone { fuse_burnt: false }, &[A::Kill { close: false }], STOP_BY, None),
        step(11, I::Killed(1, 1, Some((77, false))), &[A::Note(Note::Stuck { pid: 77 }), A::End(E::Survived(77))], STOP_BY, None),
    ] },
    Row { name: "the lease's work ended first: leasehold kills the tree", grace: None, steps: &[
        step(10, I::WorkEnded, &[A::Kill { close: true }], STOP_BY, None),
        step(11, I::Killed(1, 0, None), &[DEADLINE, gone(None, true, true)], STOP_BY, None),
    ] },
    Row { name: "the keeper's own SIGKILL at validity's end is said once, and cuts the command short", grace: None, steps: &[
        step(STOP_BY, I::Ev(Event::DeadlinePassed), &[DEADLINE], STOP_BY, None),
        step(STOP_BY, I::Ev(Event::DeadlinePassed), &[], STOP_BY, None),
        step(STOP_BY + 1, I::Ev(Event::Exited { status: 9 }), &[], STOP_BY, None),
        step(STOP_BY + 2, I::Ev(Event::Gone), &[gone(Some(9), true, true)], STOP_BY, None),
    ] },
    Row { name: "processes left behind are said, unless the tree is already being stopped", grace: None, steps: &[
        step(100, I::Ev(Event::Exited { status: 0 }), &[], STOP_BY, None),
        step(100, I::Ev(Event::LeftBehind { count: 2 }), &[A::Note(Note::LeftBehind { count: 2, leftovers: Leftovers::Stop })], STOP_BY, None),
        step(200, I::Cancel(ABSENT, STOP_BY), &[
            A::Note(Note::Cancelled { reason: ABSENT, left: ms(1000) }),
            A::Order(Order::Stop { within: Some(1000 * NANOS_PER_MS) }),
        ], 1200, None),
        step(300, I::Ev(Event::LeftBehind { count: 1 }), &[], 1200, None),
        // The command exited before the loss: its status stands, the loss is reported.
        step(400, I::Ev(Event::Gone), &[gone(Some(0), false, true)], 1200, None),
    ] },
    Row { name: "a process refusing signals is said once, and named in the end", grace: None, steps: &[
        step(100, I::Ev(Event::Unkillable { pid: 5 }), &[A::Note(Note::Refused { pid: 5 })], STOP_BY, None),
        step(200, I::Ev(Event::Unkillable { pid: 5 }), &[], STOP_BY, None),
        step(300, I::Ev(Event::Exited { status: 0 }), &[], STOP_BY, None),
        step(400, I::Ev(Event::Gone), &[A::End(E::Gone { status: Some(0), lost_before_exit: false, lost_before_gone: false, refused: Some(5) })], STOP_BY, None),
    ] },
    Row { name: "a command that cannot be started ends the run", grace: None, steps: &[
        step(1, I::Ev(Event::SpawnFailed { errno: 2 }), &[A::End(E::SpawnFailed(2))], STOP_BY, None),
    ] },
];

fn input(i: I, t0: Instant) -> Input {
    let at = |ms: u64| t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX);
    match i {
        I::Ev(event) => Input::Event(event),
        I::KeeperGone { fuse_burnt } => Input::KeeperGone { fuse_burnt },
        I::KillDue => Input::KillDue,
        I::Cancel(reason, stop_by) => Input::Cancelled {
            reason,
            stop_by: at(stop_by),
        },
        I::RecheckDue => Input::RecheckDue,
        I::Answer(gone, stop_by) => Input::Answered {
            gone,
            stop_by: at(stop_by),
        },
        I::Renewed(stop_by) => Input::Renewed {
            stop_by: at(stop_by),
        },
        I::Signal(signal) => Input::Signal(signal),
        I::WorkEnded => Input::WorkEnded,
        I::Killed(most, left, survivor) => Input::Killed(Killed {
            most,
            left,
            survivor: survivor.map(|(pid, refused)| Survivor { pid, refused }),
        }),
    }
}

fn ms_since(t0: Instant, at: Instant) -> u64 {
    u64::try_from(at.duration_since(t0).as_millis()).unwrap_or(u64::MAX)
}

fn seen(action: Action, t0: Instant) -> A {
    match action {
        Action::Note(note) => A::Note(note),
        Action::Order(order) => A::Order(order),
        Action::Deadline(at) => A::Deadline(ms_since(t0, at)),
        Action::KillTree { close } => A::Kill { close },
        Action::Ask => A::Ask,
        Action::End(end) => A::End(match end {
            CommandEnd::Gone {
                status,
                lost_before_exit,
                lost_before_gone,
                refused,
            } => E::Gone {
                status: status.map(ExitStatus::into_raw),
                lost_before_exit,
                lost_before_gone,
                refused,
            },
            CommandEnd::NotStarted { errno } => E::SpawnFailed(errno),
            CommandEnd::KeeperDied { killed } => E::KeeperDied(killed),
            CommandEnd::Survived { pid } => E::Survived(pid),
            CommandEnd::Unarmed(unarmed) => panic!("the machine never ends {unarmed:?}"),
        }),
    }
}

#[test]
fn every_row_of_the_supervision_table() {
    let t0 = Instant::now();
    for row in ROWS {
        let stopping = Stopping {
            leftovers: Leftovers::Stop,
            grace: row.grace,
            renew_every: RENEW,
        };
        let mut run = Supervision::new(stopping, t0 + MS * 3000);
        for step in row.steps {
            let now = t0 + MS * u32::try_from(step.at).unwrap_or(u32::MAX);
            let actions: Vec<A> = run
                .handle(input(step.input, t0), now)
                .into_iter()
                .map(|a| seen(a, t0))
                .collect();
            let what = format!("{}: {:?} at {}", row.name, step.input, step.at);
            assert_eq!(actions, step.then, "{what}");
            assert_eq!(ms_since(t0, run.kill_at()), step.kill_at, "{what}: kill_at");
            assert_eq!(
                run.recheck_at().map(|at| ms_since(t0, at)),
                step.recheck_at,
                "{what}: recheck_at"
            );
        }
    }
}

#[test]
fn renewals_are_watched_until_the_lease_says_none_will_come() {
    let t0 = Instant::now();
    let stopping = Stopping {
        leftovers: Leftovers::Stop,
        grace: None,
        renew_every: RENEW,
    };
    let mut run = Supervision::new(stopping, t0 + MS * 3000);
    assert!(run.watching() && run.listens_for_cancel());
    assert!(run.handle(Input::RenewalsEnded, t0).is_empty());
    assert!(!run.watching());
    run.handle(
        Input::Cancelled {
            reason: UNKNOWN,
            stop_by: t0 + MS * 3000,
        },
        t0,
    );
    assert!(!run.listens_for_cancel(), "a cancellation is news once");
}

fn stopping(grace: Option<Duration>) -> Stopping {
    Stopping {
        leftovers: Leftovers::Stop,
        grace,
        renew_every: RENEW,
    }
}

#[test]
fn a_lease_redis_says_is_gone_gets_at_most_one_renewal_period_of_grace() {
    let long = Some(Duration::from_secs(20));
    let short = Some(Duration::from_millis(50));
    let gone = [LostReason::Absent, LostReason::NotOwner].map(CancelReason::Lost);
    for reason in gone {
        assert_eq!(stopping(None).bound(Some(reason)), Some(RENEW), "{reason}");
        assert_eq!(stopping(long).bound(Some(reason)), Some(RENEW), "{reason}");
        assert_eq!(stopping(short).bound(Some(reason)), short, "{reason}");
    }
    // The lease may still be ours: --grace governs, validity bounds it (the keeper).
    let unsure = [
        Some(CancelReason::Unknown),
        Some(CancelReason::RenewalUnconfirmed),
        Some(CancelReason::Lost(LostReason::ValidityExpired)),
        None,
    ];
    for reason in unsure {
        assert_eq!(stopping(None).bound(reason), None, "{reason:?}");
        assert_eq!(stopping(long).bound(reason), long, "{reason:?}");
    }
}
