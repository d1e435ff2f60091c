//! `LeaseClient`: acquire, wait, inspect — the entry point of the lease core.

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::backend::{LeaseBackend, MemoryBackend, RedisBackend, RedisConfig};
use crate::error::LeaseError;
use crate::lease::acquire;
use crate::lease::acquire::AcquireOutcome;
use crate::lease::outcome::{InspectOutcome, LeaseReading, ReleaseOutcome};
use crate::lease::release::{self, Release};
use crate::lease::session::Session;
use crate::lease::settings::LeaseSettings;
use crate::lease::trace;
use crate::lease::variables::{self, REDIS_URL_ENV};
use crate::lease::wait;
use crate::protocol::{
    Attempt, Holding, LeaseKeys, LeaseRequest, LeaseRequestBuilder, OperationId, Purpose,
    ResourceDigest,
};
use crate::telemetry::{self, Operation};

/// Acquires and inspects leases on one backend. Cheap to clone; clones share the backend.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), leasehold::LeaseError> {
/// use leasehold::{AcquireOutcome, LeaseClient, LeaseRequest, LeaseSettings, MemoryBackend};
/// use leasehold::{Purpose, ResourceDigest};
///
/// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
/// let request = LeaseRequest::builder(
///     Purpose::new("reports")?,
///     ResourceDigest::of(b"tenant-7"),
///     client.new_attempt("nightly")?,
/// )
/// .build()?;
/// match client.try_acquire(&request).await? {
///     AcquireOutcome::Acquired(mut lease) => {
///         println!("fencing token {}", lease.token());
///         let _ = lease.release().await;
///     }
///     other => println!("not acquired: {}", other.as_str()),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseClient {
    session: Arc<Session>,
}

impl fmt::Debug for LeaseClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseClient")
            .field("backend", &self.session.backend())
            .field("settings", self.session.settings())
            .finish()
    }
}

impl LeaseClient {
    /// A client on `backend`.
    ///
    /// # Errors
    /// [`LeaseError`] if `settings` break a bound or relation ([`LeaseSettings::validate`]).
    pub fn new(backend: impl LeaseBackend, settings: LeaseSettings) -> Result<Self, LeaseError> {
        settings.validate()?;
        Ok(Self {
            session: Arc::new(Session::new(Arc::new(backend), settings)),
        })
    }

    /// A client on a [`RedisBackend`] at `url`, connecting on first use with the settings'
    /// connect timeout. The URL names a standalone node, a Sentinel-managed primary
    /// (`redis+sentinel://host,host/master`) or a Cluster (`redis+cluster://host,host`):
    /// [`RedisConfig::from_url`].
    ///
    /// # Errors
    /// [`LeaseError::InvalidRedisUrl`], or invalid settings. Nothing is sent.
    pub fn redis(url: &str, settings: LeaseSettings) -> Result<Self, LeaseError> {
        settings.validate()?;
        let backend = RedisBackend::new(
            RedisConfig::from_url(url)?.connect_timeout(settings.connect_timeout),
        )?;
        Self::new(backend, settings)
    }

    /// Redis at `$LEASEHOLD_REDIS_URL`, settings from [`LeaseSettings::from_env`]. What a
    /// service configured by its environment uses.
    ///
    /// # Errors
    /// [`LeaseError::NoBackendConfigured`] if `LEASEHOLD_REDIS_URL` is unset or empty (it
    /// names any `LEASEHOLD_*` variable that is set but not read, e.g. a misspelling):
    /// never a silent in-memory fallback, whose leases would exclude nobody. Invalid
    /// environment values or URL. Nothing is sent.
    pub fn from_env() -> Result<Self, LeaseError> {
        let settings = LeaseSettings::from_env()?;
        // Not UTF-8: refused as a URL, never taken for unset.
        match super::settings::env_text(REDIS_URL_ENV) {
            Some(url) if !url.is_empty() => Self::redis(&url, settings),
            _ => Err(LeaseError::NoBackendConfigured {
                unread: variables::unread(std::env::vars_os().map(|(name, _)| name)),
            }),
        }
    }

    /// As [`from_env`](Self::from_env), but a fresh [`MemoryBackend`] when
    /// `LEASEHOLD_REDIS_URL` is unset or empty: for examples and tests that run with or
    /// without Redis. The in-memory leases exclude only this process's holders.
    ///
    /// # Errors
    /// Invalid environment values or URL.
    pub fn from_env_or_memory() -> Result<Self, LeaseError> {
        match Self::from_env() {
            Err(LeaseError::NoBackendConfigured { .. }) => {
                Self::new(MemoryBackend::new(), LeaseSettings::from_env()?)
            }
            other => other,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &LeaseSettings {
        self.session.settings()
    }

    pub(crate) fn backend(&self) -> &dyn LeaseBackend {
        self.session.backend()
    }

    /// The keys `request` acquires: its lease's, counted when it has more than one permit.
    pub(crate) fn request_keys(&self, request: &LeaseRequest) -> LeaseKeys {
        self.session.request_keys(request)
    }

    /// A fresh attempt (new owner token) for operation `operation_id`. Make it before the
    /// first send and keep it until the outcome is certain.
    ///
    /// # Errors
    /// [`LeaseError::InvalidOperationId`], [`LeaseError::EntropyUnavailable`].
    pub fn new_attempt(&self, operation_id: &str) -> Result<Attempt, LeaseError> {
        Attempt::new(OperationId::new(operation_id)?)
    }

    /// A request for `resource` under `purpose`, ready for its options: the one-line way to
    /// start one. `resource` is hashed here ([`ResourceDigest::of`]; the raw id never
    /// leaves the process), and the request gets a fresh attempt whose operation id is the
    /// purpose. Build it with [`LeaseRequest::builder`] instead to name the operation (logs
    /// and traces carry it as `op_id`) or to send an attempt again (a replay).
    ///
    /// ```
    /// # fn main() -> Result<(), leasehold::LeaseError> {
    /// use std::time::Duration;
    /// use leasehold::{LeaseClient, LeaseSettings, MemoryBackend};
    ///
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let request = client
    ///     .request("reports", "tenant-42")?
    ///     .ttl(Duration::from_secs(30))
    ///     .build()?;
    /// assert_eq!(request.purpose().as_str(), "reports");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::InvalidPurpose`] (before anything else),
    /// [`LeaseError::EntropyUnavailable`].
    pub fn request(
        &self,
        purpose: &str,
        resource: impl AsRef<[u8]>,
    ) -> Result<LeaseRequestBuilder, LeaseError> {
        let purpose = Purpose::new(purpose)?;
        let attempt = self.new_attempt(purpose.as_str())?;
        Ok(LeaseRequest::builder(
            purpose,
            ResourceDigest::of(resource),
            attempt,
        ))
    }

    /// The Redis keys of a lease under this client's namespace.
    pub fn keys(&self, purpose: &Purpose, resource: &ResourceDigest) -> LeaseKeys {
        self.session.keys(purpose, resource)
    }

    /// One acquisition attempt, no waiting.
    ///
    /// The validity reference is the instant just before send (docs/design.md §6).
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] if `ttl ≤ drift_budget`; checked before any I/O.
    ///
    /// # Cancel safety
    /// Dropping the future after the command was written can leave the lease held by
    /// `request.attempt()` until its TTL. Send the same request again (it replays, with the
    /// same token) or [`inspect`](Self::inspect) the attempt to find out.
    pub async fn try_acquire(&self, request: &LeaseRequest) -> Result<AcquireOutcome, LeaseError> {
        self.settings().check_ttl(request.ttl())?;
        let span = trace::span!(
            "lease.acquire",
            request.purpose(),
            request.resource(),
            request.attempt()
        );
        let started = Instant::now();
        let outcome = acquire::try_acquire(&self.session, request)
            .instrument(span.clone())
            .await;
        trace::record_token(&span, outcome.token());
        // The per-try metrics are recorded inside, once for every try of `acquire` too.
        trace::finish(&span, None, &outcome, started);
        Ok(outcome)
    }

    /// Acquires, waiting up to `request.wait_timeout()` (measured from this call) while the
    /// lease is contended.
    ///
    /// * `Contended` is retried after `min(retry_after, wait left)` with jitter, and woken
    ///   early by the holder's release notice; while the subscription to that notice is
    ///   not confirmed (it failed, or its connection ended) it is made again after 50 ms,
    ///   doubling to 1 s, with a try each time — never a sleep of the holder's whole TTL;
    /// * `Indeterminate` is retried with the same attempt (a replay is safe);
    /// * `Unavailable` is retried with exponential backoff;
    /// * a grant whose reply came after its local validity had ended (a slow reply) is not
    ///   returned: it counts as `Indeterminate` and is replayed — a replay's validity runs
    ///   from its own send.
    ///
    /// The last outcome is returned when the wait runs out. If any try may have reached Redis
    /// and the last one did not succeed, the result is `Indeterminate`, never `Unavailable`.
    /// With a wait timeout of 0 this is one try, as [`try_acquire`](Self::try_acquire), but
    /// for a grant that arrived spent.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), before any I/O.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire): a dropped `acquire` may leave the lease held by
    /// the request's attempt until its TTL; the same attempt finds it.
    pub async fn acquire(&self, request: &LeaseRequest) -> Result<AcquireOutcome, LeaseError> {
        self.acquire_with(request, wait::Patience::of(request))
            .await
    }

    /// As [`acquire`](Self::acquire), waiting as long as `patience` says.
    pub(crate) async fn acquire_with(
        &self,
        request: &LeaseRequest,
        patience: wait::Patience,
    ) -> Result<AcquireOutcome, LeaseError> {
        self.settings().check_ttl(request.ttl())?;
        let span = trace::span!(
            "lease.wait",
            request.purpose(),
            request.resource(),
            request.attempt()
        );
        let started = Instant::now();
        let outcome = wait::acquire_with_wait(&self.session, request, patience)
            .instrument(span.clone())
            .await;
        trace::record_token(&span, outcome.token());
        telemetry::waited(request.purpose(), &outcome, started.elapsed());
        trace::finish(&span, None, &outcome, started);
        Ok(outcome)
    }

    /// Where `request`'s wait stands in its lease's line (docs/design.md §4, "The line"),
    /// as each try of its acquisition by this client — [`acquire`](Self::acquire), or a
    /// [`LeaseRuntime`](crate::runtime::LeaseRuntime) on a clone of it — learns it:
    /// `Some(n)` with `n` entries ahead of it (0: the first in line; a counted lease of
    /// `p` permits serves the first `p`), `None` while it is not in the line — before its
    /// first refused try, after it acquired or its wait ended, and on a server whose ACL
    /// refuses the line. What `leasehold run --wait` shows as "3rd in line". The place is
    /// the attempt's: a wait with another attempt (a new [`LeaseRequest`]) is another
    /// place. Dropping every receiver stops the reporting; watching costs a wait a lock per
    /// try and nothing else.
    pub fn watch_place(&self, request: &LeaseRequest) -> watch::Receiver<Option<u32>> {
        self.session.line_places().watch_place(request.attempt())
    }

    /// Reads the lease `request` names — its purpose, resource and permits — as its attempt
    /// sees it: whether the attempt holds it, and if not, who does. Read only. What settles
    /// an acquisition that ended `Indeterminate` (or was given up in flight): `HeldByAttempt`
    /// means it landed — acquire again with the same request to get its handle (a replay) or
    /// [`release_attempt`](Self::release_attempt) it.
    ///
    /// A counted lease ([`LeaseRequestBuilder::permits`]) answers for the whole lease, as its
    /// acquisition would: the attempt's slot if it holds one; else `Absent` while a slot is
    /// free; else the slot that frees first (`HeldByOther`, or `LockDelayed` if that one is
    /// in its lock-delay). A slot that could not be read makes it `Indeterminate` or
    /// `Unavailable` unless the attempt's slot was found. Each slot:
    /// [`inspect_slots`](Self::inspect_slots).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{AcquireOutcome, InspectOutcome, LeaseClient, LeaseSettings, MemoryBackend};
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let request = client.request("exports", "fleet")?.permits(4).build()?;
    /// if let AcquireOutcome::Indeterminate { .. } = client.try_acquire(&request).await? {
    ///     match client.inspect(&request).await {
    ///         // It landed: replay it for the handle (same token, same slot).
    ///         InspectOutcome::HeldByAttempt { .. } => { let _ = client.try_acquire(&request).await?; }
    ///         // Not known: give it up rather than leave a slot held until its TTL.
    ///         _ => { let _ = client.release_attempt(&request).await; }
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn inspect(&self, request: &LeaseRequest) -> InspectOutcome {
        InspectOutcome::of_slots(self.inspect_slots(request).await)
    }

    /// Reads each slot of the lease `request` names, in slot order: one outcome for a plain
    /// lease, `permits` for a counted one ([`LeaseRequestBuilder::permits`]) — how many are
    /// held, by which tokens, for how long, and whether the request's attempt holds one.
    /// The slots are read together (on Redis, in one script call), each atomically; read
    /// only.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{InspectOutcome, LeaseClient, LeaseSettings, MemoryBackend};
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let request = client.request("exports", "fleet")?.permits(4).build()?;
    /// let _lease = client.try_acquire(&request).await?.into_handle();
    /// let slots = client.inspect_slots(&request).await;
    /// let held = slots.iter().filter(|s| s.is_held()).count();
    /// assert_eq!((held, slots.len()), (1, 4));
    /// assert!(matches!(slots[0], InspectOutcome::HeldByAttempt { .. }));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn inspect_slots(&self, request: &LeaseRequest) -> Vec<InspectOutcome> {
        self.inspect_with_line(request).await.slots
    }

    /// Reads each slot of the lease `request` names, as
    /// [`inspect_slots`](Self::inspect_slots) does, and in the same reads how many entries
    /// wait in the lease's line ([`LeaseReading::waiting`]). What an operator's view of a
    /// lease shows; read only.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{LeaseClient, LeaseSettings, MemoryBackend};
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let request = client.request("exports", "fleet")?.build()?;
    /// let _lease = client.try_acquire(&request).await?.into_handle();
    /// let reading = client.inspect_with_line(&request).await;
    /// assert!(reading.outcome().is_held());
    /// assert_eq!(reading.waiting, Some(0)); // nobody waits
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn inspect_with_line(&self, request: &LeaseRequest) -> LeaseReading {
        let (purpose, resource) = (request.purpose(), request.resource());
        let slots = self.request_keys(request).each_slot();
        let read = futures_util::future::join_all(
            slots
                .iter()
                .map(|keys| self.inspect_keys(keys, purpose, resource, request.attempt())),
        )
        .await;
        LeaseReading::of(read)
    }

    /// Reads one lease (or slot) by its keys: its outcome, and its line's length if read.
    pub(crate) async fn inspect_keys(
        &self,
        keys: &LeaseKeys,
        purpose: &Purpose,
        resource: &ResourceDigest,
        attempt: &Attempt,
    ) -> (InspectOutcome, Option<u64>) {
        let span = trace::span!("lease.inspect", purpose, resource, attempt);
        let started = Instant::now();
        let result = self
            .backend()
            .inspect(keys, attempt, self.settings().command_timeout)
            .instrument(span.clone())
            .await;
        let (outcome, waiting) = match result {
            Ok(read) => (InspectOutcome::from(Ok(read.reply)), read.waiting),
            Err(failure) => (InspectOutcome::from(Err(failure)), None),
        };
        let metric = Some((Operation::Inspect, purpose));
        trace::finish(&span, metric, &outcome, started);
        (outcome, waiting)
    }

    /// Releases the lease `request` names if its attempt holds it — for an acquisition that
    /// ended `Indeterminate` or was given up in flight, so the lease is not left held until
    /// its TTL. Owner-checked: another holder's lease is never touched. On a counted lease
    /// the attempt's slot, whichever it took, is released (each slot is tried, owner-checked:
    /// at most one is the attempt's); `Released` if it held one.
    ///
    /// # Cancel safety
    /// If dropped mid-flight the release may or may not have landed; call again.
    pub async fn release_attempt(&self, request: &LeaseRequest) -> ReleaseOutcome {
        let keys = self.request_keys(request);
        let release = Release {
            keys: &keys,
            purpose: request.purpose(),
            resource: request.resource(),
            holding: &Holding::of_attempt(request.attempt().clone()),
        };
        release::release(&self.session, release).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_env` with `LEASEHOLD_REDIS_URL` unset: run in a child process of this test
    /// binary, whose environment the test controls (setting variables in this one would race
    /// with the other tests' threads).
    #[test]
    fn from_env_without_a_redis_url_refuses_instead_of_choosing_memory() {
        if std::env::var_os("LEASEHOLD_TEST_CHILD").is_some() {
            match LeaseClient::from_env() {
                Err(LeaseError::NoBackendConfigured { unread }) => {
                    assert_eq!(unread, ["LEASEHOLD_REDIS_ULR"]);
                }
                other => panic!("from_env gave {other:?}"),
            }
            assert!(LeaseClient::from_env_or_memory().is_ok());
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let status = std::process::Command::new(exe)
            .args([
                "--exact",
                "lease::client::tests::from_env_without_a_redis_url_refuses_instead_of_choosing_memory",
            ])
            .env_remove(REDIS_URL_ENV)
            .env("LEASEHOLD_REDIS_ULR", "redis://127.0.0.1:1")
            .env("LEASEHOLD_TEST_CHILD", "1")
            .status()
            .expect("run the child");
        assert!(status.success(), "the child test failed: {status}");
    }
}
