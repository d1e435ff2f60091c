//! The lease actor's schedule, sans I/O: when to renew, when to give up on renewing and
//! cancel, when to stop the worker — as pure functions of what happened and `now`
//! (docs/design.md §8). `LeaseActor` arms one timer for
//! [`Watchdog::next_deadline`], feeds every timer and renewal outcome back, and carries out
//! the [`Action`]s: the I/O, telemetry and messages stay there.

use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::{CancelPolicy, CancelReason};

/// Spacing of the renewal grid, at most: renewals are brought forward onto multiples of it.
pub(crate) const RENEWAL_GRID: Duration = Duration::from_millis(100);

/// Pause before retrying a renewal that provably did not reach Redis.
pub(crate) const RETRY_AFTER_UNAVAILABLE: Duration = Duration::from_millis(100);

/// The earliest of these is the one timer armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// Fires when the next renewal is due.
    Renew(Instant),
    /// Fires at `valid_until − safety margin` if no renewal was confirmed by then: the next
    /// confirmation could not arrive in time, so the worker is cancelled.
    Cancel(Instant),
    /// Fires at local validity end, after a cancellation, if the worker must be stopped (or,
    /// attached, let go of).
    StopWorker(Instant),
}

impl Deadline {
    pub(crate) fn at(self) -> Instant {
        match self {
            Self::Renew(t) | Self::Cancel(t) | Self::StopWorker(t) => t,
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

/// What the actor must do when a timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Renew, the renewal bounded by the validity left minus the safety margin (the actor
    /// reads it from the handle and asks [`Watchdog::renew_bound`]).
    Renew,
    /// Send the one cancellation, for this reason.
    Cancel(CancelReason),
    /// Stop the worker: local validity ended under [`CancelPolicy::Kill`].
    StopWorker,
    /// Validity ended for an attached worker's lease: release it and end the actor.
    FinishAttached,
}

/// A cancellation the actor must send, as [`Watchdog::cancel`] decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cancellation {
    pub(crate) reason: CancelReason,
    /// Local validity left at the cancellation.
    pub(crate) remaining: Duration,
    /// No validity is left: stop the worker now too ([`Watchdog::stop_worker`] says whether).
    pub(crate) stop_now: bool,
}

/// The schedule of one lease.
#[derive(Debug, Clone)]
pub(crate) struct Watchdog {
    renew_every: Duration,
    safety_margin: Duration,
    policy: CancelPolicy,
    /// Local validity end of the last confirmation; the worker never runs past it.
    valid_until: Instant,
    /// `valid_until − safety margin`: past it, a renewal could not be confirmed in time.
    cancel_at: Instant,
    next_renew_at: Instant,
    phase: Phase,
    /// Start of the first renewal since the last confirmation that did not confirm: where
    /// the cancellation delay is measured from.
    first_failure_at: Option<Instant>,
    renewals: u64,
}

impl Watchdog {
    /// A lease confirmed until `valid_until`, watched from `now`.
    pub(crate) fn new(
        valid_until: Instant,
        now: Instant,
        renew_every: Duration,
        safety_margin: Duration,
        policy: CancelPolicy,
    ) -> Watchdog {
        let mut watchdog = Watchdog {
            renew_every,
            safety_margin,
            policy,
            valid_until,
            cancel_at: valid_until,
            next_renew_at: now,
            phase: Phase::Watching,
            first_failure_at: None,
            renewals: 0,
        };
        watchdog.confirmed_until(valid_until);
        watchdog.schedule_renewal(now);
        watchdog
    }

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

    /// How long since the first renewal that did not confirm, if one did not.
    pub(crate) fn failing_for(&self, now: Instant) -> Option<Duration> {
        self.first_failure_at
            .map(|at| now.saturating_duration_since(at))
    }

    fn confirmed_until(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.cancel_at = valid_until
            .checked_sub(self.safety_margin)
            .unwrap_or(valid_until);
    }

    /// When to renew after a confirmation at `now`: the cadence, or earlier if the budget
    /// is short (a replay), so a retry still fits before the cancellation deadline —
    /// brought forward onto the renewal grid (see [`on_renewal_grid`]).
    fn schedule_renewal(&mut self, now: Instant) {
        let half_way = now + self.cancel_at.saturating_duration_since(now) / 2;
        let due = (now + self.renew_every).min(half_way);
        self.next_renew_at = on_renewal_grid(due, now, self.renew_every);
    }

    /// The one timer to arm, if any.
    pub(crate) fn next_deadline(&self, worker: WorkerView) -> Option<Deadline> {
        match self.phase {
            Phase::Finishing => None,
            Phase::Watching => Some(if self.next_renew_at < self.cancel_at {
                Deadline::Renew(self.next_renew_at)
            } else {
                Deadline::Cancel(self.cancel_at)
            }),
            Phase::Cancelled { killed, .. } => {
                let kill_due = self.policy == CancelPolicy::Kill && worker.alive && !killed;
                (worker.attached || kill_due).then_some(Deadline::StopWorker(self.valid_until))
            }
        }
    }

    /// What a timer that fired at `now` calls for (nothing, for a timer fired early).
    pub(crate) fn on_timeout(&mut self, now: Instant, worker: WorkerView) -> Vec<Action> {
        match self.phase {
            Phase::Finishing => Vec::new(),
            Phase::Cancelled { .. } if now >= self.valid_until => self.end_of_work(worker),
            Phase::Cancelled { .. } => Vec::new(),
            Phase::Watching if now >= self.cancel_at => {
                vec![Action::Cancel(CancelReason::RenewalUnconfirmed)]
            }
            Phase::Watching if now >= self.next_renew_at => vec![Action::Renew],
            Phase::Watching => Vec::new(),
        }
    }

    /// A drain's time for the worker to stop on its own is over. Under `Kill`, what the end
    /// of validity calls for, now; under `NotifyOnly` nothing — the lease stays until the
    /// worker ends or validity does. Only after the cancellation (the actor sends it first).
    pub(crate) fn on_drain_deadline(&mut self, worker: WorkerView) -> Vec<Action> {
        if self.policy != CancelPolicy::Kill || !matches!(self.phase, Phase::Cancelled { .. }) {
            return Vec::new();
        }
        self.end_of_work(worker)
    }

    /// The worker's time is up: stop it if it must be, let an attached one go.
    fn end_of_work(&mut self, worker: WorkerView) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.stop_worker(worker) {
            actions.push(Action::StopWorker);
        }
        if worker.attached {
            actions.push(Action::FinishAttached);
        }
        actions
    }

    /// The bound of a renewal when `remaining` validity is left: what is left before the
    /// cancellation deadline; `None` if nothing is (cancel instead).
    pub(crate) fn renew_bound(&self, remaining: Duration) -> Option<Duration> {
        Some(remaining.saturating_sub(self.safety_margin)).filter(|b| !b.is_zero())
    }

    /// A renewal sent at `started` was confirmed, valid until `valid_until`.
    pub(crate) fn on_renewed(&mut self, started: Instant, valid_until: Option<Instant>) {
        self.first_failure_at = None;
        if let Some(until) = valid_until {
            self.confirmed_until(until);
        }
        self.renewals += 1;
        self.schedule_renewal(started);
    }

    /// A renewal sent at `started` did not confirm.
    pub(crate) fn on_renew_failed(&mut self, started: Instant) {
        self.first_failure_at.get_or_insert(started);
    }

    /// A renewal provably never reached Redis: the old budget holds; try again soon — the
    /// cancellation deadline gives up in time if this keeps failing.
    pub(crate) fn on_unavailable(&mut self, now: Instant) {
        self.next_renew_at = now + self.renew_every.min(RETRY_AFTER_UNAVAILABLE);
    }

    /// Decides the one cancellation, for `reason` at `now`; `None` if one was sent already
    /// or the lease is finishing.
    pub(crate) fn cancel(&mut self, reason: CancelReason, now: Instant) -> Option<Cancellation> {
        if self.phase != Phase::Watching {
            return None;
        }
        self.phase = Phase::Cancelled {
            reason,
            killed: false,
        };
        let remaining = self.valid_until.saturating_duration_since(now);
        Some(Cancellation {
            reason,
            remaining,
            stop_now: remaining.is_zero(),
        })
    }

    /// Whether the worker must be stopped now (cancelled, under `Kill`, still running, not
    /// stopped yet); if so, it counts as stopped from here on.
    pub(crate) fn stop_worker(&mut self, worker: WorkerView) -> bool {
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

    /// The release begins: no timer any more, no cancellation.
    pub(crate) fn finish(&mut self) {
        self.phase = Phase::Finishing;
    }
}

/// `due` brought forward to the last point of a process-wide grid (spacing
/// `min(RENEWAL_GRID, renew_every / 8)`) — unless that is not after `now`.
///
/// Why: the leases of a process then renew at a few shared instants rather than spread
/// over every millisecond, so their renewals reach the backend together and travel in a few
/// script calls (`RedisBackend` coalesces them): 100,000 leases renewing every 10 s make
/// about a thousand renewals per grid point, and 10,000 a hundred. Renewing up to one
/// spacing early (1% of the cadence with the default ttl/3) costs nothing: the budget only
/// grows.
pub(crate) fn on_renewal_grid(due: Instant, now: Instant, renew_every: Duration) -> Instant {
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

#[cfg(test)]
mod tests;
