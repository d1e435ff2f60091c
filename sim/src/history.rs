//! What a run recorded: what each worker saw and when, and what the schedule did. The
//! checker reads nothing else.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::__simulation::on_shared_clock;
use leasehold::runtime::CancelReason;

/// One worker: a term of a supervisor or one `run_under_lease` job.
pub type WorkerId = u32;

/// One entry: when (simulated time since the run began) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: Duration,
    pub what: What,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// A worker began under a lease of `resource` (its slot `slot`) with `token`, to stop
    /// by `stop_by`.
    Started {
        worker: WorkerId,
        client: usize,
        resource: usize,
        slot: u16,
        token: u64,
        stop_by: Duration,
    },
    /// A renewal moved the worker's local validity end.
    Validity { worker: WorkerId, stop_by: Duration },
    /// The worker was told its lease ended, why, and by when it must stop.
    Told {
        worker: WorkerId,
        reason: CancelReason,
        stop_by: Duration,
    },
    /// The worker stopped (on its own, or stopped by its lease actor).
    Ended { worker: WorkerId },
    /// A fault began; `client` is `None` for the whole store.
    Fault {
        client: Option<usize>,
        fault: String,
    },
    /// The fault on `client` (or the store) was cleared.
    Healed { client: Option<usize> },
    /// A lease key was deleted behind its holder (`resource`'s slot `slot`), or every key
    /// (`None`: an empty restart).
    Deleted { key: Option<(usize, u16)> },
    /// A client's runtime began draining.
    DrainBegan { client: usize },
    /// A drain returned: how many leases its runtime still held, and how many keys the
    /// store still had (counted only at the final drain, where nothing may be left).
    DrainEnded {
        client: usize,
        held: usize,
        keys_left: Option<usize>,
    },
    /// Client `client`'s observer of the supervised resource read a holder under `token`
    /// (`None`: nobody held it).
    Observed { client: usize, token: Option<u64> },
    /// A store-wide outage longer than the TTL ended, and a supervisor was running.
    OutageOver,
    /// Client `client`'s process stopped: none of its tasks runs, none of its timers fires,
    /// until it resumes.
    Paused { client: usize },
    /// Client `client`'s process runs again: every timer due meanwhile fires at once, its
    /// clock reading now.
    Resumed { client: usize },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>9.3}s {:?}", self.at.as_secs_f64(), self.what)
    }
}

/// The history as it is written: shared by every task of the run (one thread, so the lock
/// is never contended; tokio's tasks need `Send`).
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
    origin: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl Recorder {
    /// Starts the clock the events are timed by: now.
    pub fn start(&self) {
        *lock(&self.origin) = Some(on_shared_clock(tokio::time::Instant::now()));
    }

    /// `instant` as time since the run began. An instant is read on the clock of the
    /// runtime that records it: where each client has a runtime of its own, it is put on
    /// the timeline they share first.
    pub fn since_start(&self, instant: tokio::time::Instant) -> Duration {
        let instant = on_shared_clock(instant);
        lock(&self.origin).map_or(Duration::ZERO, |o| instant.saturating_duration_since(o))
    }

    pub fn record(&self, what: What) {
        let at = self.since_start(tokio::time::Instant::now());
        lock(&self.events).push(Event { at, what });
    }

    pub fn events(&self) -> Vec<Event> {
        lock(&self.events).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
