//! `run`'s acquisition: one try; then, when the lease is held by someone else (or Redis did
//! not answer) and `--wait` allows, a wait for the rest of `--wait` that says who it waits
//! for ([`crate::waiting`]). Both stages send the same attempt, so a try whose reply was
//! lost is replayed, never duplicated. A forwarded signal abandons the acquisition and
//! releases whatever landed.

use std::time::Duration;

use leasehold::protocol::LeaseRequestBuilder;
use leasehold::runtime::{CancelPolicy, LeaseContext, LeaseRuntime, RunOutcome, RuntimeError};
use leasehold::{AcquireOutcome, LeaseClient, LeaseRequest, ReleaseOutcome};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::diagnose::Server;
use crate::holders;
use crate::keeper::Signal;
use crate::signals::Signals;
use crate::supervise::Work;
use crate::waiting::{self, Waiting};
use crate::{config, fail, status};

/// What to do when someone else holds the lease (`--conflict-exit-code`, `--quiet`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Contention {
    pub(crate) exit_code: Option<u8>,
    pub(crate) quiet: bool,
}

/// How to acquire.
pub(crate) struct Acquire<'a> {
    pub(crate) runtime: &'a LeaseRuntime,
    pub(crate) client: &'a LeaseClient,
    pub(crate) server: &'a Server,
    /// The request but for its wait, which each stage sets.
    pub(crate) builder: &'a LeaseRequestBuilder,
    pub(crate) wait: Duration,
    pub(crate) contention: Contention,
}

/// The lease held: its context, the lease actor's span, the sender whose drop ends the
/// work under the lease (and so releases it), and that work.
pub(crate) struct Held {
    pub(crate) ctx: LeaseContext,
    pub(crate) span: tracing::Span,
    pub(crate) done: oneshot::Sender<()>,
    pub(crate) work: Work<'static>,
    /// The request the lease was acquired by, for asking Redis whether it still holds.
    pub(crate) request: LeaseRequest,
}

// Matched once, where it is made: boxing the held lease would only allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Acquisition {
    Held(Held),
    /// The command is not run: leasehold exits with this status.
    NotRun(u8),
}

/// How one stage ended.
enum StageEnd {
    Held(Held),
    Ended(Result<RunOutcome<()>, RuntimeError>),
    Signal(Signal),
}

impl Acquire<'_> {
    pub(crate) async fn acquire(&self, signals: &mut Signals) -> Acquisition {
        let until = Instant::now() + self.wait;
        let first = match self.request(Duration::ZERO) {
            Ok(r) => r,
            Err(code) => return Acquisition::NotRun(code),
        };
        let outcome = match self.stage(&first, signals, None).await {
            StageEnd::Held(held) => return Acquisition::Held(held),
            StageEnd::Signal(signal) => {
                return Acquisition::NotRun(self.abandon(&first, signal).await);
            }
            StageEnd::Ended(outcome) => outcome,
        };
        let refusal = match outcome {
            Ok(RunOutcome::NotAcquired(
                refusal @ (AcquireOutcome::Contended { .. }
                | AcquireOutcome::LockDelayed { .. }
                | AcquireOutcome::Unavailable { .. }
                | AcquireOutcome::Indeterminate { .. }),
            )) if !self.wait.is_zero() => refusal,
            other => return Acquisition::NotRun(self.not_run(&first, other).await),
        };
        let mut view = None;
        if !self.contention.quiet {
            view = Some(Waiting::start(self.client, self.server, &first, &refusal, until).await);
        }
        let rest = match self.request(until.saturating_duration_since(Instant::now())) {
            Ok(r) => r,
            Err(code) => return Acquisition::NotRun(code),
        };
        if let Some(view) = view.as_mut() {
            // The same attempt as the first try's: its place, once the wait joins the line.
            view.follow_place(self.client.watch_place(&rest));
        }
        let end = self.stage(&rest, signals, view.as_mut()).await;
        if let Some(view) = &view {
            view.finish();
        }
        match end {
            StageEnd::Held(held) => Acquisition::Held(held),
            StageEnd::Signal(signal) => Acquisition::NotRun(self.abandon(&rest, signal).await),
            StageEnd::Ended(outcome) => {
                Acquisition::NotRun(self.not_run(&rest, settle(outcome, refusal)).await)
            }
        }
    }

    /// The request with this wait.
    fn request(&self, wait: Duration) -> Result<LeaseRequest, u8> {
        self.builder
            .clone()
            .wait_timeout(wait)
            .build()
            .map_err(|e| fail(config::option_error(&e)))
    }

    /// Runs `request`'s acquisition until it holds the lease, ends without it, or a signal
    /// comes; `view` says who holds the lease meanwhile.
    async fn stage(
        &self,
        request: &LeaseRequest,
        signals: &mut Signals,
        mut view: Option<&mut Waiting>,
    ) -> StageEnd {
        let (held_tx, mut held_rx) =
            oneshot::channel::<(LeaseContext, tracing::Span, oneshot::Sender<()>)>();
        let runtime = self.runtime.clone();
        let held_request = request.clone();
        let request = request.clone();
        // The work under the lease hands its context out and ends when told (by dropping
        // `done`): the command is supervised by `run`, in one task with the signals and the
        // keeper. The lease actor's span comes along, so leasehold's events about the
        // command carry the lease's purpose, digest, operation id and token.
        let mut work: Work<'static> = Box::pin(async move {
            runtime
                // NotifyOnly: the work is the command's tree, which `supervise` kills itself
                // when it must be gone and only then ends the work, so the release never
                // precedes that kill.
                .run_under_lease(&request, CancelPolicy::NotifyOnly, move |ctx| async move {
                    let (done_tx, done_rx) = oneshot::channel::<()>();
                    if held_tx
                        .send((ctx, tracing::Span::current(), done_tx))
                        .is_ok()
                    {
                        let _ = done_rx.await;
                    }
                })
                .await
        });
        loop {
            let change = async {
                match view.as_deref_mut() {
                    Some(view) => view.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                outcome = work.as_mut() => return StageEnd::Ended(outcome),
                held = &mut held_rx => return match held {
                    Ok((ctx, span, done)) => StageEnd::Held(Held {
                        ctx,
                        span,
                        done,
                        work,
                        request: held_request,
                    }),
                    Err(_) => StageEnd::Ended(work.await),
                },
                // The acquisition is dropped: a lease actor that had just started ends with
                // its work, and the attempt's release undoes whatever landed.
                Some(signal) = signals.recv() => return StageEnd::Signal(signal),
                () = change => {}
            }
        }
    }

    /// A signal before the command started: release whatever the attempt acquired, say
    /// whether it held anything, and exit 128+N.
    async fn abandon(&self, request: &LeaseRequest, signal: Signal) -> u8 {
        let release = self.client.release_attempt(request).await;
        let what = match &release {
            ReleaseOutcome::Released => "the lease it had just acquired was released".to_owned(),
            ReleaseOutcome::AlreadyAbsent | ReleaseOutcome::NotOwner => {
                "it never held the lease".to_owned()
            }
            ReleaseOutcome::Unavailable { detail } | ReleaseOutcome::Indeterminate { detail } => {
                format!(
                    "release: {} ({}); if the lease had been acquired, it stays held until \
                     its TTL ends",
                    release.as_str(),
                    self.server.explain(detail)
                )
            }
        };
        say!("{} before the command started; {what}", signal.name());
        signal_status(signal)
    }

    /// The run ended without the command: not acquired, or the lease ended before it
    /// started.
    async fn not_run(
        &self,
        request: &LeaseRequest,
        outcome: Result<RunOutcome<()>, RuntimeError>,
    ) -> u8 {
        let outcome = match outcome {
            Err(RuntimeError::Invalid(e)) => return fail(config::option_error(&e)),
            Err(e) => return fail(e),
            Ok(RunOutcome::Ran { report, .. }) => {
                return fail(format!(
                    "the lease ended before the command started ({}); release: {}",
                    report
                        .cancelled
                        .map_or_else(|| report.end.as_str().to_owned(), |c| c.reason.to_string()),
                    report.release.as_str()
                ));
            }
            Ok(RunOutcome::NotAcquired(outcome)) => outcome,
        };
        match outcome {
            AcquireOutcome::Contended { .. }
            | AcquireOutcome::OwnerOperationConflict { .. }
            | AcquireOutcome::LockDelayed { .. } => {
                if !self.contention.quiet {
                    let who = self.holder(request, &outcome).await;
                    let within = if self.wait.is_zero() {
                        String::new()
                    } else {
                        format!(" within --wait {}", holders::time(self.wait))
                    };
                    say!("not acquired{within}: {who}");
                }
                self.contention.exit_code.unwrap_or(status::NOT_ACQUIRED)
            }
            AcquireOutcome::Unavailable { detail } => fail(self.server.explain(&detail)),
            // Not Redis's failure: this process had too many operations waiting to be sent.
            AcquireOutcome::QueueFull { detail } => fail(format!(
                "refused before sending (nothing held): {}",
                detail.message
            )),
            AcquireOutcome::Indeterminate { detail, .. } => {
                // The acquisition may have landed (by the request's attempt, which every
                // try reuses): give it back rather than leave it held.
                let release = self.client.release_attempt(request).await;
                fail(format!(
                    "acquisition never confirmed ({}); release: {}",
                    self.server.explain(&detail),
                    release.as_str()
                ))
            }
            AcquireOutcome::Acquired(_) | AcquireOutcome::Replayed(_) => {
                fail("internal error: acquired lease reported as not acquired")
            }
        }
    }

    /// Who holds the lease, read once (the refusal's own words if the read fails or finds
    /// it free by now).
    async fn holder(&self, request: &LeaseRequest, refusal: &AcquireOutcome) -> String {
        holders::read(self.client, self.server, request)
            .await
            .ok()
            .and_then(|slots| holders::describe(&slots))
            .or_else(|| waiting::refusal_text(refusal))
            .unwrap_or_else(|| "held by someone else".to_owned())
    }
}

/// The wait's outcome, knowing the first try's: after a first try that may have reached
/// Redis, a wait that never reached it ends indeterminate too (that try may hold the
/// lease), so that its attempt is released.
fn settle(
    outcome: Result<RunOutcome<()>, RuntimeError>,
    first: AcquireOutcome,
) -> Result<RunOutcome<()>, RuntimeError> {
    match (outcome, first) {
        (
            Ok(RunOutcome::NotAcquired(AcquireOutcome::Unavailable { .. })),
            first @ AcquireOutcome::Indeterminate { .. },
        ) => Ok(RunOutcome::NotAcquired(first)),
        (outcome, _) => outcome,
    }
}

/// 128 + N, as a shell reports a process a signal ended.
pub(crate) fn signal_status(signal: Signal) -> u8 {
    u8::try_from(128 + signal.raw()).unwrap_or(status::FAILED)
}
