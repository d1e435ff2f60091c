//! The lease actor's state: what it holds for one lease, and the status it publishes. The
//! effects of the watchdog's decisions on it are in `effects`.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::published::Publisher;
use super::timers::{ArmedTimer, Timers};
use super::watchdog::{Actions, Phase, Watchdog};
use super::worker::{Worker, WorkerState};
use crate::lease::{LeaseHandle, LeaseState, RenewReach};
use crate::runtime::registry::Admission;
use crate::runtime::{CancelPolicy, CancelReason, LeaseCancelled, LeaseReport, LeaseStatus};

/// Start-up arguments of a `LeaseActor`; built by [`LeaseRuntime`](crate::runtime::LeaseRuntime).
pub(crate) struct LeaseActorArgs<M> {
    pub(crate) handle: LeaseHandle,
    pub(crate) worker: Worker<M>,
    pub(crate) policy: CancelPolicy,
    pub(crate) status: Publisher,
    pub(crate) report: Option<ReportSender>,
    pub(crate) admission: Option<Admission>,
    pub(crate) renew_every: Duration,
    pub(crate) safety_margin: Duration,
    /// The runtime's timers, where the actor arms its one deadline.
    pub(crate) timers: Timers,
}

/// Where the report goes: boxed, so the channel every held lease keeps open is a
/// pointer wide rather than a report wide (docs/performance.md, "R with one actor per lease").
pub(crate) type ReportSender = oneshot::Sender<Box<LeaseReport>>;

/// A renewal in flight: the task running its calls, and whether they may have reached
/// Redis so far.
pub(super) struct InFlight {
    pub(super) task: JoinHandle<()>,
    pub(super) reach: RenewReach,
}

/// The actor's private state.
pub(crate) struct LeaseActorState<M> {
    pub(super) handle: LeaseHandle,
    pub(super) worker: WorkerState<M>,
    /// The status the lease's contexts read, their cancellation, and the lease's span.
    pub(super) status: Publisher,
    pub(super) report: Option<ReportSender>,
    /// This lease's admission to its runtime; given back before the report is sent.
    pub(super) admission: Option<Admission>,
    /// When to renew, cancel and stop the worker: the schedule, decided without I/O.
    pub(super) watchdog: Watchdog,
    /// The cancellation sent, kept for the status and the report; boxed, as most leases
    /// never send one and every held lease carries this state.
    pub(super) cancelled: Option<Box<LeaseCancelled>>,
    /// The deadline armed with the runtime's timers, and its generation; disarmed when the
    /// actor ends.
    pub(super) armed: ArmedTimer,
    /// The renewal in flight, if one is; aborted when the actor finishes or is dropped (a
    /// renewal dropped mid-flight leaves the handle's old budget).
    pub(super) renewal: Option<InFlight>,
}

impl<M> LeaseActorState<M> {
    /// What cancelling for `reason` at `now` calls for, as the watchdog decides it
    /// (nothing if a cancellation was sent).
    pub(super) fn on_cancel(&mut self, reason: CancelReason, now: Instant) -> Actions {
        self.watchdog.handle_cancel(reason, now, self.worker.view())
    }

    pub(super) fn finishing(&self) -> bool {
        self.watchdog.phase() == Phase::Finishing
    }

    /// Publishes the status at `now` (if it changed): the handle's state, the watchdog's
    /// validity.
    pub(super) fn publish(&mut self, now: Instant) {
        let state = self.handle.state_at(now);
        let valid_until = self.watchdog.valid_until();
        let status = LeaseStatus {
            state,
            valid_until: (state == LeaseState::Active && self.cancelled.is_none())
                .then_some(valid_until),
            stop_by: valid_until,
            renewals: self.watchdog.renewals(),
            cancelled: self.cancelled.as_ref().map(|c| c.reason),
        };
        self.status.publish(status);
    }
}
