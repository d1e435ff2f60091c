//! The lease actor's state, and the effects of the watchdog's decisions on it: the renewal
//! call, the one cancellation, stopping the worker, and the release with its report.

use std::time::Duration;

use ractor::{ActorRef, Message};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::KILL_WAIT;
use crate::backend::{FailureDetail, FailureKind};
use crate::lease::{LeaseHandle, LeaseState, ReleaseOutcome, RenewOutcome};
use crate::runtime::message::{Command, LeaseActorMsg};
use crate::runtime::registry::Slot;
use crate::runtime::watchdog::{Phase, Watchdog};
use crate::runtime::worker::{Worker, WorkerState};
use crate::runtime::{
    CancelPolicy, CancelReason, JobEnd, LeaseCancelled, LeaseReport, LeaseStatus,
};
use crate::telemetry;

/// Start-up arguments of a `LeaseActor`; built by [`LeaseRuntime`](crate::runtime::LeaseRuntime).
pub(crate) struct LeaseActorArgs<M> {
    pub(crate) handle: LeaseHandle,
    pub(crate) worker: Worker<M>,
    pub(crate) policy: CancelPolicy,
    pub(crate) cancel: CancellationToken,
    pub(crate) status: watch::Sender<LeaseStatus>,
    pub(crate) report: Option<oneshot::Sender<LeaseReport>>,
    pub(crate) slot: Option<Slot>,
    pub(crate) renew_every: Duration,
    pub(crate) safety_margin: Duration,
}

/// The actor's private state.
pub(crate) struct LeaseActorState<M> {
    pub(super) handle: LeaseHandle,
    pub(super) worker: WorkerState<M>,
    pub(super) cancel: CancellationToken,
    pub(super) status: watch::Sender<LeaseStatus>,
    pub(super) report: Option<oneshot::Sender<LeaseReport>>,
    /// This lease's slot in its runtime; given back before the report is sent.
    pub(super) slot: Option<Slot>,
    /// When to renew, cancel and stop the worker: the schedule, decided without I/O.
    pub(super) watchdog: Watchdog,
    /// The cancellation sent, kept for the status and the report.
    pub(super) cancelled: Option<LeaseCancelled>,
    /// Generation of the one armed timer: a `Tick` of an older one is stale.
    pub(super) timer: u64,
    /// The armed timer's task, stopped when another is armed and when the actor ends.
    pub(super) armed: ArmedTimer,
    /// One span for the lease's whole life in this actor.
    pub(super) span: tracing::Span,
}

impl<M> LeaseActorState<M> {
    pub(super) fn finishing(&self) -> bool {
        self.watchdog.phase() == Phase::Finishing
    }

    pub(super) fn publish(&mut self) {
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

/// The task of the one armed timer (ractor's `send_after` sleeps in a task of its own until
/// the deadline, which can be a whole TTL away): a timer no longer wanted is stopped, so an
/// ended lease leaves no task behind.
#[derive(Default)]
pub(super) struct ArmedTimer(Option<TimerTask>);

type TimerTask = ractor::concurrency::JoinHandle<Result<(), ractor::MessagingErr<LeaseActorMsg>>>;

impl ArmedTimer {
    /// Arms `task` (or nothing), stopping the one armed before.
    fn replace(&mut self, task: Option<TimerTask>) {
        if let Some(previous) = std::mem::replace(&mut self.0, task) {
            previous.abort();
        }
    }
}

impl Drop for ArmedTimer {
    fn drop(&mut self) {
        self.replace(None);
    }
}

/// The effects of the watchdog's decisions: I/O, messages and telemetry.
impl<M: Message + From<LeaseCancelled>> LeaseActorState<M> {
    pub(super) fn arm(&mut self, myself: &ActorRef<LeaseActorMsg>) {
        self.timer += 1;
        let Some(deadline) = self.watchdog.next_deadline(self.worker.view()) else {
            return;
        };
        let generation = self.timer;
        let delay = deadline.at().saturating_duration_since(Instant::now());
        tracing::trace!(?deadline, ?delay, "lease actor timer armed");
        let task = myself.send_after(delay, move || LeaseActorMsg(Command::Tick(generation)));
        self.armed.replace(Some(task));
    }

    /// Sends the one cancellation (invariant 2) and applies the policy if no time is left.
    pub(super) fn cancel(&mut self, reason: CancelReason) {
        let now = Instant::now();
        let delay = self.watchdog.failing_for(now);
        let Some(cancellation) = self.watchdog.cancel(reason, now) else {
            return;
        };
        let message = LeaseCancelled {
            reason,
            token: self.handle.token(),
            remaining_validity: cancellation.remaining,
            stop_by: self.watchdog.valid_until(),
        };
        tracing::info!(
            reason = reason.as_str(),
            token = self.handle.token().get(),
            remaining_ms = u64::try_from(cancellation.remaining.as_millis()).unwrap_or(u64::MAX),
            "lease cancelled"
        );
        telemetry::cancellation(self.handle.purpose(), reason.as_str(), delay);
        self.cancelled = Some(message.clone());
        // Published before the token fires, so work woken by it reads the reason.
        self.publish();
        self.cancel.cancel();
        if self.worker.alive() {
            let target = match &self.worker {
                WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => Some(worker),
                _ => None,
            };
            if let Some(worker) = target {
                // A worker that has just stopped cannot receive it; that is fine (it is gone).
                let _ = worker.send_message(M::from(message));
            }
        }
        if cancellation.stop_now {
            self.stop_worker_if_due();
        }
    }

    fn stop_worker_if_due(&mut self) {
        let view = self.worker.view();
        if !self.watchdog.stop_worker(view) {
            return;
        }
        self.stop_worker();
    }

    /// Stops the worker; the watchdog decided it must be.
    pub(super) fn stop_worker(&self) {
        tracing::warn!(
            token = self.handle.token().get(),
            "worker still running at the end of local validity; stopping it"
        );
        match &self.worker {
            WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => worker.kill(),
            WorkerState::Task { task, .. } => task.abort(),
            WorkerState::Pending(_) | WorkerState::PendingTask(_) | WorkerState::Starting => {}
        }
    }

    pub(super) async fn renew(&mut self) {
        let started = Instant::now();
        let remaining = self.handle.remaining_validity();
        let Some(bound) = self.watchdog.renew_bound(remaining) else {
            return self.cancel(CancelReason::RenewalUnconfirmed);
        };
        let outcome = self.handle.renew_within(bound).await;
        if !matches!(outcome, RenewOutcome::Renewed { .. }) {
            self.watchdog.on_renew_failed(started);
        }
        match outcome {
            RenewOutcome::Renewed { .. } => {
                let valid_until = self.handle.valid_until();
                self.watchdog.on_renewed(started, valid_until);
                self.publish();
            }
            RenewOutcome::Lost { reason } => self.cancel(CancelReason::Lost(reason)),
            RenewOutcome::Indeterminate { .. } => self.cancel(CancelReason::Unknown),
            RenewOutcome::Unavailable { .. } => self.watchdog.on_unavailable(Instant::now()),
            RenewOutcome::Refused { state: refused } => self.cancel(match refused {
                LeaseState::Lost(reason) => CancelReason::Lost(reason),
                _ => CancelReason::Unknown,
            }),
        }
    }

    /// Releases the lease and sends the report (invariant 5: the worker has stopped, or is
    /// attached and asked for it).
    pub(super) async fn finish(&mut self, end: JobEnd) -> LeaseReport {
        self.watchdog.finish();
        self.timer += 1;
        self.armed.replace(None);
        let release = release_retrying(&mut self.handle).await;
        self.publish();
        let report = LeaseReport {
            end,
            cancelled: self.cancelled.clone(),
            release,
            token: self.handle.token(),
        };
        tracing::info!(
            end = report.end.as_str(),
            release = report.release.as_str(),
            token = report.token.get(),
            "lease actor finished"
        );
        // The slot first: a caller that starts the next lease the moment it reads the
        // report must find it free.
        drop(self.slot.take());
        if let Some(tx) = self.report.take() {
            let _ = tx.send(report.clone());
        }
        self.cancel.cancel();
        report
    }

    pub(super) fn end_for_exit(&self) -> JobEnd {
        match &self.cancelled {
            Some(c) => JobEnd::Cancelled {
                reason: c.reason,
                killed: self.watchdog.killed(),
            },
            None => JobEnd::Completed,
        }
    }
}

/// Releases `handle` once its worker stopped. A release that did not land leaves the key
/// held until its TTL; the worker has stopped, so a few bounded retries cost nothing and
/// usually free it sooner. The release is owner-checked, so a retry after an unseen success
/// reads ABSENT.
async fn release_retrying(handle: &mut LeaseHandle) -> ReleaseOutcome {
    let mut release = handle.release().await;
    for _ in 1..RELEASE_ATTEMPTS {
        if !matches!(
            release,
            ReleaseOutcome::Unavailable { .. } | ReleaseOutcome::Indeterminate { .. }
        ) {
            break;
        }
        tokio::time::sleep(RELEASE_RETRY_PAUSE).await;
        release = handle.release().await;
    }
    release
}

/// Release attempts when finishing, and the pause between them.
const RELEASE_ATTEMPTS: u32 = 3;
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The longest a finishing lease actor spends releasing, with `command_timeout` per call.
pub(crate) fn release_time(command_timeout: Duration) -> Duration {
    command_timeout * RELEASE_ATTEMPTS + RELEASE_RETRY_PAUSE * (RELEASE_ATTEMPTS - 1)
}

impl<M> Drop for LeaseActorState<M> {
    fn drop(&mut self) {
        // Invariant 6: reached after a panic or kill too, where post_stop does not run.
        self.cancel.cancel();
        let running = self.worker.take_running();
        if let Some(running) = &running {
            running.kill();
        }
        let Some(tx) = self.report.take() else {
            // Nobody to tell: the handle's drop releases best effort.
            drop(self.slot.take());
            return;
        };
        let cancelled = self.cancelled.clone();
        let token = self.handle.token();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(self.slot.take());
            let _ = tx.send(LeaseReport {
                end: JobEnd::Aborted,
                cancelled,
                release: ReleaseOutcome::Indeterminate {
                    detail: FailureDetail::new(
                        FailureKind::Abandoned,
                        "lease actor ended outside a tokio runtime; its lease expires by its ttl",
                    ),
                },
                token,
            });
            return;
        };
        // Released here, as `finish` would — once the worker stopped (invariant 5) — so the
        // report says what the release did, not that it was left to someone else.
        let (mut handle, slot) = (self.handle.take(), self.slot.take());
        runtime.spawn(async move {
            if let Some(running) = running {
                running.stop(KILL_WAIT).await;
            }
            let release = release_retrying(&mut handle).await;
            tracing::info!(
                release = release.as_str(),
                token = token.get(),
                "lease actor ended from outside; released"
            );
            drop(slot);
            let _ = tx.send(LeaseReport {
                end: JobEnd::Aborted,
                cancelled,
                release,
                token,
            });
        });
    }
}
