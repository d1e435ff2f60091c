//! leasehold's decisions while the command runs, sans I/O: `(input, now) → actions`.
//!
//! Everything [`super::supervise`] decides — when its own SIGKILL of the tree is due, what
//! the keeper is told on a cancellation, a renewal or Redis's answer about an unknown lease,
//! when Redis is asked again, what is said once, and how the run ended — is here, as a pure
//! function of what happened and the monotonic time; the shell waits for the inputs,
//! performs the actions and feeds the result of its own kill back. Like the keeper's
//! machine (`keeper/machine.rs`), it is tested as a table.

use std::process::ExitStatus;
use std::time::Duration;

use leasehold::LostReason;
use leasehold::runtime::CancelReason;
use tokio::time::Instant;

use super::CommandEnd;
use crate::keeper::{self, Event, Killed, Leftovers, Order, Signal};

/// How the command's processes are stopped: the command line's choices and the lease's
/// renewal cadence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopping {
    pub(crate) leftovers: Leftovers,
    /// `--grace`: SIGTERM to SIGKILL when the lease became unknown (bounded by validity).
    pub(crate) grace: Option<Duration>,
    /// One renewal period: the longest SIGTERM to SIGKILL once Redis said the lease is
    /// gone (absent, or someone else's), whatever `--grace` says; and how often an unknown
    /// lease is asked about again.
    pub(crate) renew_every: Duration,
}

impl Stopping {
    /// The longest SIGTERM may precede SIGKILL for a lease cancelled for `reason`, beside
    /// what is left of local validity: `--grace` while the lease may still be ours
    /// (unknown, unconfirmed), at most one renewal period once Redis said it is gone.
    pub(crate) fn bound(self, reason: Option<CancelReason>) -> Option<Duration> {
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

/// Something that happened, as leasehold learns it while the command runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input {
    /// The keeper reported this.
    Event(Event),
    /// The keeper's events pipe ended without `Gone`; `fuse_burnt`: in a namespace, after
    /// the last deadline sent had passed (the fuse's kernel timer ended it).
    KeeperGone { fuse_burnt: bool },
    /// The instant of leasehold's own SIGKILL ([`Supervision::kill_at`]) came.
    KillDue,
    /// The lease was cancelled (`reason`); local validity ends at `stop_by`.
    Cancelled {
        reason: Option<CancelReason>,
        stop_by: Instant,
    },
    /// The instant to ask Redis about an unknown lease ([`Supervision::recheck_at`]) came.
    RecheckDue,
    /// Redis answered: the lease is gone (why), or may still be ours (`None`).
    Answered {
        gone: Option<LostReason>,
        stop_by: Instant,
    },
    /// A renewal moved local validity's end.
    Renewed { stop_by: Instant },
    /// No renewal will come any more (the lease's context ended).
    RenewalsEnded,
    /// leasehold received this signal.
    Signal(Signal),
    /// The lease's work ended before the command did: the lease actor is gone.
    WorkEnded,
    /// leasehold's own kill of the tree ([`Action::KillTree`]) found this.
    Killed(Killed),
}

/// What leasehold must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Say (or log) this.
    Note(Note),
    /// Tell the keeper.
    Order(Order),
    /// Tell the fuse, then the keeper, that local validity now ends at this instant.
    Deadline(Instant),
    /// Kill the tree here, whatever the keeper does (closing the orders pipe first when
    /// `close`), and feed what was found back as [`Input::Killed`].
    KillTree { close: bool },
    /// Ask Redis whether the lease is gone; the answer comes as [`Input::Answered`].
    Ask,
    /// Supervision is over: nothing of the command runs (or nothing can stop it).
    End(CommandEnd),
}

/// What is said (or logged) about the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    /// The keeper started the command (logged with where its tree is held).
    Started,
    /// The command exited leaving this many processes behind.
    LeftBehind { count: u32, leftovers: Leftovers },
    /// A process refused leasehold's signals (said once per process).
    Refused { pid: u32 },
    /// Local validity ended before the command did (said once).
    DeadlinePassed,
    /// The lease was cancelled: SIGTERM now, SIGKILL within `left`.
    Cancelled {
        reason: Option<CancelReason>,
        left: Duration,
    },
    /// Redis says an unknown lease is gone: SIGKILL within `left`.
    FoundGone { reason: LostReason, left: Duration },
    /// A process outlived leasehold's SIGKILL (stuck in the kernel).
    Stuck { pid: u32 },
    /// A signal is passed on to the command.
    Forwarding(Signal),
}

/// Why leasehold is killing the tree itself: what its end means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Killing {
    /// Its SIGKILL instant came (validity's end, or the end of a cancellation's time).
    Due,
    /// The lease's work ended first.
    WorkEnded,
    /// The keeper's pipe ended after the fuse's timer: the kernel ended the namespace.
    FuseBurnt,
    /// The keeper died.
    KeeperDied,
}

/// What leasehold knows of the command while it supervises it.
#[derive(Debug)]
pub(crate) struct Supervision {
    stopping: Stopping,
    /// The command's own exit status, once the keeper reported it.
    status: Option<ExitStatus>,
    /// The lease can no longer be vouched for.
    lost: bool,
    /// ... and it could not before the command exited.
    lost_before_exit: bool,
    /// The keeper was told to stop the tree.
    stop_sent: bool,
    said_deadline: bool,
    /// A process of the command refused a signal (said once, when the keeper reported it).
    refused: Option<u32>,
    /// leasehold's own SIGKILL of the tree: local validity's end, brought forward to the
    /// end of the SIGTERM-to-SIGKILL time once the lease is cancelled.
    kill_at: Instant,
    /// When to ask Redis again about a lease cancelled as unknown or unconfirmed; `None`
    /// while no question is due (the lease is not unsure, or a question is in flight).
    recheck_at: Option<Instant>,
    /// Renewals may still come.
    watching: bool,
    /// leasehold is killing the tree itself, and why.
    killing: Option<Killing>,
}

impl Supervision {
    /// Supervision of a command just started under a lease whose validity ends at
    /// `stop_by`.
    pub(crate) fn new(stopping: Stopping, stop_by: Instant) -> Supervision {
        Supervision {
            stopping,
            status: None,
            lost: false,
            lost_before_exit: false,
            stop_sent: false,
            said_deadline: false,
            refused: None,
            kill_at: stop_by,
            recheck_at: None,
            watching: true,
            killing: None,
        }
    }

    /// The instant of leasehold's own SIGKILL of the tree.
    pub(crate) fn kill_at(&self) -> Instant {
        self.kill_at
    }

    /// When to ask Redis about an unknown lease, if a question is due.
    pub(crate) fn recheck_at(&self) -> Option<Instant> {
        self.recheck_at
    }

    /// Whether a cancellation is still news (the keeper was not told to stop yet).
    pub(crate) fn listens_for_cancel(&self) -> bool {
        !self.stop_sent
    }

    /// Whether renewals may still come.
    pub(crate) fn watching(&self) -> bool {
        self.watching
    }

    /// What `input`, at `now`, makes leasehold do.
    pub(crate) fn handle(&mut self, input: Input, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        match input {
            Input::Event(event) => self.on_event(event, &mut actions),
            Input::KeeperGone { fuse_burnt } => {
                self.killing = Some(if fuse_burnt {
                    Killing::FuseBurnt
                } else {
                    Killing::KeeperDied
                });
                actions.push(Action::KillTree { close: false });
            }
            Input::KillDue => {
                self.killing = Some(Killing::Due);
                actions.push(Action::KillTree { close: true });
            }
            Input::WorkEnded => {
                self.killing = Some(Killing::WorkEnded);
                actions.push(Action::KillTree { close: true });
            }
            Input::Killed(killed) => self.on_killed(killed, &mut actions),
            Input::Cancelled { reason, stop_by } => {
                self.on_cancel(reason, stop_by, now, &mut actions);
            }
            Input::RecheckDue => {
                self.recheck_at = None;
                actions.push(Action::Ask);
            }
            Input::Answered { gone, stop_by } => match gone {
                Some(reason) => self.on_found_gone(reason, stop_by, now, &mut actions),
                None => self.recheck_at = Some(now + self.stopping.renew_every),
            },
            Input::Renewed { stop_by } => {
                actions.push(Action::Deadline(stop_by));
                if !self.stop_sent {
                    self.kill_at = stop_by;
                }
            }
            Input::RenewalsEnded => self.watching = false,
            Input::Signal(signal) => {
                actions.push(Action::Note(Note::Forwarding(signal)));
                actions.push(Action::Order(Order::Forward(signal)));
            }
        }
        actions
    }

    fn on_event(&mut self, event: Event, actions: &mut Vec<Action>) {
        match event {
            Event::Started { .. } => actions.push(Action::Note(Note::Started)),
            Event::SpawnFailed { errno } => {
                actions.push(Action::End(CommandEnd::NotStarted { errno }))
            }
            Event::Exited { status } => {
                use std::os::unix::process::ExitStatusExt as _;
                self.status = Some(ExitStatus::from_raw(status));
                self.lost_before_exit = self.lost;
            }
            // Already being stopped for the lost lease: nothing new to say.
            Event::LeftBehind { count } if !self.lost => {
                actions.push(Action::Note(Note::LeftBehind {
                    count,
                    leftovers: self.stopping.leftovers,
                }));
            }
            Event::LeftBehind { .. } => {}
            Event::Unkillable { pid } => self.refused_by(pid, actions),
            Event::DeadlinePassed => {
                self.lost = true;
                self.deadline_passed(actions);
            }
            Event::Gone => actions.push(Action::End(CommandEnd::Gone {
                status: self.status,
                lost_before_exit: self.lost_before_exit || (self.status.is_none() && self.lost),
                lost_before_gone: self.lost,
                refused: self.refused,
            })),
        }
    }

    /// The lease was cancelled: SIGTERM to the tree now (through the keeper), SIGKILL at
    /// the end of its bound, and Redis asked at once if the lease may still be ours.
    fn on_cancel(
        &mut self,
        reason: Option<CancelReason>,
        stop_by: Instant,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        self.stop_sent = true;
        self.lost = true;
        let bound = self.stopping.bound(reason);
        let unsure = matches!(
            reason,
            Some(CancelReason::Unknown | CancelReason::RenewalUnconfirmed)
        );
        self.recheck_at = unsure.then_some(now);
        let (at, left) = kill_instant(stop_by, bound, now);
        actions.push(Action::Note(Note::Cancelled { reason, left }));
        actions.push(Action::Order(Order::Stop {
            within: bound.map(keeper::nanos),
        }));
        self.kill_at = at;
    }

    /// Redis said a lease that had become unknown is gone: SIGKILL within one renewal
    /// period (or `--grace`, if shorter).
    fn on_found_gone(
        &mut self,
        reason: LostReason,
        stop_by: Instant,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        self.recheck_at = None;
        let bound = self.stopping.bound(Some(CancelReason::Lost(reason)));
        let (at, left) = kill_instant(stop_by, bound, now);
        actions.push(Action::Note(Note::FoundGone { reason, left }));
        actions.push(Action::Order(Order::Stop {
            within: bound.map(keeper::nanos),
        }));
        self.kill_at = self.kill_at.min(at);
    }

    /// leasehold's own kill found `killed`: supervision ends.
    fn on_killed(&mut self, killed: Killed, actions: &mut Vec<Action>) {
        let end = match self.killing.take() {
            // The kernel ended the namespace at local validity's end, leasehold being too
            // late to (it was stopped or starved).
            Some(Killing::FuseBurnt) => {
                self.lost = true;
                self.deadline_passed(actions);
                self.gone_after_kill()
            }
            Some(Killing::KeeperDied) => {
                self.survived(killed, actions)
                    .unwrap_or(CommandEnd::KeeperDied {
                        killed: killed.most,
                    })
            }
            Some(Killing::Due | Killing::WorkEnded) => {
                // After a cancellation the SIGKILL was announced with the SIGTERM.
                if killed.most > 0 && !self.stop_sent {
                    self.deadline_passed(actions);
                }
                self.survived(killed, actions)
                    .unwrap_or_else(|| self.gone_after_kill())
            }
            // No kill was asked for: nothing to conclude.
            None => return,
        };
        actions.push(Action::End(end));
    }

    /// A process of the command still runs after leasehold's kill: the end of a run whose
    /// lease must not be released.
    fn survived(&mut self, killed: Killed, actions: &mut Vec<Action>) -> Option<CommandEnd> {
        let survivor = killed.survivor.filter(|_| killed.left > 0)?;
        if survivor.refused {
            self.refused_by(survivor.pid, actions);
        } else {
            actions.push(Action::Note(Note::Stuck { pid: survivor.pid }));
        }
        Some(CommandEnd::Survived { pid: survivor.pid })
    }

    /// One line, once per process, when a process refused leasehold's signals.
    fn refused_by(&mut self, pid: u32, actions: &mut Vec<Action>) {
        if self.refused.replace(pid) != Some(pid) {
            actions.push(Action::Note(Note::Refused { pid }));
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
    fn deadline_passed(&mut self, actions: &mut Vec<Action>) {
        if !std::mem::replace(&mut self.said_deadline, true) {
            actions.push(Action::Note(Note::DeadlinePassed));
        }
    }
}

/// When SIGKILL follows a SIGTERM sent at `now`: at the end of `bound`, never past
/// `stop_by` (local validity's end); and how long that is from `now`.
fn kill_instant(stop_by: Instant, bound: Option<Duration>, now: Instant) -> (Instant, Duration) {
    let mut left = stop_by.saturating_duration_since(now);
    if let Some(bound) = bound {
        left = left.min(bound);
    }
    (now + left, left)
}
