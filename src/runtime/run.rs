//! `run_under_lease`: the LeaseActor machinery for plain tokio code.
//!
//! The closure's future runs in the caller's future, supervised by the LeaseActor, so it
//! gets the same guarantees as an actor worker: one cancellation (the context's), release
//! when it finishes, and under [`CancelPolicy::Kill`] it is dropped — not polled again —
//! when local validity ends. Neither a worker actor nor a task of its own: one actor per
//! lease instead of two (what an idle ractor actor holds: docs/performance.md, "Memory"),
//! no actor start-up, and no task beside the caller's (docs/performance.md, "Sized
//! down").

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::FutureExt as _;
use futures_util::future::CatchUnwind;
use pin_project_lite::pin_project;
use tokio::sync::oneshot;

use crate::lease::AcquireOutcome;
use crate::protocol::FencingToken;
use crate::protocol::LeaseRequest;
use crate::runtime::job::{Started, report_or_vanished};
use crate::runtime::lease_actor::worker::{WorkGuard, Worker};
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
    /// The work runs in the returned future (no task is spawned for it): it makes progress
    /// while that future is polled, as any future does. Under [`CancelPolicy::Kill`] it is
    /// dropped when local validity ends: the lease actor wakes this future, which drops the
    /// work without polling it again.
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
    /// The returned future borrows neither the runtime nor the request (it keeps clones
    /// until the lease is held), so it may be spawned as it is:
    /// `tokio::spawn(runtime.run_under_lease(&request, policy, work))`.
    ///
    /// # Cancel safety
    /// Dropping the returned future drops the work with it, as the `Kill` policy would,
    /// and the lease is released at once (the report goes nowhere). Dropped before the
    /// lease was held, nothing ran. To let work outlive the caller's interest in it,
    /// `tokio::spawn` the returned future.
    pub fn run_under_lease<F, Fut, T>(
        &self,
        request: &LeaseRequest,
        policy: CancelPolicy,
        work: F,
    ) -> impl Future<Output = Result<RunOutcome<T>, RuntimeError>> + use<F, Fut, T>
    where
        F: FnOnce(LeaseContext) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        // The acquisition and the actor's start are one boxed future, freed once the lease
        // is held: what rests in the caller's future for as long as the lease is held is
        // the work and the report's receiver, not the room a start needs
        // (docs/performance.md, "R with one actor per lease").
        Run::Beginning {
            begun: Box::pin(self.clone().begin_run(request.clone(), policy, work)),
        }
    }

    /// `run_under_lease` up to the work's start: the lease acquired and its actor started;
    /// the receiver the actor hands the work to beside it.
    async fn begin_run<F, Fut, T>(
        self,
        request: LeaseRequest,
        policy: CancelPolicy,
        work: F,
    ) -> Begun<Fut>
    where
        F: FnOnce(LeaseContext) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (handle, admission) = match self.take_settled(&request).await? {
            Ok(held) => held,
            Err(other) => return Ok(Err(other)),
        };
        let (work_tx, work_rx) = oneshot::channel();
        let started = self
            .start::<NoWorkerMessages>(handle, admission, policy, None, move |ctx| {
                Worker::Task(Box::new(move |lease| {
                    let guard = WorkGuard::new(ctx.work_link(), lease);
                    // A caller that went away drops it here: the guard tells the actor.
                    let _ = work_tx.send(WorkInCaller {
                        work: work(ctx),
                        guard,
                    });
                }))
            })
            .await?;
        Ok(Ok((started, work_rx)))
    }
}

pin_project! {
    /// `run_under_lease`'s future. Written out rather than an `async` block: what rests in
    /// the caller's task for as long as the lease is held is the work, its guard and the
    /// report's receiver, each once (docs/performance.md, "In the caller's future").
    #[project = RunProj]
    enum Run<B, Fut: Future> {
        // The acquisition and the actor's start, boxed: freed once the lease is held, so
        // the room a start needs does not rest in the caller's task.
        Beginning { begun: Pin<Box<B>> },
        Held {
            #[pin]
            work: RunWork<Fut>,
            // The work's output once it ended: it comes before the report, or not at all.
            output: Option<Option<Fut::Output>>,
            report: oneshot::Receiver<Box<LeaseReport>>,
            token: FencingToken,
        },
        // Answered; polled again, it stays pending.
        Done,
    }
}

impl<B, Fut, T> Future for Run<B, Fut>
where
    B: Future<Output = Begun<Fut>>,
    Fut: Future<Output = T>,
{
    type Output = Result<RunOutcome<T>, RuntimeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = match self.as_mut().project() {
            RunProj::Beginning { begun } => match ready!(begun.as_mut().poll(cx)) {
                Ok(Ok((started, handed))) => {
                    let token = started.context.token();
                    self.set(Run::Held {
                        work: RunWork::Handing { handed },
                        output: None,
                        report: started.report,
                        token,
                    });
                    return self.poll(cx);
                }
                Ok(Err(other)) => Ok(RunOutcome::NotAcquired(other)),
                Err(error) => Err(error),
            },
            RunProj::Held {
                work,
                output,
                report,
                token,
            } => {
                if output.is_none() {
                    *output = Some(ready!(work.poll(cx)));
                }
                let report = ready!(Pin::new(report).poll(cx)).ok().map(|report| *report);
                Ok(RunOutcome::Ran {
                    output: output.take().flatten(),
                    report: report_or_vanished(report, *token),
                })
            }
            RunProj::Done => return Poll::Pending,
        };
        self.set(Run::Done);
        Poll::Ready(answer)
    }
}

/// What `begin_run` answers: the lease held, its actor started, and the receiver the actor
/// hands the work to; or why not.
type Begun<Fut> =
    Result<Result<(Started, oneshot::Receiver<WorkInCaller<Fut>>), AcquireOutcome>, RuntimeError>;

/// The work, handed by its lease actor to the caller's future that runs it.
struct WorkInCaller<Fut> {
    work: Fut,
    guard: WorkGuard,
}

pin_project! {
    /// The work's part of `run_under_lease`'s future: waits for the lease actor to hand the
    /// work over, then polls it in place, in the lease's span, until it ends or must stop.
    /// A future written out rather than an `async` block, which would keep the work several
    /// times over (where it was received, bound and awaited) for as long as the lease is
    /// held.
    #[project = StageProj]
    enum RunWork<Fut> {
        Handing { handed: oneshot::Receiver<WorkInCaller<Fut>> },
        // Fields drop in their order: the work first, then the guard says it ended — also
        // when the caller drops this future.
        Running {
            #[pin]
            work: CatchUnwind<AssertUnwindSafe<Fut>>,
            guard: WorkGuard,
        },
        Done,
    }
}

impl<Fut: Future> Future for RunWork<Fut> {
    /// The work's output; `None` if it was stopped or panicked (the guard tells the actor
    /// which), or the actor ended before handing it over.
    type Output = Option<Fut::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut told = None;
        let ended = match self.as_mut().project() {
            StageProj::Handing { handed } => match ready!(Pin::new(handed).poll(cx)) {
                Ok(WorkInCaller { work, guard }) => {
                    self.set(RunWork::Running {
                        work: AssertUnwindSafe(work).catch_unwind(),
                        guard,
                    });
                    return self.poll(cx);
                }
                // The actor ended before the work's start: nothing ran, and its report
                // says why.
                Err(_) => None,
            },
            StageProj::Running { work, guard } => {
                // The switch first: once killed, the work is not polled again.
                if guard.link().poll_killed(cx).is_ready() {
                    None
                } else {
                    // In the lease's span, so the work's events carry its purpose, digest,
                    // operation id and token.
                    let polled = guard.link().span().in_scope(|| work.poll(cx));
                    match ready!(polled) {
                        Ok(value) => Some(value),
                        Err(panic) => {
                            told = Some(guard.failed(panic_message(panic.as_ref())));
                            None
                        }
                    }
                }
            }
            StageProj::Done => None,
        };
        // Ended: the work and the guard go now, not when the caller drops this future;
        // a panic is told once the work is dropped.
        self.set(RunWork::Done);
        if let Some(tell) = told {
            tell();
        }
        Poll::Ready(ended)
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
