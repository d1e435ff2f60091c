//! leasehold's side of a running command: it relays the lease to the keeper (start, every
//! renewal's new deadline, a loss), forwards signals, kills the tree itself when it must be
//! gone, and waits until nothing of the command is left — only then may the lease be
//! released.

mod machine;
#[cfg(test)]
mod machine_tests;

use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use leasehold::LostReason;
use leasehold::runtime::{LeaseContext, RunOutcome, RuntimeError};
use tokio::time::Instant;

use crate::keeper::{self, KeeperLink, Leftovers, Unarmed};
use crate::recheck::Recheck;
use crate::signals::Signals;
pub(crate) use machine::Stopping;
use machine::{Action, Input, Note, Supervision};

/// The lease's work as `run_under_lease` returns it, boxed so that it can be dropped to
/// abandon an acquisition.
pub(crate) type Work<'a> =
    Pin<Box<dyn Future<Output = Result<RunOutcome<()>, RuntimeError>> + Send + 'a>>;

/// The lease's work once supervision returned: ended first (the lease actor ended before
/// the command did), or still running, to be awaited once the command's end is settled.
// Returned once per run and consumed at once, never stored: boxing would only allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum WorkEnd<'a> {
    Ended(Result<RunOutcome<()>, RuntimeError>),
    Running(Work<'a>),
}

impl WorkEnd<'_> {
    /// The work's outcome: the one it ended with, or the one it ends with now.
    pub(crate) async fn outcome(self) -> Result<RunOutcome<()>, RuntimeError> {
        match self {
            Self::Ended(outcome) => outcome,
            Self::Running(work) => work.await,
        }
    }
}

/// How long leasehold keeps killing the command's processes itself — the keeper died, or
/// the instant the tree must be gone came — before it gives up on a process that will not
/// go (one stuck in the kernel, SIGKILL pending).
const KILL_LIMIT: Duration = Duration::from_secs(5);

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommandEnd {
    /// Nothing of it is left.
    Gone {
        /// The command's own exit status (`None`: the keeper never reported it).
        status: Option<ExitStatus>,
        /// The lease could no longer be vouched for before the command exited.
        lost_before_exit: bool,
        /// ... or while processes it left behind still ran.
        lost_before_gone: bool,
        /// A process of the command refused leasehold's signals (and ended on its own).
        refused: Option<u32>,
    },
    /// It could not be started (`errno`).
    NotStarted { errno: i32 },
    /// It was not started: the fuse's timer was not armed.
    Unarmed(Unarmed),
    /// The keeper died; the processes it left were killed here.
    KeeperDied { killed: usize },
    /// A process of the command still runs after leasehold's SIGKILL — it refused it (it
    /// gained privileges) or outlived [`KILL_LIMIT`]: nothing stopped it, and the lease
    /// must not be released.
    Survived { pid: u32 },
}

/// The question to Redis in flight, if any.
type Asking<'a> = Option<Pin<Box<dyn Future<Output = Option<LostReason>> + Send + 'a>>>;

/// The answer to the question in flight; never, if none is.
async fn answer(asking: &mut Asking<'_>) -> Option<LostReason> {
    match asking {
        Some(question) => question.await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; never, if `None`.
async fn until_due(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs the command under `ctx` until nothing of it is left, and returns only then: the
/// lease is released after this returns.
///
/// Besides the keeper, leasehold enforces the instant the tree must be gone itself — local
/// validity's end, or the end of the SIGTERM-to-SIGKILL time once the lease was cancelled —
/// by SIGKILLing every descendant it finds ([`KeeperLink::kill_tree`]), so a keeper that
/// is stopped or starved cannot let the tree outlive the lease. `work` is the lease's
/// `run_under_lease` future: if it ends first (the lease actor ended), the same happens.
/// Returns how the command ended and the work: ended, or still running.
/// A lease that became unknown is asked about again ([`Recheck`]) every renewal period;
/// Redis saying it is gone brings the SIGKILL forward.
///
/// What to do is decided by [`Supervision`] (`machine.rs`); this waits for what happens,
/// reads the clock once per event, and does what it says.
pub(crate) async fn supervise<'a>(
    ctx: &mut LeaseContext,
    keeper: &mut KeeperLink,
    signals: &mut Signals,
    stopping: Stopping,
    recheck: Recheck<'_>,
    mut work: Work<'a>,
) -> (CommandEnd, WorkEnd<'a>) {
    if let Err(unarmed) = keeper
        .start(ctx.token().get(), ctx.slot(), ctx.stop_by())
        .await
    {
        return (CommandEnd::Unarmed(unarmed), WorkEnd::Running(work));
    }
    let mut run = Supervision::new(stopping, ctx.stop_by());
    // Its own handle on the token: `ctx` is borrowed mutably to watch for renewals.
    let cancel = ctx.cancellation_token().clone();
    let mut asking: Asking<'_> = None;
    let mut ended_first = None;
    loop {
        let input = tokio::select! {
            event = keeper.next_event() => match event {
                Some(event) => Input::Event(event),
                None => Input::KeeperGone { fuse_burnt: keeper.fuse_burnt() },
            },
            () = tokio::time::sleep_until(run.kill_at()) => Input::KillDue,
            () = cancel.cancelled(), if run.listens_for_cancel() => Input::Cancelled {
                reason: ctx.cancel_reason(),
                stop_by: ctx.stop_by(),
            },
            () = until_due(run.recheck_at()), if asking.is_none() => Input::RecheckDue,
            gone = answer(&mut asking), if asking.is_some() => {
                asking = None;
                Input::Answered { gone, stop_by: ctx.stop_by() }
            }
            changed = ctx.changed(), if run.watching() => if changed {
                Input::Renewed { stop_by: ctx.stop_by() }
            } else {
                Input::RenewalsEnded
            },
            Some(signal) = signals.recv() => Input::Signal(signal),
            outcome = work.as_mut(), if ended_first.is_none() => {
                // The lease actor ended before the command did: the lease can no longer
                // be vouched for. Killed here; the keeper does too when its orders end.
                ended_first = Some(outcome);
                Input::WorkEnded
            }
        };
        let mut actions = run.handle(input, Instant::now());
        let mut next = 0;
        while let Some(&action) = actions.get(next) {
            next += 1;
            match action {
                Action::Note(note) => say_note(note, keeper),
                Action::Order(order) => keeper.send(order).await,
                Action::Deadline(at) => keeper.deadline(at).await,
                Action::KillTree { close } => {
                    let killed = kill_tree(keeper, close, run.kill_at()).await;
                    actions.extend(run.handle(Input::Killed(killed), Instant::now()));
                }
                Action::Ask => asking = Some(Box::pin(recheck.gone())),
                Action::End(end) => {
                    let work = match ended_first {
                        Some(outcome) => WorkEnd::Ended(outcome),
                        None => WorkEnd::Running(work),
                    };
                    return (end, work);
                }
            }
        }
    }
}

/// leasehold's own kill of the tree (the orders pipe closed first when `close`), logged
/// with how late it came after `due` when that has passed.
async fn kill_tree(keeper: &mut KeeperLink, close: bool, due: Instant) -> keeper::Killed {
    let late = due.elapsed();
    if close {
        keeper.close();
    }
    let killed = keeper.kill_tree(KILL_LIMIT).await;
    tracing::debug!(
        killed = killed.most,
        left = killed.left,
        late_us = late.as_micros(),
        took_us = due.elapsed().saturating_sub(late).as_micros(),
        "leasehold killed the command's tree itself"
    );
    killed
}

/// Says (or logs) `note`.
fn say_note(note: Note, keeper: &KeeperLink) {
    match note {
        Note::Started => tracing::debug!(
            process_tree = keeper.containment().describe(),
            keeper = keeper.detachment().describe(),
            "command started under the keeper"
        ),
        Note::LeftBehind { count, leftovers } => left_behind(count, leftovers),
        Note::Refused { pid } => say!(
            "process {pid} of the command refuses leasehold's signals (it runs as another \
             user: a setuid program, allowed by --allow-new-privileges); leasehold cannot \
             stop it and does not release the lease while it runs"
        ),
        Note::DeadlinePassed => say!(
            "local validity ended before the command did; SIGKILL sent to every process of \
             the command"
        ),
        Note::Cancelled { reason, left } => say!(
            "lease {}; sending SIGTERM to every process of the command, SIGKILL within {}",
            reason.map_or("ended".to_owned(), |r| r.to_string()),
            humantime::format_duration(round_ms(left))
        ),
        Note::FoundGone { reason, left } => say!(
            "Redis says the lease is gone ({reason}); SIGKILL within {}",
            humantime::format_duration(round_ms(left))
        ),
        Note::Stuck { pid } => say!(
            "process {pid} of the command still runs {} after SIGKILL (stuck in the kernel)",
            humantime::format_duration(KILL_LIMIT)
        ),
        Note::Forwarding(signal) => {
            tracing::info!(signal = signal.name(), "forwarding a signal to the command");
        }
    }
}

fn left_behind(count: u32, leftovers: Leftovers) {
    match leftovers {
        Leftovers::Stop => say!(
            "the command exited and left {count} process(es) behind; stopping \
             them (SIGTERM, then SIGKILL after --grace) before the lease is released"
        ),
        Leftovers::Wait => say!(
            "the command exited and left {count} process(es) behind; holding \
             the lease until they end (--wait-for-descendants)"
        ),
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
