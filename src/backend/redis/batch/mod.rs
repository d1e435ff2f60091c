//! Coalescing: the operations of concurrent callers travel as one `EVALSHA` of
//! `lua/batch.lua` per round trip — beside it, on a server that renews and releases by its
//! own commands, one pipeline of those (`call`) — each with its own reply; the operations
//! beyond what the calls in flight carry wait in a bounded queue.
//!
//! A caller submits one [`Item`] and waits for its own result. At most [`MAX_IN_FLIGHT`]
//! flushers bound the calls in flight; each is a task that takes what waits, up to
//! [`MAX_ITEMS`] script items and [`MAX_NATIVE_ITEMS`] of the server's own commands at a
//! time, sends them as one call and hands every item its reply. A
//! caller that finds no flusher running becomes one and lets the tasks woken with it queue
//! their items first (one turn of the scheduler), so operations that arrive together leave
//! together: if others queued, it hands its place to a flusher task; if its item is still
//! alone, it sends it from its own task, at once — no task to start and wake, the cost that
//! dominates a lone round trip on a quiet machine. While a call is in flight, another
//! starts only once [`ANOTHER_CALL`] items wait; fewer leave with the next call of a
//! running flusher, which also lets the callers it just answered queue their next
//! operations first. The busier the connection, the larger the calls — and the fewer of
//! them Redis runs per operation (a script call has a fixed cost of its own:
//! docs/performance.md, "What bounds it"). Two calls in flight are kept apart: a flusher
//! whose reply arrives after another call was answered lets that call's callers send their
//! next call before it answers its own, so Redis never gets both at once (it would answer
//! them together).
//!
//! A burst larger than the calls in flight carry waits its turn: renewals and releases
//! first, then acquisitions and reads in arrival order. Time in the queue is local, not the
//! server's: an operation's timeout bounds its round trip, from the instant just before its
//! call is written. A renewal also has its caller's absolute deadline (its reply is worth
//! something only while local validity lasts; [`Bound`]): it waits in the queue until then
//! at most, and its reply is due by then at the latest. The queue is bounded:
//! an acquisition or a read that finds `limit` items waiting is refused at once, `NotSent`
//! of kind `QueueFull` — the caller's own burst, not the server's failure.
//!
//! # Invariants
//!
//! 1. An item is *waiting* (in the queue) or *taken* (in a batch being sent), and only the
//!    queue's lock moves it from one to the other. A caller whose deadline passes while its
//!    item waits (a renewal) takes it back out and reports `NotSent` — it was never
//!    written; one whose item was taken reports its reply if it came by the item's
//!    deadline, `MaybeSent` otherwise.
//! 2. Every taken item gets exactly one result: its own reply, its own error, the failure
//!    of the whole call (no connection, timeout, a refusal before running), or — when its
//!    own deadline passes before the call is answered — `MaybeSent`.
//! 3. There are never more than [`MAX_IN_FLIGHT`] flushers, each a flusher task or a caller
//!    sending its lone item, and a flusher's place is given back only after the queue was
//!    found empty under the lock; one that ends or dies holding its place (a caller whose
//!    call is done or dropped, a flusher task that panicked or was aborted) passes it to a
//!    new flusher task if items wait. So no waiting item is left without a flusher while
//!    the runtime runs. A caller sending its lone item answers no one else: dropping it
//!    never costs another operation its reply.
//! 4. One item's error is that item's: the script runs each item under `pcall`, and a batch
//!    refused as a whole for a reason that may concern only some of its keys (`NOPERM`) is
//!    sent again item by item — it provably did not run.
//! 5. An idle call is never held back: when no flusher runs, the caller sends its
//!    item — alone, or with those queued meanwhile by a flusher it starts — after the tasks
//!    already runnable have run. An item that finds calls in flight leaves in the first
//!    call taken once the items ahead of it in its lane (and every renewal and release, for
//!    an acquisition or a read) have left.
//! 6. Nothing waiting is sent after a call that got no reply: a call whose deadline passes
//!    drops its connection, and the items waiting leave only on a new one, whose set-up
//!    needs the server's answer (`CLIENT SETINFO`) within the connect timeout and their own
//!    timeouts; if none comes, every item that waited for it is answered `NotSent` at once.
//!    A deadline is judged once this process has caught up with its queued tasks
//!    ([`Deadline::wait`]): the timeout bounds the server's round trip, not the process's
//!    own backlog.
//! 7. The queue is bounded: acquisitions and reads are refused while `limit` items wait
//!    (nothing of theirs is queued or sent); renewals and releases are never refused — one
//!    at a time per lease held, they are bounded by the leases held.

mod deadline;
mod item;
mod queue;
#[cfg(test)]
mod tests;
mod text;

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Connected, RedisBackend};
use crate::backend::{FailureDetail, FailureKind, SendFailure};

pub(super) use deadline::{Bound, Deadline, Deadlines};
pub(super) use item::{Item, NativeReply, command, native_pipeline};
pub(super) use queue::Batcher;
use queue::Reply;

/// Script calls in flight at once, at most. More than one lets this process prepare and
/// answer calls while Redis runs another; four measured best (docs/performance.md, "Behind
/// the constants").
pub(super) const MAX_IN_FLIGHT: usize = 4;
/// Items per script call, at most. Smaller calls keep Redis and this process working at
/// the same time (one call of everything waiting would have each wait for the other), and
/// bound how long one call keeps Redis busy.
pub(super) const MAX_ITEMS: usize = 32;
/// Items of the server's own commands per call, at most, beside its [`MAX_ITEMS`] script
/// items: renewals and releases on a server that runs them without the script
/// (`Item::native`). A command costs the server about what a script item does without the
/// script's own cost per call, so a larger pipeline keeps the server as busy as a script
/// call does — and the renewals of one grid instant leave in a few writes, not one per 32.
pub(super) const MAX_NATIVE_ITEMS: usize = 256;
/// Items waiting that make a busy batcher start another call beside those in flight. Fewer
/// wait for a running flusher's next call: one round trip at most, and each call carries
/// enough operations to be worth its fixed cost to Redis (docs/performance.md, "What
/// bounds it").
pub(super) const ANOTHER_CALL: usize = MAX_ITEMS / 4;

/// One result of one item.
pub(super) type ItemResult = Result<Value, SendFailure>;

/// Sends `item` in the next batch and waits for its result: within its round trip from its
/// call's send, and by its caller's deadline if it is a renewal ([`Bound::By`]). An
/// acquisition or a read that finds the queue full is refused at once (`NotSent`, of kind
/// `QueueFull`), and nothing is queued.
///
/// # Cancel safety
/// Dropping the future while the item waits takes it out of the queue: it is never sent.
/// Once taken it may run; its reply is then dropped.
pub(super) async fn submit(backend: &RedisBackend, item: Item, bound: Bound) -> ItemResult {
    let batcher = backend.batcher();
    let (tx, mut rx) = oneshot::channel();
    let Some((id, start)) = batcher.push(item, bound, tx) else {
        return Err(batcher.full());
    };
    let mut queued = Queued {
        batcher,
        id: Some(id),
    };
    if start {
        let mut place = FlusherPlace {
            backend,
            held: true,
        };
        // Companions woken by the same event queue theirs first (invariant 5).
        tokio::task::yield_now().await;
        if let Some(item) = batcher.take_alone(id) {
            queued.id = None;
            // `place` drops after the call: handed to a flusher task if items queued
            // meanwhile.
            return backend.alone(&item, bound).await;
        }
        place.held = false;
        tokio::spawn(flush(backend.clone()));
    }
    let result = match bound.send_by() {
        // The flusher answers it by its own deadline once taken (invariant 2).
        None => (&mut rx).await.unwrap_or_else(|_| Err(ended())),
        Some(deadline) => match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(result) => result.unwrap_or_else(|_| Err(ended())),
            Err(_) if batcher.withdraw(id) => Err(SendFailure::NotSent(unsent(backend))),
            // Taken: the flusher answers it by its deadline (invariant 2).
            Err(_) => (&mut rx).await.unwrap_or_else(|_| Err(ended())),
        },
    };
    queued.id = None;
    result
}

/// Why a renewal that waited until its deadline was not sent.
fn unsent(backend: &RedisBackend) -> FailureDetail {
    if backend.obtaining() {
        FailureDetail::new(
            FailureKind::Connect,
            "no connection to Redis before the renewal's deadline",
        )
    } else {
        FailureDetail::new(
            FailureKind::Timeout,
            "not sent before the renewal's deadline: earlier calls were still in flight",
        )
    }
}

/// The flusher ended (panic, runtime shutdown) after taking the item.
fn ended() -> SendFailure {
    SendFailure::MaybeSent(FailureDetail::new(
        FailureKind::ConnectionLost,
        "the call carrying this operation ended without a reply",
    ))
}

/// Withdraws a waiting item whose caller went away (the cancel-safety promise of `submit`).
struct Queued<'a> {
    batcher: &'a Batcher,
    id: Option<u64>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.batcher.withdraw(id);
        }
    }
}

/// One flusher: sends what waits, one script call at a time, until nothing waits.
async fn flush(backend: RedisBackend) {
    let mut place = FlusherPlace {
        backend: &backend,
        held: true,
    };
    let batcher = backend.batcher();
    loop {
        // Calls woken by the same event (timers of one tick, say), and the callers the last
        // batch answered (a renewal loop, a contender trying again), queue up before a batch
        // is taken; an idle call loses nothing but this one turn of the scheduler.
        tokio::task::yield_now().await;
        if !batcher.keep_flushing() {
            place.held = false;
            return;
        }
        // The connection first: items keep waiting — withdrawable, provably unsent — until it
        // is there.
        let arrived_later = batcher.next_id();
        match connection(&backend).await {
            Ok((generation, connected)) => {
                let capabilities = backend.capabilities(&connected);
                let taken = batcher.take(Instant::now(), capabilities);
                if taken.items.is_empty() {
                    continue;
                }
                let answered = batcher.answered.load(Ordering::Relaxed);
                let call = backend.send(generation, &connected, &taken.items, taken.deadlines);
                let (results, replies) = answer_late(call, taken.sent, taken.replies).await;
                // Redis answers what one read of the connection brought only after running all
                // of it, so calls sent together come back together; answered together, their
                // callers' next operations leave together again, and Redis and this process
                // take turns instead of working at once. When another call was answered
                // while this one was out, its callers go first and their call leaves before
                // this one's callers queue theirs: the two calls stay a half-turn apart, and
                // Redis stays busy (docs/performance.md, "W2 on current_thread"). One turn
                // of the scheduler, taken only when two calls overlapped.
                if batcher.answered.load(Ordering::Relaxed) != answered {
                    tokio::task::yield_now().await;
                }
                for (reply, result) in replies.into_iter().zip(results) {
                    if let Some(to) = reply.to {
                        let _ = to.send(result);
                    }
                }
            }
            // The failure answers the items that waited for this attempt; later ones get an
            // attempt of their own.
            Err(failure) => batcher.fail(arrived_later, &failure),
        }
        batcher.answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits for `call`'s results (sent at `sent`), answering meanwhile each item whose own
/// deadline passes first (`MaybeSent`: it was written) — judged as [`Deadline::wait`]
/// judges; returns the results and the replies still owed.
async fn answer_late(
    call: impl Future<Output = Vec<ItemResult>>,
    sent: Instant,
    replies: Vec<Reply>,
) -> (Vec<ItemResult>, Vec<Reply>) {
    let mut call = std::pin::pin!(call);
    let mut owed = Owed { sent, replies };
    loop {
        let Some(next) = owed.poll_timeout() else {
            // Every item answered: the call itself ends by the latest deadline.
            return (call.await, owed.replies);
        };
        if let Some(results) = next.wait(call.as_mut()).await {
            return (results, owed.replies);
        }
        owed.handle_timeout(Instant::now(), !deadline::behind(Duration::ZERO));
    }
}

/// The replies a call in flight still owes, sans I/O: when the next one is due
/// (`poll_timeout`), and which are late once that time came (`handle_timeout`).
struct Owed {
    /// The instant just before the call was written.
    sent: Instant,
    replies: Vec<Reply>,
}

impl Owed {
    /// The earliest deadline owed, and the earliest point of giving up on one; `None` once
    /// every item is answered.
    fn poll_timeout(&self) -> Option<Deadline> {
        let owed = self.replies.iter().filter(|r| r.to.is_some()).map(|r| r.by);
        owed.reduce(|a, b| Deadline {
            at: a.at.min(b.at),
            give_up: a.give_up.min(b.give_up),
        })
    }

    /// That deadline passed, at `now`: every item past its own deadline — and past its
    /// giving up, unless this process has `caught_up` with its tasks — is answered
    /// `MaybeSent`.
    fn handle_timeout(&mut self, now: Instant, caught_up: bool) {
        let late = |by: Deadline| by.at <= now && (by.give_up <= now || caught_up);
        for reply in self.replies.iter_mut().filter(|r| late(r.by)) {
            if let Some(to) = reply.to.take() {
                let within = reply.by.at.saturating_duration_since(self.sent);
                let _ = to.send(Err(SendFailure::MaybeSent(FailureDetail::new(
                    FailureKind::Timeout,
                    format!("no reply within {within:?}"),
                ))));
            }
        }
    }
}

/// A flusher's place among the [`MAX_IN_FLIGHT`]. Dropped while held — the flusher panicked
/// or was aborted — it is handed to a new flusher task if items wait (and a runtime runs to
/// start one), and given back otherwise (invariant 3).
struct FlusherPlace<'a> {
    backend: &'a RedisBackend,
    held: bool,
}

impl Drop for FlusherPlace<'_> {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let runtime = tokio::runtime::Handle::try_current();
        if self.backend.batcher().hand_on(runtime.is_ok())
            && let Ok(runtime) = runtime
        {
            runtime.spawn(flush(self.backend.clone()));
        }
    }
}

/// The connection for a flusher's call: the shared one, or one obtained by the time the
/// items waiting allow (`Batcher::connect_by`). Every failure is `NotSent`.
async fn connection(backend: &RedisBackend) -> Result<(u64, Connected), SendFailure> {
    if let Some(current) = backend.current_connection() {
        return Ok(current);
    }
    let bound = backend.batcher().connect_by(backend.connect_timeout());
    backend.connection(bound, "").await
}
