//! Random walks of the model: the traces the replay runs. Seeded, so a failing trace is
//! run again by its seed; what a walk chooses depends on the model alone, never on the
//! code's replies or on timing.

use leasehold_model::{Action, Config, LeaseModel};
use stateright::Model as _;

/// The configurations the checker runs (`tests/correct.rs`), by name.
pub fn configurations() -> Vec<(&'static str, Config)> {
    vec![
        ("plain", Config::plain()),
        ("faults", Config::faults()),
        ("counted", Config::counted()),
        ("counted lock-delay", Config::counted_lock_delay()),
        ("lock-delay", Config::lock_delay()),
        (
            "native",
            Config {
                native: true,
                ..Config::plain()
            },
        ),
        ("line", Config::line()),
        ("counted line", Config::counted_line()),
    ]
}

/// Steps of one trace at most (ticks included).
pub const STEPS: usize = 24;

/// A small, fast, seeded generator (SplitMix64): the walk needs no more.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The actions the code can be made to take: all but a failover (no replica is run;
/// memory has none, and a replica missing chosen writes with a clock behind is not
/// something a test can make a real server be).
pub fn replayable(action: &Action) -> bool {
    !matches!(action, Action::Failover { .. })
}

/// The next action of a walk from `state`, or `None` when none is left: a tick one time
/// in four, so that a tick has a few steps of the clients between it and the next.
pub fn choose(
    model: &LeaseModel,
    state: &<LeaseModel as stateright::Model>::State,
    rng: &mut Rng,
) -> Option<Action> {
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    actions.retain(replayable);
    let tick = actions.iter().position(|a| *a == Action::Tick);
    if let Some(at) = tick {
        if rng.below(4) == 0 || actions.len() == 1 {
            return Some(Action::Tick);
        }
        actions.remove(at);
    }
    (!actions.is_empty()).then(|| actions[rng.below(actions.len())])
}
