//! Properties of the keeper's machine over arbitrary inputs, beside the table in
//! `machine_tests`.

use proptest::prelude::*;

use super::machine::{Action, Input, Keeper, Leftovers, Nanos, Policy};
use super::wire::Signal;

/// What can happen once the command runs (starting it is the fixed prefix).
fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        // Within reach of the steps' clock, so deadlines do pass.
        (0u64..40_000_000_000).prop_map(Input::Deadline),
        prop::sample::select(Signal::FORWARDED.to_vec()).prop_map(Input::Forward),
        prop::option::of(0u64..2_000_000_000).prop_map(|within| Input::Stop { within }),
        Just(Input::LeaseholdGone),
        (any::<i32>(), 0u32..3).prop_map(|(status, left_behind)| Input::MainExited {
            status,
            left_behind
        }),
        Just(Input::TreeEmpty),
        Just(Input::Tick),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        any::<bool>(),
    )
        .prop_map(|(grace, kill_after, wait)| Policy {
            grace,
            kill_after,
            leftovers: if wait {
                Leftovers::Wait
            } else {
                Leftovers::Stop
            },
        })
}

proptest! {
    /// Whatever happens in whatever order, a tick at or past the deadline finds the
    /// tree being killed: nothing of the command is let run past local validity.
    #[test]
    fn the_deadline_always_ends_in_sigkill(
        policy in policy(),
        first_deadline in 0u64..40_000_000_000,
        steps in prop::collection::vec((input(), 0u64..2_000_000_000), 1..40),
    ) {
        let mut keeper = Keeper::new(policy);
        keeper.handle_input(Input::Start { token: 1, deadline: first_deadline }, 0);
        keeper.handle_input(Input::Spawned { pid: 1 }, 0);
        let mut now: Nanos = 0;
        let mut deadline = first_deadline;
        let mut killed = false;
        for (input, dt) in steps {
            now = now.saturating_add(dt);
            if let Input::Deadline(d) = input {
                deadline = d;
            }
            let actions = keeper.handle_input(input, now);
            killed |= actions.contains(&Action::SignalTree(Signal::Kill));
            if now >= deadline && keeper.poll_timeout().is_some() {
                // Live past the deadline: the tick that wakes it kills.
                let actions = keeper.handle_input(Input::Tick, now);
                killed |= actions.contains(&Action::SignalTree(Signal::Kill));
                prop_assert!(killed, "alive at {now}, past deadline {deadline}");
            }
            if let Some(wake) = keeper.poll_timeout() {
                let d = deadline;
                // The keeper never sleeps past the deadline while it is not killing.
                prop_assert!(killed || wake <= d, "wakes at {wake} past deadline {d}");
            }
        }
    }
}
