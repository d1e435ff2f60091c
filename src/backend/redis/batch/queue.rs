//! The bounded queue of operations waiting to be sent: two lanes, renewals and releases
//! ahead of acquisitions and reads, and the admission limit.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::super::ServerCapabilities;
use super::deadline::{Bound, Deadline, Deadlines};
use super::item::Item;
use super::{ANOTHER_CALL, ItemResult, MAX_IN_FLIGHT};
use crate::backend::{FailureDetail, FailureKind, SendFailure};

/// The queue of items waiting for a flusher.
pub(in super::super) struct Batcher {
    queue: Mutex<Queue>,
    /// Calls answered so far: a flusher whose reply arrives after another call was answered
    /// lets that call's callers go first (see `flush`).
    pub(super) answered: AtomicU64,
    /// Acquisitions and reads are refused while this many items wait.
    limit: usize,
}

#[derive(Default)]
struct Queue {
    /// Renewals and releases (`Item::urgent`): taken first.
    urgent: VecDeque<Waiting>,
    /// Acquisitions and reads. In each lane ids increase from front to back.
    others: VecDeque<Waiting>,
    /// Flushers running, tasks or callers sending their lone item (invariant 3).
    flushers: usize,
    next_id: u64,
}

impl Queue {
    fn len(&self) -> usize {
        self.urgent.len() + self.others.len()
    }
}

struct Waiting {
    id: u64,
    item: Item,
    bound: Bound,
    reply: oneshot::Sender<ItemResult>,
}

/// What a flusher took out of the queue for one script call.
pub(super) struct Taken {
    /// The instant just before the call is written.
    pub(super) sent: Instant,
    pub(super) items: Vec<Item>,
    pub(super) replies: Vec<Reply>,
    pub(super) deadlines: Deadlines,
}

/// Where one taken item's result goes, and by when.
pub(super) struct Reply {
    /// `None` once answered.
    pub(super) to: Option<oneshot::Sender<ItemResult>>,
    pub(super) by: Deadline,
}

impl Batcher {
    /// An empty queue that admits acquisitions and reads while fewer than `limit` items wait.
    pub(in super::super) fn new(limit: usize) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            answered: AtomicU64::new(0),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every change under the lock leaves the queue consistent (one push, one removal,
        // one counter step); a panic elsewhere while holding it does not make it invalid.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item` — unless it is an acquisition or a read and `limit` items already
    /// wait (`None`). Returns its id and whether the caller is now a flusher (fewer than
    /// [`MAX_IN_FLIGHT`] ran, and its place is taken): it must send or hand its place to a
    /// flusher task.
    pub(super) fn push(
        &self,
        item: Item,
        bound: Bound,
        reply: oneshot::Sender<ItemResult>,
    ) -> Option<(u64, bool)> {
        let mut queue = self.lock();
        let urgent = item.urgent();
        if !urgent && queue.len() >= self.limit {
            return None;
        }
        let id = queue.next_id;
        queue.next_id += 1;
        let waiting = Waiting {
            id,
            item,
            bound,
            reply,
        };
        if urgent {
            queue.urgent.push_back(waiting);
        } else {
            queue.others.push_back(waiting);
        }
        // An idle batcher sends at once; a busy one adds a call only for enough items to be
        // worth one — the rest ride with the next call of a running flusher.
        let start =
            queue.flushers == 0 || (queue.flushers < MAX_IN_FLIGHT && queue.len() >= ANOTHER_CALL);
        if start {
            queue.flushers += 1;
        }
        Some((id, start))
    }

    /// The refusal of an item that found the queue full.
    pub(super) fn full(&self) -> SendFailure {
        SendFailure::NotSent(FailureDetail::new(
            FailureKind::QueueFull,
            format!(
                "{} operations already wait to be sent (the queue limit); this one was refused \
                 and not sent",
                self.limit
            ),
        ))
    }

    /// Takes item `id` out of the queue if it is the only one waiting, for its caller —
    /// a flusher — to send alone.
    pub(super) fn take_alone(&self, id: u64) -> Option<Item> {
        let mut queue = self.lock();
        if queue.len() != 1 {
            return None;
        }
        let lane = if queue.urgent.is_empty() {
            &mut queue.others
        } else {
            &mut queue.urgent
        };
        if lane.front().is_none_or(|w| w.id != id) {
            return None;
        }
        lane.pop_front().map(|w| w.item)
    }

    /// Takes item `id` back out if it is still waiting (invariant 1); whether it was.
    pub(super) fn withdraw(&self, id: u64) -> bool {
        let mut queue = self.lock();
        let Queue { urgent, others, .. } = &mut *queue;
        for lane in [urgent, others] {
            if let Ok(at) = lane.binary_search_by_key(&id, |w| w.id) {
                lane.remove(at);
                return true;
            }
        }
        false
    }

    /// Whether anything waits; if nothing does, this flusher's place is given back
    /// (invariant 3).
    pub(super) fn keep_flushing(&self) -> bool {
        let mut queue = self.lock();
        let waiting = queue.len() > 0;
        if !waiting {
            queue.flushers -= 1;
        }
        waiting
    }

    /// A flusher ends holding its place (invariant 3): whether items wait for a new flusher
    /// task to take the place on — given a runtime to start one in; otherwise the place is
    /// given back.
    pub(super) fn hand_on(&self, runtime: bool) -> bool {
        let mut queue = self.lock();
        let hand_on = runtime && queue.len() > 0;
        if !hand_on {
            queue.flushers -= 1;
        }
        hand_on
    }

    /// The id the next item will get: items queued from now on have this id or a larger one.
    pub(super) fn next_id(&self) -> u64 {
        self.lock().next_id
    }

    /// By when a connection for the waiting items must be had: `connect_timeout` from
    /// now, or sooner if no item waiting would wait that long (its timeout, or a renewal's
    /// deadline).
    pub(super) fn connect_by(&self, connect_timeout: Duration) -> Instant {
        let now = Instant::now();
        let queue = self.lock();
        let longest = queue
            .urgent
            .iter()
            .chain(&queue.others)
            .map(|w| w.bound.connect_within(now))
            .max()
            .unwrap_or_default();
        now + longest.min(connect_timeout)
    }

    /// Takes up to `MAX_ITEMS` waiting items the script runs, and up to `MAX_NATIVE_ITEMS`
    /// a node with `capabilities` runs by its own commands, renewals and releases first, for
    /// a call written now. Items whose deadline has passed are answered `NotSent` instead: their
    /// callers have given up, and they were never written.
    pub(super) fn take(&self, now: Instant, capabilities: ServerCapabilities) -> Taken {
        let mut queue = self.lock();
        // Room for what this call can take, so that it is not grown item by item.
        let most = if capabilities.renews_natively() {
            super::MAX_ITEMS + super::MAX_NATIVE_ITEMS
        } else {
            super::MAX_ITEMS
        };
        let room = queue.len().min(most);
        let mut taken = Taken {
            sent: now,
            items: Vec::with_capacity(room),
            replies: Vec::with_capacity(room),
            deadlines: Deadlines::one(Deadline::at(now)),
        };
        let mut deadlines: Option<Deadlines> = None;
        let (mut scripted, mut native) = (0, 0);
        while scripted < super::MAX_ITEMS && native < super::MAX_NATIVE_ITEMS {
            let Some(waiting) = queue
                .urgent
                .pop_front()
                .or_else(|| queue.others.pop_front())
            else {
                break;
            };
            if waiting.bound.send_by().is_some_and(|by| by <= now) {
                let _ = waiting.reply.send(Err(expired()));
                continue;
            }
            if waiting.item.native(capabilities) {
                native += 1;
            } else {
                scripted += 1;
            }
            let by = waiting.bound.deadline(now);
            // The call is judged by its items' round trips; each item's caller by its own
            // deadline (`by`), which `answer_late` keeps.
            let one = Deadlines::one(waiting.bound.round_trip(now));
            deadlines = Some(deadlines.map_or(one, |d| d.and(one)));
            taken.items.push(waiting.item);
            taken.replies.push(Reply {
                to: Some(waiting.reply),
                by,
            });
        }
        if let Some(deadlines) = deadlines {
            taken.deadlines = deadlines;
        }
        taken
    }

    /// Answers every item waiting whose id is below `before` with `failure`: a connection
    /// attempt made for them failed, or the connection stopped answering. None of them was
    /// written.
    pub(super) fn fail(&self, before: u64, failure: &SendFailure) {
        let failed: Vec<Waiting> = {
            let mut queue = self.lock();
            let Queue { urgent, others, .. } = &mut *queue;
            [urgent, others]
                .into_iter()
                .flat_map(|lane| {
                    let n = lane.partition_point(|w| w.id < before);
                    lane.drain(..n).collect::<Vec<_>>()
                })
                .collect()
        };
        for waiting in failed {
            let _ = waiting.reply.send(Err(failure.clone()));
        }
    }
}

fn expired() -> SendFailure {
    SendFailure::NotSent(FailureDetail::new(
        FailureKind::Timeout,
        "not sent before the call's deadline: earlier calls were still in flight",
    ))
}

#[cfg(test)]
mod tests;
