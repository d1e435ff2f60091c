//! The lease actors' timers: one task per runtime keeps every lease actor's one armed
//! deadline and sends its `Tick` when the deadline comes.
//!
//! Why not a task per timer (ractor's `send_after`): a lease actor re-arms on every event,
//! so a task per timer is a task spawned and aborted per renewal, and a task's 384 bytes
//! kept per held lease (docs/performance.md, "Memory"). Here arming is a message to one
//! task, and a deadline costs an entry in its queue.
//!
//! What a lease actor may rely on: a deadline armed is ticked at or after it, unless it was
//! replaced or disarmed first, by a task on the actor's own tokio runtime. If a timer task
//! ends with deadlines in its queue (its runtime shut down), it ticks each of them at once:
//! an actor woken early finds nothing due and arms again, which starts another task. No
//! deadline is lost in silence.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::message::{Command, LeaseActorMsg};

/// A lease actor's key in the queue: its actor id (unique in the process).
pub(crate) type LeaseKey = u64;

/// Requests to the timer task; per sender, applied in the order sent.
#[derive(Debug)]
enum Request {
    /// Arms `lease`'s timer for `at`, replacing the one armed for `previous`.
    Arm {
        lease: LeaseKey,
        at: Instant,
        previous: Option<Instant>,
        tick: Tick,
    },
    /// Disarms `lease`'s timer armed for `at`.
    Disarm { lease: LeaseKey, at: Instant },
}

/// What a deadline sends when it comes.
#[derive(Debug)]
struct Tick {
    actor: ActorRef<LeaseActorMsg>,
    generation: u64,
}

impl Tick {
    fn send(self) {
        // The actor may have ended since; nothing to tell then.
        let _ = self
            .actor
            .send_message(LeaseActorMsg(Command::Tick(self.generation)));
    }
}

/// A `LeaseRuntime`'s timers: one timer task per tokio runtime its lease actors run on
/// (an actor's deadlines must not wait on a runtime nobody drives). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timers {
    /// The timer task of each tokio runtime, by the runtime's id.
    tasks: Arc<Mutex<Vec<(tokio::runtime::Id, Inbox)>>>,
}

type Inbox = mpsc::UnboundedSender<Request>;

impl Timers {
    /// The inbox of the current runtime's timer task, started if none runs (none yet, or
    /// it ended with its runtime). Called from a lease actor's handler, so on its runtime.
    fn here(&self) -> Inbox {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        // Every update under the lock is one push or retain: a poisoned lock is used as is.
        tasks.retain(|(_, inbox)| !inbox.is_closed());
        let runtime = tokio::runtime::Handle::current().id();
        if let Some((_, inbox)) = tasks.iter().find(|(id, _)| *id == runtime) {
            return inbox.clone();
        }
        let (inbox, requests) = mpsc::unbounded_channel();
        tokio::spawn(run(requests));
        tasks.push((runtime, inbox.clone()));
        inbox
    }
}

/// One lease actor's armed timer. Dropped, it disarms.
#[derive(Debug)]
pub(crate) struct ArmedTimer {
    timers: Timers,
    /// The timer task this actor arms with, once it armed.
    inbox: Option<Inbox>,
    lease: LeaseKey,
    /// The deadline armed and not yet ticked.
    at: Option<Instant>,
    /// Bumped at every arming and disarming: a `Tick` carrying an older one is stale.
    generation: u64,
}

impl ArmedTimer {
    pub(crate) fn new(timers: Timers, lease: LeaseKey) -> Self {
        Self {
            timers,
            inbox: None,
            lease,
            at: None,
            generation: 0,
        }
    }

    /// The deadline armed and not yet ticked.
    #[cfg(test)]
    pub(crate) fn armed(&self) -> Option<Instant> {
        self.at
    }

    /// Whether a `Tick(generation)` answers the deadline armed now, not an older one.
    pub(crate) fn is_current(&self, generation: u64) -> bool {
        generation == self.generation
    }

    /// Arms `at`, replacing the deadline armed before: `actor` is sent a `Tick` of the
    /// current generation. A deadline armed already is left as it is.
    pub(crate) fn arm(&mut self, actor: &ActorRef<LeaseActorMsg>, at: Instant) {
        if self.at == Some(at) {
            return;
        }
        self.generation += 1;
        tracing::trace!(?at, "lease actor timer armed");
        let request = Request::Arm {
            lease: self.lease,
            at,
            previous: self.at.replace(at),
            tick: Tick {
                actor: actor.clone(),
                generation: self.generation,
            },
        };
        // The inbox kept is that of this actor's own runtime (it arms from its handlers);
        // closed, that task ended with its runtime, and `here` starts another.
        let inbox = match self.inbox.take() {
            Some(inbox) if !inbox.is_closed() => inbox,
            _ => self.timers.here(),
        };
        // A send fails only if even a task just started is gone: the runtime is shutting
        // down, its actors with it, and no deadline can be kept. Never retried, so a
        // handler caught in a shutdown does not spin.
        if inbox.send(request).is_ok() {
            self.inbox = Some(inbox);
        }
    }

    /// The armed deadline's tick arrived: nothing is armed any more.
    pub(crate) fn ticked(&mut self) {
        self.at = None;
    }

    /// Disarms the deadline armed, if any; a tick already on its way is stale from now on.
    /// Needs no runtime (it may run in a drop): a task that ended holds no deadline.
    pub(crate) fn disarm(&mut self) {
        self.generation += 1;
        if let (Some(at), Some(inbox)) = (self.at.take(), &self.inbox) {
            let _ = inbox.send(Request::Disarm {
                lease: self.lease,
                at,
            });
        }
    }
}

impl Drop for ArmedTimer {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// The deadlines armed, earliest first: sans I/O, so the timer task only waits and sends.
#[derive(Debug, Default)]
struct Queue {
    armed: BTreeMap<(Instant, LeaseKey), Tick>,
}

impl Queue {
    fn apply(&mut self, request: Request) {
        match request {
            Request::Arm {
                lease,
                at,
                previous,
                tick,
            } => {
                if let Some(previous) = previous {
                    self.armed.remove(&(previous, lease));
                }
                self.armed.insert((at, lease), tick);
            }
            Request::Disarm { lease, at } => {
                self.armed.remove(&(at, lease));
            }
        }
    }

    fn next(&self) -> Option<Instant> {
        self.armed.first_key_value().map(|((at, _), _)| *at)
    }

    /// Takes the deadlines due at `now`.
    fn due(&mut self, now: Instant) -> Vec<Tick> {
        let later = self.armed.split_off(&(now, LeaseKey::MAX));
        let due = std::mem::replace(&mut self.armed, later);
        // (now, MAX) itself stays behind in `later`; no lease has that key.
        due.into_values().collect()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // The task ends with deadlines armed: tick them now, so their actors arm again.
        for tick in std::mem::take(&mut self.armed).into_values() {
            tick.send();
        }
    }
}

/// Requests applied per turn, at most.
const BATCH: usize = 64;

async fn run(mut inbox: mpsc::UnboundedReceiver<Request>) {
    let mut queue = Queue::default();
    let mut requests = Vec::with_capacity(BATCH);
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    loop {
        let next = queue.next();
        if let Some(at) = next
            && sleep.deadline() != at
        {
            sleep.as_mut().reset(at);
        }
        tokio::select! {
            biased;
            received = inbox.recv_many(&mut requests, BATCH) => {
                if received == 0 {
                    // Every sender is gone: no lease actor of this runtime is left.
                    return;
                }
                for request in requests.drain(..) {
                    queue.apply(request);
                }
            }
            () = &mut sleep, if next.is_some() => {
                for tick in queue.due(Instant::now()) {
                    tick.send();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
