//! `LeaseClient`: acquire, wait, inspect — the entry point of the lease core.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use crate::backend::{
    LeaseBackend, MemoryBackend, RedisBackend, RedisConfig, ReplicatedReply, SendFailure,
};
use crate::error::LeaseError;
use crate::lease::handle::LeaseHandle;
use crate::lease::outcome::{
    AcquireOutcome, InspectOutcome, ReleaseOutcome, Replication, release_outcome,
};
use crate::lease::settings::LeaseSettings;
use crate::lease::trace;
use crate::lease::validity::ValidityBudget;
use crate::lease::wait;
use crate::protocol::{
    AcquireReply, Attempt, InspectReply, LeaseKeys, LeaseRequest, OperationId, Purpose,
    ResourceDigest,
};
use crate::telemetry::{self, Operation};

/// The environment variable [`LeaseClient::from_env`] reads for a Redis URL.
pub const REDIS_URL_ENV: &str = "LEASEHOLD_REDIS_URL";

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
    inner: Arc<Inner>,
}

struct Inner {
    backend: Arc<dyn LeaseBackend>,
    settings: LeaseSettings,
}

impl fmt::Debug for LeaseClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseClient")
            .field("backend", &self.inner.backend)
            .field("settings", &self.inner.settings)
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
            inner: Arc::new(Inner {
                backend: Arc::new(backend),
                settings,
            }),
        })
    }

    /// A client on a [`RedisBackend`] at `url`, connecting on first use with the settings'
    /// connect timeout.
    ///
    /// # Errors
    /// [`LeaseError::InvalidRedisUrl`], or invalid settings. Nothing is sent.
    pub fn redis(url: &str, settings: LeaseSettings) -> Result<Self, LeaseError> {
        settings.validate()?;
        let backend =
            RedisBackend::new(RedisConfig::new(url).connect_timeout(settings.connect_timeout))?;
        Self::new(backend, settings)
    }

    /// Redis at `$LEASEHOLD_REDIS_URL` if set, otherwise a fresh [`MemoryBackend`]; settings
    /// from [`LeaseSettings::from_env`]. What examples use.
    ///
    /// # Errors
    /// Invalid environment values or URL.
    pub fn from_env() -> Result<Self, LeaseError> {
        let settings = LeaseSettings::from_env()?;
        match std::env::var(REDIS_URL_ENV) {
            Ok(url) if !url.is_empty() => Self::redis(&url, settings),
            _ => Self::new(MemoryBackend::new(), settings),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &LeaseSettings {
        &self.inner.settings
    }

    pub(crate) fn backend(&self) -> &dyn LeaseBackend {
        self.inner.backend.as_ref()
    }

    /// A fresh attempt (new owner token) for operation `operation_id`. Make it before the
    /// first send and keep it until the outcome is certain.
    ///
    /// # Errors
    /// [`LeaseError::InvalidOperationId`], [`LeaseError::EntropyUnavailable`].
    pub fn new_attempt(&self, operation_id: &str) -> Result<Attempt, LeaseError> {
        Attempt::new(OperationId::new(operation_id)?)
    }

    /// The Redis keys of a lease under this client's namespace.
    pub fn keys(&self, purpose: &Purpose, resource: &ResourceDigest) -> LeaseKeys {
        LeaseKeys::new(&self.inner.settings.namespace, purpose, resource)
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
        self.inner.settings.check_ttl(request.ttl())?;
        let span = trace::span!(
            "lease.acquire",
            request.purpose(),
            request.resource(),
            request.attempt()
        );
        let started = Instant::now();
        let outcome = self
            .try_acquire_checked(request)
            .instrument(span.clone())
            .await;
        trace::record_token(&span, &outcome);
        // The per-try metrics are recorded inside, once for every try of `acquire` too.
        trace::finish(&span, None, outcome.as_str(), started);
        Ok(outcome)
    }

    /// `try_acquire` after validation: the wait loop calls this.
    pub(crate) async fn try_acquire_checked(&self, request: &LeaseRequest) -> AcquireOutcome {
        let settings = &self.inner.settings;
        let keys = self.keys(request.purpose(), request.resource());
        let sent_at = Instant::now();
        let backend = self.backend();
        let (result, replication) = match request.replica_wait() {
            None => {
                let timeout = settings.command_timeout;
                let result = backend
                    .acquire(&keys, request.attempt(), request.ttl(), timeout)
                    .await;
                (result, Replication::NotRequested)
            }
            Some(wait) => {
                let timeout = settings.command_timeout + wait.timeout();
                let attempt = request.attempt();
                let result = backend
                    .acquire_replicated(&keys, attempt, request.ttl(), wait, timeout)
                    .await;
                let replication = match &result {
                    Ok(ReplicatedReply {
                        acked: Some(Ok(acked)),
                        ..
                    }) => Replication::Acknowledged {
                        acked: *acked,
                        wanted: wait.replicas(),
                    },
                    Ok(ReplicatedReply {
                        acked: Some(Err(detail)),
                        ..
                    }) => Replication::Unknown {
                        detail: detail.clone(),
                    },
                    _ => Replication::NotWaited,
                };
                (result.map(|r| r.reply), replication)
            }
        };
        let drift = settings.drift_budget;
        let outcome = match result {
            Ok(AcquireReply::Acquired { ttl, token }) => {
                let budget = ValidityBudget::acquired(sent_at, request.ttl(), ttl, drift);
                AcquireOutcome::Acquired(LeaseHandle::new(
                    self.clone(),
                    request,
                    keys,
                    token,
                    budget,
                    replication,
                ))
            }
            Ok(AcquireReply::Replayed { pttl, token }) => {
                let budget = ValidityBudget::replayed(sent_at, request.ttl(), pttl, drift);
                AcquireOutcome::Replayed(LeaseHandle::new(
                    self.clone(),
                    request,
                    keys,
                    token,
                    budget,
                    replication,
                ))
            }
            Ok(AcquireReply::Contended { pttl }) => AcquireOutcome::Contended {
                retry_after: self.retry_after(pttl),
            },
            Ok(AcquireReply::Conflict { pttl }) => AcquireOutcome::OwnerOperationConflict {
                retry_after: self.retry_after(pttl),
            },
            Err(SendFailure::NotSent(detail)) => AcquireOutcome::Unavailable { detail },
            Err(SendFailure::MaybeSent(detail)) => AcquireOutcome::Indeterminate {
                attempt: request.attempt().clone(),
                detail,
            },
        };
        let latency = sent_at.elapsed();
        telemetry::operation(
            Operation::Acquire,
            request.purpose(),
            outcome.as_str(),
            latency,
        );
        outcome
    }

    fn retry_after(&self, pttl: Duration) -> Duration {
        if pttl.is_zero() {
            self.inner.settings.retry_after_fallback
        } else {
            pttl
        }
    }

    /// Acquires, waiting up to `request.wait_timeout()` (measured from this call) while the
    /// lease is contended.
    ///
    /// * `Contended` is retried after `min(retry_after, wait left)` with jitter, and woken
    ///   early by the holder's release notice;
    /// * `Indeterminate` is retried with the same attempt (a replay is safe);
    /// * `Unavailable` is retried with exponential backoff.
    ///
    /// The last outcome is returned when the wait runs out. If any try may have reached Redis
    /// and the last one did not succeed, the result is `Indeterminate`, never `Unavailable`.
    /// With a wait timeout of 0 this is exactly [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), before any I/O.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire): a dropped `acquire` may leave the lease held by
    /// the request's attempt until its TTL; the same attempt finds it.
    pub async fn acquire(&self, request: &LeaseRequest) -> Result<AcquireOutcome, LeaseError> {
        self.inner.settings.check_ttl(request.ttl())?;
        let span = trace::span!(
            "lease.wait",
            request.purpose(),
            request.resource(),
            request.attempt()
        );
        let started = Instant::now();
        let outcome = wait::acquire_with_wait(self, request)
            .instrument(span.clone())
            .await;
        trace::record_token(&span, &outcome);
        telemetry::waited(request.purpose(), outcome.as_str(), started.elapsed());
        trace::finish(&span, None, outcome.as_str(), started);
        Ok(outcome)
    }

    /// Reads whether `attempt` holds the lease on (`purpose`, `resource`). Read only.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn inspect(
        &self,
        purpose: &Purpose,
        resource: &ResourceDigest,
        attempt: &Attempt,
    ) -> InspectOutcome {
        let span = trace::span!("lease.inspect", purpose, resource, attempt);
        let started = Instant::now();
        let keys = self.keys(purpose, resource);
        let result = self
            .backend()
            .inspect(&keys, attempt, self.inner.settings.command_timeout)
            .instrument(span.clone())
            .await;
        let outcome = match result {
            Ok(InspectReply::HeldByAttempt { pttl, token }) => InspectOutcome::HeldByAttempt {
                remaining: pttl,
                token,
            },
            Ok(InspectReply::HeldByOther { pttl, token }) => InspectOutcome::HeldByOther {
                remaining: pttl,
                token,
            },
            Ok(InspectReply::Absent) => InspectOutcome::Absent,
            Err(SendFailure::NotSent(detail)) => InspectOutcome::Unavailable { detail },
            Err(SendFailure::MaybeSent(detail)) => InspectOutcome::Indeterminate { detail },
        };
        let metric = Some((Operation::Inspect, purpose));
        trace::finish(&span, metric, outcome.as_str(), started);
        outcome
    }

    /// Releases the lease on (`purpose`, `resource`) if `attempt` holds it — for an attempt
    /// whose acquisition ended `Indeterminate` and is being given up, so the lease is not
    /// left held until its TTL. Owner-checked: another holder's lease is never touched.
    ///
    /// # Cancel safety
    /// If dropped mid-flight the release may or may not have landed; call again.
    pub async fn release_attempt(
        &self,
        purpose: &Purpose,
        resource: &ResourceDigest,
        attempt: &Attempt,
    ) -> ReleaseOutcome {
        let span = trace::span!("lease.release", purpose, resource, attempt);
        let started = Instant::now();
        let keys = self.keys(purpose, resource);
        let result = self
            .backend()
            .release(&keys, attempt, self.inner.settings.command_timeout)
            .instrument(span.clone())
            .await;
        let outcome = release_outcome(result);
        let metric = Some((Operation::Release, purpose));
        trace::finish(&span, metric, outcome.as_str(), started);
        outcome
    }
}
