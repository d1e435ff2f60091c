//! A run that pauses a client: each client on a current-thread runtime of its own, its
//! clock paused, and the schedule on one more (the world: the store's faults, deletions,
//! drains), all driven from this thread in lock-step. A paused client's runtime is not
//! driven at all; at its resume its clock is advanced to the others' at once, so every
//! timer due meanwhile fires then, as in a process stopped and continued.
//!
//! The runtimes take turns by the instants their timers fire: each idle one is let run
//! its clock to its next timer (at most `QUANTUM`, 10 ms, ahead, and never past a pause's
//! start or end), stopped there before it runs what the timer woke; then those at the
//! earliest such instant run, and so on. What one runtime wakes in another runs at once if
//! that one waits at the same instant, else at the instant it waits at: at most a quantum
//! late, as a notice crossing a network would be.
//!
//! Each runtime's clock starts at the real instant it was built; the store, the recorder
//! and the renewal grid put its readings on the world's timeline
//! ([`SharedClock`]), so a run replays exactly whatever those instants were.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};
use std::time::Duration;

use leasehold::__simulation::{self, Bugs, SharedClock};
use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::driver::{self, Places};
use crate::history::Event;
use crate::schedule::{CLIENTS, Schedule};

/// How far ahead of the others a runtime's clock may run to its next timer: what another
/// runtime wakes in it meanwhile runs that much late at most.
const QUANTUM: Duration = Duration::from_millis(10);

thread_local! {
    /// The `block_on` future to wake when the runtime it drives wakes from a park with its
    /// clock past the instant noted: the clock then reads the next timer's instant, and
    /// what the timer woke has not run.
    static UNPARKED: RefCell<Option<(Waker, Instant)>> = const { RefCell::new(None) };
}

/// Wakes the future waiting in [`UNPARKED`] if the clock has moved. Not otherwise: its
/// waker would leave the runtime's driver woken, and the next park would not move the
/// clock either.
fn unparked() {
    let moved = UNPARKED.with(|w| {
        let mut w = w.borrow_mut();
        match &*w {
            Some((_, from)) if Instant::now() > *from => w.take(),
            _ => None,
        }
    });
    if let Some((waker, _)) = moved {
        waker.wake();
    }
}

/// How many times a runtime yields once its clock reads the instant it is driven to (the
/// jump itself yields once): the first runs what its timers and other runtimes woke and
/// fires any timer due since, the next runs what that woke (tokio runs up to 61 tasks
/// between yields). What is left still runs at this instant, before the clock moves on
/// ([`Place::peek`]).
const SETTLE: usize = 1;

/// Longer than any run lasts: a run still going then is stuck.
const LIMIT: Duration = Duration::from_secs(120);

/// One runtime of the run: where its clock started, where it reads (since the start), and
/// how long it has been paused.
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
            .on_thread_unpark(unparked)
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

    /// Lets this runtime run what is ready at `at` after the run's start. Its clock reads
    /// `at` already (stopped there by [`peek`](Self::peek)), or, after a pause (`resume`),
    /// jumps there at once by the whole pause, every timer due meanwhile firing then.
    fn drive(&self, world: Instant, at: Duration, resume: bool) {
        let behind = at.saturating_sub(self.reads.replace(at));
        if resume {
            self.stood_still.set(self.stood_still.get() + behind);
        }
        self.enter(world);
        self.runtime.block_on(async move {
            // First the clock, so that what another runtime woke at this instant runs at
            // it; then each yield runs what is ready and fires the timers due.
            tokio::time::advance(behind).await;
            for _ in 0..SETTLE {
                tokio::task::yield_now().await;
            }
        });
    }

    /// Lets this runtime, idle, run its clock to its next timer, no later than `cap` after
    /// the run's start, and stops it there before it runs what the timer woke; returns
    /// where its clock reads then (where it was if it was woken instead).
    fn peek(&self, world: Instant, cap: Duration) -> Duration {
        self.enter(world);
        let (start, cap) = (self.start, self.start + cap);
        let reads = self.runtime.block_on(async move {
            let from = Instant::now();
            let sleep = tokio::time::sleep_until(cap);
            tokio::pin!(sleep);
            poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() || Instant::now() > from {
                    return Poll::Ready(());
                }
                UNPARKED.with(|w| *w.borrow_mut() = Some((cx.waker().clone(), from)));
                Poll::Pending
            })
            .await;
            Instant::now() - start
        });
        UNPARKED.with(|w| w.borrow_mut().take());
        self.reads.set(reads);
        reads
    }

    /// Sets the hooks' clock for this runtime: what it reads, on the world's timeline.
    fn enter(&self, world: Instant) {
        __simulation::set_shared_clock(Some(SharedClock {
            own: self.start,
            shared: world,
            stood_still: self.stood_still.get(),
        }));
        __simulation::set_grid_origin(Some(self.start));
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
    __simulation::set_bugs(bugs);
    __simulation::seed_jitter(Some(schedule.seed));
    let places = Places::Apart(clients.iter().map(|p| p.runtime.handle().clone()).collect());
    let run = world
        .runtime
        .spawn(driver::simulate(schedule.clone(), places));
    // Where a pause begins or ends: every runtime's clock stops there on its way.
    let mut marks: Vec<Duration> = windows.iter().flat_map(|&(_, a, b)| [a, b]).collect();
    marks.sort();
    let mut now = Duration::ZERO;
    // The places that run at `now` (`after`: just after it): the world, and each client
    // not paused then. A client runs at the instant its pause begins, not after it.
    let running = |now: Duration, after: bool| {
        let mut places = vec![&world];
        for (c, place) in clients.iter().enumerate() {
            let paused = |&(client, from, to): &(usize, Duration, Duration)| {
                client == c && (from < now || (after && from == now)) && now < to
            };
            if !windows.iter().any(paused) {
                places.push(place);
            }
        }
        places
    };
    while !run.is_finished() {
        assert!(
            now < LIMIT,
            "seed {}: the run did not end within {LIMIT:?}",
            schedule.seed
        );
        // Each place that waits at `now` runs what is due: a client behind (paused until
        // now) resumes, its clock jumping here.
        for place in running(now, false) {
            if place.reads.get() <= now {
                place.drive(world.start, now, place.reads.get() < now);
            }
        }
        settle(&running(now, false), world.start, now);
        if run.is_finished() {
            break;
        }
        // Every idle runtime to its next timer, or the cap; the earliest run next.
        let cap = marks
            .iter()
            .copied()
            .find(|&m| m > now)
            .unwrap_or(Duration::MAX)
            .min(now + QUANTUM);
        now = running(now, true)
            .into_iter()
            .map(|place| match place.reads.get() == now {
                true => place.peek(world.start, cap),
                false => place.reads.get(),
            })
            .min()
            .unwrap_or(cap);
    }
    let events = world.runtime.block_on(run).expect("the run does not panic");
    __simulation::set_bugs(Bugs::default());
    __simulation::seed_jitter(None);
    __simulation::set_grid_origin(None);
    __simulation::set_shared_clock(None);
    events
}

/// Runs, at `now`, what one runtime woke in another that waits at `now` too, until none
/// has anything left.
fn settle(running: &[&Place], world: Instant, now: Duration) {
    for _ in 0..1000 {
        let woken: Vec<&Place> = running
            .iter()
            .copied()
            .filter(|p| p.reads.get() == now && p.woken())
            .collect();
        if woken.is_empty() {
            return;
        }
        for place in woken {
            place.drive(world, now, false);
        }
    }
    panic!("the runtimes keep waking each other at {now:?}");
}
