//! Hooks for leasehold's deterministic simulation (the `sim/` package): a seeded jitter, a
//! renewal grid per run and one timeline for the in-memory store over runtimes with clocks
//! of their own, so that one seed replays one history, and deliberate bugs the simulation
//! must find.
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
    /// The in-memory store reads each client's own clock instead of one timeline: a clock
    /// that stood still while its client was paused ([`SharedClock::stood_still`]). A
    /// lease a client takes or renews after a pause expires early for the others, who
    /// take it while its holder's validity lasts.
    pub store_on_client_clock: bool,
}

thread_local! {
    static BUGS: Cell<Bugs> = const {
        Cell::new(Bugs {
            cancel_at_validity_end: false,
            drain_forgets_a_lease: false,
            forget_unsettled: false,
            store_on_client_clock: false,
        })
    };
    static RNG: RefCell<Option<Xoshiro256PlusPlus>> = const { RefCell::new(None) };
    static GRID_ORIGIN: Cell<Option<Instant>> = const { Cell::new(None) };
    static CLOCK: Cell<Option<SharedClock>> = const { Cell::new(None) };
}

/// Where the runtime the calling thread is about to drive started, on its own clock and on
/// the timeline its clients share.
///
/// A simulation that pauses one client runs each client on a runtime of its own, so that
/// one can stand still while the others run. Each runtime's paused clock starts at the
/// real instant it was built, so the same moment of the run reads differently on each
/// (by a fraction of a millisecond that varies from run to run); the in-memory store,
/// shared by every client, compares expiries written on one client's clock with another's.
/// Set before each runtime is driven, this puts every reading on one timeline: an instant
/// `i` of the runtime being driven is `shared + (i - own)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedClock {
    /// The start of the runtime about to be driven, on its own clock.
    pub own: Instant,
    /// The same moment on the shared timeline.
    pub shared: Instant,
    /// How long the client of this runtime has been paused so far: its clock jumped by as
    /// much at each resume, as a stopped process's does when it runs again. Read only by
    /// the deliberate bug [`Bugs::store_on_client_clock`].
    pub stood_still: Duration,
}

/// Puts the calling thread's readings of the in-memory store on `clock`'s shared timeline
/// (or, with `None`, on tokio's clock again, as without the feature).
pub fn set_shared_clock(clock: Option<SharedClock>) {
    CLOCK.with(|c| c.set(clock));
}

/// `instant`, of the runtime being driven, on the shared timeline (itself if none is set).
pub fn on_shared_clock(instant: Instant) -> Instant {
    match CLOCK.with(Cell::get) {
        Some(clock) => clock.shared + instant.saturating_duration_since(clock.own),
        None => instant,
    }
}

/// What the in-memory store reads as now: tokio's clock, on the shared timeline if one is
/// set.
pub(crate) fn store_now() -> Instant {
    let now = on_shared_clock(Instant::now());
    // A deliberate bug the simulation must find: the client's own clock, without its
    // pauses.
    match CLOCK.with(Cell::get) {
        Some(clock) if bugs().store_on_client_clock => {
            now.checked_sub(clock.stood_still).unwrap_or(now)
        }
        _ => now,
    }
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
