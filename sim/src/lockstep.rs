//! A run that pauses a client: each client on a current-thread runtime of its own, its
//! clock paused, and the schedule on one more (the world: the store's faults, deletions,
//! drains), all driven from this thread in lock-step, a millisecond at a time. A paused
//! client's runtime is not driven at all; at its resume its clock is advanced to the
//! others' at once, so every timer due meanwhile fires then, as in a process stopped and
//! continued.
//!
//! Each runtime's clock starts at the real instant it was built; the store, the recorder
//! and the renewal grid put its readings on the world's timeline
//! ([`SharedClock`]), so a run replays exactly whatever those instants were.

use std::cell::Cell;
use std::time::Duration;

use leasehold::__simulation::{self, Bugs, SharedClock};
use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::driver::{self, Places};
use crate::history::Event;
use crate::schedule::{CLIENTS, Schedule};

/// How many times a runtime yields once its clock reads the instant it is driven to (the
/// jump itself yields once): the first runs what another runtime woke and fires the
/// timers due, the next runs what they woke (tokio runs up to 61 tasks between yields), so
/// that nothing of this instant is left for the next millisecond.
const SETTLE: usize = 1;

/// Longer than any run lasts: a run still going then is stuck.
const LIMIT: Duration = Duration::from_secs(120);

/// One runtime of the run: where its clock started, where it reads now (since the start),
/// and how long it has been paused.
struct Place {
    runtime: Runtime,
    start: Instant,
    reads: Cell<Duration>,
    stood_still: Cell<Duration>,
}

impl Place {
    fn new() -> Place {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        let start = runtime.block_on(async { Instant::now() });
        Place {
            runtime,
            start,
            reads: Cell::new(Duration::ZERO),
            stood_still: Cell::new(Duration::ZERO),
        }
    }

    /// Runs this runtime until its clock reads `at` after the run's start, then lets what is
    /// ready run. Its clock jumps there at once: by a millisecond, or after a pause
    /// (`resume`) by the whole pause, every timer due meanwhile firing then.
    fn drive(&self, world: Instant, at: Duration, resume: bool) {
        let behind = at.saturating_sub(self.reads.replace(at));
        if resume {
            self.stood_still.set(self.stood_still.get() + behind);
        }
        __simulation::set_shared_clock(Some(SharedClock {
            own: self.start,
            shared: world,
            stood_still: self.stood_still.get(),
        }));
        __simulation::set_grid_origin(Some(self.start));
        self.runtime.block_on(async move {
            // First the clock, so that what another runtime woke at this instant runs at
            // it; then each yield runs what is ready and fires the timers due.
            tokio::time::advance(behind).await;
            for _ in 0..SETTLE {
                tokio::task::yield_now().await;
            }
        });
    }

    /// Whether tasks of this runtime were woken from another and wait to run.
    fn woken(&self) -> bool {
        self.runtime.handle().metrics().global_queue_depth() > 0
    }
}

/// The history of `schedule` (which pauses a client) run with `bugs` on.
pub fn run(schedule: &Schedule, bugs: Bugs) -> Vec<Event> {
    let world = Place::new();
    let clients: Vec<Place> = (0..CLIENTS).map(|_| Place::new()).collect();
    let windows = schedule.pause_windows();
    let due = driver::world_instants(schedule);
    __simulation::set_bugs(bugs);
    __simulation::seed_jitter(Some(schedule.seed));
    let places = Places::Apart(clients.iter().map(|p| p.runtime.handle().clone()).collect());
    let run = world
        .runtime
        .spawn(driver::simulate(schedule.clone(), places));
    let mut tick = Duration::ZERO;
    while !run.is_finished() {
        assert!(
            tick < LIMIT,
            "seed {}: the run did not end within {LIMIT:?}",
            schedule.seed
        );
        // The world's own timers are the schedule's: it is driven then, or when woken.
        if due.contains(&tick) || world.woken() {
            world.drive(world.start, tick, false);
        }
        // Client c runs now unless a pause of it began before now and ends after.
        let state = |c: usize| {
            let mut window = windows.iter().filter(|(client, ..)| *client == c);
            if window
                .clone()
                .any(|&(_, from, to)| from < tick && tick < to)
            {
                None
            } else {
                Some(window.any(|&(_, from, to)| from < tick && tick == to))
            }
        };
        for (c, place) in clients.iter().enumerate() {
            if let Some(resume) = state(c) {
                place.drive(world.start, tick, resume);
            }
        }
        // What one runtime woke in another runs at this instant too.
        for _ in 0..100 {
            let woken: Vec<&Place> = std::iter::once(&world)
                .chain(
                    clients
                        .iter()
                        .enumerate()
                        .filter(|(c, _)| state(*c).is_some())
                        .map(|(_, p)| p),
                )
                .filter(|p| p.woken())
                .collect();
            if woken.is_empty() {
                break;
            }
            for place in woken {
                place.drive(world.start, tick, false);
            }
        }
        tick += Duration::from_millis(1);
    }
    let events = world.runtime.block_on(run).expect("the run does not panic");
    __simulation::set_bugs(Bugs::default());
    __simulation::seed_jitter(None);
    __simulation::set_grid_origin(None);
    __simulation::set_shared_clock(None);
    events
}
