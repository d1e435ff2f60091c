//! `run_under_lease`: the LeaseActor machinery for plain tokio code.
//!
//! The closure's future runs as a task of its own, supervised by the LeaseActor, so it gets
//! the same guarantees as an actor worker: one cancellation (the context's token), release
//! when it finishes, and under [`CancelPolicy::Kill`] it is dropped — aborted at its next
//! `.await` — when local validity ends. A task rather than a worker actor: one actor per
//! lease instead of two (what an idle ractor actor holds: docs/performance.md, "Memory"),
//! and no actor start-up.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::lease::AcquireOutcome;
use crate::protocol::LeaseRequest;
use crate::runtime::job::Started;
use crate::runtime::lease_actor::worker::{TaskEnd, Worker};
use crate::runtime::{
    CancelPolicy, LeaseCancelled, LeaseContext, LeaseReport, LeaseRuntime, RuntimeError,
};

/// What [`LeaseRuntime::run_under_lease`] achieved.
#[must_use]
#[derive(Debug)]
// Returned once per job, never stored in bulk: boxing would only cost an allocation.
#[allow(clippy::large_enum_variant)]
pub enum RunOutcome<T> {
    /// The lease was held and the future ran under it.
    Ran {
        /// The future's output; `None` if it was dropped (validity ran out under
        /// [`CancelPolicy::Kill`]) or panicked — `report.end` says which.
        output: Option<T>,
        /// How it ended and the release outcome.
        report: LeaseReport,
    },
    /// The lease was not acquired; the closure was not called.
    NotAcquired(AcquireOutcome),
}

impl<T> RunOutcome<T> {
    /// The future's output if it ran to its end under the lease; `None` when the lease was
    /// not acquired, or the future was stopped (validity ran out under
    /// [`CancelPolicy::Kill`]) or panicked. Match on the outcome to tell those apart.
    ///
    /// ```
    /// # use leasehold::runtime::RunOutcome;
    /// fn total(outcome: RunOutcome<u64>) -> u64 {
    ///     outcome.into_output().unwrap_or(0)
    /// }
    /// ```
    pub fn into_output(self) -> Option<T> {
        match self {
            RunOutcome::Ran { output, .. } => output,
            RunOutcome::NotAcquired(_) => None,
        }
    }
}

/// The lease actor's worker message type when the worker is a task: there are no worker
/// messages (the work watches its context's token), so none is ever built.
pub(crate) struct NoWorkerMessages;

impl From<LeaseCancelled> for NoWorkerMessages {
    fn from(_: LeaseCancelled) -> Self {
        Self
    }
}

impl LeaseRuntime {
    /// Acquires `request` (waiting up to its wait timeout) and runs `work(ctx)` under it.
    ///
    /// `ctx.cancelled()` completes the moment the lease is lost or unknown (or cannot be
    /// renewed in time); `ctx.token()` is the fencing token; `ctx.remaining()` the validity
    /// left. When the future finishes, the lease is released at once.
    ///
    /// # `run_under_lease` vs `spawn_under_lease`
    /// This one is for plain async code and returns the future's output. Use
    /// [`spawn_under_lease`](Self::spawn_under_lease) for a ractor worker that handles
    /// messages (the cancellation arrives as one) and may be linked into a supervision tree.
    ///
    /// An acquisition of unknown end is replayed until it is settled, as
    /// [`spawn_under_lease`](Self::spawn_under_lease) says.
    ///
    /// # Errors
    /// As [`spawn_under_lease`](Self::spawn_under_lease).
    ///
    /// # Cancel safety
    /// Dropping the returned future does not stop the work: it runs under its lease actor
    /// until it finishes or the lease ends.
    pub fn run_under_lease<F, Fut, T>(
        &self,
        request: &LeaseRequest,
        policy: CancelPolicy,
        work: F,
    ) -> impl Future<Output = Result<RunOutcome<T>, RuntimeError>>
    where
        F: FnOnce(LeaseContext) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        // The acquisition and the actor's start are one boxed future, freed once the lease
        // is held: what rests in the caller's task for as long as the lease is held is two
        // receivers, not the room a start needs (docs/performance.md, "R with one actor
        // per lease").
        let begun = Box::pin(self.begin_run(request, policy, work));
        async move {
            let (started, output_rx) = match begun.await? {
                Ok(running) => running,
                Err(other) => return Ok(RunOutcome::NotAcquired(other)),
            };
            // The output first (it comes before the report, or not at all).
            let wait = started.wait();
            let output = output_rx.await.ok();
            Ok(RunOutcome::Ran {
                output,
                report: wait.await,
            })
        }
    }

    /// `run_under_lease` up to the work's start: the lease acquired, its actor started
    /// and the work's task with it; the receiver of the work's output beside it.
    async fn begin_run<F, Fut, T>(
        &self,
        request: &LeaseRequest,
        policy: CancelPolicy,
        work: F,
    ) -> Result<Result<(Started, oneshot::Receiver<T>), AcquireOutcome>, RuntimeError>
    where
        F: FnOnce(LeaseContext) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (handle, admission) = match self.take_settled(request).await? {
            Ok(held) => held,
            Err(other) => return Ok(Err(other)),
        };
        let (output_tx, output_rx) = oneshot::channel();
        let started = self
            .start::<NoWorkerMessages>(handle, admission, policy, None, move |ctx| {
                Worker::Task(Box::new(move |lease| {
                    // Started in the lease actor's span: the work runs in it too, so its
                    // events carry the lease's purpose, digest, operation id and token.
                    let work = work(ctx).instrument(tracing::Span::current());
                    // The task is the work's future and a closure, not an `async` block: a
                    // block would keep the future twice, where it captured it and where it
                    // awaits it, for as long as the lease is held.
                    let mut end = TaskEnd::new(lease);
                    tokio::spawn(AssertUnwindSafe(work).catch_unwind().map(move |ended| {
                        match ended {
                            Ok(value) => {
                                let _ = output_tx.send(value);
                            }
                            Err(panic) => end.failed(panic_message(panic.as_ref())),
                        }
                        // `end` is dropped here, after the output is sent or the panic
                        // noted; an abort drops it with the work.
                    }))
                }))
            })
            .await?;
        Ok(Ok((started, output_rx)))
    }
}

/// The text a panic carried, as ractor reports a panicking actor's.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    format!("panicked: {text}")
}
