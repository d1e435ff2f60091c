//! When an operation, and a script call, give up on a reply.
//!
//! An operation's timeout bounds its round trip from the instant just before its call is
//! written ([`Bound::RoundTrip`]); a renewal's too, and its caller's absolute deadline
//! bounds its wait in the queue and its reply ([`Bound::By`]). Either deadline is judged
//! once this process has caught up with the tasks it has queued ([`Deadline::wait`]): a
//! reply that reached it in time still counts when the process, busy, had not read it yet
//! — the timeout bounds the server's round trip, not this process's backlog. A call, and
//! with it its connection, is judged by its items' round trips ([`Bound::round_trip`]).

use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::RenewBound;
use crate::protocol::limits::deadline_after;

/// A turn of the scheduler longer than this means the process is behind: one that has
/// caught up takes far less, even on oversubscribed cores (docs/performance.md, "Behind the
/// constants"); a slower turn only waits longer.
const SLOW_TURN: Duration = Duration::from_millis(1);

/// How much longer than its timeout a round trip may take to be read while the runtime is
/// behind, at least: a few times the lateness measured under the burst of
/// tests/batching/burst.rs (docs/performance.md, "Behind the constants").
const BEHIND_GRACE: Duration = Duration::from_secs(1);

/// How long one operation may take.
#[derive(Debug, Clone, Copy)]
pub(in super::super) enum Bound {
    /// Sent before `by` (it may wait in the queue until then) and its reply within
    /// `timeout` of its send, by `by` at the latest: a renewal, whose reply is worth
    /// something only while local validity lasts — its caller's deadline is absolute.
    By { by: Instant, timeout: Duration },
    /// Its reply within this long of the instant just before its call is written; time in
    /// the queue is not counted.
    RoundTrip(Duration),
}

impl Bound {
    /// A renewal's bound.
    pub(in super::super) fn renewal(bound: RenewBound) -> Self {
        Self::By {
            by: bound.by,
            timeout: bound.round_trip,
        }
    }

    /// The instant it may still be sent until, if there is one.
    pub(in super::super) fn send_by(self) -> Option<Instant> {
        match self {
            Self::By { by, .. } => Some(by),
            Self::RoundTrip(_) => None,
        }
    }

    /// The deadline of its reply, for a call written at `sent`. The grace past it is as
    /// long again as its time for a renewal — within the runtime's safety margin, which is
    /// at least one command timeout, so a renewal still ends before local validity does —
    /// and at least [`BEHIND_GRACE`] for anything else.
    pub(in super::super) fn deadline(self, sent: Instant) -> Deadline {
        match self {
            // Its round trip's, cut short by its caller's deadline.
            Self::By { by, timeout } => {
                let at = self.round_trip(sent).at.min(by);
                Deadline {
                    at,
                    give_up: deadline_after(at, timeout),
                }
            }
            Self::RoundTrip(timeout) => {
                let at = deadline_after(sent, timeout);
                Deadline {
                    at,
                    give_up: deadline_after(at, timeout.max(BEHIND_GRACE)),
                }
            }
        }
    }

    /// The deadline of its round trip, for a call written at `sent`: what judges the call
    /// and its connection. A renewal's is not cut short by its caller's deadline: one
    /// taken from the queue just before that deadline answers its caller then
    /// ([`deadline`](Self::deadline)), but a reply later than that says nothing about the
    /// connection, which is given up only when a round trip took longer than its timeout.
    pub(in super::super) fn round_trip(self, sent: Instant) -> Deadline {
        match self {
            Self::By { timeout, .. } => {
                let at = deadline_after(sent, timeout);
                Deadline {
                    at,
                    give_up: deadline_after(at, timeout),
                }
            }
            Self::RoundTrip(_) => self.deadline(sent),
        }
    }

    /// How long obtaining a connection for it may take from `now`, at most: it is sent once
    /// connected.
    pub(super) fn connect_within(self, now: Instant) -> Duration {
        match self {
            Self::By { by, timeout } => timeout.min(by.saturating_duration_since(now)),
            Self::RoundTrip(timeout) => timeout,
        }
    }
}

/// A reply's deadline, and how long past it a process that is behind keeps waiting.
#[derive(Debug, Clone, Copy)]
pub(in super::super) struct Deadline {
    pub(in super::super) at: Instant,
    pub(in super::super) give_up: Instant,
}

impl Deadline {
    /// A deadline with no grace but the tasks already runnable at it.
    pub(in super::super) fn at(at: Instant) -> Self {
        Self { at, give_up: at }
    }

    /// `future`'s output if it is ready by this deadline — judged once this process has
    /// caught up: the connection's reader is a task of its own, queued like any other, and
    /// behind thousands of tasks (a burst of spawned operations) the reader of a reply that
    /// came in a millisecond may not run for hundreds. So, past the deadline, the tasks
    /// already runnable have their turn first (one yield: on a current-thread runtime that
    /// is all of them), then more turns while the runtime is [`behind`] — until
    /// `give_up`. A process that has caught up gives up after that first turn.
    pub(in super::super) async fn wait<F: Future>(
        self,
        mut future: Pin<&mut F>,
    ) -> Option<F::Output> {
        if let Ok(output) = tokio::time::timeout_at(self.at, future.as_mut()).await {
            return Some(output);
        }
        loop {
            let turn = Instant::now();
            tokio::task::yield_now().await;
            // Polled with this task's waker, so a reply still wakes it if it goes on waiting.
            let poll = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
            if let Poll::Ready(output) = poll {
                return Some(output);
            }
            let now = Instant::now();
            if !behind(now - turn) || now >= self.give_up {
                return None;
            }
        }
    }
}

/// Whether the runtime is behind: its global queue holds tasks it has not got to, or its
/// last turn (a yield, back of the queue and round again: `turn`) took more than
/// [`SLOW_TURN`] — tasks were queued ahead, or the process did not get the CPU.
pub(super) fn behind(turn: Duration) -> bool {
    turn > SLOW_TURN
        || tokio::runtime::Handle::try_current().is_ok_and(|h| h.metrics().global_queue_depth() > 0)
}

/// When a script call gives up on its reply.
#[derive(Debug, Clone, Copy)]
pub(in super::super) struct Deadlines {
    /// The earliest item's: a reply not in by then marks the connection for replacement
    /// (calls after it start afresh), as any timed-out call does.
    pub(in super::super) first: Deadline,
    /// The latest item's: the call waits no longer.
    pub(in super::super) last: Deadline,
}

impl Deadlines {
    /// One item's deadline.
    pub(in super::super) fn one(deadline: Deadline) -> Self {
        Self {
            first: deadline,
            last: deadline,
        }
    }

    pub(super) fn and(self, other: Self) -> Self {
        Self {
            first: if other.first.at < self.first.at {
                other.first
            } else {
                self.first
            },
            last: Deadline {
                at: self.last.at.max(other.last.at),
                give_up: self.last.give_up.max(other.last.give_up),
            },
        }
    }
}
