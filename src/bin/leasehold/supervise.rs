//! leasehold's side of a running command: it relays the lease to the keeper (start, every
//! renewal's new deadline, a loss), forwards signals, and waits until nothing of the
//! command is left — only then may the lease be released.

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use leasehold::runtime::{LeaseContext, RunOutcome, RuntimeError};

use crate::keeper::{Event, KeeperLink, Leftovers, Order, Signal};
use crate::signals::Signals;

/// The lease's work as `run_under_lease` returns it, boxed so that it can be dropped to
/// abandon an acquisition.
pub(crate) type Work<'a> =
    Pin<Box<dyn Future<Output = Result<RunOutcome<()>, RuntimeError>> + Send + 'a>>;

/// How long leasehold keeps killing orphans if the keeper itself died.
const ORPHAN_KILL_LIMIT: Duration = Duration::from_secs(5);

/// How the command ended.
#[derive(Debug)]
pub(crate) enum CommandEnd {
    /// Nothing of it is left.
    Gone {
        /// The command's own exit status (`None`: the keeper never reported it).
        status: Option<ExitStatus>,
        /// The lease could no longer be vouched for before the command exited.
        lost_before_exit: bool,
        /// ... or while processes it left behind still ran.
        lost_before_gone: bool,
    },
    /// It could not be started.
    NotStarted(io::Error),
    /// The keeper died; the processes it left were killed here.
    KeeperDied { killed: usize },
}

/// Runs the command under `ctx` until nothing of it is left. `work` is the lease's
/// `run_under_lease` future: if it ends first (the lease actor stopped the work at the end
/// of local validity), the keeper is told to kill everything.
pub(crate) async fn supervise(
    ctx: &mut LeaseContext,
    keeper: &mut KeeperLink,
    signals: &mut Signals,
    leftovers: Leftovers,
    grace: Option<Duration>,
    work: &mut Work<'_>,
    work_done: &mut Option<Result<RunOutcome<()>, RuntimeError>>,
) -> CommandEnd {
    keeper
        .start(ctx.token().get(), ctx.slot(), ctx.stop_by())
        .await;
    let mut status = None;
    let mut lost = false;
    let mut lost_before_exit = false;
    let mut stop_sent = false;
    let mut watching = true;
    // Its own handle on the token: `ctx` is borrowed mutably to watch for renewals.
    let cancel = ctx.cancellation_token().clone();
    loop {
        tokio::select! {
            event = keeper.next_event() => match event {
                Some(Event::Started { .. }) => {}
                Some(Event::SpawnFailed { errno }) => {
                    return CommandEnd::NotStarted(io::Error::from_raw_os_error(errno));
                }
                Some(Event::Exited { status: raw }) => {
                    status = Some(ExitStatus::from_raw(raw));
                    lost_before_exit = lost;
                }
                // Already being stopped for the lost lease: nothing new to say.
                Some(Event::LeftBehind { count }) if !lost => left_behind(count, leftovers),
                Some(Event::LeftBehind { .. }) => {}
                Some(Event::DeadlinePassed) => {
                    lost = true;
                    say!("local validity ended before the command did; \
                         SIGKILL sent to every process of the command"
                    );
                }
                Some(Event::Gone) => {
                    return CommandEnd::Gone {
                        status,
                        lost_before_exit: lost_before_exit || (status.is_none() && lost),
                        lost_before_gone: lost,
                    };
                }
                None => {
                    let killed = keeper.kill_tree(ORPHAN_KILL_LIMIT).await;
                    return CommandEnd::KeeperDied { killed };
                }
            },
            () = cancel.cancelled(), if !stop_sent => {
                stop_sent = true;
                lost = true;
                let mut left = ctx.stop_by().saturating_duration_since(tokio::time::Instant::now());
                if let Some(grace) = grace {
                    left = left.min(grace);
                }
                say!("lease {}; sending SIGTERM to every process of the command, \
                     SIGKILL within {}",
                    ctx.cancel_reason().map_or("ended".to_owned(), |r| r.to_string()),
                    humantime::format_duration(round_ms(left))
                );
                keeper.send(Order::Stop).await;
            }
            changed = ctx.changed(), if watching => {
                if changed {
                    keeper.deadline(ctx.stop_by()).await;
                } else {
                    watching = false;
                }
            }
            Some(signal) = signals.recv() => forward(keeper, signal).await,
            outcome = work.as_mut(), if work_done.is_none() => {
                // The lease actor ended the work: local validity is over. The keeper kills
                // the tree when its orders end (it did at its own deadline already, unless
                // it was stopped); leasehold kills what it finds too.
                *work_done = Some(outcome);
                lost = true;
                keeper.close();
                keeper.kill_tree(Duration::ZERO).await;
            }
        }
    }
}

async fn forward(keeper: &mut KeeperLink, signal: Signal) {
    tracing::info!(signal = signal.name(), "forwarding a signal to the command");
    keeper.send(Order::Forward(signal)).await;
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
