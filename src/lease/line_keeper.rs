//! A client's line session (docs/design.md §4, "The line"): while any of its waiters is in
//! a lease's line, one keep-alive per [`LINE_KEEP_EVERY`] keeps all of them alive there —
//! the cost of waiting grows with the clients that wait, not with the waiters — and a
//! place its waiter failed to leave is left again at the next beat.
//!
//! The keep-alive task runs while some registration lives (or a leave is owed) and holds
//! the session weakly: a dropped client's keep-alives stop, and its waiters' places end
//! [`LINE_KEEP`](crate::protocol::LINE_KEEP) later, as a killed process's do.

use std::sync::{Arc, Weak};

use crate::lease::line_places::Beat;
use crate::lease::session::Session;
use crate::protocol::{Attempt, LINE_KEEP_EVERY, LeaseKeys, WaiterId};

/// Beats per extension of the lines' lives (about 7 s: the lines live an hour).
const EXTEND_EVERY: u64 = 8;

/// A waiter's registration in a line: the session keeps the line alive while any lives.
pub(crate) struct Kept {
    session: Arc<Session>,
    line: String,
}

/// A waiter of `session` joined the line of `keys`: kept alive there until the
/// registration drops. Starts the keep-alive task if it does not run.
pub(crate) fn register(session: &Arc<Session>, keys: &LeaseKeys) -> Kept {
    if session.line_places().join(keys) {
        spawn(session);
    }
    Kept {
        session: Arc::clone(session),
        line: keys.line(),
    }
}

/// A leave of `id`'s place that failed: owed, and tried again at each beat.
pub(crate) fn owe_leave(
    session: &Arc<Session>,
    keys: &LeaseKeys,
    attempt: &Attempt,
    id: &WaiterId,
) {
    if session
        .line_places()
        .owe((keys.clone(), attempt.clone(), id.clone()))
    {
        spawn(session);
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.session.line_places().left(&self.line);
    }
}

/// Starts the keep-alive task, unless there is no runtime (nothing could run it; the
/// places then live out their join's keep-alive, as a killed process's do).
fn spawn(session: &Arc<Session>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        session.line_places().stopped();
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
        let places = session.line_places();
        let Some(Beat { lines, owed }) = places.beat() else {
            return;
        };
        let timeout = session.settings().command_timeout;
        let backend = session.backend();
        let keeps = lines
            .iter()
            .map(|keys| backend.keep_in_line(keys, places.id(), extend, timeout));
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
        places.still_owed(still);
    }
}
