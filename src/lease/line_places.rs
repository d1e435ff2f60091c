//! A client's places in lines (docs/design.md §4, "The line"): its line session's id, the
//! lines its waiters are in, and the places owed a leave — what the keep-alive task
//! (`src/lease/line_keeper.rs`) reads at each beat. No I/O, no clock: each method is one
//! step of the bookkeeping, under one lock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::protocol::{Attempt, LeaseKeys, LineSession, WaiterId};

/// A place whose leave failed: the lease's keys, the attempt, its waiter id.
pub(crate) type OwedLeave = (LeaseKeys, Attempt, WaiterId);

/// One client's places in lines, shared by its clones and their waiters.
#[derive(Debug)]
pub(crate) struct LinePlaces {
    id: LineSession,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// By line key: the lease's keys, and how many of the client's waiters are in it.
    lines: HashMap<String, (LeaseKeys, usize)>,
    /// Places whose leave failed (a Redis fault): left again at each beat until one
    /// lands, so that the session's keep-alive does not keep them in the line.
    owed: Vec<OwedLeave>,
    /// Whether the keep-alive task runs.
    running: bool,
    /// The attempts whose place someone watches (`LeaseClient::watch_place`): what their
    /// waits learn of it is sent there. An entry goes once nobody receives.
    watched: HashMap<Attempt, watch::Sender<Option<u32>>>,
}

/// What one beat of the keep-alive task does: keep these lines alive, leave these places.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Beat {
    pub(crate) lines: Vec<LeaseKeys>,
    pub(crate) owed: Vec<OwedLeave>,
}

impl LinePlaces {
    pub(crate) fn new() -> Self {
        Self {
            id: LineSession::new(),
            state: Mutex::new(State::default()),
        }
    }

    /// The client's line session.
    pub(crate) fn id(&self) -> &LineSession {
        &self.id
    }

    /// `attempt`'s id in a line, under this session.
    pub(crate) fn waiter_id(&self, attempt: &Attempt) -> WaiterId {
        WaiterId::of(&self.id, attempt)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain inserts and removals: a panic while holding it leaves it consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A waiter joined the line of `keys`. True when the keep-alive task must be started
    /// (it did not run): the caller starts it, or calls [`stopped`](Self::stopped).
    pub(crate) fn join(&self, keys: &LeaseKeys) -> bool {
        let mut state = self.lock();
        state
            .lines
            .entry(keys.line())
            .or_insert_with(|| (keys.clone(), 0))
            .1 += 1;
        !std::mem::replace(&mut state.running, true)
    }

    /// A waiter's registration in `line` ended.
    pub(crate) fn left(&self, line: &str) {
        let mut state = self.lock();
        if let Some((_, count)) = state.lines.get_mut(line) {
            *count -= 1;
            if *count == 0 {
                state.lines.remove(line);
            }
        }
    }

    /// A leave that failed: owed. True when the keep-alive task must be started, as for
    /// [`join`](Self::join).
    pub(crate) fn owe(&self, place: OwedLeave) -> bool {
        let mut state = self.lock();
        state.owed.push(place);
        !std::mem::replace(&mut state.running, true)
    }

    /// The keep-alive task is not running (it could not be started, or it ended).
    pub(crate) fn stopped(&self) {
        self.lock().running = false;
    }

    /// The next beat's work, the owed leaves taken out; `None` when there is none, and the
    /// task is then taken to have stopped (a later [`join`](Self::join) starts it again).
    pub(crate) fn beat(&self) -> Option<Beat> {
        let mut state = self.lock();
        if state.lines.is_empty() && state.owed.is_empty() {
            state.running = false;
            return None;
        }
        let lines = state.lines.values().map(|(keys, _)| keys.clone()).collect();
        Some(Beat {
            lines,
            owed: std::mem::take(&mut state.owed),
        })
    }

    /// A receiver of `attempt`'s place in its lease's line, as its waits learn it (a new
    /// receiver of the same channel when one is watched already).
    pub(crate) fn watch_place(&self, attempt: &Attempt) -> watch::Receiver<Option<u32>> {
        let mut state = self.lock();
        state.watched.retain(|_, sender| !sender.is_closed());
        state
            .watched
            .entry(attempt.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// `attempt`'s wait learnt its place: `Some(n)` with n entries ahead of it, `None`
    /// when it is not (or no longer) in a line. Nothing when nobody watches it.
    pub(crate) fn report_place(&self, attempt: &Attempt, place: Option<u32>) {
        let mut state = self.lock();
        if state.watched.is_empty() {
            return;
        }
        let Some(sender) = state.watched.get(attempt) else {
            return;
        };
        if sender.is_closed() {
            state.watched.remove(attempt);
        } else {
            sender.send_if_modified(|current| std::mem::replace(current, place) != place);
        }
    }

    /// Leaves a beat tried that failed again: owed still.
    pub(crate) fn still_owed(&self, places: impl IntoIterator<Item = OwedLeave>) {
        self.lock().owed.extend(places);
    }
}

#[cfg(test)]
mod tests;
