//! `LeaseClient::observe`: who holds a resource now, and each time that changes — for
//! followers of a leader election and for dashboards.
//!
//! One task per observer reads the lease (each slot of it: `inspect_slots`) when a release
//! or acquisition notice arrives, when a holder's TTL or a lock-delay runs out (an expiry
//! publishes nothing), and at least every
//! `poll` (a deletion from outside publishes nothing either, and a subscription can end).
//! What it reads is published on a `watch` channel, only when the holder changed.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{FailureDetail, ReleaseNotices};
use crate::error::LeaseError;
use crate::lease::{InspectOutcome, LeaseClient};
#[cfg(doc)]
use crate::protocol::LeaseRequestBuilder;
use crate::protocol::limits::OBSERVE_POLL;
use crate::protocol::{FencingToken, HolderLabel, LeaseRequest};
use crate::telemetry::LineLength;

/// Who holds a resource, as an observer last read it.
///
/// Two readings are equal when they name the same holdings (tokens and labels); an expiry
/// estimate moves with every renewal and is not a change of holder.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ResourceHolder {
    /// Not read yet, or the last read failed (`detail` says how): nothing is known.
    Unknown {
        /// Why, once a read failed; `None` before the first read.
        detail: Option<FailureDetail>,
    },
    /// Nobody held it at the last read, and nothing refuses a holder.
    Free,
    /// Held under `token`, by `holder` if its acquisition gave a label.
    Held {
        /// The holder's fencing token.
        token: FencingToken,
        /// The holder's label ([`LeaseRequestBuilder::holder`]), if any.
        holder: Option<HolderLabel>,
        /// When the lease expires unless renewed, as of the last read (local clock; a
        /// renewal moves it without counting as a change).
        expires_at: Instant,
    },
    /// Nobody holds it, but no holder can take it yet: the last lease (`token`, `holder`)
    /// ended without a release and its lock-delay ([`LeaseRequestBuilder::lock_delay`])
    /// refuses every acquisition until `free_at`; the last holder's work may still be
    /// finishing. A follower that acts now is refused (`LockDelayed`).
    LockDelayed {
        /// The ended lease's fencing token.
        token: FencingToken,
        /// The ended lease's label, if its acquisition gave one.
        holder: Option<HolderLabel>,
        /// When the lock-delay ends, as of the last read (local clock).
        free_at: Instant,
    },
    /// A counted lease ([`LeaseRequestBuilder::permits`] > 1): each slot as last read, in
    /// slot order — [`Free`](Self::Free), [`Held`](Self::Held) or
    /// [`LockDelayed`](Self::LockDelayed), as a plain lease reads. A slot is free for the
    /// next holder only when it reads `Free`.
    Counted {
        /// One reading per slot.
        slots: Vec<ResourceHolder>,
    },
}

/// What two readings are compared by: the kind of holding, its token and its label —
/// never the time estimates, which a renewal moves.
type Holding<'a> = (u8, Option<FencingToken>, Option<&'a HolderLabel>);

impl PartialEq for ResourceHolder {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Counted { slots: a }, Self::Counted { slots: b }) => a == b,
            _ => self.holding() == other.holding(),
        }
    }
}

impl Eq for ResourceHolder {}

impl ResourceHolder {
    /// The holder's token, while a plain lease is held (a counted lease's: each slot's).
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Self::Held { token, .. } => Some(*token),
            _ => None,
        }
    }

    /// What a reading is compared by; a counted lease's are its slots'.
    fn holding(&self) -> Holding<'_> {
        match self {
            Self::Free => (0, None, None),
            Self::Held { token, holder, .. } => (1, Some(*token), holder.as_ref()),
            Self::LockDelayed { token, holder, .. } => (2, Some(*token), holder.as_ref()),
            Self::Unknown { .. } => (3, None, None),
            Self::Counted { .. } => (4, None, None),
        }
    }

    /// The reading of `slots` (in slot order), as one slot for a plain lease; `Unknown` if
    /// any slot could not be read.
    fn read(slots: Vec<InspectOutcome>, sent: Instant) -> Self {
        let read: Result<Vec<Self>, FailureDetail> = slots
            .into_iter()
            .map(|slot| Self::read_slot(slot, sent))
            .collect();
        match read {
            Err(detail) => Self::Unknown {
                detail: Some(detail),
            },
            Ok(mut slots) if slots.len() == 1 => slots.pop().unwrap_or(Self::Free),
            Ok(slots) => Self::Counted { slots },
        }
    }

    /// What `read` (sent at `sent`) says of one slot — `Free`, `Held` or `LockDelayed`; the
    /// detail when nothing is known.
    fn read_slot(read: InspectOutcome, sent: Instant) -> Result<Self, FailureDetail> {
        Ok(match read {
            InspectOutcome::HeldByAttempt {
                remaining,
                token,
                holder,
            }
            | InspectOutcome::HeldByOther {
                remaining,
                token,
                holder,
            } => Self::Held {
                token,
                holder,
                expires_at: sent + remaining,
            },
            InspectOutcome::LockDelayed {
                remaining,
                token,
                holder,
            } => Self::LockDelayed {
                token,
                holder,
                free_at: sent + remaining,
            },
            InspectOutcome::Absent => Self::Free,
            InspectOutcome::Unavailable { detail }
            | InspectOutcome::Indeterminate { detail }
            | InspectOutcome::QueueFull { detail } => {
                return Err(detail);
            }
        })
    }

    /// The earliest moment this reading changes without a notice: an expiry publishes
    /// nothing, nor does a lock-delay's end.
    fn silent_change(&self) -> Option<Instant> {
        match self {
            Self::Unknown { .. } | Self::Free => None,
            Self::Held { expires_at, .. } => Some(*expires_at),
            Self::LockDelayed { free_at, .. } => Some(*free_at),
            Self::Counted { slots } => slots.iter().filter_map(Self::silent_change).min(),
        }
    }
}

/// How long after a holder's TTL (or a lock-delay) runs out its expiry is read: the server's clock may be a
/// little behind ours.
const EXPIRY_GRACE: Duration = Duration::from_millis(5);
/// How soon a reader without a subscription (it failed: a timeout, a connection lost, a
/// primary moved) tries again — reading too — when `poll` is longer: one failed subscribe
/// must not leave the observer blind to notices for a whole poll.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// A running observation of one resource; dropping it (and every receiver from
/// [`watch`](Self::watch)) stops it.
#[derive(Debug)]
pub struct LeaseObserver {
    holder: watch::Receiver<ResourceHolder>,
    waiting: watch::Receiver<Option<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LeaseObserver {
    fn drop(&mut self) {
        // Receivers handed out by `watch` see the value freeze; the observer's own reads
        // stop with it.
        self.task.abort();
    }
}

impl LeaseObserver {
    /// Who holds the resource, as last read.
    pub fn current(&self) -> ResourceHolder {
        self.holder.borrow().clone()
    }

    /// A receiver of every change (latest value only, like every `watch`). It stops
    /// changing when the observer is dropped.
    pub fn watch(&self) -> watch::Receiver<ResourceHolder> {
        self.holder.clone()
    }

    /// How many entries the lease's line of waiters held at the last read
    /// ([`LeaseReading::waiting`](crate::LeaseReading::waiting)): `None` before the first
    /// read, or when the line could not be read. A join or a waiter's leaving publishes no
    /// notice: the number is as fresh as the last read (at least every `poll`).
    pub fn waiting(&self) -> Option<u64> {
        *self.waiting.borrow()
    }

    /// A receiver of every change of [`waiting`](Self::waiting) (latest value only). It
    /// stops changing when the observer is dropped.
    pub fn watch_waiting(&self) -> watch::Receiver<Option<u64>> {
        self.waiting.clone()
    }

    /// Waits for the next change of holder and returns it.
    ///
    /// # Cancel safety
    /// Cancel safe: a change that happens while nobody waits is returned by the next call.
    pub async fn changed(&mut self) -> ResourceHolder {
        // The sender lives in the task, which only ends when the observer is dropped.
        let _ = self.holder.changed().await;
        self.holder.borrow_and_update().clone()
    }
}

impl LeaseClient {
    /// Observes who holds the lease `request` names — its purpose, resource and permits —
    /// each time that changes: the holder's token and label, a lock-delay after a lease that
    /// ended unreleased, and for a counted lease each slot. Changes are read one round trip
    /// after the release or acquisition notice that announces them; an expiry (and a
    /// lock-delay's end) when its time runs out; a key deleted from outside within `poll`
    /// (10 ms ..= 1 h). While notices are unavailable (the subscription failed or ended) it
    /// reads and subscribes again every second, or every `poll` if shorter.
    ///
    /// Spawns a task on the current tokio runtime; it reads the lease only, never writes —
    /// the request's attempt is only who reads (a follower passes its own request; a
    /// dashboard one built for the purpose, [`request`](Self::request)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use leasehold::*;
    ///
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let watching = client.request("leader", b"scheduler")?.build()?;
    /// let mut leader = client.observe(&watching, Duration::from_secs(1))?;
    /// let request = client
    ///     .request("leader", b"scheduler")?
    ///     .holder(HolderLabel::new("node-a")?)
    ///     .build()?;
    /// let _lease = client.try_acquire(&request).await?;
    /// let ResourceHolder::Held { holder, .. } = leader.changed().await else { panic!() };
    /// assert_eq!(holder.map(|h| h.to_string()).as_deref(), Some("node-a"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for a `poll` out of bounds, before any I/O.
    ///
    /// # Panics
    /// Outside a tokio runtime (it spawns its task there).
    pub fn observe(
        &self,
        request: &LeaseRequest,
        poll: Duration,
    ) -> Result<LeaseObserver, LeaseError> {
        let poll = OBSERVE_POLL.check(poll)?;
        let (tx, holder) = watch::channel(ResourceHolder::Unknown { detail: None });
        let (line, waiting) = watch::channel(None);
        let reader = Reader {
            client: self.clone(),
            request: request.clone(),
            poll,
        };
        let task = tokio::spawn(reader.run(tx, line));
        Ok(LeaseObserver {
            holder,
            waiting,
            task,
        })
    }
}

struct Reader {
    client: LeaseClient,
    request: LeaseRequest,
    poll: Duration,
}

impl Reader {
    async fn run(self, tx: watch::Sender<ResourceHolder>, line: watch::Sender<Option<u64>>) {
        let mut notices: Option<ReleaseNotices> = None;
        // Dropped with the task: the gauge forgets this observer's line then.
        let mut gauge = LineLength::new(self.request.purpose());
        loop {
            if notices.is_none() {
                // Subscribed before the read: a change after the read is noticed.
                notices = self.subscribe().await;
            }
            let (read, waiting) = self.read().await;
            gauge.set(waiting);
            line.send_if_modified(|current| {
                let changed = *current != waiting;
                *current = waiting;
                changed
            });
            let expiry = read.silent_change().map(|at| at + EXPIRY_GRACE);
            // The same holding keeps its newest expiry but tells nobody.
            tx.send_if_modified(|current| {
                let changed = *current != read;
                *current = read;
                changed
            });
            let next_read = match notices {
                Some(_) => self.poll,
                None => self.poll.min(RESUBSCRIBE),
            };
            let wake = expiry.map_or(Instant::now() + next_read, |at| {
                at.min(Instant::now() + next_read)
            });
            let noticed = async {
                match &mut notices {
                    Some(n) => n.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                alive = noticed => if !alive {
                    // The subscription ended (a connection lost, a primary moved).
                    notices = None;
                },
                () = tokio::time::sleep_until(wake) => {}
                () = tx.closed() => return,
            }
        }
    }

    async fn subscribe(&self) -> Option<ReleaseNotices> {
        let keys = self.client.request_keys(&self.request);
        let timeout = self.client.settings().command_timeout;
        match self
            .client
            .backend()
            .subscribe_changes(&keys, timeout)
            .await
        {
            Ok(notices) => Some(notices),
            Err(failure) => {
                tracing::debug!(%failure, "lease notices unavailable; the observer polls");
                None
            }
        }
    }

    /// The holder, and the line's length if it was read.
    async fn read(&self) -> (ResourceHolder, Option<u64>) {
        let sent = Instant::now();
        let reading = self.client.inspect_with_line(&self.request).await;
        (ResourceHolder::read(reading.slots, sent), reading.waiting)
    }
}
