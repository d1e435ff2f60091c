//! `LeaseSupervisor`: keeps one job running under a lease across losses. Leader election is
//! this with a job that never ends.
//!
//! # Invariants
//!
//! 1. At most one term (one lease, one worker) at a time per supervisor; a new term starts
//!    only after the previous LeaseActor reported (its worker stopped, its lease released).
//! 2. Every term uses a fresh attempt (a new owner token), so a stale term's replay can
//!    never be mistaken for the new one.
//! 3. Between terms and after failed acquisitions the supervisor backs off with jitter, so
//!    a fleet of supervisors does not stampede Redis after a loss.

use std::time::Duration;

use ractor::Actor;
use rand::RngExt as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::lease::AcquireOutcome;
use crate::protocol::{FencingToken, LeaseRequest};
use crate::runtime::worker::{SpawnFuture, Worker};
use crate::runtime::{
    CancelPolicy, JobEnd, LeaseCancelled, LeaseContext, LeaseReport, LeaseRuntime, RuntimeError,
};

/// How a [`LeaseSupervisor`] paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupervisorConfig {
    /// Pause after a term ends or an acquisition fails, doubled per consecutive failure.
    /// Default 100 ms.
    pub backoff_min: Duration,
    /// Upper bound of that pause. Default 5 s.
    pub backoff_max: Duration,
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
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SupervisorState {
    /// Trying to acquire the lease (a follower, in leader-election terms).
    Acquiring,
    /// A term is running: the lease is held with this token (the leader).
    Holding {
        /// The term's fencing token.
        token: FencingToken,
    },
    /// Stopped: shut down, or the job completed.
    Stopped,
}

/// A running supervisor. Dropping it does not stop it; call [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct LeaseSupervisor {
    shutdown: CancellationToken,
    state: watch::Receiver<SupervisorState>,
    task: JoinHandle<Vec<LeaseReport>>,
}

impl LeaseSupervisor {
    /// The current state, and changes to it.
    pub fn watch(&self) -> watch::Receiver<SupervisorState> {
        self.state.clone()
    }

    /// Asks the current worker to stop (a `LeaseCancelled` with `Shutdown`), waits for its
    /// release, and returns the reports of every term.
    ///
    /// # Cancel safety
    /// Not cancel safe: the reports are consumed with `self`. The shutdown goes ahead
    /// regardless.
    pub async fn shutdown(self) -> Vec<LeaseReport> {
        self.shutdown.cancel();
        self.join().await
    }

    /// Waits for the supervisor to stop on its own (its job completed) and returns the
    /// reports of every term.
    ///
    /// # Cancel safety
    /// Not cancel safe: the reports are consumed with `self`. The supervisor carries on
    /// regardless.
    pub async fn join(self) -> Vec<LeaseReport> {
        self.task.await.unwrap_or_default()
    }
}

impl LeaseRuntime {
    /// Keeps a worker made by `make` running under `request`'s lease: acquire (waiting up
    /// to the request's wait timeout, again and again), run a term, and when the term ends
    /// by loss, failure or abort, re-acquire with a new attempt after a backoff and start a
    /// fresh worker. A term whose worker completes normally ends the supervisor.
    ///
    /// # Errors
    /// [`RuntimeError::Invalid`] if the request's TTL (after its replica wait, if any) leaves
    /// no room for renewals ([`LeaseSettings::check_request`](crate::LeaseSettings::check_request));
    /// checked before anything starts.
    pub fn supervise<W, F>(
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
        self.client().settings().check_request(&request)?;
        let shutdown = CancellationToken::new();
        let (state_tx, state_rx) = watch::channel(SupervisorState::Acquiring);
        let runtime = self.clone();
        let stop = shutdown.clone();
        let make = std::sync::Arc::new(make);
        let task = tokio::spawn(async move {
            let mut reports = Vec::new();
            let mut backoff = config.backoff_min;
            while !stop.is_cancelled() && !runtime.registry.draining() {
                state_tx.send_replace(SupervisorState::Acquiring);
                let term = match request.with_new_attempt() {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "lease supervisor cannot make an attempt");
                        break;
                    }
                };
                let acquired = tokio::select! {
                    () = stop.cancelled() => break,
                    a = runtime.acquire_for_term(&term) => a,
                };
                let handle = match acquired {
                    Ok(h) => h,
                    Err(pause) => {
                        let pause = pause.unwrap_or(backoff);
                        backoff = (backoff * 2).min(config.backoff_max);
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(jittered(pause)) => continue,
                        }
                    }
                };
                let slot = match runtime.slot() {
                    Ok(slot) => slot,
                    Err(RuntimeError::ShuttingDown) => {
                        drop(handle);
                        break;
                    }
                    Err(_) => {
                        tracing::warn!("lease limit reached; supervisor waits");
                        drop(handle);
                        tokio::time::sleep(jittered(backoff)).await;
                        continue;
                    }
                };
                let make = make.clone();
                let started = runtime
                    .start(handle, slot, policy, None, move |ctx| {
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
                let started = match started {
                    Ok(s) => s,
                    Err(RuntimeError::ShuttingDown) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "lease supervisor could not start a term");
                        tokio::time::sleep(jittered(backoff)).await;
                        continue;
                    }
                };
                state_tx.send_replace(SupervisorState::Holding {
                    token: started.context.token(),
                });
                let mut started = started;
                let finished = tokio::select! {
                    r = &mut started.report => Some(r),
                    () = stop.cancelled() => None,
                };
                let report = match finished {
                    Some(r) => {
                        crate::runtime::spawn::report_or_vanished(r, started.context.token())
                    }
                    None => {
                        let _ = started
                            .lease
                            .send_message(crate::runtime::LeaseActorMsg::release());
                        started.wait().await
                    }
                };
                tracing::info!(
                    end = report.end.as_str(),
                    token = report.token.get(),
                    "lease supervisor term ended"
                );
                let completed = report.end == JobEnd::Completed;
                reports.push(report);
                if completed {
                    break;
                }
                backoff = config.backoff_min;
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(jittered(backoff)) => {}
                }
            }
            state_tx.send_replace(SupervisorState::Stopped);
            reports
        });
        Ok(LeaseSupervisor {
            shutdown,
            state: state_rx,
            task,
        })
    }

    /// One acquisition for a term: the handle, or how long to pause (`None`: back off).
    async fn acquire_for_term(
        &self,
        request: &LeaseRequest,
    ) -> Result<crate::lease::LeaseHandle, Option<Duration>> {
        match self.client().acquire(request).await {
            Ok(AcquireOutcome::Acquired(h) | AcquireOutcome::Replayed(h)) => Ok(h),
            // Contended after the whole wait: try again at once if the wait was long, the
            // wait loop already slept; otherwise honour retry_after.
            Ok(AcquireOutcome::Contended { retry_after }) if request.wait_timeout().is_zero() => {
                Err(Some(retry_after))
            }
            Ok(AcquireOutcome::Contended { .. }) => Err(Some(Duration::ZERO)),
            Ok(other) => {
                tracing::debug!(outcome = other.as_str(), "lease supervisor did not acquire");
                Err(None)
            }
            Err(e) => {
                // Validated before the loop; a failure here would repeat forever.
                tracing::error!(error = %e, "lease supervisor request rejected");
                Err(None)
            }
        }
    }
}

fn jittered(pause: Duration) -> Duration {
    if pause.is_zero() {
        return pause;
    }
    // ±25 %: enough to spread a fleet, small enough to keep the pacing recognisable.
    let quarter = pause / 4;
    pause - quarter + rand::rng().random_range(Duration::ZERO..=quarter * 2)
}
