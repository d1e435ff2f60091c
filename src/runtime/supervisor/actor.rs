//! The supervisor actor: acquires, runs one term at a time as a linked lease actor, backs
//! off, and stops when told, when the job completed, or when its runtime drains.
//!
//! The acquisition runs in a task of its own, so the actor keeps answering (a `Shutdown`
//! gives the acquisition up); a term's end reaches the actor as the supervision event of
//! its lease actor, whose report was sent just before it stopped.

use std::marker::PhantomData;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::lease::{AcquireOutcome, LeaseHandle};
use crate::protocol::{FencingToken, LeaseRequest};
use crate::runtime::job::report_or_vanished;
use crate::runtime::lease_actor::release_time;
use crate::runtime::message::LeaseActorMsg;
use crate::runtime::registry::Slot;
use crate::runtime::supervisor::pacing::{Pacing, jittered, retry_hint};
use crate::runtime::supervisor::{
    SupervisorConfig, SupervisorMsg, SupervisorState, SupervisorSummary,
};
use crate::runtime::worker::{SpawnFuture, Worker};
use crate::runtime::{
    CancelPolicy, JobEnd, LeaseCancelled, LeaseContext, LeaseReport, LeaseRuntime, RuntimeError,
};

/// Builds each term's worker from its lease.
pub(crate) type MakeWorker<W> =
    Box<dyn Fn(LeaseContext) -> (W, <W as Actor>::Arguments) + Send + Sync + 'static>;

/// What an acquisition task brings back: as [`LeaseRuntime::take`] answers.
type Taken = Result<Result<(LeaseHandle, Slot), AcquireOutcome>, RuntimeError>;

pub(crate) enum Command {
    /// The pause is over: acquire for the next term.
    Acquire,
    /// The acquisition task answered.
    Acquired(Box<Taken>),
    /// The acquisition was given up for a `Shutdown` (and its attempt released).
    AcquireAbandoned,
    Shutdown,
}

impl Command {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Acquire => "Acquire",
            Self::Acquired(_) => "Acquired",
            Self::AcquireAbandoned => "AcquireAbandoned",
            Self::Shutdown => "Shutdown",
        }
    }
}

pub(crate) struct SupervisorArgs<W: Actor> {
    pub(crate) runtime: LeaseRuntime,
    pub(crate) request: LeaseRequest,
    pub(crate) make: MakeWorker<W>,
    pub(crate) policy: CancelPolicy,
    pub(crate) config: SupervisorConfig,
    pub(crate) state: watch::Sender<SupervisorState>,
    pub(crate) summary: watch::Sender<Option<SupervisorSummary>>,
}

pub(crate) struct SupervisorActor<W>(PhantomData<fn() -> W>);

impl<W> SupervisorActor<W> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

/// Where the supervisor is between terms.
enum Phase {
    /// Waiting for the pause to end (an `Acquire` is scheduled).
    Paused,
    /// An acquisition task runs; cancelling gives it up.
    Acquiring(CancellationToken),
    /// A term runs under this lease actor.
    Holding(Term),
}

struct Term {
    lease: ActorRef<LeaseActorMsg>,
    token: FencingToken,
    report: oneshot::Receiver<LeaseReport>,
}

pub(crate) struct Core<W: Actor> {
    runtime: LeaseRuntime,
    request: LeaseRequest,
    make: MakeWorker<W>,
    policy: CancelPolicy,
    pacing: Pacing,
    phase: Phase,
    /// A `Shutdown` arrived: end the term (or acquisition) in progress, then stop.
    stopping: bool,
    state: watch::Sender<SupervisorState>,
    summary: watch::Sender<Option<SupervisorSummary>>,
    terms: u64,
    last: Option<LeaseReport>,
}

impl<W: Actor> Drop for Core<W> {
    /// However the actor ends — stopped, failed, killed — watchers see `Stopped` and
    /// [`LeaseSupervisor::join`](crate::runtime::LeaseSupervisor::join) gets the summary; an
    /// acquisition in flight is given up.
    fn drop(&mut self) {
        if let Phase::Acquiring(cancel) = &self.phase {
            cancel.cancel();
        }
        self.state.send_replace(SupervisorState::Stopped);
        self.summary.send_replace(Some(SupervisorSummary {
            terms: self.terms,
            last: self.last.take(),
        }));
    }
}

impl<W> Actor for SupervisorActor<W>
where
    W: Actor,
    W::Msg: From<LeaseCancelled>,
{
    type Msg = SupervisorMsg;
    type State = Core<W>;
    type Arguments = SupervisorArgs<W>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Core {
            runtime: args.runtime,
            request: args.request,
            make: args.make,
            policy: args.policy,
            pacing: Pacing::new(args.config),
            phase: Phase::Paused,
            stopping: false,
            state: args.state,
            summary: args.summary,
            terms: 0,
            last: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself.send_message(SupervisorMsg(Command::Acquire))?;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        core: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message.0 {
            Command::Acquire => Box::pin(core.acquire(&myself)).await?,
            Command::Acquired(taken) => Box::pin(core.acquired(&myself, *taken)).await?,
            Command::AcquireAbandoned => myself.stop(None),
            Command::Shutdown => {
                core.stopping = true;
                match &core.phase {
                    Phase::Paused => myself.stop(None),
                    Phase::Acquiring(cancel) => cancel.cancel(),
                    Phase::Holding(term) => {
                        let _ = term.lease.send_message(LeaseActorMsg::release());
                    }
                }
            }
        }
        Ok(())
    }

    /// Overridden: the term's lease actor stopping is the term's end, not a reason to stop
    /// (ractor's default); events of anything else linked here are ignored.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        core: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ended = match &event {
            SupervisionEvent::ActorTerminated(cell, _, _)
            | SupervisionEvent::ActorFailed(cell, _) => cell.get_id(),
            _ => return Ok(()),
        };
        drop(event);
        let Phase::Holding(term) = &core.phase else {
            return Ok(());
        };
        if term.lease.get_id() != ended {
            return Ok(());
        }
        let Phase::Holding(term) = std::mem::replace(&mut core.phase, Phase::Paused) else {
            return Ok(());
        };
        // The lease actor sends its report before it stops; the bound only covers a lease
        // actor that vanished without one.
        let report = tokio::time::timeout(REPORT_WAIT, term.report).await;
        let report = report_or_vanished(report.ok().and_then(Result::ok), term.token);
        core.term_ended(&myself, report);
        Ok(())
    }

    /// A term still running when the supervisor is stopped from outside ends first, bounded:
    /// ractor kills linked children right after, which would leave the release to the
    /// handle's best-effort drop.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        core: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Phase::Holding(term) = std::mem::replace(&mut core.phase, Phase::Paused) {
            let bound =
                REPORT_WAIT + release_time(core.runtime.client().settings().command_timeout);
            let _ = term.lease.stop_and_wait(None, Some(bound)).await;
            if let Ok(report) = term.report.await {
                core.terms += 1;
                core.last = Some(report);
            }
        }
        Ok(())
    }
}

/// Bound on waiting for a stopped lease actor's report, and for a stopped worker.
const REPORT_WAIT: Duration = Duration::from_secs(1);

impl<W> Core<W>
where
    W: Actor,
    W::Msg: From<LeaseCancelled>,
{
    /// Starts the acquisition for the next term, in a task of its own.
    async fn acquire(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(self.phase, Phase::Paused) {
            return Ok(());
        }
        if self.stopping || self.runtime.is_shutting_down() {
            myself.stop(None);
            return Ok(());
        }
        // Invariant 2: a fresh attempt per term.
        let request = self.request.with_new_attempt()?;
        let cancel = CancellationToken::new();
        self.phase = Phase::Acquiring(cancel.clone());
        self.state.send_replace(SupervisorState::Acquiring);
        let runtime = self.runtime.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                taken = runtime.take(&request) => Command::Acquired(Box::new(taken)),
                () = cancel.cancelled() => {
                    // The acquisition may have landed: give it up by its attempt
                    // (owner-checked, so nobody else's lease is touched).
                    let _ = runtime
                        .client()
                        .release_attempt(&request)
                        .await;
                    Command::AcquireAbandoned
                }
            };
            // If the supervisor is gone, the answer is dropped here: a handle in it
            // releases best effort on drop.
            let _ = myself.send_message(SupervisorMsg(answer));
        });
        Ok(())
    }

    async fn acquired(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        taken: Taken,
    ) -> Result<(), ActorProcessingErr> {
        self.phase = Phase::Paused;
        let (mut handle, slot) = match taken {
            Ok(Ok(held)) => held,
            Ok(Err(outcome)) => {
                tracing::debug!(
                    outcome = outcome.as_str(),
                    "lease supervisor did not acquire"
                );
                let hint = retry_hint(&outcome, self.request.wait_timeout());
                pause_then_acquire(myself, self.pacing.after_failure(hint));
                return Ok(());
            }
            Err(RuntimeError::ShuttingDown) => {
                myself.stop(None);
                return Ok(());
            }
            Err(RuntimeError::LimitReached { max }) => {
                tracing::warn!(max, "lease limit reached; the supervisor waits");
                pause_then_acquire(myself, self.pacing.after_failure(None));
                return Ok(());
            }
            // Checked before the supervisor started; failing again would repeat forever.
            Err(e) => return Err(Box::new(e)),
        };
        if self.stopping {
            let _ = handle.release().await;
            myself.stop(None);
            return Ok(());
        }
        let make = &self.make;
        let started = self
            .runtime
            .start(handle, slot, self.policy, Some(myself.get_cell()), |ctx| {
                // A panic here fails the supervisor; the handle is dropped on the way out,
                // which releases the lease best effort.
                let (worker, args) = make(ctx);
                Worker::Spawn(Box::new(move |cell| {
                    Box::pin(async move {
                        W::spawn_linked(None, worker, args, cell)
                            .await
                            .map(|(w, _)| w)
                    }) as SpawnFuture<W::Msg>
                }))
            })
            .await;
        match started {
            Ok(started) => {
                let token = started.context.token();
                tracing::info!(token = token.get(), "lease supervisor term started");
                self.state.send_replace(SupervisorState::Holding {
                    token,
                    context: started.context,
                });
                self.phase = Phase::Holding(Term {
                    lease: started.lease,
                    token,
                    report: started.report,
                });
            }
            Err(RuntimeError::ShuttingDown) => myself.stop(None),
            Err(e) => {
                tracing::error!(error = %e, "lease supervisor could not start a term");
                pause_then_acquire(myself, self.pacing.after_failure(None));
            }
        }
        Ok(())
    }

    /// A term ended (invariant 4: counted and its report kept, no history).
    fn term_ended(&mut self, myself: &ActorRef<SupervisorMsg>, report: LeaseReport) {
        tracing::info!(
            end = report.end.as_str(),
            token = report.token.get(),
            "lease supervisor term ended"
        );
        let end = report.end.clone();
        self.terms += 1;
        self.last = Some(report);
        self.state.send_replace(SupervisorState::Acquiring);
        if end == JobEnd::Completed || self.stopping || self.runtime.is_shutting_down() {
            myself.stop(None);
            return;
        }
        // A worker that fails at once would otherwise crash-loop at the shortest pause.
        let pause = match end {
            JobEnd::Failed { .. } => self.pacing.after_failure(None),
            _ => self.pacing.after_term(),
        };
        pause_then_acquire(myself, pause);
    }
}

/// Schedules the next acquisition (the phase is `Paused`).
fn pause_then_acquire(myself: &ActorRef<SupervisorMsg>, pause: Duration) {
    myself.send_after(jittered(pause), || SupervisorMsg(Command::Acquire));
}
