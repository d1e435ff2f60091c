//! `LeaseActor`: owns one `LeaseHandle`, renews it like a watchdog, and supervises the worker
//! the lease protects (docs/design.md §8).
//!
//! # Where things are
//!
//! This file: the actor and its message handling. [`message`] what it is sent;
//! [`watchdog`] the lease's time (sans I/O: what to do next, and when); [`timers`] the
//! runtime's one timer task that wakes it; [`worker`] the work it supervises, an actor or
//! work run in its caller's future; [`published`] the status and the cancellation it
//! publishes to the work and to observers; `state` what
//! it holds; `effects` what it does on the watchdog's word (start a renewal, cancel, stop,
//! release, report); `at_once` the tick and the renewal's end, handled without a future of
//! their own.
//! The runtime's entry points (`spawn`, `run`, `job`, `drain`, the supervisor) are beside
//! this folder.
//!
//! # Invariants
//!
//! 1. The handle never leaves the actor; others see it through [`LeaseStatus`](crate::runtime::LeaseStatus) and the
//!    worker's [`LeaseContext`](crate::runtime::LeaseContext).
//! 2. [`LeaseCancelled`] is sent at most once per lease, never after the worker stopped, and
//!    the context's cancellation (its token, once one was asked for) fires at the same
//!    moment.
//! 3. One timer is armed at a time, for the earliest pending
//!    [`Deadline`](watchdog::Deadline), with the runtime's timer task ([`timers`]); a timer
//!    message carries a generation, and a stale one is ignored. After every event the
//!    deadline is asked for again and re-armed if it moved, never an interval (an interval
//!    catches up in bursts after a stall).
//! 4. Every renewal is bounded by `min(command timeout, remaining validity − safety margin)`,
//!    so a renewal that fails leaves the actor at the cancellation deadline, not past it.
//! 5. The lease is released (owner-checked) only after the worker stopped, so a new holder
//!    never overlaps a worker this actor could still stop.
//! 6. When the actor ends for any reason — panic, `kill`, error — its state is dropped, which
//!    cancels the token and stops the worker; a task then waits (bounded) for the worker's
//!    end, releases the lease as a finish would and sends the report with that release's
//!    outcome (without a tokio runtime to run it in, the handle's drop is the best effort
//!    and the TTL the backstop).
//! 7. Stopped from outside (not killed), the actor sends the worker [`LeaseCancelled`] with
//!    [`CancelReason::Shutdown`] (unless one was sent) and gives it a grace, within local
//!    validity, to end on its own before stopping it.
//! 8. At most one renewal is in flight, its calls in a task of their own whose end comes
//!    back as a message: no other message waits for a reply. The clock is read once per
//!    message and that instant is passed to everything the message does. What a renewal
//!    says after the cancellation was sent moves nothing (the worker keeps its `stop_by`);
//!    the release aborts a renewal still in flight.

mod at_once;
mod effects;
pub(super) mod message;
pub(super) mod published;
mod state;
pub(super) mod timers;
pub(super) mod watchdog;
pub(super) mod worker;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::OnceLock;
use std::time::Duration;

use futures_util::future::Either;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, Message, SupervisionEvent};
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::lease::LeaseState;
use crate::runtime::{CancelReason, JobEnd, LeaseCancelled};
use at_once::{AtOnce, at_once};
pub(crate) use effects::release_time;
use message::{Command, LeaseActorMsg};
pub(crate) use state::{LeaseActorArgs, LeaseActorState};
use timers::ArmedTimer;
use watchdog::{Action, Actions, Watchdog};
use worker::{Worker, WorkerState};

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

/// How a lease actor's stop reason begins when its lease ended and was released as it
/// should (see [`is_lease_end`]).
const LEASE_END: &str = "leasehold lease ended: ";

/// Whether `event` is a lease actor ending normally: its lease ended — released, lost, or
/// its work done — and the release was attempted. What an application's supervisor that
/// links lease actors ([`LeaseRuntime::attach`](crate::runtime::LeaseRuntime::attach) with
/// a supervisor) receives every time a lease ends; ractor's default
/// `handle_supervisor_evt` stops the supervisor on any `ActorTerminated`, so a supervisor
/// that links lease actors overrides it and lets these pass:
///
/// ```
/// use leasehold::runtime::is_lease_end;
/// use ractor::{ActorProcessingErr, ActorRef, SupervisionEvent};
///
/// # struct Msg;
/// async fn handle_supervisor_evt(
///     myself: ActorRef<Msg>,
///     event: SupervisionEvent,
/// ) -> Result<(), ActorProcessingErr> {
///     if is_lease_end(&event) {
///         return Ok(()); // a lease came and went; nothing failed
///     }
///     // ... the application's own policy for its other children
///     # let _ = myself;
///     Ok(())
/// }
/// ```
///
/// A lease actor that failed arrives as `ActorFailed`, and one killed from outside as an
/// `ActorTerminated` with another reason: neither is a lease end.
pub fn is_lease_end(event: &SupervisionEvent) -> bool {
    matches!(
        event,
        SupervisionEvent::ActorTerminated(_, _, Some(reason)) if reason.starts_with(LEASE_END)
    )
}

/// Bound on waiting for a killed worker to stop before releasing.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// How long the worker of a lease actor stopped from outside has, after its
/// `LeaseCancelled`, to stop on its own before it is stopped.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The longest a lease actor stopped from outside takes to end, with `command_timeout` per
/// Redis call: its worker's grace, the stop, the release.
pub(crate) fn stop_time(command_timeout: Duration) -> Duration {
    STOP_GRACE + KILL_WAIT + release_time(command_timeout)
}

/// Where the renewal grid of every lease in this process starts: one origin, so leases
/// renew at shared instants (see [`on_renewal_grid`](watchdog::on_renewal_grid)).
fn renewal_grid_origin() -> Instant {
    // A simulated run sets its own: each runs on a clock of its own, and replays exactly.
    #[cfg(feature = "__simulation")]
    if let Some(origin) = crate::simulation::grid_origin() {
        return origin;
    }
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

// Each handler's future is boxed (one allocation per message): ractor allocates an actor's
// message loop once, at the size of its largest state, so unboxed every held lease would
// carry room for a release with retries for its whole life (docs/performance.md, "Behind
// the constants").
impl<M: Message + From<LeaseCancelled>> Actor for LeaseActor<M> {
    type Msg = LeaseActorMsg;
    type State = LeaseActorState<M>;
    type Arguments = LeaseActorArgs<M>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let LeaseActorArgs {
            mut handle,
            worker,
            policy,
            status,
            report,
            admission,
            renew_every,
            safety_margin,
            timers,
        } = args;
        let now = Instant::now();
        // The acquisition's validity; from here on the watchdog holds it, and only a
        // confirmed renewal moves it.
        let valid_until = handle.valid_until_at(now).unwrap_or(now);
        status
            .span()
            .in_scope(|| tracing::info!(policy = ?policy, "lease actor spawned"));
        let mut state = LeaseActorState {
            handle,
            worker: match worker {
                Worker::Spawn(spawner) => WorkerState::Pending(spawner),
                Worker::Attached(worker) => WorkerState::Attached(worker),
                Worker::Task(starter) => WorkerState::PendingTask(starter),
            },
            status,
            report,
            admission,
            watchdog: Watchdog::new(
                valid_until,
                now,
                renew_every,
                safety_margin,
                policy,
                renewal_grid_origin(),
            ),
            cancelled: None,
            armed: ArmedTimer::new(timers, myself.get_id().pid()),
            renewal: None,
        };
        state.publish(now);
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.status.span().clone();
        Box::pin(self.on_post_start(myself, state).instrument(span)).await
    }

    /// A timer's tick and a renewal's end — the messages every renewal brings — are decided
    /// and carried out in the call, without a future of their own, unless what they call
    /// for awaits (a release); every other message is handled in a boxed future.
    fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> impl Future<Output = Result<(), ActorProcessingErr>> + Send {
        let span = state.status.span().clone();
        match span.in_scope(|| at_once(&myself, state, message)) {
            AtOnce::Done => Either::Left(std::future::ready(Ok(()))),
            later => Either::Right(Box::pin(
                self.on_message(myself, later, state).instrument(span),
            )),
        }
    }

    /// Overridden: ractor's default stops a supervisor when any child stops, normal exits
    /// included, which would skip the release.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.status.span().clone();
        Box::pin(self.on_supervision(myself, event, state).instrument(span)).await
    }

    /// Does not run after a panic or `kill` (ractor skips it); the state's `Drop` covers
    /// those (invariant 6).
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.status.span().clone();
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
                    state.finish(end).await;
                    return Err(Box::new(e));
                }
            },
            WorkerState::PendingTask(start) => {
                start(myself.clone());
                state.worker = WorkerState::Task {
                    work: state.status.work_switch(),
                    alive: true,
                };
            }
            other => state.worker = other,
        }
        let now = Instant::now();
        let actions = if state.handle.state_at(now) == LeaseState::Active {
            Actions::new()
        } else {
            // A replay born without validity: cancel at once.
            state.on_cancel(CancelReason::RenewalUnconfirmed, now)
        };
        Self::perform(&myself, state, actions, now).await;
        Ok(())
    }

    /// What [`at_once()`] left to do: the rest of a tick's or a renewal's actions, or
    /// another message.
    async fn on_message(
        &self,
        myself: ActorRef<LeaseActorMsg>,
        later: AtOnce,
        state: &mut LeaseActorState<M>,
    ) -> Result<(), ActorProcessingErr> {
        let message = match later {
            AtOnce::Done => return Ok(()),
            AtOnce::Finish(mut pending, now) => {
                // The finish `carry_out_now` stopped at, then what came after it.
                pending.insert(0, Action::FinishAttached);
                Self::perform(&myself, state, pending, now).await;
                return Ok(());
            }
            AtOnce::Message(message) => message,
        };
        // The clock, read once for everything this message does.
        let now = Instant::now();
        match message.0 {
            // Handled by `at_once`, which never hands them on.
            Command::Tick(_) | Command::Renewed(_) => {}
            Command::Drain => {
                let actions = state.on_cancel(CancelReason::Shutdown, now);
                Self::perform(&myself, state, actions, now).await;
            }
            Command::DrainDeadline => {
                // Sent after `Drain`, but from another task: it may arrive first, so the
                // watchdog sends the drain's cancellation if it was not sent.
                let actions = state
                    .watchdog
                    .handle_drain_deadline(now, state.worker.view());
                Self::perform(&myself, state, actions, now).await;
            }
            Command::Status(reply) => {
                state.publish(now);
                let _ = reply.send(state.status.get());
            }
            Command::TaskEnded(failure) => {
                let WorkerState::Task { work, alive } = &mut state.worker else {
                    return Ok(());
                };
                *alive = false;
                // The work is dropped before its guard speaks; the release still waits for
                // the work's own word, bounded (invariant 5).
                let _ = tokio::time::timeout(KILL_WAIT, work.ended()).await;
                let end = match failure {
                    Some(error) => JobEnd::Failed { error },
                    None => state.end_for_exit(),
                };
                state.finish(end).await;
                myself.stop(Some(format!("{LEASE_END}work ended")));
            }
            Command::Release => match &state.worker {
                WorkerState::Attached(_) => {
                    // After a loss the lease ended cancelled, whoever asks for the release.
                    let end = state.end_for_exit();
                    state.finish(end).await;
                    myself.stop(Some(format!("{LEASE_END}released")));
                }
                _ => {
                    let actions = state.on_cancel(CancelReason::Shutdown, now);
                    Self::perform(&myself, state, actions, now).await;
                }
            },
        }
        Ok(())
    }

    /// Carries out the watchdog's decisions, made at `now`, then arms the next timer.
    async fn perform(
        myself: &ActorRef<LeaseActorMsg>,
        state: &mut LeaseActorState<M>,
        actions: Actions,
        now: Instant,
    ) {
        state.carry_out(myself, actions, now).await;
        state.arm(myself);
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
        let failure = match &event {
            SupervisionEvent::ActorTerminated(cell, _, _) if is_worker(cell) => None,
            SupervisionEvent::ActorFailed(cell, error) if is_worker(cell) => {
                Some(error.to_string())
            }
            // Not our worker (ractor may deliver events of grandchildren): ignore, do not
            // stop as the default handler would.
            _ => return Ok(()),
        };
        *alive = false;
        // ractor moves the worker's final state into the event, a killed worker's too: drop
        // it now, so what the worker held is freed when it stopped, not after the release.
        drop(event);
        match failure {
            None => {
                let end = state.end_for_exit();
                state.finish(end).await;
                myself.stop(Some(format!("{LEASE_END}worker exited")));
                Ok(())
            }
            Some(error) => {
                let end = JobEnd::Failed {
                    error: error.clone(),
                };
                state.finish(end).await;
                // Reported to this actor's own supervisor (if any) as a failure.
                Err(format!("worker failed: {error}").into())
            }
        }
    }

    async fn on_post_stop(
        &self,
        myself: ActorRef<LeaseActorMsg>,
        state: &mut LeaseActorState<M>,
    ) -> Result<(), ActorProcessingErr> {
        if state.finishing() {
            return Ok(());
        }
        // Stopped from outside while the worker ran (invariant 7); the release waits for the
        // worker's end (invariant 5).
        let now = Instant::now();
        let actions = state.on_cancel(CancelReason::Shutdown, now);
        state.carry_out(&myself, actions, now).await;
        let left = state.watchdog.valid_until().saturating_duration_since(now);
        let running = match state.worker.take_running() {
            Some(running) => running.ended_within(STOP_GRACE.min(left)).await,
            None => None,
        };
        let end = match running {
            None => state.end_for_exit(),
            Some(running) => {
                running.kill_and_wait(KILL_WAIT).await;
                JobEnd::Aborted
            }
        };
        state.finish(end).await;
        Ok(())
    }
}
