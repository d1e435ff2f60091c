//! The supervisor actor: acquires, runs one term at a time as a linked lease actor, backs
//! off, and stops when told, when the job completed, or when its runtime drains.
//!
//! The acquisition runs in a task of its own, so the actor keeps answering (a `Shutdown`
//! gives the acquisition up); a term's end reaches the actor when its lease actor's report
//! does (a task waits for it). The lease actor is not linked under the supervisor: ractor
//! kills a stopped actor's linked children, and their children, without a word — a
//! supervisor stopped with its application would take its term's worker down with no
//! `LeaseCancelled`. However the supervisor ends, it ends its term as a stop from outside
//! does: the worker told, given its grace, stopped, the lease released, the term counted.
//!
//! This file: the actor, its phases and its handlers (acquiring, a term starting and
//! ending). A term as it is held, and ending it from here: `term`; the supervisor's end,
//! however it ends: `farewell`.

use std::marker::PhantomData;
use std::time::Duration;

use futures_util::FutureExt as _;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::lease::{AcquireOutcome, LeaseHandle, Patience, ReleaseOutcome};
use crate::protocol::{FencingToken, LeaseRequest};
use crate::runtime::lease_actor::message::LeaseActorMsg;
use crate::runtime::lease_actor::worker::{SpawnFuture, Worker};
use crate::runtime::registry::Admission;
use crate::runtime::supervisor::pacing::{Pacing, jittered, retry_hint};
use crate::runtime::supervisor::{
    SupervisorConfig, SupervisorMsg, SupervisorState, SupervisorSummary,
};
use crate::runtime::{
    CancelPolicy, JobEnd, LeaseCancelled, LeaseContext, LeaseReport, LeaseRuntime, RuntimeError,
};

/// Builds each term's worker from its lease.
pub(crate) type MakeWorker<W> =
    Box<dyn Fn(LeaseContext) -> (W, <W as Actor>::Arguments) + Send + Sync + 'static>;

/// What an acquisition task brings back: as [`LeaseRuntime::take`] answers.
type Taken = Result<Result<(LeaseHandle, Admission), AcquireOutcome>, RuntimeError>;

pub(crate) enum Command {
    /// The pause is over: acquire for the next term.
    Acquire,
    /// The acquisition task answered.
    Acquired(Box<Taken>),
    /// The acquisition was given up for a `Shutdown` (and its attempt released).
    AcquireAbandoned,
    /// The lease actor of the term with this token reported: the term is over.
    TermEnded(FencingToken),
    Shutdown,
}

impl Command {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Acquire => "Acquire",
            Self::Acquired(_) => "Acquired",
            Self::AcquireAbandoned => "AcquireAbandoned",
            Self::TermEnded(_) => "TermEnded",
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
    /// An acquisition task runs with this request; cancelling gives it up.
    Acquiring(CancellationToken, LeaseRequest),
    /// A term runs under this lease actor.
    Holding(Term),
}

mod farewell;
mod term;

use term::{Term, end_bound};

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
    /// The request of an acquisition whose end is unknown (`Indeterminate`: it may have
    /// landed): the next acquisition replays its attempt, which either finds the lease it
    /// took or learns it took nothing — never a fresh attempt beside it (invariant 2).
    unsettled: Option<LeaseRequest>,
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
            unsettled: None,
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
            Command::TermEnded(token) => Box::pin(core.term_reported(&myself, token)).await,
            Command::Shutdown => {
                core.stopping = true;
                match &core.phase {
                    Phase::Paused => myself.stop(None),
                    Phase::Acquiring(cancel, _) => cancel.cancel(),
                    Phase::Holding(term) => {
                        let _ = term.lease.send_message(LeaseActorMsg::release());
                    }
                }
            }
        }
        Ok(())
    }

    /// A term still running when the supervisor is stopped from outside ends first,
    /// bounded: its worker is told (`LeaseCancelled` with `Shutdown`) and given a grace
    /// before it is stopped, its lease released, the term counted.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        core: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Phase::Holding(term) = std::mem::replace(&mut core.phase, Phase::Paused) {
            let report = term.end(end_bound(core)).await;
            core.terms += 1;
            core.last = Some(report);
        }
        Ok(())
    }
}

/// Says how an acquisition given up by its attempt was released: a release that may not
/// have run leaves the lease, if the acquisition took it, held until its TTL ends.
fn given_up(released: &ReleaseOutcome) {
    if released.may_leave_it_held() {
        tracing::warn!(
            release = released.as_str(),
            "lease supervisor gave up an acquisition but could not release it: if it took the \
             lease, the lease stays held until its TTL ends"
        );
    } else {
        tracing::debug!(
            release = released.as_str(),
            "lease supervisor gave up an acquisition"
        );
    }
}

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
        // Invariant 2: a fresh attempt per term, but for an acquisition of unknown end,
        // which is replayed.
        let unsettled = self.unsettled.take();
        // A deliberate bug the simulation must find: the unsettled attempt abandoned, its
        // lease (if it landed) waited out.
        #[cfg(feature = "__simulation")]
        let unsettled = unsettled.filter(|_| !crate::simulation::bugs().forget_unsettled);
        let request = match unsettled {
            Some(request) => request,
            None => self.request.with_new_attempt()?,
        };
        let cancel = CancellationToken::new();
        self.phase = Phase::Acquiring(cancel.clone(), request.clone());
        self.state.send_replace(SupervisorState::Acquiring);
        let runtime = self.runtime.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                // Contended, it waits for the release notice however long that takes,
                // whatever the request's own wait: a handover is one round trip.
                taken = runtime.take(&request, Patience::while_contended(&request)) => {
                    Command::Acquired(Box::new(taken))
                }
                () = cancel.cancelled() => {
                    // The acquisition may have landed: give it up by its attempt
                    // (owner-checked, so nobody else's lease is touched).
                    let released = runtime.client().release_attempt(&request).await;
                    given_up(&released);
                    Command::AcquireAbandoned
                }
            };
            // If the supervisor is gone, the answer is dropped here: a handle in it
            // releases best effort on drop.
            let _ = myself.send_message(SupervisorMsg(answer));
        });
        Ok(())
    }

    /// An acquisition answered without the lease: its attempt stays unsettled after an
    /// unknown end, and after a call that provably did not run (a replay that could not be
    /// sent settles nothing); any answer settles it. Then the pause before the next one.
    fn not_acquired(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        outcome: &AcquireOutcome,
        attempted: Option<LeaseRequest>,
    ) {
        if matches!(
            outcome,
            AcquireOutcome::Indeterminate { .. } | AcquireOutcome::Unavailable { .. }
        ) {
            self.unsettled = attempted;
        }
        tracing::debug!(
            outcome = outcome.as_str(),
            "lease supervisor did not acquire"
        );
        let hint = retry_hint(outcome);
        pause_then_acquire(myself, self.pacing.handle_failure(hint));
    }

    async fn acquired(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        taken: Taken,
    ) -> Result<(), ActorProcessingErr> {
        let attempted = match std::mem::replace(&mut self.phase, Phase::Paused) {
            Phase::Acquiring(_, request) => Some(request),
            Phase::Paused | Phase::Holding(_) => None,
        };
        let (mut handle, admission) = match taken {
            Ok(Ok(held)) => held,
            Ok(Err(outcome)) => {
                self.not_acquired(myself, &outcome, attempted);
                return Ok(());
            }
            Err(RuntimeError::ShuttingDown) => {
                myself.stop(None);
                return Ok(());
            }
            Err(RuntimeError::LimitReached { max }) => {
                tracing::warn!(max, "lease limit reached; the supervisor waits");
                pause_then_acquire(myself, self.pacing.handle_failure(None));
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
            .start(handle, admission, self.policy, None, |ctx| {
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
                let report = started.report.shared();
                let (ended, myself) = (report.clone(), myself.clone());
                tokio::spawn(async move {
                    let _ = ended.await;
                    // A supervisor already gone ended the term itself.
                    let _ = myself.send_message(SupervisorMsg(Command::TermEnded(token)));
                });
                self.phase = Phase::Holding(Term {
                    lease: started.lease,
                    token,
                    report,
                });
            }
            Err(RuntimeError::ShuttingDown) => myself.stop(None),
            Err(e) => {
                tracing::error!(error = %e, "lease supervisor could not start a term");
                pause_then_acquire(myself, self.pacing.handle_failure(None));
            }
        }
        Ok(())
    }

    /// The lease actor of the term with `token` reported; a report of an earlier term is
    /// stale.
    async fn term_reported(&mut self, myself: &ActorRef<SupervisorMsg>, token: FencingToken) {
        if !matches!(&self.phase, Phase::Holding(term) if term.token == token) {
            return;
        }
        let Phase::Holding(term) = std::mem::replace(&mut self.phase, Phase::Paused) else {
            return;
        };
        let report = term.report().await;
        self.term_ended(myself, report);
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
            JobEnd::Failed { .. } => self.pacing.handle_failure(None),
            _ => self.pacing.handle_term_end(),
        };
        pause_then_acquire(myself, pause);
    }
}

/// Schedules the next acquisition (the phase is `Paused`).
fn pause_then_acquire(myself: &ActorRef<SupervisorMsg>, pause: Duration) {
    myself.send_after(jittered(pause), || SupervisorMsg(Command::Acquire));
}
