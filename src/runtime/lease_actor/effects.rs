//! The effects of the watchdog's decisions on a lease actor's state: the renewal's task, the
//! one cancellation, stopping the worker, the timer, and the release with its report —
//! the I/O, messages and telemetry the watchdog leaves out.

use std::time::Duration;

use ractor::{ActorRef, Message};
use tokio::time::Instant;

use super::message::{Command, LeaseActorMsg};
use super::state::{InFlight, LeaseActorState};
use super::watchdog::{Action, Actions, Cancellation};
use super::worker::WorkerState;
use super::{KILL_WAIT, LEASE_END};
use crate::backend::{FailureDetail, FailureKind};
use crate::lease::{LeaseHandle, ReleaseOutcome, Renewal};
use crate::runtime::{JobEnd, LeaseCancelled, LeaseReport};
use crate::telemetry;

impl<M: Message + From<LeaseCancelled>> LeaseActorState<M> {
    /// Carries out `actions`, decided at `now`, in order, and those a renewal refused at
    /// once calls for.
    pub(super) async fn carry_out(
        &mut self,
        myself: &ActorRef<LeaseActorMsg>,
        actions: Actions,
        now: Instant,
    ) {
        let mut pending = actions;
        while self.carry_out_now(myself, &mut pending, now) {
            let end = self.end_for_exit();
            self.finish(end).await;
            myself.stop(Some(format!("{LEASE_END}lease ended")));
        }
    }

    /// Carries out `pending` in order, and those a renewal refused at once calls for, up to
    /// the attached worker's finish, the one action that awaits (the release): true if it
    /// stopped there, the finish taken out of `pending` and still to do.
    pub(super) fn carry_out_now(
        &mut self,
        myself: &ActorRef<LeaseActorMsg>,
        pending: &mut Actions,
        now: Instant,
    ) -> bool {
        while !pending.is_empty() {
            match pending.remove(0) {
                Action::Renew { until } => {
                    let next = self.start_renewal(myself, until, now);
                    pending.insert_many(0, next);
                }
                Action::Confirmed => self.publish(now),
                Action::Cancel(cancellation) => self.send_cancellation(cancellation, now),
                Action::KillWorker => self.kill_worker(),
                Action::FinishAttached => return true,
            }
        }
        false
    }

    /// Arms the one timer the watchdog asks for, replacing the one armed before; with
    /// nothing to wait for, disarms.
    pub(super) fn arm(&mut self, myself: &ActorRef<LeaseActorMsg>) {
        match self.watchdog.poll_timeout(self.worker.view()) {
            Some(deadline) => self.armed.arm(myself, deadline.at()),
            None => self.armed.disarm(),
        }
    }

    /// Starts the renewal the watchdog asked for at `now`, giving up at `until`: its calls
    /// run in a task of their own, whose end comes back as a message (`Renewed`), so the
    /// actor's other messages — a status, a drain, the worker's end, its timer — do not wait
    /// behind a slow reply. What a renewal the handle refuses at once calls for.
    fn start_renewal(
        &mut self,
        myself: &ActorRef<LeaseActorMsg>,
        until: Instant,
        now: Instant,
    ) -> Actions {
        match self.handle.begin_renewal(now, Some(until)) {
            Ok(call) => {
                let (myself, reach) = (myself.clone(), call.reach());
                let task = tokio::spawn(async move {
                    let sent = call.send().await;
                    // An actor that ended meanwhile cannot receive it; nothing is owed then.
                    let _ = myself.send_message(LeaseActorMsg(Command::Renewed(sent)));
                });
                self.renewal = Some(InFlight { task, reach });
                Actions::new()
            }
            Err(refused) => self.watchdog.handle_renewal(
                &Renewal::Unconfirmed(refused),
                now,
                self.worker.view(),
            ),
        }
    }

    /// Abandons the renewal in flight, if one is: dropped mid-flight, it leaves the handle
    /// its old budget (a lower bound whether or not it landed).
    fn abandon_renewal(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.task.abort();
        }
    }

    /// Whether the renewal in flight, if one is, may have reached Redis so far.
    pub(super) fn renewal_reached(&self) -> bool {
        self.renewal
            .as_ref()
            .is_some_and(|renewal| renewal.reach.may_have_landed())
    }

    /// Sends the one cancellation (invariant 2) the watchdog decided.
    fn send_cancellation(&mut self, cancellation: Cancellation, now: Instant) {
        let Cancellation {
            reason,
            remaining,
            stop_by,
            unconfirmed_for,
        } = cancellation;
        let message = LeaseCancelled {
            reason,
            token: self.handle.token(),
            remaining_validity: remaining,
            stop_by,
        };
        tracing::info!(
            reason = reason.as_str(),
            token = self.handle.token().get(),
            remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            "lease cancelled"
        );
        telemetry::cancellation(self.handle.purpose(), &reason, unconfirmed_for);
        self.cancelled = Some(Box::new(message.clone()));
        // Published before the token fires, so work woken by it reads the reason.
        self.publish(now);
        self.status.cancel();
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
    }

    /// Stops the worker; the watchdog decided it must be.
    fn kill_worker(&self) {
        tracing::warn!(
            token = self.handle.token().get(),
            "worker still running at the end of local validity; killing it"
        );
        match &self.worker {
            WorkerState::Child { worker, .. } | WorkerState::Attached(worker) => worker.kill(),
            WorkerState::Task { work, .. } => work.kill(),
            WorkerState::Pending(_) | WorkerState::PendingTask(_) | WorkerState::Starting => {}
        }
    }

    /// Releases the lease and sends the report (invariant 5: the worker has stopped, or is
    /// attached and asked for it).
    pub(super) async fn finish(&mut self, end: JobEnd) -> LeaseReport {
        self.watchdog.finish();
        self.armed.disarm();
        self.abandon_renewal();
        let release = release_retrying(&mut self.handle).await;
        // The release's own instant: it took its time since the event that ended the work.
        self.publish(Instant::now());
        let report = LeaseReport {
            end,
            cancelled: self.cancelled.as_deref().cloned(),
            release,
            token: self.handle.token(),
        };
        tracing::info!(
            end = report.end.as_str(),
            release = report.release.as_str(),
            token = report.token.get(),
            "lease actor finished"
        );
        // The admission first: a caller that starts the next lease the moment it reads the
        // report must find it free.
        drop(self.admission.take());
        if let Some(tx) = self.report.take() {
            let _ = tx.send(Box::new(report.clone()));
        }
        self.status.cancel();
        report
    }

    pub(super) fn end_for_exit(&self) -> JobEnd {
        match self.cancelled.as_deref() {
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
        if !release.may_leave_it_held() {
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
        self.status.cancel();
        if let Some(renewal) = self.renewal.take() {
            renewal.task.abort();
        }
        let running = self.worker.take_running();
        if let Some(running) = &running {
            running.kill();
        }
        let Some(tx) = self.report.take() else {
            // Nobody to tell: the handle's drop releases best effort.
            drop(self.admission.take());
            return;
        };
        let cancelled = self.cancelled.as_deref().cloned();
        let token = self.handle.token();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(self.admission.take());
            let _ = tx.send(Box::new(LeaseReport {
                end: JobEnd::Aborted,
                cancelled,
                release: ReleaseOutcome::Indeterminate {
                    detail: FailureDetail::new(
                        FailureKind::Abandoned,
                        "lease actor ended outside a tokio runtime; its lease expires by its ttl",
                    ),
                },
                token,
            }));
            return;
        };
        // Released here, as `finish` would — once the worker stopped (invariant 5) — so the
        // report says what the release did, not that it was left to someone else.
        let (mut handle, admission) = (self.handle.take(), self.admission.take());
        runtime.spawn(async move {
            if let Some(running) = running {
                running.kill_and_wait(KILL_WAIT).await;
            }
            let release = release_retrying(&mut handle).await;
            tracing::info!(
                release = release.as_str(),
                token = token.get(),
                "lease actor ended from outside; released"
            );
            drop(admission);
            let _ = tx.send(Box::new(LeaseReport {
                end: JobEnd::Aborted,
                cancelled,
                release,
                token,
            }));
        });
    }
}
