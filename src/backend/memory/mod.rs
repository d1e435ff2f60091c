//! `MemoryBackend`: the scripts of docs/design.md §4, in process, on tokio's clock (what a
//! caller may rely on is on the type).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{BackendFuture, FailureDetail, FailureKind, ReleaseNotices, SendFailure};

// The store's clock: tokio's; in the deterministic simulation, one timeline shared by
// clients that each run on a clock of their own (`crate::simulation::SharedClock`).
#[cfg(feature = "__simulation")]
use crate::simulation::store_now as now;
#[cfg(not(feature = "__simulation"))]
fn now() -> Instant {
    Instant::now()
}
use crate::protocol::{Attempt, HolderLabel, LeaseKeys};

/// An in-process lease store with the same semantics as the Redis scripts.
///
/// Because it reads `tokio::time::Instant`, a test under `#[tokio::test(start_paused = true)]`
/// moves lease expiry with `tokio::time::advance`. It is the embedded default for examples and
/// unit tests of code built on leasehold; it is not a replacement for testing against Redis.
///
/// Clones share one store, so two clients on clones contend like two processes on one Redis.
/// Fencing tokens come from a counter per lease group (as on Redis: see
/// [`LeaseKeys`]) that is never evicted.
///
/// Faults can be injected with [`set_fault`](Self::set_fault), and a lease can be taken away
/// behind its holder's back with [`delete`](Self::delete): that is how code built on
/// leasehold tests its reaction to `Indeterminate`, UNKNOWN and LOST without Redis.
///
/// For a fault that hits one client and not the others (a partitioned holder whose lease
/// expires while another client takes it), give each client its own
/// [`connection`](Self::connection): it shares the store, and
/// [`set_connection_fault`](Self::set_connection_fault) applies to its calls only.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use leasehold::{MemoryBackend, MemoryFault};
/// let backend = MemoryBackend::new();
/// backend.set_fault(Some(MemoryFault::LoseReply)); // runs, but the reply never arrives
/// backend.set_fault(None);
/// assert_eq!(backend.held_leases(), 0);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryBackend {
    store: Arc<Mutex<Store>>,
    /// This connection's own fault, shared by its clones; ahead of the store's.
    connection: Arc<Mutex<Option<MemoryFault>>>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the store: it holds owner tokens, which are bearer secrets.
        let store = self.lock();
        f.debug_struct("MemoryBackend")
            .field("leases", &store.leases.len())
            .field("fault", &store.fault)
            .field("calls", &store.calls)
            .finish()
    }
}

mod acquire;
mod fault;
mod line;
mod operations;

pub use fault::MemoryFault;

#[derive(Default)]
struct Store {
    leases: HashMap<String, Entry>,
    /// Each lease's line of waiters, by its key (`LeaseKeys::line`).
    lines: HashMap<String, line::Line>,
    /// Line sessions' keep-alives, by key (`LeaseKeys::keep_alive`): until when each lasts.
    kept: HashMap<String, Instant>,
    /// The size of `kept` at which ended keep-alives are swept out.
    kept_sweep_at: usize,
    fences: HashMap<String, u64>,
    watchers: HashMap<String, Vec<mpsc::Sender<()>>>,
    fault: Option<MemoryFault>,
    calls: u64,
}

struct Entry {
    owner: String,
    operation: String,
    token: u64,
    holder: Option<HolderLabel>,
    /// When the lease ends unless renewed.
    expires_at: Instant,
    /// How long the entry outlives the lease's end, refusing acquisitions (lua/owner.lua).
    lock_delay: Duration,
}

impl Entry {
    fn is(&self, attempt: &Attempt) -> bool {
        self.owner == attempt.owner().expose() && self.operation == attempt.operation().as_str()
    }

    /// The lease's remaining time, and whether it has ended and the entry only holds its
    /// lock-delay (the time then being the delay's remaining time).
    fn left(&self, now: Instant) -> (Duration, bool) {
        let ended = self.expires_at <= now;
        let end = if ended {
            self.expires_at + self.lock_delay
        } else {
            self.expires_at
        };
        // Redis reports whole milliseconds, rounded down.
        let left = end.saturating_duration_since(now);
        let left = Duration::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        (left, ended)
    }

    /// The lease's remaining time while it has not ended.
    fn pttl(&self, now: Instant) -> Option<Duration> {
        match self.left(now) {
            (left, false) => Some(left),
            (_, true) => None,
        }
    }
}

impl Store {
    /// The live entry for `key` (its lease, or the lock-delay after it), dropping it first
    /// if it has expired (Redis expires lazily too, and a script never sees an expired
    /// key).
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        if self
            .leases
            .get(key)
            .is_some_and(|e| e.expires_at + e.lock_delay <= now)
        {
            self.leases.remove(key);
        }
        self.leases.get_mut(key)
    }

    /// One subscription to every channel of `channels`.
    fn subscribe<const N: usize>(&mut self, channels: [String; N]) -> ReleaseNotices {
        let (tx, rx) = mpsc::channel(1);
        for channel in channels {
            self.watchers.entry(channel).or_default().push(tx.clone());
        }
        ReleaseNotices::from_channel(rx)
    }

    fn notify(&mut self, channel: &str) {
        if let Some(senders) = self.watchers.get_mut(channel) {
            // Full means a notice is already pending: coalescing is the contract.
            senders.retain(|tx| !tx.is_closed());
            for tx in senders.iter() {
                let _ = tx.try_send(());
            }
        }
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `fault` to every later call, or clears it with `None`: on every connection
    /// to the store, like an outage of the server itself.
    pub fn set_fault(&self, fault: Option<MemoryFault>) {
        self.lock().fault = fault;
    }

    /// Another connection to the same store, as a second process would open: leases,
    /// fencing counters, release notices and [`set_fault`](Self::set_fault) are shared
    /// with every other connection, and it has a fault of its own
    /// ([`set_connection_fault`](Self::set_connection_fault)), none at first. Its clones
    /// are the same connection.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::*;
    /// let store = MemoryBackend::new();
    /// let partitioned = store.connection();
    /// partitioned.set_connection_fault(Some(MemoryFault::Unavailable)); // this one only
    ///
    /// let request = |client: &LeaseClient| {
    ///     let attempt = client.new_attempt("job")?;
    ///     LeaseRequest::builder(Purpose::new("reports")?, ResourceDigest::of(b"t"), attempt).build()
    /// };
    /// let cut_off = LeaseClient::new(partitioned, LeaseSettings::default())?;
    /// let healthy = LeaseClient::new(store.clone(), LeaseSettings::default())?;
    /// let refused = cut_off.acquire(&request(&cut_off)?).await?;
    /// assert!(matches!(refused, AcquireOutcome::Unavailable { .. }));
    /// let taken = healthy.acquire(&request(&healthy)?).await?;
    /// assert!(matches!(taken, AcquireOutcome::Acquired(_)));
    /// assert_eq!(store.held_leases(), 1);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn connection(&self) -> MemoryBackend {
        MemoryBackend {
            store: Arc::clone(&self.store),
            connection: Arc::default(),
        }
    }

    /// Applies `fault` to every later call made on this connection (and its clones), or
    /// clears it with `None`. While set, it is the fault this connection's calls see,
    /// whatever [`set_fault`](Self::set_fault) set for the store; cleared, they see the
    /// store's again.
    pub fn set_connection_fault(&self, fault: Option<MemoryFault>) {
        *self
            .connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fault;
    }

    /// Deletes a lease behind its holder's back, as an operator's `DEL` would. Publishes no
    /// release notice. Returns whether a live lease was there.
    pub fn delete(&self, keys: &LeaseKeys) -> bool {
        let now = now();
        let mut store = self.lock();
        let existed = store.live(keys.lease(), now).is_some();
        store.leases.remove(keys.lease());
        existed
    }

    /// Forgets the fencing counter of a lease, as an eviction would.
    pub fn delete_fence(&self, keys: &LeaseKeys) {
        self.lock().fences.remove(keys.fence());
    }

    /// The remaining time of a live lease (its PTTL), or `None` if it is not held.
    pub fn remaining(&self, keys: &LeaseKeys) -> Option<Duration> {
        let now = now();
        self.lock()
            .live(keys.lease(), now)
            .and_then(|e| e.pttl(now))
    }

    /// How many backend calls were made, faulted ones included.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// How many leases are live now.
    pub fn held_leases(&self) -> usize {
        let now = now();
        self.lock()
            .leases
            .values()
            .filter(|e| e.expires_at > now)
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock cannot leave the store half-written: every
        // mutation is a single insert or remove, so the data is usable after a poison.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `op` on the store under the current fault, honouring `timeout`.
    fn run<'a, T: Send + 'a>(
        &'a self,
        timeout: Duration,
        op: impl FnOnce(&mut Store, Instant) -> T + Send + 'a,
    ) -> BackendFuture<'a, T> {
        Box::pin(async move {
            let own = *self
                .connection
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let fault = {
                let mut store = self.lock();
                store.calls += 1;
                own.or(store.fault)
            };
            let lost = |what: &str| {
                SendFailure::MaybeSent(FailureDetail::new(
                    FailureKind::Injected,
                    format!("{what} (injected); no reply within {timeout:?}"),
                ))
            };
            match fault {
                None => Ok(op(&mut self.lock(), now())),
                Some(MemoryFault::Unavailable) => Err(SendFailure::NotSent(FailureDetail::new(
                    FailureKind::Injected,
                    "backend unavailable (injected)",
                ))),
                Some(MemoryFault::LoseReply) => {
                    op(&mut self.lock(), now());
                    tokio::time::sleep(timeout).await;
                    Err(lost("reply lost"))
                }
                Some(MemoryFault::LoseRequest) => {
                    tokio::time::sleep(timeout).await;
                    Err(lost("request lost"))
                }
                Some(MemoryFault::Slow(delay)) if delay < timeout => {
                    tokio::time::sleep(delay).await;
                    Ok(op(&mut self.lock(), now()))
                }
                Some(MemoryFault::Slow(_)) => {
                    tokio::time::sleep(timeout).await;
                    op(&mut self.lock(), now());
                    Err(lost("slow reply"))
                }
            }
        })
    }
}
