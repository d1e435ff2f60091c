//! The keeper's machine as a table: each row drives a fresh [`Keeper`] through some
//! inputs and checks the actions of the last one and the wake-up it asks for next.

use super::machine::{Action, Input, Keeper, Leftovers, Nanos, Policy, REKILL_EVERY};
use super::wire::{Event, Signal};

const STOP: Policy = Policy {
    grace: Some(200),
    kill_after: Some(300),
    leftovers: Leftovers::Stop,
};
const WAIT: Policy = Policy {
    leftovers: Leftovers::Wait,
    ..STOP
};
const NO_GRACE: Policy = Policy {
    grace: None,
    kill_after: None,
    leftovers: Leftovers::Stop,
};

/// The lease became unknown: `--grace` governs.
const STOP_UNKNOWN: Input = Input::Stop { within: None };

/// Starts the command (token 7, deadline 1000) at time 0 and reports it as pid 42.
const RUNNING: &[(Input, Nanos)] = &[
    (
        Input::Start {
            token: 7,
            deadline: 1000,
        },
        0,
    ),
    (Input::Spawned { pid: 42 }, 0),
];

struct Row {
    name: &'static str,
    policy: Policy,
    before: &'static [(Input, Nanos)],
    steps: &'static [(Input, Nanos)],
    actions: &'static [Action],
    wakeup: Option<Nanos>,
}

use Action::{Exit, Report, SignalGroup, SignalTree, Spawn};

const ROWS: &[Row] = &[
    Row {
        name: "idle: start spawns with the token",
        policy: STOP,
        before: &[],
        steps: &[(
            Input::Start {
                token: 7,
                deadline: 1000,
            },
            0,
        )],
        actions: &[Spawn { token: 7 }],
        wakeup: None,
    },
    Row {
        name: "idle: a start past its deadline never spawns",
        policy: STOP,
        before: &[],
        steps: &[(
            Input::Start {
                token: 7,
                deadline: 5,
            },
            5,
        )],
        actions: &[Report(Event::DeadlinePassed), Report(Event::Gone), Exit],
        wakeup: None,
    },
    Row {
        name: "idle: leasehold gone → exit",
        policy: STOP,
        before: &[],
        steps: &[(Input::LeaseholdGone, 0)],
        actions: &[Exit],
        wakeup: None,
    },
    Row {
        name: "idle: stop and signals change nothing",
        policy: STOP,
        before: &[(STOP_UNKNOWN, 0)],
        steps: &[(Input::Forward(Signal::Term), 0)],
        actions: &[],
        wakeup: None,
    },
    Row {
        name: "spawned: reported, deadline armed",
        policy: STOP,
        before: &[],
        steps: RUNNING,
        actions: &[Report(Event::Started { pid: 42 })],
        wakeup: Some(1000),
    },
    Row {
        name: "spawn failed: reported, exit",
        policy: STOP,
        before: &[(
            Input::Start {
                token: 7,
                deadline: 1000,
            },
            0,
        )],
        steps: &[(Input::SpawnFailed { errno: 2 }, 0)],
        actions: &[Report(Event::SpawnFailed { errno: 2 }), Exit],
        wakeup: None,
    },
    Row {
        name: "running: a renewal moves the deadline",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Deadline(2000), 10)],
        actions: &[],
        wakeup: Some(2000),
    },
    Row {
        name: "running: USR1 goes to the group, no kill-after",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Forward(Signal::Usr1), 100)],
        actions: &[SignalGroup(Signal::Usr1)],
        wakeup: Some(1000),
    },
    Row {
        name: "running: TERM goes to the group and arms kill-after",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Forward(Signal::Term), 100)],
        actions: &[SignalGroup(Signal::Term)],
        wakeup: Some(400),
    },
    Row {
        name: "running: kill-after due → SIGKILL to the tree",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Forward(Signal::Hup), 100), (Input::Tick, 400)],
        actions: &[SignalTree(Signal::Kill)],
        wakeup: Some(400 + REKILL_EVERY),
    },
    Row {
        name: "running: stop → SIGTERM to the tree, SIGKILL after grace",
        policy: STOP,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 100)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(300),
    },
    Row {
        name: "running: grace never passes the deadline",
        policy: STOP,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 900)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(1000),
    },
    Row {
        name: "running: a lease known gone → SIGKILL within its bound, not after a long grace",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Stop { within: Some(50) }, 100)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(150),
    },
    Row {
        name: "running: a lease known gone, no grace → SIGKILL within its bound",
        policy: NO_GRACE,
        before: RUNNING,
        steps: &[(Input::Stop { within: Some(50) }, 100)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(150),
    },
    Row {
        name: "running: a lease known gone, shorter grace → the grace",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Stop { within: Some(500) }, 100)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(300),
    },
    Row {
        name: "running: a lease known gone near the deadline → the deadline",
        policy: NO_GRACE,
        before: RUNNING,
        steps: &[(Input::Stop { within: Some(500) }, 900)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(1000),
    },
    Row {
        name: "running: no grace → SIGKILL at the deadline",
        policy: NO_GRACE,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 100)],
        actions: &[SignalTree(Signal::Term)],
        wakeup: Some(1000),
    },
    Row {
        name: "running: an earlier deadline pulls SIGKILL in",
        policy: NO_GRACE,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 100), (Input::Deadline(500), 100)],
        actions: &[],
        wakeup: Some(500),
    },
    Row {
        name: "running: an unknown lease found gone → SIGKILL brought forward, no second SIGTERM",
        policy: NO_GRACE,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 100), (Input::Stop { within: Some(50) }, 300)],
        actions: &[],
        wakeup: Some(350),
    },
    Row {
        name: "running: a later bound never pushes SIGKILL back",
        policy: STOP,
        before: RUNNING,
        steps: &[
            (STOP_UNKNOWN, 100),
            (Input::Stop { within: Some(500) }, 150),
        ],
        actions: &[],
        wakeup: Some(300),
    },
    Row {
        name: "running: a second stop changes nothing",
        policy: STOP,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 100), (STOP_UNKNOWN, 150)],
        actions: &[],
        wakeup: Some(300),
    },
    Row {
        name: "running: grace over → SIGKILL to the tree",
        policy: STOP,
        before: RUNNING,
        steps: &[(STOP_UNKNOWN, 100), (Input::Tick, 300)],
        actions: &[SignalTree(Signal::Kill)],
        wakeup: Some(300 + REKILL_EVERY),
    },
    Row {
        name: "running: deadline reached on its own → reported, SIGKILL",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Tick, 1000)],
        actions: &[Report(Event::DeadlinePassed), SignalTree(Signal::Kill)],
        wakeup: Some(1000 + REKILL_EVERY),
    },
    Row {
        name: "running: a tick before anything is due does nothing",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::Tick, 999)],
        actions: &[],
        wakeup: Some(1000),
    },
    Row {
        name: "killing: SIGKILL again until the tree is empty",
        policy: STOP,
        before: RUNNING,
        steps: &[
            (Input::LeaseholdGone, 50),
            (Input::Tick, 50 + REKILL_EVERY - 1),
            (Input::Tick, 50 + REKILL_EVERY),
        ],
        actions: &[SignalTree(Signal::Kill)],
        wakeup: Some(50 + 2 * REKILL_EVERY),
    },
    Row {
        name: "running: leasehold gone → SIGKILL to the tree at once",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::LeaseholdGone, 50)],
        actions: &[SignalTree(Signal::Kill)],
        wakeup: Some(50 + REKILL_EVERY),
    },
    Row {
        name: "main exited alone: reported; then gone → exit",
        policy: STOP,
        before: RUNNING,
        steps: &[
            (
                Input::MainExited {
                    status: 0,
                    left_behind: 0,
                },
                100,
            ),
            (Input::TreeEmpty, 100),
        ],
        actions: &[Report(Event::Gone), Exit],
        wakeup: None,
    },
    Row {
        name: "main exited, two left (stop): reported, SIGTERM, SIGKILL after grace",
        policy: STOP,
        before: RUNNING,
        steps: &[(
            Input::MainExited {
                status: 256,
                left_behind: 2,
            },
            100,
        )],
        actions: &[
            Report(Event::Exited { status: 256 }),
            Report(Event::LeftBehind { count: 2 }),
            SignalTree(Signal::Term),
        ],
        wakeup: Some(300),
    },
    Row {
        name: "main exited, two left (wait): reported, nothing signalled",
        policy: WAIT,
        before: RUNNING,
        steps: &[(
            Input::MainExited {
                status: 0,
                left_behind: 2,
            },
            100,
        )],
        actions: &[
            Report(Event::Exited { status: 0 }),
            Report(Event::LeftBehind { count: 2 }),
        ],
        wakeup: Some(1000),
    },
    Row {
        name: "main exited: a forwarded signal goes to every process left",
        policy: WAIT,
        before: RUNNING,
        steps: &[
            (
                Input::MainExited {
                    status: 0,
                    left_behind: 1,
                },
                100,
            ),
            (Input::Forward(Signal::Hup), 150),
        ],
        actions: &[SignalTree(Signal::Hup)],
        wakeup: Some(450),
    },
    Row {
        name: "main exited, waiting: the deadline still kills",
        policy: WAIT,
        before: RUNNING,
        steps: &[
            (
                Input::MainExited {
                    status: 0,
                    left_behind: 1,
                },
                100,
            ),
            (Input::Tick, 1000),
        ],
        actions: &[Report(Event::DeadlinePassed), SignalTree(Signal::Kill)],
        wakeup: Some(1000 + REKILL_EVERY),
    },
    Row {
        name: "running: an empty tree cannot be (the command lives); ignored",
        policy: STOP,
        before: RUNNING,
        steps: &[(Input::TreeEmpty, 100)],
        actions: &[],
        wakeup: Some(1000),
    },
    Row {
        name: "done: nothing more happens",
        policy: STOP,
        before: RUNNING,
        steps: &[
            (
                Input::MainExited {
                    status: 0,
                    left_behind: 0,
                },
                100,
            ),
            (Input::TreeEmpty, 100),
            (STOP_UNKNOWN, 200),
        ],
        actions: &[],
        wakeup: None,
    },
];

#[test]
fn every_row_of_the_keeper_table() {
    for row in ROWS {
        let mut keeper = Keeper::new(row.policy);
        for &(input, now) in row.before {
            keeper.handle_input(input, now);
        }
        let mut last = Vec::new();
        for &(input, now) in row.steps {
            last = keeper.handle_input(input, now);
        }
        assert_eq!(last, row.actions, "{}: actions", row.name);
        assert_eq!(
            keeper.poll_timeout(),
            row.wakeup,
            "{}: next wake-up",
            row.name
        );
    }
}

#[test]
fn inputs_at_the_ends_of_the_clock_neither_panic_nor_leave_a_wake_up() {
    // Times near the ends of the clock: the saturating arithmetic holds.
    let inputs = [
        Input::Start {
            token: 1,
            deadline: u64::MAX,
        },
        Input::Spawned { pid: 1 },
        Input::Deadline(u64::MAX),
        Input::Forward(Signal::Term),
        STOP_UNKNOWN,
        Input::Tick,
        Input::MainExited {
            status: 0,
            left_behind: 1,
        },
        Input::LeaseholdGone,
        Input::Tick,
        Input::TreeEmpty,
    ];
    for now in [0, 1, u64::MAX - 1, u64::MAX] {
        let mut keeper = Keeper::new(Policy {
            grace: Some(u64::MAX),
            kill_after: Some(u64::MAX),
            leftovers: Leftovers::Stop,
        });
        for input in inputs {
            keeper.handle_input(input, now);
        }
        assert_eq!(keeper.poll_timeout(), None, "at {now}: the tree is gone");
    }
}
