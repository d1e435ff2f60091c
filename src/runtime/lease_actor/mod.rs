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
use std::marker::PhantomData;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, Message, RpcReplyPort, SupervisionEvent,
};
use tokio::sync::{OwnedSemaphorePermit, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::backend::{FailureDetail, FailureKind};
use crate::lease::{LeaseHandle, LeaseState, ReleaseOutcome, RenewOutcome};
use crate::runtime::watchdog::{Action, Phase, Watchdog};
use crate::runtime::worker::WorkerState;
pub(crate) use crate::runtime::worker::{SpawnFuture, TaskEnd, Worker};
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
pub(crate) struct LeaseActor<M>(PhantomData<fn() -> M>);

impl<M> LeaseActor<M> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

/// Messages a lease actor accepts. Build them with the associated functions; the timer
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
    /// The task running the work ended; the panic's message if it panicked.
    pub(crate) fn task_ended(failure: Option<String>) -> Self {
        Self(Command::TaskEnded(failure))
    }

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

/// Start-up arguments of a `LeaseActor`; built by [`LeaseRuntime`](crate::runtime::LeaseRuntime).
pub(crate) struct LeaseActorArgs<M> {
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

/// The actor's private state.
pub(crate) struct LeaseActorState<M> {
    handle: LeaseHandle,
    worker: WorkerState<M>,
    cancel: CancellationToken,
    status: watch::Sender<LeaseStatus>,
    report: Option<oneshot::Sender<LeaseReport>>,
    /// This lease's slot in the runtime's limit; given back before the report is sent.
    permit: Option<OwnedSemaphorePermit>,
    /// When to renew, cancel and stop the worker: the schedule, decided without I/O.
    watchdog: Watchdog,
    /// The cancellation sent, kept for the status and the report.
    cancelled: Option<LeaseCancelled>,
    /// Generation of the one armed timer: a `Tick` of an older one is stale.
    timer: u64,
    /// One span for the lease's whole life in this actor.
    span: tracing::Span,
}

impl<M> LeaseActorState<M> {
    fn finishing(&self) -> bool {
        self.watchdog.phase() == Phase::Finishing
    }

    fn publish(&mut self) {
        let state = self.handle.state();
        let valid_until = self.watchdog.valid_until();
        let status = LeaseStatus {
            state,
            valid_until: (state == LeaseState::Active && self.cancelled.is_none())
                .then_some(valid_until),
            stop_by: valid_until,
            renewals: self.watchdog.renewals(),
            cancelled: self.cancelled.as_ref().map(|c| c.reason),
        };
        self.status.send_replace(status);
    }
}

impl<M: Message + From<LeaseCancelled>> LeaseActor<M> {
    fn arm(myself: &ActorRef<LeaseActorMsg>, state: &mut LeaseActorState<M>) {
        state.timer += 1;
        let Some(deadline) = state.watchdog.next_deadline(state.worker.view()) else {
            return;
        };
        let generation = state.timer;
        let delay = deadline.at().saturating_duration_since(Instant::now());
        tracing::trace!(?deadline, ?delay, "lease actor timer armed");
        myself.send_after(delay, move || LeaseActorMsg(Command::Tick(generation)));
    }

    /// Sends the one cancellation (invariant 2) and applies the policy if no time is left.
    fn cancel(state: &mut LeaseActorState<M>, reason: CancelReason) {
        let now = Instant::now();
        let delay = state.watchdog.failing_for(now);
        let Some(cancellation) = state.watchdog.cancel(reason, now) else {
            return;
        };
        let message = LeaseCancelled {
            reason,
            token: state.handle.token(),
            remaining_validity: cancellation.remaining,
        };
        tracing::info!(
            reason = reason.as_str(),
            token = state.handle.token().get(),
            remaining_ms = u64::try_from(cancellation.remaining.as_millis()).unwrap_or(u64::MAX),
            "lease cancelled"
        );
        telemetry::cancellation(state.handle.purpose(), reason.as_str(), delay);
        state.cancelled = Some(message.clone());
        // Published before the token fires, so work woken by it reads the reason.
        state.publish();
        state.cancel.cancel();
        if state.worker.alive() {
            let target = match &state.worker {
                WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => Some(worker),
                _ => None,
            };
            if let Some(worker) = target {
                // A worker that has just stopped cannot receive it; that is fine (it is gone).
                let _ = worker.send_message(M::from(message));
            }
        }
        if cancellation.stop_now {
            Self::stop_worker_if_due(state);
        }
    }

    fn stop_worker_if_due(state: &mut LeaseActorState<M>) {
        let view = state.worker.view();
        if !state.watchdog.stop_worker(view) {
            return;
        }
        Self::stop_worker(state);
    }

    /// Stops the worker; the watchdog decided it must be.
    fn stop_worker(state: &LeaseActorState<M>) {
        tracing::warn!(
            token = state.handle.token().get(),
            "worker still running at the end of local validity; stopping it"
        );
        match &state.worker {
            WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => worker.kill(),
            WorkerState::Task { task, .. } => task.abort(),
            WorkerState::Pending(_) | WorkerState::PendingTask(_) | WorkerState::Starting => {}
        }
    }

    async fn renew(state: &mut LeaseActorState<M>) {
        let started = Instant::now();
        let remaining = state.handle.remaining_validity();
        let Some(bound) = state.watchdog.renew_bound(remaining) else {
            return Self::cancel(state, CancelReason::RenewalUnconfirmed);
        };
        let outcome = state.handle.renew_within(bound).await;
        if !matches!(outcome, RenewOutcome::Renewed { .. }) {
            state.watchdog.on_renew_failed(started);
        }
        match outcome {
            RenewOutcome::Renewed { .. } => {
                let valid_until = state.handle.valid_until();
                state.watchdog.on_renewed(started, valid_until);
                state.publish();
            }
            RenewOutcome::Lost { reason } => Self::cancel(state, CancelReason::Lost(reason)),
            RenewOutcome::Indeterminate { .. } => Self::cancel(state, CancelReason::Unknown),
            RenewOutcome::Unavailable { .. } => state.watchdog.on_unavailable(Instant::now()),
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
        state.watchdog.finish();
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
        // The slot first: a caller that starts the next lease the moment it reads the
        // report must find it free.
        drop(state.permit.take());
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
                killed: state.watchdog.killed(),
            },
            None => JobEnd::Completed,
        }
    }
}

/// Release attempts when finishing, and the pause between them.
const RELEASE_ATTEMPTS: u32 = 3;
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Bound on waiting for a killed worker to stop before releasing.
const KILL_WAIT: Duration = Duration::from_secs(1);

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
            cancel,
            status,
            report,
            permit,
            watchdog: Watchdog::new(valid_until, now, renew_every, safety_margin, policy),
            cancelled: None,
            timer: 0,
            span,
        };
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
            Command::Tick(generation) if generation != state.timer || state.finishing() => {}
            Command::Tick(_) => {
                let view = state.worker.view();
                for action in state.watchdog.on_timeout(Instant::now(), view) {
                    match action {
                        Action::Renew => Self::renew(state).await,
                        Action::Cancel(reason) => Self::cancel(state, reason),
                        Action::StopWorker => Self::stop_worker(state),
                        Action::FinishAttached => {
                            let end = Self::end_for_exit(state);
                            Self::finish(state, end).await;
                            myself.stop(Some("lease ended".to_owned()));
                        }
                    }
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
        if !state.finishing() {
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
        drop(self.permit.take());
        if let Some(tx) = self.report.take() {
            let _ = tx.send(LeaseReport {
                end: JobEnd::Aborted,
                cancelled: self.cancelled.clone(),
                release: ReleaseOutcome::Indeterminate {
                    detail: FailureDetail::new(
                        FailureKind::Abandoned,
                        "lease actor ended before releasing; released best effort on drop",
                    ),
                },
                token: self.handle.token(),
            });
        }
    }
}
