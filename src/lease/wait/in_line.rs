//! The waiter's place in the lease's line, kept alive by its client's line session while it
//! waits and left when its wait ends without the lease (`src/lease/wait.rs`, invariant 8;
//! `lua/line.lua` `leave`; `src/lease/line_keeper.rs`).

use std::sync::Arc;

use crate::lease::line_keeper::{self, Kept};
use crate::lease::session::Session;
use crate::protocol::{Attempt, LeaseKeys, LeaseRequest, WaiterId};

/// The waiter's place in the lease's line, once a waiting try joined it: kept alive by the
/// client's line session, and left when the wait ends without the lease, or when it is
/// dropped (cancelled), so that a waiter that gave up blocks nobody.
pub(super) struct InLine {
    session: Arc<Session>,
    keys: LeaseKeys,
    attempt: Attempt,
    id: WaiterId,
    /// The session's registration, while the place may exist.
    kept: Option<Kept>,
}

impl InLine {
    pub(super) fn new(session: &Arc<Session>, request: &LeaseRequest) -> Self {
        Self {
            session: Arc::clone(session),
            keys: session.request_keys(request),
            attempt: request.attempt().clone(),
            id: session.waiter_id(request),
            kept: None,
        }
    }

    /// Whether a waiting try was sent: the next one looks for its place first.
    pub(super) fn is_joined(&self) -> bool {
        self.kept.is_some()
    }

    /// A waiting try was sent: it may have joined the line, so the session keeps the
    /// place alive from now on.
    pub(super) fn joined(&mut self) {
        if self.kept.is_none() {
            self.kept = Some(line_keeper::register(&self.session, &self.keys));
        }
    }

    /// A grant took the waiter out of the line: nothing to leave or keep alive.
    pub(super) fn served(&mut self) {
        self.kept = None;
    }

    /// Leaves the line, if the wait joined it.
    pub(super) async fn leave(&mut self) {
        if self.kept.take().is_some() {
            leave_line(&self.session, &self.keys, &self.attempt, &self.id).await;
        }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        if self.kept.take().is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Owns no `InLine`: a task dropped unrun (the runtime shutting down) leaves
        // nothing that would spawn again.
        let (session, keys, attempt, id) = (
            Arc::clone(&self.session),
            self.keys.clone(),
            self.attempt.clone(),
            self.id.clone(),
        );
        runtime.spawn(async move { leave_line(&session, &keys, &attempt, &id).await });
    }
}

/// `attempt`'s waiter leaves the lease's line. A leave that fails is owed: the session's
/// next beat tries it again, so that its keep-alive does not keep the place alive.
async fn leave_line(session: &Arc<Session>, keys: &LeaseKeys, attempt: &Attempt, id: &WaiterId) {
    let timeout = session.settings().command_timeout;
    if let Err(failure) = session
        .backend()
        .leave_line(keys, attempt, id, timeout)
        .await
    {
        tracing::debug!(%failure, "leaving the line failed; the session leaves it again");
        line_keeper::owe_leave(session, keys, attempt, id);
    }
}
