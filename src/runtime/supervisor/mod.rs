//! `LeaseSupervisor`: keeps one job running under a lease across losses — an actor, which
//! an application can link under its own supervisor. Leader election is this with a job
//! that never ends.
//!
//! # Invariants
//!
//! 1. At most one term (one lease, one worker) at a time per supervisor; a new term starts
//!    only after the previous LeaseActor reported (its worker stopped, its lease released).
//! 2. Every term uses a fresh attempt (a new owner token), so a stale term's replay can
//!    never be mistaken for the new one — except after an acquisition whose end is unknown
//!    (`Indeterminate`: it may have landed, and Redis may run it late), whose attempt the
//!    next acquisition replays until an answer settles it (a call that could not be sent
//!    settles nothing): it finds the lease that attempt took (the same grant, the same
//!    token) or learns it took none. A fresh attempt beside it would
//!    leave the lease it took held, by nobody, for a whole TTL. One still unsettled when
//!    the supervisor ends is released by its attempt.
//! 3. Between terms and after failed acquisitions the supervisor backs off with jitter, so
//!    a fleet of supervisors does not stampede Redis after a loss (`pacing`).
//! 4. Its memory does not grow with the number of terms: it keeps the last term's report
//!    and a count, never a history.
//! 5. However the supervisor ends — shut down, stopped from outside, killed (with its
//!    application, say) — its term ends as a lease actor stopped from outside ends: the
//!    worker is sent `LeaseCancelled` with `Shutdown` and given a grace, then stopped; the
//!    lease is released; the term is counted in the summary. The term's lease actor is
//!    therefore not linked under the supervisor: ractor kills a dying actor's linked
//!    descendants at once, with no message first.

mod actor;
mod pacing;

use std::time::Duration;

use ractor::{Actor, ActorCell, ActorRef};
use tokio::sync::watch;

use crate::error::{DurationProblem, LeaseError};
use crate::protocol::{FencingToken, LeaseRequest};
use crate::runtime::{
    CancelPolicy, LeaseCancelled, LeaseContext, LeaseReport, LeaseRuntime, RuntimeError,
};
use actor::{Command, SupervisorActor, SupervisorArgs};

/// How a [`LeaseSupervisor`] paces itself.
///
/// Non-exhaustive, so a later version can add a setting: start from
/// [`SupervisorConfig::default`] or [`SupervisorConfig::backoff`].
///
/// ```
/// use std::time::Duration;
/// use leasehold::runtime::SupervisorConfig;
///
/// let config = SupervisorConfig::backoff(Duration::from_millis(50), Duration::from_secs(2));
/// assert!(config.check().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupervisorConfig {
    /// Pause after a term ends or an acquisition fails, doubled per consecutive failure.
    /// Default 100 ms.
    pub backoff_min: Duration,
    /// Upper bound of that pause. Default 5 s.
    pub backoff_max: Duration,
}
impl SupervisorConfig {
    /// The shortest `backoff_min`: a zero pause would let a job that fails at once loop hot.
    pub const MIN_BACKOFF: Duration = Duration::from_millis(1);
    /// The longest `backoff_max`.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

    /// Pauses from `min` doubling to `max`; checked (by [`check`](Self::check)) when the
    /// supervisor starts, not here.
    pub const fn backoff(min: Duration, max: Duration) -> Self {
        Self {
            backoff_min: min,
            backoff_max: max,
        }
    }

    /// Checks the bounds: `MIN_BACKOFF ≤ backoff_min ≤ backoff_max ≤ MAX_BACKOFF`.
    /// [`LeaseRuntime::supervise`] calls it before anything starts.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] naming the parameter.
    pub fn check(&self) -> Result<(), LeaseError> {
        let invalid = |param, problem| Err(LeaseError::InvalidDuration { param, problem });
        if self.backoff_min < Self::MIN_BACKOFF {
            return invalid(
                "backoff_min",
                DurationProblem::BelowMinimum {
                    value: self.backoff_min,
                    min: Self::MIN_BACKOFF,
                },
            );
        }
        if self.backoff_max > Self::MAX_BACKOFF {
            return invalid(
                "backoff_max",
                DurationProblem::AboveMaximum {
                    value: self.backoff_max,
                    max: Self::MAX_BACKOFF,
                },
            );
        }
        if self.backoff_max < self.backoff_min {
            return invalid(
                "backoff_max",
                DurationProblem::NotAtLeast {
                    value: self.backoff_max,
                    other: "backoff_min",
                    other_value: self.backoff_min,
                },
            );
        }
        Ok(())
    }
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// What the supervisor is doing now; watch it with [`LeaseSupervisor::watch`].
///
/// Two `Holding` states are equal when they hold the same term (the same token).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SupervisorState {
    /// Trying to acquire the lease (a follower, in leader-election terms).
    Acquiring,
    /// A term is running: the lease is held with this token (the leader).
    Holding {
        /// The term's fencing token.
        token: FencingToken,
        /// The term's lease as its worker sees it: validity, cancellation, renewals.
        context: LeaseContext,
    },
    /// Stopped: shut down, the job completed, or the supervisor failed.
    Stopped,
}

impl PartialEq for SupervisorState {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Acquiring, Self::Acquiring) | (Self::Stopped, Self::Stopped) => true,
            (Self::Holding { token: a, .. }, Self::Holding { token: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl Eq for SupervisorState {}

impl SupervisorState {
    /// The term's token while holding.
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Self::Holding { token, .. } => Some(*token),
            _ => None,
        }
    }
}

/// What a supervisor did over its life: bounded, however many terms it ran.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SupervisorSummary {
    /// Terms run (leases held, then released or lost).
    pub terms: u64,
    /// The last term's report.
    pub last: Option<LeaseReport>,
}

/// Messages a supervisor actor accepts (see [`LeaseSupervisor::actor`]).
pub struct SupervisorMsg(Command);

impl SupervisorMsg {
    /// Asks the supervisor to stop: the current worker is sent a `LeaseCancelled` with
    /// `Shutdown` and its lease released; an acquisition in flight is given up.
    pub fn shutdown() -> Self {
        Self(Command::Shutdown)
    }
}

impl std::fmt::Debug for SupervisorMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SupervisorMsg::{}", self.0.name())
    }
}

/// A running supervisor: a handle on its actor. Dropping it does not stop it; call
/// [`shutdown`](Self::shutdown), or stop [`actor`](Self::actor).
#[derive(Debug)]
pub struct LeaseSupervisor {
    actor: ActorRef<SupervisorMsg>,
    state: watch::Receiver<SupervisorState>,
    summary: watch::Receiver<Option<SupervisorSummary>>,
}

impl LeaseSupervisor {
    /// The supervisor actor: link it, monitor it, or send it [`SupervisorMsg::shutdown`].
    pub fn actor(&self) -> &ActorRef<SupervisorMsg> {
        &self.actor
    }

    /// The current state, and changes to it. Like every `watch`, it keeps only the latest
    /// value: a term that starts and ends between two looks is not seen (the summary counts
    /// it). Use the context a term's `make` receives to act on every term.
    pub fn watch(&self) -> watch::Receiver<SupervisorState> {
        self.state.clone()
    }

    /// Asks the current worker to stop (a `LeaseCancelled` with `Shutdown`), waits for its
    /// release, and returns the summary.
    ///
    /// # Cancel safety
    /// Not cancel safe: the summary is consumed with `self`. The shutdown goes ahead
    /// regardless.
    pub async fn shutdown(self) -> SupervisorSummary {
        let _ = self.actor.send_message(SupervisorMsg::shutdown());
        self.join().await
    }

    /// Waits for the supervisor to stop — its job completed, it was shut down or stopped,
    /// or it failed — and returns the summary.
    ///
    /// # Cancel safety
    /// Not cancel safe: the summary is consumed with `self`. The supervisor carries on
    /// regardless.
    pub async fn join(mut self) -> SupervisorSummary {
        match self.summary.wait_for(Option::is_some).await {
            Ok(summary) => summary.clone().unwrap_or_default(),
            Err(_) => SupervisorSummary::default(),
        }
    }
}

impl LeaseRuntime {
    /// Keeps a worker made by `make` running under `request`'s lease: acquire, run a term,
    /// and when the term ends by loss, failure or abort, re-acquire with a new attempt after
    /// a backoff and start a fresh worker. While the lease is held by another (or in its
    /// lock-delay) the supervisor waits for it however long that takes, listening for the
    /// release notice whatever the request's wait timeout: a leader's graceful stop hands
    /// over in one round trip; a crashed leader's lease when its TTL runs out. Other
    /// failures to acquire are retried within the request's wait timeout, then paced by
    /// `config`. A term whose worker completes normally ends the supervisor; so does
    /// the runtime's [`shutdown`](Self::shutdown), after the current term.
    ///
    /// The supervisor is an actor of its own, linked to nothing (see
    /// [`supervise_linked`](Self::supervise_linked)); `make` runs inside it, so a panic
    /// there fails the supervisor, whose term is then killed and released.
    ///
    /// # Errors
    /// [`RuntimeError::Invalid`] if the request's TTL (after its replica wait, if any) leaves
    /// no room for renewals ([`LeaseSettings::check_request`](crate::LeaseSettings::check_request))
    /// or `config` is out of bounds ([`SupervisorConfig::check`]),
    /// [`RuntimeError::ShuttingDown`] — both before anything starts;
    /// [`RuntimeError::Spawn`] if the actor system refused.
    ///
    /// # Cancel safety
    /// Dropped once the actor started, the supervisor runs on with nobody holding its
    /// handle; the runtime's [`shutdown`](Self::shutdown) still ends it.
    pub async fn supervise<W, F>(
        &self,
        request: LeaseRequest,
        make: F,
        policy: CancelPolicy,
        config: SupervisorConfig,
    ) -> Result<LeaseSupervisor, RuntimeError>
    where
        W: Actor,
        W::Msg: From<LeaseCancelled>,
        F: Fn(LeaseContext) -> (W, W::Arguments) + Send + Sync + 'static,
    {
        self.start_supervisor(request, Box::new(make), policy, config, None)
            .await
    }

    /// As [`supervise`](Self::supervise), with the supervisor actor linked under
    /// `supervisor`, an actor of the application: it is told when the supervisor stops
    /// (`ActorTerminated`) or fails (`ActorFailed`, e.g. `make` panicked), and the
    /// supervisor dies with it — ending its term first, as any stop does: the worker is
    /// sent `LeaseCancelled` with `Shutdown` and given a grace (1 s) before it is stopped,
    /// the lease is released, and [`join`](LeaseSupervisor::join) returns once that is done,
    /// with the term counted.
    ///
    /// # Errors
    /// As [`supervise`](Self::supervise).
    ///
    /// # Cancel safety
    /// As [`supervise`](Self::supervise).
    pub async fn supervise_linked<W, F>(
        &self,
        request: LeaseRequest,
        make: F,
        policy: CancelPolicy,
        config: SupervisorConfig,
        supervisor: ActorCell,
    ) -> Result<LeaseSupervisor, RuntimeError>
    where
        W: Actor,
        W::Msg: From<LeaseCancelled>,
        F: Fn(LeaseContext) -> (W, W::Arguments) + Send + Sync + 'static,
    {
        self.start_supervisor(request, Box::new(make), policy, config, Some(supervisor))
            .await
    }

    async fn start_supervisor<W>(
        &self,
        request: LeaseRequest,
        make: actor::MakeWorker<W>,
        policy: CancelPolicy,
        config: SupervisorConfig,
        link: Option<ActorCell>,
    ) -> Result<LeaseSupervisor, RuntimeError>
    where
        W: Actor,
        W::Msg: From<LeaseCancelled>,
    {
        self.client().settings().check_request(&request)?;
        config.check()?;
        if self.is_shutting_down() {
            return Err(RuntimeError::ShuttingDown);
        }
        let (state_tx, state) = watch::channel(SupervisorState::Acquiring);
        let (summary_tx, summary) = watch::channel(None);
        let args = SupervisorArgs {
            runtime: self.clone(),
            request,
            make,
            policy,
            config,
            state: state_tx,
            summary: summary_tx,
        };
        let spawned = match link {
            Some(sup) => Actor::spawn_linked(None, SupervisorActor::<W>::new(), args, sup).await,
            None => Actor::spawn(None, SupervisorActor::<W>::new(), args).await,
        };
        let (actor, _) = spawned.map_err(|e| RuntimeError::Spawn {
            reason: e.to_string(),
        })?;
        Ok(LeaseSupervisor {
            actor,
            state,
            summary,
        })
    }
}
