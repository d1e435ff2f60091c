//! A client: its current attempt, its handle (docs/design.md §7, `src/lease/state.rs`) and
//! the one request it has on its way.
//!
//! Clock model. Every client's clock runs at the server's rate within the drift budget:
//! over one lease term it drifts from the real time by at most `drift`. A validity that
//! ends `ttl − drift` after the send by the client's clock therefore ends, in real time, at
//! most `ttl` after the send. The model takes the worst clock the budget allows: a handle
//! believes it holds until `until + drift` in real time (`Client::believes`), and only
//! then does its clock make it LOST.

use crate::server::{AcquireReply, Attempt, Reply, Time, Token};

/// The handle of the client's current attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handle {
    /// No lease known for this attempt: its acquisition may be sent (again: a replay).
    Idle,
    /// Held, with `until` its local validity's end (`sent_at + ttl − drift`).
    Active { slot: u8, token: Token, until: Time },
    /// Ended: renewals are refused locally; one release may still be sent.
    Lost { slot: u8, token: Token },
    /// A renewal or release may or may not have run: renewals are refused locally.
    Unknown { slot: u8, token: Token },
    /// Released: the handle sends nothing more.
    Released,
}

impl Handle {
    /// The slot and token a release of this handle names, if it may send one.
    pub fn releasable(self) -> Option<(u8, Token)> {
        match self {
            Handle::Active { slot, token, .. }
            | Handle::Lost { slot, token }
            | Handle::Unknown { slot, token } => Some((slot, token)),
            Handle::Idle | Handle::Released => None,
        }
    }

    /// `HandleState::lose`: ACTIVE and UNKNOWN become LOST; LOST and RELEASED stay.
    fn lose(self) -> Handle {
        match self {
            Handle::Active { slot, token, .. } | Handle::Unknown { slot, token } => {
                Handle::Lost { slot, token }
            }
            other => other,
        }
    }
}

/// A request on its way to the server, with what its reply is read against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// A: try_acquire's acquisition.
    Acquire {
        sent: Time,
    },
    /// W: the wait loop's acquisition, which joins the line when refused.
    Wait {
        sent: Time,
    },
    Renew {
        sent: Time,
        slot: u8,
        token: Token,
    },
    Release {
        slot: u8,
        token: Token,
    },
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The current attempt's operation id.
    pub op: u8,
    pub handle: Handle,
    /// The request whose reply the client waits for.
    pub waiting: Option<Request>,
    /// A request the client gave up on that may still reach the server, for an attempt.
    pub late: Option<(u8, Request)>,
    /// Whether this attempt's handle left ACTIVE (for property d: never ACTIVE again).
    pub left_active: bool,
    /// This attempt is in its wait loop: it has sent W, and sends W or K from now on (or
    /// dies), never A.
    pub waits: bool,
}

/// The lease's timing, as a client reads replies against it.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ttl: Time,
    pub drift: Time,
    /// A RENEWED after the handle left ACTIVE revives it (a deliberate breakage).
    pub revive: bool,
}

impl Client {
    pub fn new() -> Client {
        Client {
            op: 0,
            handle: Handle::Idle,
            waiting: None,
            late: None,
            left_active: false,
            waits: false,
        }
    }

    pub fn attempt(&self, id: u8) -> Attempt {
        Attempt {
            client: id,
            op: self.op,
        }
    }

    /// Whether the client believes it holds the lease at real time `now` (its clock being
    /// the slowest the drift budget allows).
    pub fn believes(&self, now: Time, drift: Time) -> bool {
        matches!(self.handle, Handle::Active { until, .. } if now < until + drift)
    }

    /// The clock reached `now`: an ACTIVE handle without validity left is LOST, for good.
    pub fn observe(&mut self, now: Time, drift: Time) {
        if let Handle::Active { until, .. } = self.handle
            && now >= until + drift
        {
            self.set(self.handle.lose());
        }
    }

    fn set(&mut self, handle: Handle) {
        let was_active = matches!(self.handle, Handle::Active { .. });
        if was_active && !matches!(handle, Handle::Active { .. }) {
            self.left_active = true;
        }
        self.handle = handle;
    }

    /// An acquisition's reply (ACQUIRED, or REPLAYED with the server's time left).
    pub fn on_acquire(&mut self, reply: AcquireReply, sent: Time, now: Time, t: Timing) {
        let (slot, token, term) = match reply {
            AcquireReply::Acquired { token, slot } => (slot, token, t.ttl),
            AcquireReply::Replayed { left, token, slot } => (slot, token, left.min(t.ttl)),
            _ => return,
        };
        let until = (sent + term).saturating_sub(t.drift);
        self.handle = Handle::Active { slot, token, until };
        self.observe(now, t.drift);
    }

    /// A renewal's reply (`handle_renew_reply`).
    pub fn on_renew(&mut self, reply: Reply, sent: Time, now: Time, t: Timing) {
        match (reply, self.handle) {
            (Reply::Done, Handle::Active { slot, token, until }) if now < until + t.drift => {
                let until = (sent + t.ttl).saturating_sub(t.drift);
                self.set(Handle::Active { slot, token, until });
            }
            (Reply::Done, Handle::Lost { slot, token } | Handle::Unknown { slot, token })
                if t.revive =>
            {
                let until = (sent + t.ttl).saturating_sub(t.drift);
                self.handle = Handle::Active { slot, token, until };
            }
            (Reply::Done, _) => self.observe(now, t.drift),
            (Reply::Absent | Reply::NotOwner, handle) => self.set(handle.lose()),
        }
    }

    /// A release's reply (`handle_release`).
    pub fn on_release(&mut self, reply: Reply) {
        match reply {
            Reply::Done => self.set(Handle::Released),
            Reply::Absent | Reply::NotOwner => self.set(self.handle.lose()),
        }
    }

    /// A request that got no reply: the client learns nothing (`Indeterminate`).
    pub fn on_no_reply(&mut self, request: Request) {
        match (request, self.handle) {
            (Request::Acquire { .. } | Request::Wait { .. }, _) => {}
            (_, Handle::Active { slot, token, .. }) => self.set(Handle::Unknown { slot, token }),
            _ => {}
        }
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}
