//! Coalescing: the operations of concurrent callers travel as one `EVALSHA` of
//! `lua/batch.lua` per round trip, each with its own reply.
//!
//! A caller submits one [`Item`] and waits for its own result. [`MAX_IN_FLIGHT`] call slots
//! bound the script calls in flight; each taken slot is a flusher task that takes what
//! waits, up to [`MAX_ITEMS`] at a time, sends it as one script call and hands every item
//! its reply. A caller that finds no call slot taken takes one and lets the tasks woken
//! with it queue their items first (one turn of the scheduler), so operations that arrive
//! together leave together: if others queued, it hands the slot to a flusher; if its item
//! is still alone, it sends it from its own task, at once — no task to start and wake, the
//! cost that dominates a lone round trip on a quiet machine. While a call is in
//! flight, another starts only once [`ANOTHER_CALL`] items wait; fewer leave with the next
//! call of a running flusher, which also lets the callers it just answered queue their next
//! operations first. The busier the connection, the larger the calls — and the fewer of
//! them Redis runs per operation (a script call's fixed cost is about that of four
//! refusals). Two calls in flight are kept apart: a flusher whose reply arrives after
//! another call was answered lets that call's callers send their next call before it
//! answers its own, so Redis never gets both at once (it would answer them together).
//!
//! # Invariants
//!
//! 1. An item is *waiting* (in the queue) or *taken* (in a batch being sent), and only the
//!    queue's lock moves it from one to the other. A caller whose deadline passes while its
//!    item waits takes it back out and reports `NotSent` — it was never written; one whose
//!    item was taken reports its reply if it came, `MaybeSent` otherwise.
//! 2. Every taken item gets exactly one result: its own reply, its own error, or the failure
//!    of the whole call (no connection, timeout, a refusal before running).
//! 3. There are never more than [`MAX_IN_FLIGHT`] call slots taken, each by one flusher or
//!    by one caller sending its lone item, and a slot is given back only after the queue was
//!    found empty under the lock; a holder that ends or dies holding one (a caller whose
//!    call is done or dropped, a flusher that panicked or was aborted) passes it to a new
//!    flusher if items wait. So no waiting item is left without a flusher while the runtime
//!    runs. A caller sending its lone item answers no one else: dropping it never costs
//!    another operation its reply.
//! 4. One item's error is that item's: the script runs each item under `pcall`, and a batch
//!    refused as a whole for a reason that may concern only some of its keys (`NOPERM`) is
//!    sent again item by item — it provably did not run.
//! 5. An idle call is never held back: when no call slot is taken, the caller sends its
//!    item — alone, or with those queued meanwhile by a flusher it starts — after the tasks
//!    already runnable have run. An item that finds a call in flight waits at most until
//!    one of the calls in flight ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{RedisBackend, scripts};
use crate::backend::{FailureDetail, FailureKind, SendFailure};
use crate::protocol::{Attempt, LeaseKeys, LeaseRequest};

/// Script calls in flight at once, at most. More than one lets this process prepare and
/// answer calls while Redis runs another; four measured best on two cores (W2 of the load
/// benchmark: 57k cycles/s against 35k with two, current-thread runtime).
pub(super) const MAX_IN_FLIGHT: usize = 4;
/// Items per script call, at most. Smaller calls keep Redis and this process working at
/// the same time (one call of everything waiting would have each wait for the other), and
/// bound how long one call keeps Redis busy.
pub(super) const MAX_ITEMS: usize = 32;
/// Items waiting that make a busy batcher start another call beside those in flight. Fewer
/// wait for a running flusher's next call: one round trip at most, and each call carries
/// enough operations to be worth its fixed cost to Redis (a script call's set-up and reply
/// cost it about as much as four refusals).
pub(super) const ANOTHER_CALL: usize = MAX_ITEMS / 4;

/// One result of one item.
pub(super) type ItemResult = Result<Value, SendFailure>;

/// One operation on one lease, owning its keys and arguments so it can wait in the queue:
/// the two arguments `lua/batch.lua` takes per item, ready to send.
///
/// No `Debug`: it holds the owner token, a bearer secret.
pub(super) struct Item {
    lease: String,
    /// The slot keys a counted lease's acquisition reads (`LeaseKeys::slot_keys`), in
    /// place of `lease`; empty for every other item.
    slots: Vec<String>,
    /// The group's fence counter: acquire only.
    fence: Option<String>,
    /// The kind letter, then for a counted acquisition the number of slots and a space,
    /// then the ttl in milliseconds for acquire and renew (for an acquire, then its
    /// lock-delay after a slash if it has one), then for an acquire the holder label if
    /// any: `A30000`, `A30000 web-7`, `A30000/2000`, `P4 30000`.
    head: String,
    /// `"<owner> <op> "`: the lease value's prefix while this attempt holds it.
    mine: String,
}

impl Item {
    fn new(keys: &LeaseKeys, attempt: &Attempt, fence: bool, head: String) -> Self {
        let (owner, operation) = (attempt.owner().expose(), attempt.operation().as_str());
        let mut mine = String::with_capacity(owner.len() + operation.len() + 2);
        for part in [owner, " ", operation, " "] {
            mine.push_str(part);
        }
        Self {
            lease: keys.lease.clone(),
            slots: Vec::new(),
            fence: fence.then(|| keys.fence.clone()),
            head,
            mine,
        }
    }

    pub(super) fn acquire(keys: &LeaseKeys, request: &LeaseRequest) -> Self {
        // The ttl, and its lock-delay after a slash: `30000/2000`.
        let ttl = match request.lock_delay() {
            None => request.ttl().as_millis().to_string(),
            Some(delay) => format!("{}/{}", request.ttl().as_millis(), delay.as_millis()),
        };
        let holder = request.holder();
        // A counted lease's acquisition reads every slot; keys that already name a slot
        // are read as a lease of their own.
        let slots = match keys.slot() {
            None if keys.permits() > 1 => keys.permits(),
            _ => 0,
        };
        let head = match (slots, holder) {
            // A label holds no space (`HolderLabel`): the script splits at the first one.
            (0, Some(holder)) => format!("A{ttl} {holder}"),
            (0, None) => format!("A{ttl}"),
            (n, Some(holder)) => format!("P{n} {ttl} {holder}"),
            (n, None) => format!("P{n} {ttl}"),
        };
        let mut item = Self::new(keys, request.attempt(), true, head);
        if slots > 0 {
            item.slots = keys.slot_keys();
        }
        item
    }

    pub(super) fn renew(keys: &LeaseKeys, attempt: &Attempt, ttl: Duration) -> Self {
        Self::new(keys, attempt, false, format!("N{}", ttl.as_millis()))
    }

    /// The script publishes the release notice on `keys.release_channel`, which it derives
    /// from the lease key by the same rule ([`LeaseKeys`]).
    pub(super) fn release(keys: &LeaseKeys, attempt: &Attempt) -> Self {
        Self::new(keys, attempt, false, "R".to_owned())
    }

    pub(super) fn inspect(keys: &LeaseKeys, attempt: &Attempt) -> Self {
        Self::new(keys, attempt, false, "I".to_owned())
    }

    /// The key a cluster routes the item by.
    pub(super) fn route(&self) -> &str {
        &self.lease
    }
}

/// The `EVALSHA` of `lua/batch.lua` for `items` under call id `id`: their keys, then the
/// id and their arguments.
pub(super) fn command(id: u64, items: &[Item]) -> Cmd {
    let keys: usize = items
        .iter()
        .map(|i| i.slots.len().max(1) + usize::from(i.fence.is_some()))
        .sum();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts::BATCH.get_hash()).arg(keys);
    for item in items {
        if item.slots.is_empty() {
            cmd.arg(&item.lease);
        }
        for slot in &item.slots {
            cmd.arg(slot);
        }
        if let Some(fence) = &item.fence {
            cmd.arg(fence);
        }
    }
    cmd.arg(id);
    for item in items {
        cmd.arg(&item.head).arg(&item.mine);
    }
    cmd
}

/// The queue of items waiting for a flusher.
#[derive(Default)]
pub(super) struct Batcher {
    queue: Mutex<Queue>,
    /// Calls answered so far: a flusher whose reply arrives after another call was answered
    /// lets that call's callers go first (see `flush`).
    answered: AtomicU64,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// Flusher tasks running (invariant 3).
    flushers: usize,
    next_id: u64,
}

struct Waiting {
    id: u64,
    item: Item,
    deadline: Instant,
    reply: oneshot::Sender<ItemResult>,
}

/// What a flusher took out of the queue for one script call.
struct Taken {
    items: Vec<Item>,
    replies: Vec<oneshot::Sender<ItemResult>>,
    /// The earliest and the latest deadline among the items (see `RedisBackend::send`).
    deadlines: Deadlines,
}

/// When a script call gives up on its reply.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadlines {
    /// The earliest item's: a reply not in by then marks the connection for replacement
    /// (calls after it start afresh), as any timed-out call does.
    pub(super) first: Instant,
    /// The latest item's: the call waits no longer.
    pub(super) last: Instant,
}

impl Deadlines {
    /// One item's deadline.
    pub(super) fn one(deadline: Instant) -> Self {
        Self {
            first: deadline,
            last: deadline,
        }
    }
}

impl Batcher {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every change under the lock leaves the queue consistent (one push, one removal,
        // one counter step); a panic elsewhere while holding it does not make it invalid.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item`; returns its id and whether the caller now holds a call slot (one was
    /// free and is now taken for it): it must send or hand it to a flusher.
    fn push(
        &self,
        item: Item,
        deadline: Instant,
        reply: oneshot::Sender<ItemResult>,
    ) -> (u64, bool) {
        let mut queue = self.lock();
        let id = queue.next_id;
        queue.next_id += 1;
        queue.waiting.push_back(Waiting {
            id,
            item,
            deadline,
            reply,
        });
        // An idle batcher sends at once; a busy one adds a call only for enough items to be
        // worth one — the rest ride with the next call of a running flusher.
        let start = queue.flushers == 0
            || (queue.flushers < MAX_IN_FLIGHT && queue.waiting.len() >= ANOTHER_CALL);
        if start {
            queue.flushers += 1;
        }
        (id, start)
    }

    /// Takes item `id` out of the queue if it is the only one waiting, for its caller —
    /// which holds a call slot — to send alone.
    fn take_alone(&self, id: u64) -> Option<Item> {
        let mut queue = self.lock();
        if queue.waiting.len() != 1 || queue.waiting.front().is_none_or(|w| w.id != id) {
            return None;
        }
        queue.waiting.pop_front().map(|w| w.item)
    }

    /// Takes item `id` back out if it is still waiting (invariant 1); whether it was.
    fn withdraw(&self, id: u64) -> bool {
        let mut queue = self.lock();
        let Some(at) = queue.waiting.iter().position(|w| w.id == id) else {
            return false;
        };
        queue.waiting.remove(at);
        true
    }

    /// The latest deadline among the waiting items — or `None`, having given up this
    /// flusher's slot, when nothing waits (invariant 3).
    fn latest_deadline(&self) -> Option<Instant> {
        let mut queue = self.lock();
        let latest = queue.waiting.iter().map(|w| w.deadline).max();
        if latest.is_none() {
            queue.flushers -= 1;
        }
        latest
    }

    /// The id the next item will get: items queued from now on have this id or a larger one.
    fn next_id(&self) -> u64 {
        self.lock().next_id
    }

    /// Takes up to [`MAX_ITEMS`] waiting items whose id is below `before`. Items whose
    /// deadline has passed are answered `NotSent` instead: their callers have given up, and
    /// they were never written.
    fn take(&self, now: Instant, before: u64) -> Taken {
        let mut queue = self.lock();
        let mut taken = Taken {
            items: Vec::new(),
            replies: Vec::new(),
            deadlines: Deadlines::one(now),
        };
        let mut deadlines: Option<Deadlines> = None;
        while taken.items.len() < MAX_ITEMS {
            if queue.waiting.front().is_none_or(|w| w.id >= before) {
                break;
            }
            let Some(waiting) = queue.waiting.pop_front() else {
                break;
            };
            if waiting.deadline <= now {
                let _ = waiting.reply.send(Err(expired()));
                continue;
            }
            let one = Deadlines::one(waiting.deadline);
            deadlines = Some(deadlines.map_or(one, |d| Deadlines {
                first: d.first.min(one.first),
                last: d.last.max(one.last),
            }));
            taken.items.push(waiting.item);
            taken.replies.push(waiting.reply);
        }
        if let Some(deadlines) = deadlines {
            taken.deadlines = deadlines;
        }
        taken
    }
}

fn expired() -> SendFailure {
    SendFailure::NotSent(FailureDetail::new(
        FailureKind::Timeout,
        "not sent before the call's deadline: earlier calls were still in flight",
    ))
}

/// Sends `item` in the next batch and waits for its result, until `deadline` (`timeout`
/// after the call started).
///
/// # Cancel safety
/// Dropping the future while the item waits takes it out of the queue: it is never sent.
/// Once taken it may run; its reply is then dropped.
pub(super) async fn submit(
    backend: &RedisBackend,
    item: Item,
    deadline: Instant,
    timeout: Duration,
) -> ItemResult {
    let batcher = &backend.inner.batcher;
    let (tx, mut rx) = oneshot::channel();
    let (id, start) = batcher.push(item, deadline, tx);
    let mut queued = Queued {
        batcher,
        id: Some(id),
    };
    if start {
        let mut slot = Slot {
            backend,
            held: true,
        };
        // Companions woken by the same event queue theirs first (invariant 5).
        tokio::task::yield_now().await;
        if let Some(item) = batcher.take_alone(id) {
            queued.id = None;
            // `slot` drops after the call: handed to a flusher if items queued meanwhile.
            return backend.alone(&item, deadline).await;
        }
        slot.held = false;
        tokio::spawn(flush(backend.clone()));
    }
    let result = match tokio::time::timeout_at(deadline, &mut rx).await {
        Ok(Ok(result)) => result,
        // The flusher ended (panic, runtime shutdown) after taking the item.
        Ok(Err(_)) => Err(SendFailure::MaybeSent(FailureDetail::new(
            FailureKind::ConnectionLost,
            "the call carrying this operation ended without a reply",
        ))),
        Err(_) if batcher.withdraw(id) => Err(SendFailure::NotSent(if backend.obtaining() {
            FailureDetail::new(
                FailureKind::Connect,
                format!("no connection to Redis within {timeout:?}"),
            )
        } else {
            FailureDetail::new(
                FailureKind::Timeout,
                format!("not sent within {timeout:?}: earlier calls were still in flight"),
            )
        })),
        // Taken: the reply may have arrived just now.
        Err(_) => rx.try_recv().unwrap_or_else(|_| {
            Err(SendFailure::MaybeSent(FailureDetail::new(
                FailureKind::Timeout,
                format!("no reply within {timeout:?}"),
            )))
        }),
    };
    queued.id = None;
    result
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
    let mut slot = Slot {
        backend: &backend,
        held: true,
    };
    let batcher = &backend.inner.batcher;
    loop {
        // Calls woken by the same event (timers of one tick, say), and the callers the last
        // batch answered (a renewal loop, a contender trying again), queue up before a batch
        // is taken; an idle call loses nothing but this one turn of the scheduler.
        tokio::task::yield_now().await;
        let Some(bound) = batcher.latest_deadline() else {
            slot.held = false;
            return;
        };
        // The connection first: items keep waiting — withdrawable, provably unsent — until it
        // is there.
        let arrived_later = batcher.next_id();
        let connection = backend.connection(bound, "").await;
        let (taken, results) = match connection {
            Ok((generation, connected)) => {
                let taken = batcher.take(Instant::now(), u64::MAX);
                if taken.items.is_empty() {
                    continue;
                }
                let answered = batcher.answered.load(Ordering::Relaxed);
                let results = backend
                    .send(generation, &connected, &taken.items, taken.deadlines)
                    .await;
                // Redis answers what one read of the connection brought only after running all
                // of it, so calls sent together come back together; answered together, their
                // callers' next operations leave together again, and Redis and this process
                // take turns instead of working at once (W2 of the load benchmark on a
                // current-thread runtime: Redis 65% busy). When another call was answered
                // while this one was out, its callers go first and their call leaves before
                // this one's callers queue theirs: the two calls stay a half-turn apart
                // (Redis 96% busy, 1.5× the cycles). One turn of the scheduler, taken only
                // when two calls overlapped.
                if batcher.answered.load(Ordering::Relaxed) != answered {
                    tokio::task::yield_now().await;
                }
                (taken, results)
            }
            // The failure answers the items that waited for this attempt; later ones get an
            // attempt of their own.
            Err(failure) => {
                let taken = batcher.take(Instant::now(), arrived_later);
                let results = vec![Err(failure); taken.items.len()];
                (taken, results)
            }
        };
        for (reply, result) in taken.replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
        batcher.answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// A flusher's call slot. Dropped while held — the flusher panicked or was aborted — it is
/// handed to a new flusher if items wait (and a runtime runs to start one), and given back
/// otherwise (invariant 3).
struct Slot<'a> {
    backend: &'a RedisBackend,
    held: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let batcher = &self.backend.inner.batcher;
        let mut queue = batcher.lock();
        let runtime = tokio::runtime::Handle::try_current();
        match runtime {
            Ok(runtime) if !queue.waiting.is_empty() => {
                drop(queue);
                runtime.spawn(flush(self.backend.clone()));
            }
            _ => queue.flushers -= 1,
        }
    }
}
