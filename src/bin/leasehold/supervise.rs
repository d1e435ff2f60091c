//! leasehold's side of a running command: it relays the lease to the keeper (start, every
//! renewal's new deadline, a loss), forwards signals, kills the tree itself when it must be
//! gone, and waits until nothing of the command is left — only then may the lease be
//! released.

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use leasehold::LostReason;
use leasehold::runtime::{CancelReason, LeaseContext, RunOutcome, RuntimeError};

use crate::keeper::{self, Event, KeeperLink, Leftovers, Order, Signal};
use crate::signals::Signals;

/// The lease's work as `run_under_lease` returns it, boxed so that it can be dropped to
/// abandon an acquisition.
pub(crate) type Work<'a> =
    Pin<Box<dyn Future<Output = Result<RunOutcome<()>, RuntimeError>> + Send + 'a>>;

/// How long leasehold keeps killing the command's processes itself — the keeper died, or
/// the instant the tree must be gone came — before it gives up on a process that will not
/// go (one stuck in the kernel, SIGKILL pending).
const KILL_LIMIT: Duration = Duration::from_secs(5);

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

/// How the command's processes are stopped: the command line's choices and the lease's
/// renewal cadence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopping {
    pub(crate) leftovers: Leftovers,
    /// `--grace`: SIGTERM to SIGKILL when the lease became unknown (bounded by validity).
    pub(crate) grace: Option<Duration>,
    /// One renewal period: the longest SIGTERM to SIGKILL once Redis said the lease is
    /// gone (absent, or someone else's), whatever `--grace` says.
    pub(crate) renew_every: Duration,
}

impl Stopping {
    /// The longest SIGTERM may precede SIGKILL for a lease cancelled for `reason`, beside
    /// what is left of local validity: `--grace` while the lease may still be ours
    /// (unknown, unconfirmed), at most one renewal period once Redis said it is gone.
    fn bound(self, reason: Option<CancelReason>) -> Option<Duration> {
        let gone = matches!(
            reason,
            Some(CancelReason::Lost(
                LostReason::Absent | LostReason::NotOwner
            ))
        );
        if gone {
            Some(
                self.grace
                    .map_or(self.renew_every, |g| g.min(self.renew_every)),
            )
        } else {
            self.grace
        }
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
pub(crate) async fn supervise(
    ctx: &mut LeaseContext,
    keeper: &mut KeeperLink,
    signals: &mut Signals,
    stopping: Stopping,
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
    let mut said_deadline = false;
    // Its own handle on the token: `ctx` is borrowed mutably to watch for renewals.
    let cancel = ctx.cancellation_token().clone();
    // leasehold's own SIGKILL of the tree: at local validity's end, brought forward to the
    // end of the SIGTERM-to-SIGKILL time once the lease is cancelled.
    let kill_at = tokio::time::sleep_until(ctx.stop_by());
    tokio::pin!(kill_at);
    loop {
        tokio::select! {
            event = keeper.next_event() => match event {
                Some(Event::Started { .. }) => tracing::debug!(
                    process_tree = keeper.detachment().describe(),
                    "command started under the keeper"
                ),
                Some(Event::SpawnFailed { errno }) => {
                    return CommandEnd::NotStarted(io::Error::from_raw_os_error(errno));
                }
                Some(Event::Exited { status: raw }) => {
                    status = Some(ExitStatus::from_raw(raw));
                    lost_before_exit = lost;
                }
                // Already being stopped for the lost lease: nothing new to say.
                Some(Event::LeftBehind { count }) if !lost => left_behind(count, stopping.leftovers),
                Some(Event::LeftBehind { .. }) => {}
                Some(Event::DeadlinePassed) => {
                    lost = true;
                    deadline_passed(&mut said_deadline);
                }
                Some(Event::Gone) => {
                    return CommandEnd::Gone {
                        status,
                        lost_before_exit: lost_before_exit || (status.is_none() && lost),
                        lost_before_gone: lost,
                    };
                }
                None => {
                    let killed = keeper.kill_tree(KILL_LIMIT).await;
                    return CommandEnd::KeeperDied { killed: killed.most };
                }
            },
            () = &mut kill_at => {
                // Whatever the keeper does — it may be stopped — nothing of the command
                // runs from here on, and the lease is released only after this.
                let late = kill_at.deadline().elapsed();
                keeper.close();
                let killed = keeper.kill_tree(KILL_LIMIT).await;
                // After a cancellation the SIGKILL was announced with the SIGTERM.
                if killed.most > 0 && !stop_sent {
                    deadline_passed(&mut said_deadline);
                }
                tracing::debug!(
                    killed = killed.most,
                    left = killed.left,
                    late_us = late.as_micros(),
                    took_us = (kill_at.deadline().elapsed() - late).as_micros(),
                    "leasehold killed the command's tree itself"
                );
                return CommandEnd::Gone {
                    status,
                    lost_before_exit: lost_before_exit || status.is_none(),
                    lost_before_gone: true,
                };
            }
            () = cancel.cancelled(), if !stop_sent => {
                stop_sent = true;
                lost = true;
                let reason = ctx.cancel_reason();
                let now = tokio::time::Instant::now();
                let mut left = ctx.stop_by().saturating_duration_since(now);
                let bound = stopping.bound(reason);
                if let Some(bound) = bound {
                    left = left.min(bound);
                }
                say!("lease {}; sending SIGTERM to every process of the command, \
                     SIGKILL within {}",
                    reason.map_or("ended".to_owned(), |r| r.to_string()),
                    humantime::format_duration(round_ms(left))
                );
                keeper.send(Order::Stop { within: bound.map(keeper::nanos) }).await;
                kill_at.as_mut().reset(now + left);
            }
            changed = ctx.changed(), if watching => {
                if changed {
                    keeper.deadline(ctx.stop_by()).await;
                    if !stop_sent {
                        kill_at.as_mut().reset(ctx.stop_by());
                    }
                } else {
                    watching = false;
                }
            }
            Some(signal) = signals.recv() => forward(keeper, signal).await,
            outcome = work.as_mut(), if work_done.is_none() => {
                // The lease actor ended before the command did: the lease can no longer be
                // vouched for. Kill the tree here; the keeper does too when its orders end.
                *work_done = Some(outcome);
                keeper.close();
                let killed = keeper.kill_tree(KILL_LIMIT).await;
                if killed.most > 0 {
                    deadline_passed(&mut said_deadline);
                }
                return CommandEnd::Gone {
                    status,
                    lost_before_exit: lost_before_exit || status.is_none(),
                    lost_before_gone: true,
                };
            }
        }
    }
}

/// One line, once, when the tree had to be SIGKILLed because local validity ran out.
fn deadline_passed(said: &mut bool) {
    if !std::mem::replace(said, true) {
        say!(
            "local validity ended before the command did; SIGKILL sent to every process of \
             the command"
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    const RENEW: Duration = Duration::from_millis(333);

    fn stopping(grace: Option<Duration>) -> Stopping {
        Stopping {
            leftovers: Leftovers::Stop,
            grace,
            renew_every: RENEW,
        }
    }

    #[test]
    fn a_lease_redis_says_is_gone_gets_at_most_one_renewal_period_of_grace() {
        let long = Some(Duration::from_secs(20));
        let short = Some(Duration::from_millis(50));
        let gone = [LostReason::Absent, LostReason::NotOwner].map(CancelReason::Lost);
        for reason in gone {
            assert_eq!(stopping(None).bound(Some(reason)), Some(RENEW), "{reason}");
            assert_eq!(stopping(long).bound(Some(reason)), Some(RENEW), "{reason}");
            assert_eq!(stopping(short).bound(Some(reason)), short, "{reason}");
        }
        // The lease may still be ours: --grace governs, validity bounds it (the keeper).
        let unsure = [
            Some(CancelReason::Unknown),
            Some(CancelReason::RenewalUnconfirmed),
            Some(CancelReason::Lost(LostReason::ValidityExpired)),
            None,
        ];
        for reason in unsure {
            assert_eq!(stopping(None).bound(reason), None, "{reason:?}");
            assert_eq!(stopping(long).bound(reason), long, "{reason:?}");
        }
    }
}
