//! `LeaseClient::observe`: who holds a resource now, and each time that changes — for
//! followers of a leader election and for dashboards.
//!
//! One task per observer reads the lease (`inspect`) when a release or acquisition notice
//! arrives, when the holder's TTL runs out (an expiry publishes nothing), and at least every
//! `poll` (a deletion from outside publishes nothing either, and a subscription can end).
//! What it reads is published on a `watch` channel, only when the holder changed.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{FailureDetail, ReleaseNotices};
use crate::error::LeaseError;
use crate::lease::LeaseClient;
use crate::protocol::limits::OBSERVE_POLL;
use crate::protocol::{Attempt, FencingToken, HolderLabel, Purpose, ResourceDigest};

/// Who holds a resource, as an observer last read it.
///
/// Two `Held` values are equal when they name the same holding (token and label); the
/// expiry estimate moves with every renewal and is not a change of holder.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ResourceHolder {
    /// Not read yet, or the last read failed (`detail` says how): nothing is known.
    Unknown {
        /// Why, once a read failed; `None` before the first read.
        detail: Option<FailureDetail>,
    },
    /// Nobody held it at the last read.
    Free,
    /// Held under `token`, by `holder` if its acquisition gave a label.
    Held {
        /// The holder's fencing token.
        token: FencingToken,
        /// The holder's label ([`LeaseRequestBuilder::holder`]), if any.
        ///
        /// [`LeaseRequestBuilder::holder`]: crate::protocol::LeaseRequestBuilder::holder
        holder: Option<HolderLabel>,
        /// When the lease expires unless renewed, as of the last read (local clock; a
        /// renewal moves it without counting as a change).
        expires_at: Instant,
    },
}

impl PartialEq for ResourceHolder {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Unknown { .. }, Self::Unknown { .. }) | (Self::Free, Self::Free) => true,
            (
                Self::Held {
                    token: a,
                    holder: ha,
                    ..
                },
                Self::Held {
                    token: b,
                    holder: hb,
                    ..
                },
            ) => a == b && ha == hb,
            _ => false,
        }
    }
}

impl Eq for ResourceHolder {}

impl ResourceHolder {
    /// The holder's token, while held.
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Self::Held { token, .. } => Some(*token),
            _ => None,
        }
    }
}

/// How long after a holder's TTL runs out its expiry is read: the server's clock may be a
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
    /// Observes who holds `resource` under `purpose`: the holder's token and label, each
    /// time they change. Changes are read one round trip after the release or acquisition
    /// notice that announces them; an expiry when the holder's TTL runs out; a key deleted
    /// from outside within `poll` (10 ms ..= 1 h). While notices are unavailable (the
    /// subscription failed or ended) it reads and subscribes again every second, or every
    /// `poll` if shorter.
    ///
    /// Spawns a task on the current tokio runtime; it reads the lease only, never writes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use leasehold::*;
    ///
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let (purpose, resource) = (Purpose::new("leader")?, ResourceDigest::of(b"scheduler"));
    /// let mut leader = client.observe(&purpose, &resource, Duration::from_secs(1))?;
    /// let request = LeaseRequest::builder(purpose, resource, client.new_attempt("elect")?)
    ///     .holder(HolderLabel::new("node-a")?)
    ///     .build()?;
    /// let _lease = client.try_acquire(&request).await?;
    /// let ResourceHolder::Held { holder, .. } = leader.changed().await else { panic!() };
    /// assert_eq!(holder.map(|h| h.to_string()).as_deref(), Some("node-a"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for a `poll` out of bounds;
    /// [`LeaseError::EntropyUnavailable`] — both before any I/O.
    ///
    /// # Panics
    /// Outside a tokio runtime (it spawns its task there).
    pub fn observe(
        &self,
        purpose: &Purpose,
        resource: &ResourceDigest,
        poll: Duration,
    ) -> Result<LeaseObserver, LeaseError> {
        let poll = OBSERVE_POLL.check(poll)?;
        // A stranger's attempt: it never holds the lease, so every holder reads as another.
        let attempt = self.new_attempt("observe")?;
        let (tx, holder) = watch::channel(ResourceHolder::Unknown { detail: None });
        let reader = Reader {
            client: self.clone(),
            purpose: purpose.clone(),
            resource: *resource,
            attempt,
            poll,
        };
        let task = tokio::spawn(reader.run(tx));
        Ok(LeaseObserver { holder, task })
    }
}

struct Reader {
    client: LeaseClient,
    purpose: Purpose,
    resource: ResourceDigest,
    attempt: Attempt,
    poll: Duration,
}

impl Reader {
    async fn run(self, tx: watch::Sender<ResourceHolder>) {
        let mut notices: Option<ReleaseNotices> = None;
        loop {
            if notices.is_none() {
                // Subscribed before the read: a change after the read is noticed.
                notices = self.subscribe().await;
            }
            let read = self.read().await;
            let expiry = match &read {
                ResourceHolder::Held { expires_at, .. } => Some(*expires_at + EXPIRY_GRACE),
                _ => None,
            };
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
        let keys = self.client.keys(&self.purpose, &self.resource);
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

    async fn read(&self) -> ResourceHolder {
        let sent = Instant::now();
        let read = self
            .client
            .inspect(&self.purpose, &self.resource, &self.attempt)
            .await;
        match read.into_held() {
            Ok(Some((remaining, token, holder))) => ResourceHolder::Held {
                token,
                holder,
                expires_at: sent + remaining,
            },
            Ok(None) => ResourceHolder::Free,
            Err(detail) => ResourceHolder::Unknown {
                detail: Some(detail),
            },
        }
    }
}
