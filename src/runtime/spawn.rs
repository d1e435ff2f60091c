//! `LeaseRuntime`: the entry points that put work under a lease.

use std::fmt;
use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorRef, Message};
use tokio::sync::oneshot;

use crate::error::LeaseError;
use crate::lease::{AcquireOutcome, LeaseClient, LeaseHandle, LeaseState, Patience};
use crate::protocol::LeaseRequest;
use crate::runtime::job::Started;
use crate::runtime::lease_actor::published::{self, LeaseFacts};
use crate::runtime::lease_actor::timers::Timers;
use crate::runtime::lease_actor::worker::Worker;
use crate::runtime::lease_actor::{LeaseActor, LeaseActorArgs};
use crate::runtime::registry::{Admission, Registry};
use crate::runtime::{
    AttachedLease, CancelPolicy, JobEnd, LeaseCancelled, LeaseContext, LeaseStatus, SpawnOutcome,
};
#[cfg(doc)]
use crate::runtime::{LeaseActorMsg, LeaseJob};

/// Why the runtime could not start: all local, before or instead of any lease being held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A request or setting broke a rule; nothing was sent.
    #[error(transparent)]
    Invalid(#[from] LeaseError),
    /// This runtime already holds its maximum number of leases; nothing was sent.
    #[error("lease limit reached: this runtime holds at most {max} leases")]
    LimitReached {
        /// The configured maximum.
        max: usize,
    },
    /// The runtime is draining ([`LeaseRuntime::shutdown`]): it takes no new lease. Nothing
    /// is held: an acquisition the drain interrupted was given up and released.
    #[error("the lease runtime is shutting down and takes no new lease")]
    ShuttingDown,
    /// The actor system refused to start the lease actor; the lease was released.
    #[error("the lease actor could not start: {reason}")]
    Spawn {
        /// ractor's error text.
        reason: String,
    },
}

/// Runs work under leases from one [`LeaseClient`], holding at most a bounded number at once.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold::runtime::{CancelPolicy, LeaseRuntime};
/// use leasehold::*;
///
/// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
/// let runtime = LeaseRuntime::new(client.clone()).with_max_leases(1_000);
/// let request = LeaseRequest::builder(
///     Purpose::new("reports")?,
///     ResourceDigest::of(b"tenant-7"),
///     client.new_attempt("nightly")?,
/// )
/// .build()?;
/// let outcome = runtime
///     .run_under_lease(&request, CancelPolicy::Kill, |ctx| async move {
///         tokio::select! {
///             _ = ctx.cancelled() => None,                 // lease lost: stop writing
///             token = async { Some(ctx.token()) } => token, // the work, fenced
///         }
///     })
///     .await?;
/// # let _ = outcome;
/// # Ok(()) }
/// ```
///
/// Clones share the leases, the limit and [`shutdown`](Self::shutdown).
#[derive(Clone)]
pub struct LeaseRuntime {
    client: LeaseClient,
    pub(crate) registry: Arc<Registry>,
    /// Where its lease actors arm their deadlines.
    timers: Timers,
}

impl fmt::Debug for LeaseRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRuntime")
            .field("max_leases", &self.registry.max())
            .field("held", &self.held())
            .finish()
    }
}

impl LeaseRuntime {
    /// Default bound on leases held at once by one runtime.
    pub const DEFAULT_MAX_LEASES: usize = 100_000;

    /// A runtime on `client` holding at most [`DEFAULT_MAX_LEASES`](Self::DEFAULT_MAX_LEASES).
    pub fn new(client: LeaseClient) -> Self {
        Self {
            client,
            registry: Registry::new(Self::DEFAULT_MAX_LEASES),
            timers: Timers::default(),
        }
    }

    /// Sets the bound on leases held at once; past it, starting one more is
    /// [`RuntimeError::LimitReached`] before any I/O. A runtime of its own: clones made
    /// before do not share its leases.
    #[must_use]
    pub fn with_max_leases(self, max: usize) -> Self {
        Self {
            registry: Registry::new(max),
            ..self
        }
    }

    /// The client leases are taken with.
    pub fn client(&self) -> &LeaseClient {
        &self.client
    }

    /// Leases held by this runtime's actors now, with the acquisitions in flight.
    pub fn held(&self) -> usize {
        self.registry.live()
    }

    /// A place under the runtime's limit, before any I/O.
    pub(crate) fn admit(&self) -> Result<Admission, RuntimeError> {
        self.registry.admit()
    }

    /// Acquires `request` (waiting up to its wait timeout), then starts a lease actor and,
    /// as its child, the worker actor `W` with the arguments `args` builds from the lease's
    /// [`LeaseContext`].
    ///
    /// The worker receives one [`LeaseCancelled`] (through `W::Msg: From<LeaseCancelled>`)
    /// when the lease is lost or unknown, or when the next renewal cannot be confirmed in
    /// time; under [`CancelPolicy::Kill`] it is stopped when local validity ends. When the
    /// worker exits, the lease is released at once; [`LeaseJob::wait`] gives the report.
    ///
    /// `args` is called inside the lease actor's tracing span (purpose, digest prefix,
    /// operation id, token): capture `tracing::Span::current()` there to log under it. The
    /// worker's own handlers run in ractor's actor span; leasehold builds ractor without
    /// `message_span_propogation`, so [`LeaseCancelled`] does not carry the lease's span
    /// unless the application turns that feature on.
    ///
    /// # An acquisition of unknown end
    /// A try whose reply was lost (`Indeterminate`: it may have taken the lease) is not
    /// abandoned: the same attempt is replayed — past the wait timeout, for up to the
    /// request's TTL more — until an answer says whether it holds the lease. If it does,
    /// the worker starts under it; if not, that answer is the outcome (`Contended`, …).
    /// [`SpawnOutcome::NotAcquired`] with `Indeterminate` comes only when no answer came in
    /// that time: what the attempt took before then has expired, unless Redis ran the
    /// command later still (a server paused with it unread). Send the same request again
    /// (a replay) or [`LeaseClient::release_attempt`] it to settle that.
    ///
    /// # Errors
    /// [`RuntimeError::Invalid`] for a request whose TTL (after its replica wait, if any)
    /// leaves no room for renewals
    /// ([`LeaseSettings::check_request`](crate::LeaseSettings::check_request)),
    /// [`RuntimeError::LimitReached`] — both before any I/O; [`RuntimeError::Spawn`] if the
    /// actor system refused (the lease is then released).
    ///
    /// # Cancel safety
    /// Dropping the future while it acquires can leave the lease held by the request's
    /// attempt until its TTL (see [`LeaseClient::acquire`]); once the actors run, they own it.
    pub async fn spawn_under_lease<W>(
        &self,
        request: &LeaseRequest,
        worker: W,
        args: impl FnOnce(LeaseContext) -> W::Arguments + Send + 'static,
        policy: CancelPolicy,
    ) -> Result<SpawnOutcome<W::Msg>, RuntimeError>
    where
        W: Actor,
        W::Msg: From<LeaseCancelled>,
    {
        let (handle, admission) = match self.take_settled(request).await? {
            Ok(held) => held,
            Err(other) => return Ok(SpawnOutcome::NotAcquired(other)),
        };
        let (worker_tx, worker_rx) = oneshot::channel();
        let spawner = move |supervisor: ActorCell, ctx: LeaseContext| {
            let fut = async move {
                let (worker, _) = W::spawn_linked(None, worker, args(ctx), supervisor).await?;
                let _ = worker_tx.send(worker.clone());
                Ok(worker)
            };
            Box::pin(fut) as crate::runtime::lease_actor::worker::SpawnFuture<W::Msg>
        };
        let started = self
            .start(handle, admission, policy, None, |ctx| {
                Worker::Spawn(Box::new(move |cell| spawner(cell, ctx)))
            })
            .await?;
        let Ok(worker) = worker_rx.await else {
            // The worker failed to start; the lease actor released and reported it.
            let report = started.wait().await;
            return Err(RuntimeError::Spawn {
                reason: match report.end {
                    JobEnd::Failed { error } => error,
                    other => other.as_str().to_owned(),
                },
            });
        };
        Ok(SpawnOutcome::Started(started.into_job(worker)))
    }

    /// Starts a lease actor for a lease already held (`handle`), on behalf of a worker
    /// that already runs and outlives the lease — a long-running actor taking and dropping
    /// leases over its life.
    ///
    /// # Linked under `supervisor`
    /// With `Some(supervisor)` the lease actor is linked under it, and ractor tells the
    /// supervisor when it stops: an `ActorTerminated` every time a lease ends — every normal
    /// release included — and `ActorFailed` if the lease actor fails. ractor's default
    /// `handle_supervisor_evt` stops the supervisor (and its children) on either, so a
    /// supervisor that links lease actors overrides it and lets [`is_lease_end`] events
    /// pass. With `None`, nothing is linked: the worker still hears of losses, and
    /// [`AttachedLease::wait`] reports the end.
    ///
    /// [`is_lease_end`]: crate::runtime::is_lease_end
    ///
    /// The worker receives one [`LeaseCancelled`] if the lease is lost or unknown; it ends
    /// the lease by sending [`LeaseActorMsg::release`] (or [`AttachedLease::release`]).
    /// Under [`CancelPolicy::Kill`], a worker that has not released by the end of local
    /// validity after a cancellation is killed — choose [`CancelPolicy::NotifyOnly`] if the
    /// worker must survive and checks [`LeaseContext::cancelled`] instead.
    ///
    /// # Errors
    /// [`RuntimeError::LimitReached`], [`RuntimeError::Invalid`] (renewal cadence), or
    /// [`RuntimeError::Spawn`]; in every error case the handle is released.
    ///
    /// # Cancel safety
    /// Not cancel safe: do not race it. Dropped before the lease actor started, the handle
    /// moved into it is dropped (released best effort); dropped after, the lease stays with
    /// that actor — renewing, its worker told of a loss as usual — but no
    /// [`AttachedLease`] exists to release it, so it ends only when it is lost.
    pub async fn attach<M>(
        &self,
        mut handle: LeaseHandle,
        worker: ActorRef<M>,
        supervisor: Option<ActorCell>,
        policy: CancelPolicy,
    ) -> Result<AttachedLease, RuntimeError>
    where
        M: Message + From<LeaseCancelled>,
    {
        let checked = self
            .client
            .settings()
            .check_renewal_cadence(handle.ttl())
            .map_err(RuntimeError::from)
            .and_then(|()| self.admit());
        let admission = match checked {
            Ok(admission) => admission,
            Err(e) => {
                let _ = handle.release().await;
                return Err(e);
            }
        };
        let started = self
            .start(handle, admission, policy, supervisor, |_| {
                Worker::Attached(worker)
            })
            .await?;
        Ok(started.into_attached())
    }

    /// What every entry point does first: the checks before any I/O (renewal room, the
    /// runtime's lease limit, a drain), then the acquisition, waiting as `patience` says —
    /// given up if a drain begins meanwhile. The handle with its admission, or what the
    /// acquisition answered instead.
    pub(crate) async fn take(
        &self,
        request: &LeaseRequest,
        patience: Patience,
    ) -> Result<Result<(LeaseHandle, Admission), AcquireOutcome>, RuntimeError> {
        self.client.settings().check_request(request)?;
        let admission = self.admit()?;
        let outcome = tokio::select! {
            outcome = self.client.acquire_with(request, patience) => outcome?,
            () = self.registry.drain_began() => {
                // The acquisition may have landed: give it up by its attempt
                // (owner-checked, so nobody else's lease is touched). A release that may
                // not have run is said and counted (while the admission still lives).
                if !self.give_up(request, "given up for the drain").await {
                    self.registry.note_unreleased();
                }
                drop(admission);
                return Err(RuntimeError::ShuttingDown);
            }
        };
        Ok(match outcome {
            AcquireOutcome::Acquired(h) | AcquireOutcome::Replayed(h) => Ok((h, admission)),
            other => Err(other),
        })
    }

    /// [`take`](Self::take) for the entry points that answer once (`spawn_under_lease`,
    /// `run_under_lease`): an acquisition of unknown end is replayed until an answer settles
    /// it ([`Patience::settling`]). If none came, the attempt is given up by a release
    /// (owner-checked), so the replays — each of which may have landed — leave nothing
    /// held; a release whose end is unknown too is said, and the outcome stays
    /// `Indeterminate`.
    pub(crate) async fn take_settled(
        &self,
        request: &LeaseRequest,
    ) -> Result<Result<(LeaseHandle, Admission), AcquireOutcome>, RuntimeError> {
        let taken = self.take(request, Patience::settling(request)).await?;
        if let Err(AcquireOutcome::Indeterminate { .. }) = &taken {
            self.give_up(request, "of unknown end could not be settled and")
                .await;
        }
        Ok(taken)
    }

    /// Gives up `request`'s acquisition, which may have landed, by a release of its attempt
    /// (owner-checked: nobody else's lease is touched). A release that may not have run is
    /// said (`why`: what the acquisition was) and answers false: if the acquisition took
    /// the lease, it stays held until its TTL ends.
    async fn give_up(&self, request: &LeaseRequest, why: &str) -> bool {
        let released = self.client.release_attempt(request).await;
        if released.may_leave_it_held() {
            tracing::warn!(
                release = released.as_str(),
                "an acquisition {why} could not be released: if it took the lease, the lease \
                 stays held until its TTL ends"
            );
            return false;
        }
        true
    }

    /// Spawns the lease actor for `handle`; the worker is made from the lease's context.
    pub(crate) async fn start<M>(
        &self,
        mut handle: LeaseHandle,
        admission: Admission,
        policy: CancelPolicy,
        supervisor: Option<ActorCell>,
        worker: impl FnOnce(LeaseContext) -> Worker<M>,
    ) -> Result<Started, RuntimeError>
    where
        M: Message + From<LeaseCancelled>,
    {
        if self.registry.draining() {
            // Acquired just as a drain began: no worker starts under it.
            let _ = handle.release().await;
            return Err(RuntimeError::ShuttingDown);
        }
        let admission_id = admission.id();
        let settings = self.client.settings();
        let facts = LeaseFacts::new(
            handle.purpose().clone(),
            *handle.resource(),
            handle.replication().clone(),
            handle.keys().slot(),
            // Made here, in the caller's task, where the actor's `pre_start` runs too: its
            // parent is the caller's span.
            tracing::info_span!(
                "lease_actor",
                purpose = %handle.purpose(),
                digest = %handle.resource().short(),
                op_id = %handle.attempt().operation(),
                token = handle.token().get(),
            ),
        );
        let initial = LeaseStatus {
            state: LeaseState::Active,
            valid_until: handle.valid_until(),
            stop_by: handle
                .valid_until()
                .unwrap_or_else(tokio::time::Instant::now),
            renewals: 0,
            cancelled: None,
        };
        let (status_tx, status_rx) = published::channel(initial, facts);
        let context = LeaseContext::new(handle.token(), status_rx);
        let (report_tx, report_rx) = oneshot::channel();
        let token = handle.token();
        let args = LeaseActorArgs {
            renew_every: settings.renewal_cadence(handle.ttl()),
            safety_margin: settings.safety_margin(),
            worker: worker(context.clone()),
            handle,
            policy,
            status: status_tx,
            report: Some(report_tx),
            admission: Some(admission),
            timers: self.timers.clone(),
        };
        let spawned = match supervisor {
            Some(sup) => Actor::spawn_linked(None, LeaseActor::<M>::new(), args, sup).await,
            None => Actor::spawn(None, LeaseActor::<M>::new(), args).await,
        };
        // On a spawn error the arguments (and the handle in them) are dropped, which
        // releases the lease best effort.
        let (lease, _) = spawned.map_err(|e| RuntimeError::Spawn {
            reason: e.to_string(),
        })?;
        self.registry.started(admission_id, &lease);
        tracing::debug!(token = token.get(), "lease actor started");
        Ok(Started {
            lease,
            context,
            report: report_rx,
        })
    }
}
