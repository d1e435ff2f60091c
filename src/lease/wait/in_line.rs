//! The waiter's place in the lease's line, left when its wait ends without the lease
//! (`src/lease/wait.rs`, invariant 8; `lua/line.lua` `leave`).

use std::sync::Arc;

use crate::lease::session::Session;
use crate::protocol::{Attempt, LeaseKeys, LeaseRequest};

/// The waiter's place in the lease's line, once a waiting try joined it: left when the
/// wait ends without the lease, or when it is dropped (cancelled), so that a waiter that
/// gave up blocks nobody for the rest of its keep-alive.
pub(super) struct InLine {
    session: Arc<Session>,
    keys: LeaseKeys,
    attempt: Attempt,
    pub(super) joined: bool,
}

impl InLine {
    pub(super) fn new(session: &Arc<Session>, request: &LeaseRequest) -> Self {
        Self {
            session: Arc::clone(session),
            keys: session.request_keys(request),
            attempt: request.attempt().clone(),
            joined: false,
        }
    }

    /// Leaves the line, if the wait joined it.
    pub(super) async fn leave(&mut self) {
        if std::mem::take(&mut self.joined) {
            leave_line(&self.session, &self.keys, &self.attempt).await;
        }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        if !self.joined {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Owns no `InLine`: a task dropped unrun (the runtime shutting down) leaves
        // nothing that would spawn again.
        let (session, keys, attempt) = (
            Arc::clone(&self.session),
            self.keys.clone(),
            self.attempt.clone(),
        );
        runtime.spawn(async move { leave_line(&session, &keys, &attempt).await });
    }
}

/// `attempt`'s waiter leaves the lease's line. Best effort: a place not left lives out
/// its keep-alive, as a dead waiter's does.
async fn leave_line(session: &Session, keys: &LeaseKeys, attempt: &Attempt) {
    let timeout = session.settings().command_timeout;
    if let Err(failure) = session.backend().leave_line(keys, attempt, timeout).await {
        tracing::debug!(%failure, "leaving the line failed; the place lives out its keep-alive");
    }
}
