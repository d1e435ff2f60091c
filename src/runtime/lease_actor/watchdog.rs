//! The lease actor's time, sans I/O: when to renew, when to give up on renewing and
//! cancel, when to stop the worker — as pure functions of what happened and `now`
//! (docs/design.md §8). It holds the lease's one local validity end in the runtime, taken
//! only from a renewal the handle says was confirmed ([`Renewal::Confirmed`]), and knows
//! whether a renewal is in flight: one at a time, its end arriving as an event of its own.
//!
//! `LeaseActor` makes one call per event — [`handle_timeout`](Watchdog::handle_timeout),
//! [`handle_renewal`](Watchdog::handle_renewal), [`handle_cancel`](Watchdog::handle_cancel),
//! [`handle_drain_deadline`](Watchdog::handle_drain_deadline) — carries out the [`Action`]s it
//! returns, and arms one timer for [`poll_timeout`](Watchdog::poll_timeout): the I/O,
//! telemetry and messages stay in the actor.

use std::time::Duration;

use smallvec::{SmallVec, smallvec};
use tokio::time::Instant;

use crate::lease::{LeaseState, LostReason, RenewOutcome, Renewal};
use crate::runtime::{CancelPolicy, CancelReason};

/// Spacing of the renewal grid, at most: renewals are brought forward onto multiples of it.
pub(crate) const RENEWAL_GRID: Duration = Duration::from_millis(100);

/// What one event calls for, in order: at most three actions (a drain's deadline: the
/// cancellation, the worker stopped, the attached worker's finish), most often none or
/// one — kept inline, since every renewal decides twice (its tick, its end).
pub(crate) type Actions = SmallVec<[Action; 2]>;

/// The earliest of these is the one timer armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// Fires when the next renewal is due.
    Renew(Instant),
    /// Fires at `valid_until − safety margin` if no renewal was confirmed by then (a renewal
    /// in flight included: it is bounded by this instant): the next confirmation could not
    /// arrive in time, so the worker is cancelled.
    Cancel(Instant),
    /// Fires at local validity end, after a cancellation, if the worker must be stopped (or,
    /// attached, let go of).
    KillWorker(Instant),
}

impl Deadline {
    pub(crate) fn at(self) -> Instant {
        match self {
            Self::Renew(t) | Self::Cancel(t) | Self::KillWorker(t) => t,
        }
    }
}

/// What the watchdog knows of the worker; the actor owns the worker itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkerView {
    /// An attached worker: told, not supervised; at validity end the lease ends regardless.
    pub(crate) attached: bool,
    /// Still running (an attached worker always counts as running).
    pub(crate) alive: bool,
}

/// Where the lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Renewing; no cancellation sent.
    Watching,
    /// The one cancellation was sent; `killed` once the worker was stopped for it.
    Cancelled { reason: CancelReason, killed: bool },
    /// Releasing: no timer any more.
    Finishing,
}

/// What the actor must do, in the order given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Start a renewal, giving up at `until` (the cancellation deadline: validity left
    /// minus the safety margin), and hand its end to [`Watchdog::handle_renewal`] when it
    /// comes. No other is asked for until then.
    Renew { until: Instant },
    /// A renewal was confirmed: publish the new validity.
    Confirmed,
    /// Send the one cancellation, as decided here.
    Cancel(Cancellation),
    /// Stop the worker: local validity ended under [`CancelPolicy::Kill`].
    KillWorker,
    /// Validity ended for an attached worker's lease: release it and end the actor.
    FinishAttached,
}

/// The one cancellation, as the watchdog decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cancellation {
    pub(crate) reason: CancelReason,
    /// Local validity left at the cancellation.
    pub(crate) remaining: Duration,
    /// Local validity end: the worker must have stopped by then.
    pub(crate) stop_by: Instant,
    /// How long renewals had been failing, counted from the first one since the last
    /// confirmation that did not confirm; `None` if none failed.
    pub(crate) unconfirmed_for: Option<Duration>,
}

/// The schedule of one lease.
#[derive(Debug, Clone)]
pub(crate) struct Watchdog {
    renew_every: Duration,
    safety_margin: Duration,
    policy: CancelPolicy,
    /// Where the renewal grid starts (see [`on_renewal_grid`]).
    grid_origin: Instant,
    /// Local validity end of the last confirmation; the worker never runs past it.
    valid_until: Instant,
    next_renew_at: Instant,
    phase: Phase,
    /// Start of the first renewal since the last confirmation that did not confirm: where
    /// the cancellation delay is measured from.
    first_failure_at: Option<Instant>,
    /// When the renewal in flight was asked for, if one is: at most one at a time.
    renewing: Option<Instant>,
    renewals: u64,
}

impl Watchdog {
    /// A lease confirmed until `valid_until`, watched from `now`, its renewals on the grid
    /// that starts at `grid_origin`.
    pub(crate) fn new(
        valid_until: Instant,
        now: Instant,
        renew_every: Duration,
        safety_margin: Duration,
        policy: CancelPolicy,
        grid_origin: Instant,
    ) -> Watchdog {
        let mut watchdog = Watchdog {
            renew_every,
            safety_margin,
            policy,
            grid_origin,
            valid_until,
            next_renew_at: now,
            phase: Phase::Watching,
            first_failure_at: None,
            renewing: None,
            renewals: 0,
        };
        watchdog.schedule_renewal(now);
        watchdog
    }

    /// Local validity end of the last confirmation: the instant the worker must have
    /// stopped by.
    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    pub(crate) fn renewals(&self) -> u64 {
        self.renewals
    }

    /// Whether the worker was stopped for the cancellation.
    pub(crate) fn killed(&self) -> bool {
        matches!(self.phase, Phase::Cancelled { killed: true, .. })
    }

    /// The one timer to arm, if any.
    pub(crate) fn poll_timeout(&self, worker: WorkerView) -> Option<Deadline> {
        match self.phase {
            Phase::Finishing => None,
            Phase::Watching => Some(
                if self.renewing.is_none() && self.next_renew_at < self.cancel_at() {
                    Deadline::Renew(self.next_renew_at)
                } else {
                    Deadline::Cancel(self.cancel_at())
                },
            ),
            Phase::Cancelled { killed, .. } => {
                let kill_due = self.policy == CancelPolicy::Kill && worker.alive && !killed;
                (worker.attached || kill_due).then_some(Deadline::KillWorker(self.valid_until))
            }
        }
    }

    /// What a timer that fired at `now` calls for (nothing, for a timer fired early).
    /// `reached`: whether the renewal in flight, if one is, may have reached Redis (see
    /// [`RenewReach`](crate::lease::RenewReach)) — what the cancellation's reason says if
    /// the deadline comes before its end.
    pub(crate) fn handle_timeout(
        &mut self,
        now: Instant,
        worker: WorkerView,
        reached: bool,
    ) -> Actions {
        match self.phase {
            Phase::Finishing => Actions::new(),
            Phase::Cancelled { .. } if now >= self.valid_until => self.end_of_work(worker),
            Phase::Cancelled { .. } => Actions::new(),
            // The deadline does not wait for a renewal in flight: it is bounded by this
            // instant, and its end, a moment later, would come too late to tell the worker
            // in time. One that may have landed leaves the lease unknown, as its own
            // outcome would; it counts as a renewal that did not confirm.
            Phase::Watching if now >= self.cancel_at() => {
                let mut reason = CancelReason::RenewalUnconfirmed;
                if let Some(started) = self.renewing {
                    self.first_failure_at.get_or_insert(started);
                    if reached {
                        reason = CancelReason::Unknown;
                    }
                }
                self.handle_cancel(reason, now, worker)
            }
            // One renewal at a time: the one in flight ends by the cancellation deadline.
            Phase::Watching if self.renewing.is_some() => Actions::new(),
            // Before the cancellation deadline, so the renewal has time left to spend.
            Phase::Watching if now >= self.next_renew_at => {
                self.renewing = Some(now);
                smallvec![Action::Renew {
                    until: self.cancel_at(),
                }]
            }
            Phase::Watching => Actions::new(),
        }
    }

    /// The renewal in flight ended so, seen at `now`. Only a confirmation moves validity,
    /// and only while watching: once the worker was told when it must have stopped, nothing
    /// a renewal says changes that (a late confirmation is not taken, a late loss sends no
    /// second cancellation). With no renewal in flight (the lease finished, or a stray end)
    /// it does nothing.
    pub(crate) fn handle_renewal(
        &mut self,
        renewal: &Renewal,
        now: Instant,
        worker: WorkerView,
    ) -> Actions {
        let Some(started) = self.renewing.take() else {
            return Actions::new();
        };
        if self.phase != Phase::Watching {
            return Actions::new();
        }
        let outcome = match renewal {
            Renewal::Confirmed { valid_until } if *valid_until > now => {
                self.first_failure_at = None;
                self.valid_until = *valid_until;
                self.renewals += 1;
                self.schedule_renewal(started);
                return smallvec![Action::Confirmed];
            }
            // Confirmed until an instant already past: it proves nothing now (the handle
            // answers so only if its clock and this one disagree).
            Renewal::Confirmed { .. } => None,
            Renewal::Unconfirmed(outcome) => Some(outcome),
        };
        self.first_failure_at.get_or_insert(started);
        let reason = match outcome {
            None => CancelReason::Lost(LostReason::ValidityExpired),
            // Provably never reached Redis: the old budget holds. The handle already spent
            // its attempts; the next renewal comes on the usual schedule, and the
            // cancellation deadline gives up in time if this keeps failing.
            Some(RenewOutcome::Unavailable { .. }) => {
                self.schedule_renewal(now);
                return Actions::new();
            }
            Some(RenewOutcome::Lost { reason }) => CancelReason::Lost(*reason),
            Some(RenewOutcome::Refused {
                state: LeaseState::Lost(reason),
            }) => CancelReason::Lost(*reason),
            // `Renewed` is always `Confirmed`; were it not, it would prove nothing here.
            Some(
                RenewOutcome::Indeterminate { .. }
                | RenewOutcome::Refused { .. }
                | RenewOutcome::Renewed { .. },
            ) => CancelReason::Unknown,
        };
        self.handle_cancel(reason, now, worker)
    }

    /// Cancel for `reason` at `now`: the one cancellation, and the worker stopped at once
    /// if no validity is left (under `Kill`). Nothing if one was sent already or the lease
    /// is finishing.
    pub(crate) fn handle_cancel(
        &mut self,
        reason: CancelReason,
        now: Instant,
        worker: WorkerView,
    ) -> Actions {
        let Some(cancellation) = self.cancel(reason, now) else {
            return Actions::new();
        };
        let mut actions = smallvec![Action::Cancel(cancellation)];
        if cancellation.remaining.is_zero() && self.kill_worker(worker) {
            actions.push(Action::KillWorker);
        }
        actions
    }

    /// A drain's time for the worker to stop on its own is over, at `now`. The drain's
    /// cancellation first, if it was not sent yet; then under `Kill` what the end of
    /// validity calls for, now; under `NotifyOnly` nothing more — the lease stays until the
    /// worker ends or validity does.
    pub(crate) fn handle_drain_deadline(&mut self, now: Instant, worker: WorkerView) -> Actions {
        let mut actions = self.handle_cancel(CancelReason::Shutdown, now, worker);
        if self.policy == CancelPolicy::Kill && matches!(self.phase, Phase::Cancelled { .. }) {
            actions.extend(self.end_of_work(worker));
        }
        actions
    }

    /// The release begins: no timer any more, no cancellation; a renewal in flight is
    /// abandoned (its end, should it come, does nothing).
    pub(crate) fn finish(&mut self) {
        self.phase = Phase::Finishing;
        self.renewing = None;
    }

    /// `valid_until − safety margin`: past it, a renewal could not be confirmed in time.
    /// Worked out when asked rather than kept: every held lease carries this state.
    fn cancel_at(&self) -> Instant {
        // A deliberate bug the simulation must find: the worker told at the instant it
        // must have stopped.
        #[cfg(feature = "__simulation")]
        if crate::simulation::bugs().cancel_at_validity_end {
            return self.valid_until;
        }
        self.valid_until
            .checked_sub(self.safety_margin)
            .unwrap_or(self.valid_until)
    }

    /// When to renew after a renewal at `now`: the cadence, or earlier if the budget is
    /// short (a replay, or a renewal that reached nothing), so another still fits before
    /// the cancellation deadline — brought forward onto the renewal grid (see
    /// [`on_renewal_grid`]).
    fn schedule_renewal(&mut self, now: Instant) {
        let half_way = now + self.cancel_at().saturating_duration_since(now) / 2;
        let due = (now + self.renew_every).min(half_way);
        self.next_renew_at = on_renewal_grid(due, now, self.renew_every, self.grid_origin);
    }

    /// How long since the first renewal that did not confirm, if one did not.
    fn failing_for(&self, now: Instant) -> Option<Duration> {
        self.first_failure_at
            .map(|at| now.saturating_duration_since(at))
    }

    /// Decides the one cancellation, for `reason` at `now`; `None` if one was sent already
    /// or the lease is finishing.
    fn cancel(&mut self, reason: CancelReason, now: Instant) -> Option<Cancellation> {
        if self.phase != Phase::Watching {
            return None;
        }
        self.phase = Phase::Cancelled {
            reason,
            killed: false,
        };
        Some(Cancellation {
            reason,
            remaining: self.valid_until.saturating_duration_since(now),
            stop_by: self.valid_until,
            unconfirmed_for: self.failing_for(now),
        })
    }

    /// The worker's time is up: stop it if it must be, let an attached one go.
    fn end_of_work(&mut self, worker: WorkerView) -> Actions {
        let mut actions = Actions::new();
        if self.kill_worker(worker) {
            actions.push(Action::KillWorker);
        }
        if worker.attached {
            actions.push(Action::FinishAttached);
        }
        actions
    }

    /// Whether the worker must be stopped now (cancelled, under `Kill`, still running, not
    /// stopped yet); if so, it counts as stopped from here on.
    fn kill_worker(&mut self, worker: WorkerView) -> bool {
        let Phase::Cancelled {
            reason,
            killed: false,
        } = self.phase
        else {
            return false;
        };
        if self.policy != CancelPolicy::Kill || !worker.alive {
            return false;
        }
        self.phase = Phase::Cancelled {
            reason,
            killed: true,
        };
        true
    }
}

/// `due` brought forward to the last point of a grid of spacing
/// `min(RENEWAL_GRID, renew_every / 8)` from `origin` — unless that is not after `now`.
/// `due` before `origin` stays as it is.
///
/// Why: with one origin for a process, its leases renew at a few shared instants rather
/// than spread over every millisecond, so their renewals reach the backend together and
/// travel in a few script calls (`RedisBackend` coalesces them): 100,000 leases renewing
/// every 10 s make about a thousand renewals per grid point, and 10,000 a hundred. Renewing
/// up to one spacing early (1% of the cadence with the default ttl/3) costs nothing: the
/// budget only grows.
pub(crate) fn on_renewal_grid(
    due: Instant,
    now: Instant,
    renew_every: Duration,
    origin: Instant,
) -> Instant {
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

#[cfg(test)]
mod tests;
