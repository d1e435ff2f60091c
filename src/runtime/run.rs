//! `run_under_lease`: the LeaseActor machinery for plain tokio code.
//!
//! The closure's future runs inside a small worker actor supervised by the LeaseActor, so
//! it gets the same guarantees as an actor worker: one cancellation (the context's token),
//! release when it finishes, and under [`CancelPolicy::Kill`] it is dropped — aborted at its
//! next `.await` — when local validity ends.

use std::future::Future;
use std::pin::Pin;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::lease::AcquireOutcome;
use crate::protocol::LeaseRequest;
use crate::runtime::{
    CancelPolicy, LeaseCancelled, LeaseContext, LeaseReport, LeaseRuntime, RuntimeError,
    SpawnOutcome,
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

type BoxedWork<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The worker actor that drives one future.
struct FutureWorker<T>(std::marker::PhantomData<fn() -> T>);

struct FutureWorkerArgs<T> {
    work: BoxedWork<T>,
    output: oneshot::Sender<T>,
}

struct FutureWorkerState<T> {
    work: Option<FutureWorkerArgs<T>>,
}

enum FutureWorkerMsg {
    Run,
    /// Delivered after the future finished, if ever; the future watches the token instead.
    Cancelled,
}

impl From<LeaseCancelled> for FutureWorkerMsg {
    fn from(_: LeaseCancelled) -> Self {
        Self::Cancelled
    }
}

impl<T: Send + 'static> Actor for FutureWorker<T> {
    type Msg = FutureWorkerMsg;
    type State = FutureWorkerState<T>;
    type Arguments = FutureWorkerArgs<T>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_message(FutureWorkerMsg::Run)?;
        Ok(FutureWorkerState { work: Some(args) })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            FutureWorkerMsg::Run => {
                if let Some(FutureWorkerArgs { work, output }) = state.work.take() {
                    // A kill interrupts this await: the future is dropped where it stands.
                    let value = work.await;
                    let _ = output.send(value);
                    myself.stop(None);
                }
            }
            FutureWorkerMsg::Cancelled => {}
        }
        Ok(())
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
    /// # Errors
    /// As [`spawn_under_lease`](Self::spawn_under_lease).
    ///
    /// # Cancel safety
    /// Dropping the returned future does not stop the work: it runs under its lease actor
    /// until it finishes or the lease ends.
    pub async fn run_under_lease<F, Fut, T>(
        &self,
        request: &LeaseRequest,
        policy: CancelPolicy,
        work: F,
    ) -> Result<RunOutcome<T>, RuntimeError>
    where
        F: FnOnce(LeaseContext) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (output_tx, output_rx) = oneshot::channel();
        let outcome = self
            .spawn_under_lease(
                request,
                FutureWorker::<T>(std::marker::PhantomData),
                // Called in the lease actor's span: the work runs in it too, so its events
                // carry the lease's purpose, digest, operation id and token.
                move |ctx| FutureWorkerArgs {
                    work: Box::pin(work(ctx).instrument(tracing::Span::current())),
                    output: output_tx,
                },
                policy,
            )
            .await?;
        match outcome {
            SpawnOutcome::Started(job) => {
                let report = job.wait().await;
                Ok(RunOutcome::Ran {
                    output: output_rx.await.ok(),
                    report,
                })
            }
            SpawnOutcome::NotAcquired(outcome) => Ok(RunOutcome::NotAcquired(outcome)),
        }
    }
}
