//! What a lease actor is sent: the public requests (status, release) and the internal
//! timer, renewal-end and task-end events, behind one opaque type so callers cannot forge a timer.

use std::fmt;

use ractor::RpcReplyPort;

use crate::lease::RenewSent;
use crate::runtime::LeaseStatus;
#[cfg(doc)]
use crate::runtime::{CancelReason, LeaseCancelled};

/// Messages a lease actor accepts. Build them with the associated functions; the timer
/// messages are internal.
pub struct LeaseActorMsg(pub(in crate::runtime) Command);

pub(in crate::runtime) enum Command {
    Tick(u64),
    /// The renewal in flight ended; what its calls got, for the handle to apply.
    Renewed(RenewSent),
    Status(RpcReplyPort<LeaseStatus>),
    Release,
    /// The work run in its caller's future ended (returned, dropped or panicked); the
    /// panic's message if it panicked.
    TaskEnded(Option<String>),
    /// The runtime drains: cancel for `Shutdown`, release once the worker stopped (or, an
    /// attached one, released).
    Drain,
    /// The drain's deadline for the worker passed: stop it now under `Kill`.
    DrainDeadline,
}

impl LeaseActorMsg {
    /// The work run in its caller's future ended (returned, dropped or panicked); the
    /// panic's message if it panicked.
    pub(crate) fn task_ended(failure: Option<String>) -> Self {
        Self(Command::TaskEnded(failure))
    }

    /// The runtime drains (see [`LeaseRuntime::shutdown`](crate::runtime::LeaseRuntime::shutdown)).
    pub(crate) fn drain() -> Self {
        Self(Command::Drain)
    }

    /// The drain's time for the workers to stop on their own is over.
    pub(crate) fn drain_deadline() -> Self {
        Self(Command::DrainDeadline)
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
            Command::Renewed(_) => "LeaseActorMsg::Renewed",
            Command::Status(_) => "LeaseActorMsg::Status",
            Command::Release => "LeaseActorMsg::Release",
            Command::TaskEnded(_) => "LeaseActorMsg::TaskEnded",
            Command::Drain => "LeaseActorMsg::Drain",
            Command::DrainDeadline => "LeaseActorMsg::DrainDeadline",
        })
    }
}
