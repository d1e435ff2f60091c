//! A client's line session (docs/design.md §4, "The line"): while any of its waiters is in
//! a lease's line, one keep-alive per [`LINE_KEEP_EVERY`] keeps all of them alive there —
//! the cost of waiting grows with the clients that wait, not with the waiters — and a
//! place its waiter failed to leave is left again at the next beat.
//!
//! The keep-alive task runs while some registration lives (or a leave is owed) and holds
//! the session weakly: a dropped client's keep-alives stop, and its waiters' places end
//! [`LINE_KEEP`](crate::protocol::LINE_KEEP) later, as a killed process's do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::lease::session::Session;
use crate::protocol::{Attempt, LINE_KEEP_EVERY, LeaseKeys, LineSession, WaiterId};

/// Beats per extension of the lines' lives (about 7 s: the lines live an hour).
const EXTEND_EVERY: u64 = 8;

/// One client's line session: its id, the lines its waiters are in, and the places owed a
/// leave.
#[derive(Debug)]
pub(crate) struct LineKeeper {
    id: LineSession,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// By line key: the lease's keys, and how many of the client's waiters are in it.
    lines: HashMap<String, (LeaseKeys, usize)>,
    /// Places whose leave failed (a Redis fault): left again at each beat until one
    /// lands, so that the session's keep-alive does not keep them in the line.
    owed: Vec<(LeaseKeys, Attempt, WaiterId)>,
    /// Whether the keep-alive task runs.
    running: bool,
}

impl State {
    fn idle(&self) -> bool {
        self.lines.is_empty() && self.owed.is_empty()
    }
}

/// A waiter's registration in a line: the session keeps the line alive while any lives.
pub(crate) struct Kept {
    session: Arc<Session>,
    line: String,
}

impl LineKeeper {
    pub(crate) fn new() -> Self {
        Self {
            id: LineSession::new(),
            state: Mutex::new(State::default()),
        }
    }

    /// `attempt`'s id in a line, under this session.
    pub(crate) fn waiter_id(&self, attempt: &Attempt) -> WaiterId {
        WaiterId::of(&self.id, attempt)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain inserts and removals: a panic while holding it leaves it consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A waiter of `session` joined the line of `keys`: kept alive there until the
    /// registration drops. Starts the keep-alive task if it does not run.
    pub(crate) fn register(session: &Arc<Session>, keys: &LeaseKeys) -> Kept {
        let line = keys.line();
        let start = {
            let mut state = session.line_keeper().lock();
            state
                .lines
                .entry(line.clone())
                .or_insert_with(|| (keys.clone(), 0))
                .1 += 1;
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            spawn(session);
        }
        Kept {
            session: Arc::clone(session),
            line,
        }
    }

    /// A leave of `id`'s place that failed: owed, and tried again at each beat.
    pub(crate) fn owe_leave(
        session: &Arc<Session>,
        keys: &LeaseKeys,
        attempt: &Attempt,
        id: &WaiterId,
    ) {
        let start = {
            let mut state = session.line_keeper().lock();
            state.owed.push((keys.clone(), attempt.clone(), id.clone()));
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            spawn(session);
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let mut state = self.session.line_keeper().lock();
        if let Some((_, count)) = state.lines.get_mut(&self.line) {
            *count -= 1;
            if *count == 0 {
                state.lines.remove(&self.line);
            }
        }
    }
}

/// Starts the keep-alive task, unless there is no runtime (nothing could run it; the
/// places then live out their join's keep-alive, as a killed process's do).
fn spawn(session: &Arc<Session>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        session.line_keeper().lock().running = false;
        return;
    };
    runtime.spawn(beat(Arc::downgrade(session)));
}

/// The keep-alive task: a beat every [`LINE_KEEP_EVERY`] while the session lives and has
/// a line to keep or a leave owed. Every [`EXTEND_EVERY`]th beat extends the lines' lives
/// too, so that a line outlives its creation's hour while anyone waits in it.
async fn beat(session: Weak<Session>) {
    for beat in 0u64.. {
        tokio::time::sleep(LINE_KEEP_EVERY).await;
        let extend = beat % EXTEND_EVERY == 0;
        let Some(session) = session.upgrade() else {
            return;
        };
        let (lines, owed) = {
            let mut state = session.line_keeper().lock();
            if state.idle() {
                state.running = false;
                return;
            }
            let lines: Vec<LeaseKeys> = state.lines.values().map(|(k, _)| k.clone()).collect();
            (lines, std::mem::take(&mut state.owed))
        };
        let keeper = session.line_keeper();
        let timeout = session.settings().command_timeout;
        let backend = session.backend();
        let keeps = lines
            .iter()
            .map(|keys| backend.keep_in_line(keys, &keeper.id, extend, timeout));
        for (keys, result) in lines
            .iter()
            .zip(futures_util::future::join_all(keeps).await)
        {
            if let Err(failure) = result {
                // The next beat writes it again, within LINE_KEEP.
                tracing::debug!(%failure, line = %keys.line(), "a line keep-alive failed");
            }
        }
        let leaves = owed
            .iter()
            .map(|(keys, attempt, id)| backend.leave_line(keys, attempt, id, timeout));
        let results = futures_util::future::join_all(leaves).await;
        let still: Vec<_> = owed
            .into_iter()
            .zip(results)
            .filter_map(|(place, result)| result.is_err().then_some(place))
            .collect();
        session.line_keeper().lock().owed.extend(still);
    }
}
