//! `LeaseActor`: owns one `LeaseHandle`, renews it like a watchdog, and supervises the worker
//! the lease protects (docs/design.md §8).
//!
//! # Invariants
//!
//! 1. The handle never leaves the actor; others see it through [`LeaseStatus`] and the
//!    worker's [`LeaseContext`](crate::runtime::LeaseContext).
//! 2. [`LeaseCancelled`] is sent at most once per lease, never after the worker stopped, and
//!    the context's cancellation token is cancelled at the same moment.
//! 3. One timer is armed at a time, for the earliest pending [`Deadline`]; a timer message
//!    carries a generation, and a stale one is ignored. A timer is re-armed per event, never
//!    an interval (an interval catches up in bursts after a stall).
//! 4. Every renewal is bounded by `min(command timeout, remaining validity − safety margin)`,
//!    so a renewal that fails leaves the actor at the cancellation deadline, not past it.
//! 5. The lease is released (owner-checked) only after the worker stopped, so a new holder
//!    never overlaps a worker this actor could still stop.
//! 6. When the actor ends for any reason — panic, `kill`, error — its state is dropped, which
//!    cancels the token, stops a child worker, and (through the handle's drop) releases the
//!    lease best effort; the TTL is the backstop.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, Message, RpcReplyPort, SpawnErr,
    SupervisionEvent,
};
use tokio::sync::{OwnedSemaphorePermit, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::backend::{FailureDetail, FailureKind};
use crate::lease::{LeaseHandle, LeaseState, ReleaseOutcome, RenewOutcome};
use crate::runtime::{
    CancelPolicy, CancelReason, JobEnd, LeaseCancelled, LeaseReport, LeaseStatus,
};
use crate::telemetry;

/// The actor holding one lease. Generic over the worker's message type `M`, which must
/// accept a [`LeaseCancelled`].
///
/// Spawned by [`LeaseRuntime::spawn_under_lease`](crate::runtime::LeaseRuntime) (which also
/// spawns the worker as its child) or by
/// [`LeaseRuntime::attach`](crate::runtime::LeaseRuntime::attach) (for a worker that already
/// runs and outlives the lease).
///
/// Its `handle_supervisor_evt` is overridden: ractor's default stops a supervisor when any
/// child stops, normal exits included, which would skip the release.
pub struct LeaseActor<M>(PhantomData<fn() -> M>);

impl<M> LeaseActor<M> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

/// Messages a [`LeaseActor`] accepts. Build them with the associated functions; the timer
/// messages are internal.
pub struct LeaseActorMsg(Command);

enum Command {
    Tick(u64),
    Status(RpcReplyPort<LeaseStatus>),
    Release,
    /// The task running the work ended; the panic's message if it panicked.
    TaskEnded(Option<String>),
}

impl LeaseActorMsg {
    /// Asks for the current [`LeaseStatus`].
    pub fn status(reply: RpcReplyPort<LeaseStatus>) -> Self {
        Self(Command::Status(reply))
    }

    /// Ends the lease: a child worker is sent [`LeaseCancelled`] with
    /// [`CancelReason::Shutdown`] and the lease is released once it stopped; with an
    /// attached worker the lease is released at once.
    pub fn release() -> Self {
        Self(Command::Release)
    }
}

impl fmt::Debug for LeaseActorMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Command::Tick(_) => "LeaseActorMsg::Tick",
            Command::Status(_) => "LeaseActorMsg::Status",
            Command::Release => "LeaseActorMsg::Release",
            Command::TaskEnded(_) => "LeaseActorMsg::TaskEnded",
        })
    }
}

pub(crate) type SpawnFuture<M> =
    Pin<Box<dyn Future<Output = Result<ActorRef<M>, SpawnErr>> + Send>>;
/// Spawns the worker linked under the given supervisor cell.
pub(crate) type Spawner<M> = Box<dyn FnOnce(ActorCell) -> SpawnFuture<M> + Send>;

/// Starts the task that runs the work (in `post_start`, in the lease's span); the task
/// holds a [`TaskEnd`] that tells this actor when it ends.
pub(crate) type TaskStarter =
    Box<dyn FnOnce(ActorRef<LeaseActorMsg>) -> tokio::task::JoinHandle<()> + Send>;

pub(crate) enum Worker<M> {
    /// Spawned in `post_start` as this actor's child.
    Spawn(Spawner<M>),
    /// An actor that already runs; it is told, not supervised.
    Attached(ActorRef<M>),
    /// A future run as a task of its own, started in `post_start`: its cancellation is the
    /// context's token, and it is stopped by aborting it (dropped at its next `.await`).
    Task(TaskStarter),
}

/// Tells the lease actor, when dropped, that the task running the work ended: it returned,
/// panicked ([`failed`](Self::failed) was called), or was aborted.
pub(crate) struct TaskEnd {
    actor: ActorRef<LeaseActorMsg>,
    failure: Option<String>,
}

impl TaskEnd {
    pub(crate) fn new(actor: ActorRef<LeaseActorMsg>) -> Self {
        Self {
            actor,
            failure: None,
        }
    }

    /// The work panicked with `message`.
    pub(crate) fn failed(&mut self, message: String) {
        self.failure = Some(message);
    }
}

impl Drop for TaskEnd {
    fn drop(&mut self) {
        // The actor may be gone already (stopped from outside): nothing left to tell.
        let _ = self
            .actor
            .send_message(LeaseActorMsg(Command::TaskEnded(self.failure.take())));
    }
}

/// Start-up arguments of a [`LeaseActor`]; built by [`LeaseRuntime`](crate::runtime::LeaseRuntime).
pub struct LeaseActorArgs<M> {
    pub(crate) handle: LeaseHandle,
    pub(crate) worker: Worker<M>,
    pub(crate) policy: CancelPolicy,
    pub(crate) cancel: CancellationToken,
    pub(crate) status: watch::Sender<LeaseStatus>,
    pub(crate) report: Option<oneshot::Sender<LeaseReport>>,
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    pub(crate) renew_every: Duration,
    pub(crate) safety_margin: Duration,
}

/// The earliest of these is the one timer armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    /// Fires when the next renewal is due.
    Renew(Instant),
    /// Fires at `valid_until − safety margin` if no renewal was confirmed by then: the next
    /// confirmation could not arrive in time, so the worker is cancelled.
    Cancel(Instant),
    /// Fires at local validity end, after a cancellation, if the worker still runs.
    StopWorker(Instant),
}

impl Deadline {
    fn at(self) -> Instant {
        match self {
            Self::Renew(t) | Self::Cancel(t) | Self::StopWorker(t) => t,
        }
    }
}

enum WorkerState<M> {
    Pending(Spawner<M>),
    PendingTask(TaskStarter),
    Child {
        worker: ActorRef<M>,
        alive: bool,
    },
    Attached(ActorRef<M>),
    Task {
        task: tokio::task::JoinHandle<()>,
        alive: bool,
    },
    Starting,
}

/// The actor's private state.
pub struct LeaseActorState<M> {
    handle: LeaseHandle,
    worker: WorkerState<M>,
    policy: CancelPolicy,
    cancel: CancellationToken,
    status: watch::Sender<LeaseStatus>,
    report: Option<oneshot::Sender<LeaseReport>>,
    _permit: Option<OwnedSemaphorePermit>,
    renew_every: Duration,
    safety_margin: Duration,
    /// Local validity end of the last confirmation; the worker never runs past it.
    valid_until: Instant,
    next_renew_at: Instant,
    cancelled: Option<LeaseCancelled>,
    killed: bool,
    renewals: u64,
    timer: u64,
    /// Set once `finish` started: no more timers, no second report.
    finishing: bool,
    /// Start of the first renewal round since the last confirmation that did not confirm:
    /// where the cancellation delay is measured from.
    first_failure_at: Option<Instant>,
    /// One span for the lease's whole life in this actor.
    span: tracing::Span,
}

impl<M> LeaseActorState<M> {
    fn worker_alive(&self) -> bool {
        match &self.worker {
            WorkerState::Child { alive, .. } | WorkerState::Task { alive, .. } => *alive,
            WorkerState::Attached(_) => true,
            WorkerState::Pending(_) | WorkerState::PendingTask(_) | WorkerState::Starting => false,
        }
    }

    fn publish(&mut self) {
        let state = self.handle.state();
        let status = LeaseStatus {
            state,
            valid_until: (state == LeaseState::Active && self.cancelled.is_none())
                .then_some(self.valid_until),
            stop_by: self.valid_until,
            renewals: self.renewals,
            cancelled: self.cancelled.as_ref().map(|c| c.reason),
        };
        self.status.send_replace(status);
    }

    /// The earliest pending deadline, if any.
    fn next_deadline(&self) -> Option<Deadline> {
        if self.finishing {
            return None;
        }
        if self.cancelled.is_none() {
            let cancel_at = self.valid_until.checked_sub(self.safety_margin);
            let cancel_at = cancel_at.unwrap_or(self.valid_until);
            return Some(if self.next_renew_at < cancel_at {
                Deadline::Renew(self.next_renew_at)
            } else {
                Deadline::Cancel(cancel_at)
            });
        }
        let attached = matches!(self.worker, WorkerState::Attached(_));
        let kill_due = self.policy == CancelPolicy::Kill && self.worker_alive() && !self.killed;
        // An attached worker is not supervised: at validity end the lease ends regardless.
        (attached || kill_due).then_some(Deadline::StopWorker(self.valid_until))
    }

    /// When to renew after a confirmation at `now`: the cadence, or earlier if the budget
    /// is short (a replay), so a retry still fits before the cancellation deadline —
    /// brought forward onto the renewal grid (see [`on_renewal_grid`]).
    fn schedule_renewal(&mut self, now: Instant) {
        let cancel_at = self
            .valid_until
            .checked_sub(self.safety_margin)
            .unwrap_or(now);
        let half_way = now + cancel_at.saturating_duration_since(now) / 2;
        let due = (now + self.renew_every).min(half_way);
        self.next_renew_at = on_renewal_grid(due, now, self.renew_every);
    }
}

impl<M: Message + From<LeaseCancelled>> LeaseActor<M> {
    fn arm(myself: &ActorRef<LeaseActorMsg>, state: &mut LeaseActorState<M>) {
        state.timer += 1;
        let Some(deadline) = state.next_deadline() else {
            return;
        };
        let generation = state.timer;
        let delay = deadline.at().saturating_duration_since(Instant::now());
        tracing::trace!(?deadline, ?delay, "lease actor timer armed");
        myself.send_after(delay, move || LeaseActorMsg(Command::Tick(generation)));
    }

    /// Sends the one cancellation (invariant 2) and applies the policy if no time is left.
    fn cancel(state: &mut LeaseActorState<M>, reason: CancelReason) {
        if state.cancelled.is_some() {
            return;
        }
        let remaining = state.valid_until.saturating_duration_since(Instant::now());
        let message = LeaseCancelled {
            reason,
            token: state.handle.token(),
            remaining_validity: remaining,
        };
        tracing::info!(
            reason = reason.as_str(),
            token = state.handle.token().get(),
            remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            "lease cancelled"
        );
        let delay = state.first_failure_at.map(|at| at.elapsed());
        telemetry::cancellation(state.handle.purpose(), reason.as_str(), delay);
        state.cancelled = Some(message.clone());
        // Published before the token fires, so work woken by it reads the reason.
        state.publish();
        state.cancel.cancel();
        if state.worker_alive() {
            let target = match &state.worker {
                WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => Some(worker),
                _ => None,
            };
            if let Some(worker) = target {
                // A worker that has just stopped cannot receive it; that is fine (it is gone).
                let _ = worker.send_message(M::from(message));
            }
        }
        if remaining.is_zero() {
            Self::stop_worker_if_due(state);
        }
    }

    fn stop_worker_if_due(state: &mut LeaseActorState<M>) {
        if state.policy != CancelPolicy::Kill || state.killed || !state.worker_alive() {
            return;
        }
        tracing::warn!(
            token = state.handle.token().get(),
            "worker still running at the end of local validity; stopping it"
        );
        match &state.worker {
            WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => worker.kill(),
            WorkerState::Task { task, .. } => task.abort(),
            WorkerState::Pending(_) | WorkerState::PendingTask(_) | WorkerState::Starting => {
                return;
            }
        }
        state.killed = true;
    }

    async fn renew(state: &mut LeaseActorState<M>) {
        let started = Instant::now();
        let remaining = state.handle.remaining_validity();
        let bound = remaining.saturating_sub(state.safety_margin);
        if bound.is_zero() {
            return Self::cancel(state, CancelReason::RenewalUnconfirmed);
        }
        let outcome = state.handle.renew_within(bound).await;
        if !matches!(outcome, RenewOutcome::Renewed { .. }) {
            state.first_failure_at.get_or_insert(started);
        }
        match outcome {
            RenewOutcome::Renewed { .. } => {
                state.first_failure_at = None;
                if let Some(until) = state.handle.valid_until() {
                    state.valid_until = until;
                }
                state.renewals += 1;
                state.schedule_renewal(started);
                state.publish();
            }
            RenewOutcome::Lost { reason } => Self::cancel(state, CancelReason::Lost(reason)),
            RenewOutcome::Indeterminate { .. } => Self::cancel(state, CancelReason::Unknown),
            RenewOutcome::Unavailable { .. } => {
                // Nothing reached Redis; the old budget holds. Try again soon — the Cancel
                // deadline gives up in time if this keeps failing.
                state.next_renew_at =
                    Instant::now() + state.renew_every.min(RETRY_AFTER_UNAVAILABLE);
            }
            RenewOutcome::Refused { state: refused } => Self::cancel(
                state,
                match refused {
                    LeaseState::Lost(reason) => CancelReason::Lost(reason),
                    _ => CancelReason::Unknown,
                },
            ),
        }
    }

    /// Releases the lease and sends the report (invariant 5: the worker has stopped, or is
    /// attached and asked for it).
    async fn finish(state: &mut LeaseActorState<M>, end: JobEnd) -> LeaseReport {
        state.finishing = true;
        state.timer += 1;
        let mut release = state.handle.release().await;
        // A release that did not land leaves the key held until its TTL; the worker has
        // stopped, so a few bounded retries cost nothing and usually free it sooner. The
        // release is owner-checked, so a retry after an unseen success reads ABSENT.
        for _ in 1..RELEASE_ATTEMPTS {
            if !matches!(
                release,
                ReleaseOutcome::Unavailable { .. } | ReleaseOutcome::Indeterminate { .. }
            ) {
                break;
            }
            tokio::time::sleep(RELEASE_RETRY_PAUSE).await;
            release = state.handle.release().await;
        }
        state.publish();
        let report = LeaseReport {
            end,
            cancelled: state.cancelled.clone(),
            release,
            token: state.handle.token(),
        };
        tracing::info!(
            end = report.end.as_str(),
            release = report.release.as_str(),
            token = report.token.get(),
            "lease actor finished"
        );
        if let Some(tx) = state.report.take() {
            let _ = tx.send(report.clone());
        }
        state.cancel.cancel();
        report
    }

    fn end_for_exit(state: &LeaseActorState<M>) -> JobEnd {
        match &state.cancelled {
            Some(c) => JobEnd::Cancelled {
                reason: c.reason,
                killed: state.killed,
            },
            None => JobEnd::Completed,
        }
    }
}

/// Spacing of the renewal grid, at most: renewals are brought forward onto multiples of it.
const RENEWAL_GRID: Duration = Duration::from_millis(100);

/// `due` brought forward to the last point of a process-wide grid (spacing
/// `min(RENEWAL_GRID, renew_every / 8)`) — unless that is not after `now`.
///
/// Why: the leases of a process then renew at a few shared instants rather than spread
/// over every millisecond, so their renewals reach the backend together and travel in a few
/// script calls (`RedisBackend` coalesces them): 100,000 leases renewing every 10 s make
/// about a thousand renewals per grid point, and 10,000 a hundred. Renewing up to one
/// spacing early (1% of the cadence with the default ttl/3) costs nothing: the budget only
/// grows.
fn on_renewal_grid(due: Instant, now: Instant, renew_every: Duration) -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let spacing = RENEWAL_GRID.min(renew_every / 8);
    let Some(since) = due.checked_duration_since(origin) else {
        return due;
    };
    if spacing.is_zero() {
        return due;
    }
    // Both fit in u128 nanoseconds; the remainder is below `spacing`, so `due − off_grid`
    // does not underflow.
    let off_grid = since.as_nanos() % spacing.as_nanos();
    let aligned = due - Duration::from_nanos(u64::try_from(off_grid).unwrap_or(0));
    if aligned > now { aligned } else { due }
}

/// Release attempts when finishing, and the pause between them.
const RELEASE_ATTEMPTS: u32 = 3;
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Bound on waiting for a killed worker to stop before releasing.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// Pause before retrying a renewal that provably did not reach Redis.
const RETRY_AFTER_UNAVAILABLE: Duration = Duration::from_millis(100);

// Each handler's future is boxed (one allocation per message): ractor allocates an actor's
// message loop once, at the size of its largest state, so unboxed every held lease would
// carry room for a release with retries — 1.3 KB — for its whole life.
impl<M: Message + From<LeaseCancelled>> Actor for LeaseActor<M> {
    type Msg = LeaseActorMsg;
    type State = LeaseActorState<M>;
    type Arguments = LeaseActorArgs<M>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let LeaseActorArgs {
            mut handle,
            worker,
            policy,
            cancel,
            status,
            report,
            permit,
            renew_every,
            safety_margin,
        } = args;
        let now = Instant::now();
        let valid_until = handle.valid_until().unwrap_or(now);
        let span = tracing::info_span!(
            "lease_actor",
            purpose = %handle.purpose(),
            digest = %handle.resource().short(),
            op_id = %handle.attempt().operation(),
            token = handle.token().get(),
        );
        span.in_scope(|| tracing::info!(policy = ?policy, "lease actor spawned"));
        let mut state = LeaseActorState {
            handle,
            worker: match worker {
                Worker::Spawn(spawner) => WorkerState::Pending(spawner),
                Worker::Attached(worker) => WorkerState::Attached(worker),
                Worker::Task(starter) => WorkerState::PendingTask(starter),
            },
            policy,
            cancel,
            status,
            report,
            _permit: permit,
            renew_every,
            safety_margin,
            valid_until,
            next_renew_at: now,
            cancelled: None,
            killed: false,
            renewals: 0,
            timer: 0,
            finishing: false,
            first_failure_at: None,
            span,
        };
        state.schedule_renewal(now);
        state.publish();
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        Box::pin(self.on_post_start(myself, state).instrument(span)).await
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        Box::pin(self.on_message(myself, message, state).instrument(span)).await
    }

    /// Overridden: ractor's default stops a supervisor when any child stops, normal exits
    /// included, which would skip the release.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        Box::pin(self.on_supervision(myself, event, state).instrument(span)).await
    }

    /// Does not run after a panic or `kill` (ractor skips it); the state's `Drop` covers
    /// those (invariant 6).
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        Box::pin(self.on_post_stop(myself, state).instrument(span)).await
    }
}

/// The actor's event handlers, run inside the lease's span.
impl<M: Message + From<LeaseCancelled>> LeaseActor<M> {
    async fn on_post_start(
        &self,
        myself: ActorRef<LeaseActorMsg>,
        state: &mut LeaseActorState<M>,
    ) -> Result<(), ActorProcessingErr> {
        // Take the spawner out; any other slot (an attached worker) goes straight back.
        match std::mem::replace(&mut state.worker, WorkerState::Starting) {
            WorkerState::Pending(spawn) => match spawn(myself.get_cell()).await {
                Ok(worker) => {
                    state.worker = WorkerState::Child {
                        worker,
                        alive: true,
                    };
                }
                Err(e) => {
                    // No worker: nothing to protect. Release and report the failure.
                    let end = JobEnd::Failed {
                        error: format!("worker failed to start: {e}"),
                    };
                    Self::finish(state, end).await;
                    return Err(Box::new(e));
                }
            },
            WorkerState::PendingTask(start) => {
                state.worker = WorkerState::Task {
                    task: start(myself.clone()),
                    alive: true,
                };
            }
            other => state.worker = other,
        }
        if state.handle.state() != LeaseState::Active {
            // A replay born without validity: cancel at once.
            Self::cancel(state, CancelReason::RenewalUnconfirmed);
        }
        Self::arm(&myself, state);
        Ok(())
    }

    async fn on_message(
        &self,
        myself: ActorRef<LeaseActorMsg>,
        message: LeaseActorMsg,
        state: &mut LeaseActorState<M>,
    ) -> Result<(), ActorProcessingErr> {
        match message.0 {
            Command::Tick(generation) if generation != state.timer || state.finishing => {}
            Command::Tick(_) => {
                let now = Instant::now();
                if state.cancelled.is_some() {
                    if now >= state.valid_until {
                        Self::stop_worker_if_due(state);
                        if let WorkerState::Attached(_) = state.worker {
                            let end = Self::end_for_exit(state);
                            Self::finish(state, end).await;
                            myself.stop(Some("lease ended".to_owned()));
                        }
                    }
                } else if now
                    >= state
                        .valid_until
                        .checked_sub(state.safety_margin)
                        .unwrap_or(state.valid_until)
                {
                    Self::cancel(state, CancelReason::RenewalUnconfirmed);
                } else if now >= state.next_renew_at {
                    Self::renew(state).await;
                }
                Self::arm(&myself, state);
            }
            Command::Status(reply) => {
                state.publish();
                let _ = reply.send(*state.status.borrow());
            }
            Command::TaskEnded(failure) => {
                let WorkerState::Task { task, alive } = &mut state.worker else {
                    return Ok(());
                };
                *alive = false;
                // `TaskEnd` speaks while the task may still be dropping the work (an abort):
                // the release waits for the task's very end, bounded (invariant 5).
                let _ = tokio::time::timeout(KILL_WAIT, task).await;
                let end = match failure {
                    Some(error) => JobEnd::Failed { error },
                    None => Self::end_for_exit(state),
                };
                Self::finish(state, end).await;
                myself.stop(Some("work ended".to_owned()));
            }
            Command::Release => match &state.worker {
                WorkerState::Attached(_) => {
                    Self::finish(state, JobEnd::Completed).await;
                    myself.stop(Some("released".to_owned()));
                }
                _ => {
                    Self::cancel(state, CancelReason::Shutdown);
                    Self::arm(&myself, state);
                }
            },
        }
        Ok(())
    }

    async fn on_supervision(
        &self,
        myself: ActorRef<LeaseActorMsg>,
        event: SupervisionEvent,
        state: &mut LeaseActorState<M>,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerState::Child { worker, alive } = &mut state.worker else {
            return Ok(());
        };
        let is_worker = |cell: &ActorCell| cell.get_id() == worker.get_id();
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) if is_worker(&cell) => {
                *alive = false;
                let end = Self::end_for_exit(state);
                Self::finish(state, end).await;
                myself.stop(Some("worker exited".to_owned()));
                Ok(())
            }
            SupervisionEvent::ActorFailed(cell, error) if is_worker(&cell) => {
                *alive = false;
                let end = JobEnd::Failed {
                    error: error.to_string(),
                };
                Self::finish(state, end).await;
                // Reported to this actor's own supervisor (if any) as a failure.
                Err(format!("worker failed: {error}").into())
            }
            // Not our worker (ractor may deliver events of grandchildren): ignore, do not
            // stop as the default handler would.
            _ => Ok(()),
        }
    }

    async fn on_post_stop(
        &self,
        _myself: ActorRef<LeaseActorMsg>,
        state: &mut LeaseActorState<M>,
    ) -> Result<(), ActorProcessingErr> {
        if !state.finishing {
            // Stopped from outside while the worker ran: stop it first (invariant 5).
            // Wait for it, bounded: the release must not overlap a running worker.
            match &mut state.worker {
                WorkerState::Child {
                    worker,
                    alive: true,
                } => {
                    let _ = worker.kill_and_wait(Some(KILL_WAIT)).await;
                }
                WorkerState::Task { task, alive: true } => {
                    task.abort();
                    let _ = tokio::time::timeout(KILL_WAIT, task).await;
                }
                _ => {}
            }
            Self::finish(state, JobEnd::Aborted).await;
        }
        Ok(())
    }
}

impl<M> Drop for LeaseActorState<M> {
    fn drop(&mut self) {
        // Invariant 6: reached after a panic or kill too, where post_stop does not run.
        self.cancel.cancel();
        match &self.worker {
            WorkerState::Child {
                worker,
                alive: true,
            } => worker.kill(),
            WorkerState::Task { task, alive: true } => task.abort(),
            _ => {}
        }
        if let Some(tx) = self.report.take() {
            let _ = tx.send(LeaseReport {
                end: JobEnd::Aborted,
                cancelled: self.cancelled.clone(),
                release: ReleaseOutcome::Indeterminate {
                    detail: FailureDetail::new(
                        FailureKind::Timeout,
                        "lease actor ended before releasing; released best effort on drop",
                    ),
                },
                token: self.handle.token(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn renewals_due_within_one_grid_spacing_share_an_instant_no_later_than_due() {
        let now = Instant::now();
        let every = Duration::from_secs(10);
        let dues: Vec<Instant> = (0..100).map(|i| now + every + MS * i / 10).collect();
        let aligned: Vec<Instant> = dues
            .iter()
            .map(|&due| on_renewal_grid(due, now, every))
            .collect();
        for (due, at) in dues.iter().zip(&aligned) {
            assert!(at <= due && *due - *at < RENEWAL_GRID, "{at:?} for {due:?}");
            assert!(*at > now);
        }
        let mut distinct = aligned.clone();
        distinct.dedup();
        // 100 renewals due over 10 ms land on at most two grid points.
        assert!(distinct.len() <= 2, "{} instants", distinct.len());
    }

    #[test]
    fn a_short_cadence_gets_a_finer_grid_and_nothing_moves_into_the_past() {
        let now = Instant::now();
        let every = Duration::from_millis(40);
        for i in 0..50 {
            let due = now + every + MS * i / 7;
            let at = on_renewal_grid(due, now, every);
            assert!(at <= due && due - at < every / 8, "{at:?} for {due:?}");
        }
        // Due within a spacing of now: never moved to now or before it.
        for i in 1..20 {
            let due = now + MS * i / 4;
            let at = on_renewal_grid(due, now, every);
            assert!(at <= due && (at > now || at == due), "{at:?} for {due:?}");
        }
    }
}
