//! Hooks for leasehold's deterministic simulation (the `sim/` package): a seeded jitter and
//! a renewal grid per run, so that one seed replays one history, and deliberate bugs the
//! simulation must find.
//!
//! Compiled only with the hidden `__simulation` feature, and even then inert until a thread
//! turns it on: the settings are per thread, and a simulation runs each seed on a
//! current-thread tokio runtime, whose tasks (lease actors, timers, workers) all run on the
//! thread that set them. Another test on another thread of the same binary — `cargo test
//! --workspace` unifies the feature into every package's build — sees everything off.
//!
//! Not part of leasehold's API: no stability promise.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt as _, SeedableRng as _};
use tokio::time::Instant;

/// Deliberate bugs, each off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs {
    /// The watchdog gives up on renewing at local validity's end instead of a safety margin
    /// before it: the worker is told too late (at the instant it must have stopped).
    pub cancel_at_validity_end: bool,
    /// A drain forgets the lease actor admitted first: it is neither told to drain nor
    /// stopped at the deadline, so its lease outlives the drain.
    pub drain_forgets_a_lease: bool,
    /// A supervisor abandons an acquisition of unknown end for a fresh attempt instead of
    /// replaying it: if the first landed, the service has no leader until its TTL ends.
    pub forget_unsettled: bool,
}

thread_local! {
    static BUGS: Cell<Bugs> = const {
        Cell::new(Bugs {
            cancel_at_validity_end: false,
            drain_forgets_a_lease: false,
            forget_unsettled: false,
        })
    };
    static RNG: RefCell<Option<Xoshiro256PlusPlus>> = const { RefCell::new(None) };
    static GRID_ORIGIN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Starts the renewal grid of the calling thread's leases at `origin` (or, with `None`,
/// at the process's origin again). A process has one origin, taken on its clock at its
/// first lease; a simulation runs each seed on a clock of its own and sets the origin to
/// its start, so that a seed's renewals fall on the same instants on every run.
pub fn set_grid_origin(origin: Option<Instant>) {
    GRID_ORIGIN.with(|o| o.set(origin));
}

/// The calling thread's renewal grid origin, if one was set.
pub(crate) fn grid_origin() -> Option<Instant> {
    GRID_ORIGIN.with(Cell::get)
}

/// Turns `bugs` on (or off) for the calling thread.
pub fn set_bugs(bugs: Bugs) {
    BUGS.with(|b| b.set(bugs));
}

/// Draws the calling thread's jitter from a generator seeded with `seed` (or, with `None`,
/// from the thread's entropy again, as without the feature).
pub fn seed_jitter(seed: Option<u64>) {
    RNG.with(|r| *r.borrow_mut() = seed.map(Xoshiro256PlusPlus::seed_from_u64));
}

/// The bugs on for the calling thread.
pub(crate) fn bugs() -> Bugs {
    BUGS.with(Cell::get)
}

/// A duration in `0 ..= max` from the seeded generator, if the thread seeded one.
pub(crate) fn seeded_up_to(max: Duration) -> Option<Duration> {
    RNG.with(|r| {
        r.borrow_mut()
            .as_mut()
            .map(|rng| rng.random_range(Duration::ZERO..=max))
    })
}
