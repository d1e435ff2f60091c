//! What a lease actor is sent: the public requests (status, release) and the internal
//! timer and task-end events, behind one opaque type so callers cannot forge a timer.

use std::fmt;

use ractor::RpcReplyPort;

use crate::runtime::LeaseStatus;
#[cfg(doc)]
use crate::runtime::{CancelReason, LeaseCancelled};

/// Messages a lease actor accepts. Build them with the associated functions; the timer
/// messages are internal.
pub struct LeaseActorMsg(pub(in crate::runtime) Command);

pub(in crate::runtime) enum Command {
    Tick(u64),
    Status(RpcReplyPort<LeaseStatus>),
    Release,
    /// The task running the work ended; the panic's message if it panicked.
    TaskEnded(Option<String>),
}

impl LeaseActorMsg {
    /// The task running the work ended; the panic's message if it panicked.
    pub(crate) fn task_ended(failure: Option<String>) -> Self {
        Self(Command::TaskEnded(failure))
    }

    /// Asks for the current [`LeaseStatus`].
    pub fn status(reply: RpcReplyPort<LeaseStatus>) -> Self {
        Self(Command::Status(reply))
    }

    /// Ends the lease: a child worker is sent [`LeaseCancelled`] with
    /// [`CancelReason::Shutdown`] and the lease is released once it stopped; with an
    /// attached worker the lease is released at once.
    pub fn release() -> Self {
        Self(Command::Release)
    }
}

impl fmt::Debug for LeaseActorMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Command::Tick(_) => "LeaseActorMsg::Tick",
            Command::Status(_) => "LeaseActorMsg::Status",
            Command::Release => "LeaseActorMsg::Release",
            Command::TaskEnded(_) => "LeaseActorMsg::TaskEnded",
        })
    }
}
