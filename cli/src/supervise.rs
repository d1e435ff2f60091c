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
use tokio::time::Instant;

use crate::keeper::{self, Event, KeeperLink, Leftovers, Order, Signal, Unarmed};
use crate::recheck::Recheck;
use crate::signals::Signals;

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
        /// A process of the command refused leasehold's signals (and ended on its own).
        refused: Option<u32>,
    },
    /// It could not be started.
    NotStarted(io::Error),
    /// It was not started: the fuse's timer was not armed.
    Unarmed(Unarmed),
    /// The keeper died; the processes it left were killed here.
    KeeperDied { killed: usize },
    /// A process of the command still runs after leasehold's SIGKILL — it refused it (it
    /// gained privileges) or outlived [`KILL_LIMIT`]: nothing stopped it, and the lease
    /// must not be released.
    Survived { pid: u32 },
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

/// How often leasehold asks Redis whether a lease that became unknown is still its own (the
/// first time at once): as often as it renewed it.
fn recheck_every(stopping: Stopping) -> Duration {
    stopping.renew_every
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
    let mut run = Supervision::new(stopping);
    let mut watching = true;
    // Its own handle on the token: `ctx` is borrowed mutably to watch for renewals.
    let cancel = ctx.cancellation_token().clone();
    // leasehold's own SIGKILL of the tree: at local validity's end, brought forward to the
    // end of the SIGTERM-to-SIGKILL time once the lease is cancelled.
    let kill_at = tokio::time::sleep_until(ctx.stop_by());
    tokio::pin!(kill_at);
    // The next question to Redis about an unknown lease, and the one in flight.
    let recheck_at = tokio::time::sleep_until(ctx.stop_by());
    tokio::pin!(recheck_at);
    let mut asking: Asking<'_> = None;
    loop {
        tokio::select! {
            event = keeper.next_event() => {
                if let Some(end) = run.on_event(event, keeper).await {
                    return (end, WorkEnd::Running(work));
                }
            }
            () = &mut kill_at => {
                let end = run.kill(keeper, kill_at.deadline()).await;
                return (end, WorkEnd::Running(work));
            }
            () = cancel.cancelled(), if !run.stop_sent => {
                let at = run.on_cancel(ctx, keeper).await;
                kill_at.as_mut().reset(at);
                recheck_at.as_mut().reset(Instant::now());
            }
            () = &mut recheck_at, if run.unsure && asking.is_none() => {
                asking = Some(Box::pin(recheck.gone()));
            }
            gone = answer(&mut asking), if asking.is_some() => {
                asking = None;
                match gone {
                    Some(reason) => {
                        let at = run.on_found_gone(reason, ctx.stop_by(), keeper).await;
                        if at < kill_at.deadline() {
                            kill_at.as_mut().reset(at);
                        }
                    }
                    None => recheck_at.as_mut().reset(Instant::now() + recheck_every(stopping)),
                }
            }
            changed = ctx.changed(), if watching => {
                if changed {
                    keeper.deadline(ctx.stop_by()).await;
                    if !run.stop_sent {
                        kill_at.as_mut().reset(ctx.stop_by());
                    }
                } else {
                    watching = false;
                }
            }
            Some(signal) = signals.recv() => forward(keeper, signal).await,
            outcome = work.as_mut() => {
                // The lease actor ended before the command did: the lease can no longer be
                // vouched for. Kill the tree here; the keeper does too when its orders end.
                let end = run.kill(keeper, Instant::now()).await;
                return (end, WorkEnd::Ended(outcome));
            }
        }
    }
}

/// What leasehold knows of the command while it supervises it.
struct Supervision {
    stopping: Stopping,
    /// The command's own exit status, once the keeper reported it.
    status: Option<ExitStatus>,
    /// The lease can no longer be vouched for.
    lost: bool,
    /// ... and it could not before the command exited.
    lost_before_exit: bool,
    /// The keeper was told to stop the tree.
    stop_sent: bool,
    /// The lease was cancelled as unknown or unconfirmed: Redis is asked again.
    unsure: bool,
    said_deadline: bool,
    /// A process of the command refused a signal (said once, when the keeper reported it).
    refused: Option<u32>,
}

impl Supervision {
    fn new(stopping: Stopping) -> Supervision {
        Supervision {
            stopping,
            status: None,
            lost: false,
            lost_before_exit: false,
            stop_sent: false,
            unsure: false,
            said_deadline: false,
            refused: None,
        }
    }

    /// An event from the keeper; the end of the supervision once nothing is left.
    async fn on_event(
        &mut self,
        event: Option<Event>,
        keeper: &mut KeeperLink,
    ) -> Option<CommandEnd> {
        match event {
            Some(Event::Started { .. }) => tracing::debug!(
                process_tree = keeper.containment().describe(),
                keeper = keeper.detachment().describe(),
                "command started under the keeper"
            ),
            Some(Event::SpawnFailed { errno }) => {
                return Some(CommandEnd::NotStarted(io::Error::from_raw_os_error(errno)));
            }
            Some(Event::Exited { status: raw }) => {
                self.status = Some(ExitStatus::from_raw(raw));
                self.lost_before_exit = self.lost;
            }
            // Already being stopped for the lost lease: nothing new to say.
            Some(Event::LeftBehind { count }) if !self.lost => {
                left_behind(count, self.stopping.leftovers);
            }
            Some(Event::LeftBehind { .. }) => {}
            Some(Event::Unkillable { pid }) => self.refused_by(pid),
            Some(Event::DeadlinePassed) => {
                self.lost = true;
                self.deadline_passed();
            }
            Some(Event::Gone) => {
                return Some(CommandEnd::Gone {
                    status: self.status,
                    lost_before_exit: self.lost_before_exit || (self.status.is_none() && self.lost),
                    lost_before_gone: self.lost,
                    refused: self.refused,
                });
            }
            // The fuse's timer: the kernel ended the namespace at local validity's end,
            // leasehold being too late to (it was stopped or starved).
            None if keeper.fuse_burnt() => {
                keeper.kill_tree(KILL_LIMIT).await;
                self.lost = true;
                self.deadline_passed();
                return Some(self.gone_after_kill());
            }
            None => {
                let killed = keeper.kill_tree(KILL_LIMIT).await;
                if let Some(end) = self.survived(killed) {
                    return Some(end);
                }
                return Some(CommandEnd::KeeperDied {
                    killed: killed.most,
                });
            }
        }
        None
    }

    /// The lease was cancelled: SIGTERM to the tree now (through the keeper), SIGKILL at
    /// the instant returned.
    async fn on_cancel(&mut self, ctx: &LeaseContext, keeper: &mut KeeperLink) -> Instant {
        self.stop_sent = true;
        self.lost = true;
        let reason = ctx.cancel_reason();
        let bound = self.stopping.bound(reason);
        self.unsure = matches!(
            reason,
            Some(CancelReason::Unknown | CancelReason::RenewalUnconfirmed)
        );
        let (at, left) = kill_instant(ctx.stop_by(), bound);
        say!(
            "lease {}; sending SIGTERM to every process of the command, SIGKILL within {}",
            reason.map_or("ended".to_owned(), |r| r.to_string()),
            humantime::format_duration(round_ms(left))
        );
        keeper
            .send(Order::Stop {
                within: bound.map(keeper::nanos),
            })
            .await;
        at
    }

    /// Redis said a lease that had become unknown is gone: SIGKILL within one renewal
    /// period (or `--grace`, if shorter), at the instant returned.
    async fn on_found_gone(
        &mut self,
        reason: LostReason,
        stop_by: Instant,
        keeper: &mut KeeperLink,
    ) -> Instant {
        self.unsure = false;
        let bound = self.stopping.bound(Some(CancelReason::Lost(reason)));
        let (at, left) = kill_instant(stop_by, bound);
        say!(
            "Redis says the lease is gone ({reason}); SIGKILL within {}",
            humantime::format_duration(round_ms(left))
        );
        keeper
            .send(Order::Stop {
                within: bound.map(keeper::nanos),
            })
            .await;
        at
    }

    /// Kills the tree here, whatever the keeper does — it may be stopped — and ends the
    /// supervision once nothing of the command runs: the lease is released after this.
    async fn kill(&mut self, keeper: &mut KeeperLink, due: Instant) -> CommandEnd {
        let late = due.elapsed();
        keeper.close();
        let killed = keeper.kill_tree(KILL_LIMIT).await;
        // After a cancellation the SIGKILL was announced with the SIGTERM.
        if killed.most > 0 && !self.stop_sent {
            self.deadline_passed();
        }
        tracing::debug!(
            killed = killed.most,
            left = killed.left,
            late_us = late.as_micros(),
            took_us = due.elapsed().saturating_sub(late).as_micros(),
            "leasehold killed the command's tree itself"
        );
        self.survived(killed)
            .unwrap_or_else(|| self.gone_after_kill())
    }

    /// A process of the command still runs after leasehold's kill: the end of a run whose
    /// lease must not be released.
    fn survived(&mut self, killed: keeper::Killed) -> Option<CommandEnd> {
        let survivor = killed.survivor.filter(|_| killed.left > 0)?;
        if survivor.refused {
            self.refused_by(survivor.pid);
        } else {
            say!(
                "process {} of the command still runs {} after SIGKILL (stuck in the kernel)",
                survivor.pid,
                humantime::format_duration(KILL_LIMIT)
            );
        }
        Some(CommandEnd::Survived { pid: survivor.pid })
    }

    /// One line, once per process, when a process refused leasehold's signals.
    fn refused_by(&mut self, pid: u32) {
        if self.refused.replace(pid) != Some(pid) {
            say!(
                "process {pid} of the command refuses leasehold's signals (it runs as \
                 another user: a setuid program, allowed by --allow-new-privileges); \
                 leasehold cannot stop it and does not release the lease while it runs"
            );
        }
    }

    /// The end once the tree was killed because the lease could no longer be vouched for.
    fn gone_after_kill(&self) -> CommandEnd {
        CommandEnd::Gone {
            status: self.status,
            lost_before_exit: self.lost_before_exit || self.status.is_none(),
            lost_before_gone: true,
            refused: self.refused,
        }
    }

    /// One line, once, when the tree had to be SIGKILLed because local validity ran out.
    fn deadline_passed(&mut self) {
        if !std::mem::replace(&mut self.said_deadline, true) {
            say!(
                "local validity ended before the command did; SIGKILL sent to every process \
                 of the command"
            );
        }
    }
}

/// When SIGKILL follows a SIGTERM sent now: at the end of `bound`, never past `stop_by`
/// (local validity's end); and how long that is from now.
fn kill_instant(stop_by: Instant, bound: Option<Duration>) -> (Instant, Duration) {
    let now = Instant::now();
    let mut left = stop_by.saturating_duration_since(now);
    if let Some(bound) = bound {
        left = left.min(bound);
    }
    (now + left, left)
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
