//! The keeper's decisions, sans I/O: `(input, now) → actions`.
//!
//! The keeper is the process between leasehold and the command (see [`super`]). Everything
//! it decides — when to start the command, whom to signal, when SIGTERM turns into SIGKILL,
//! when the process tree is gone — is here, as a pure function of what happened and the
//! monotonic time; [`super::process`] does the system calls and feeds the results back.

pub(crate) use super::wire::Nanos;
use super::wire::{Event, Signal};

/// How often SIGKILL is sent again while the tree is being killed: a process that forked
/// between the walk of the tree and the signal is caught by the next round.
pub(crate) const REKILL_EVERY: Nanos = 20_000_000;

/// What happens to processes the command left behind when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leftovers {
    /// SIGTERM them, then SIGKILL at the end of the grace period (the default).
    Stop,
    /// Keep the lease until they end on their own (`--wait-for-descendants`).
    Wait,
}

/// The command line's choices, fixed for the keeper's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Time between SIGTERM and SIGKILL when stopping the tree; `None`: until the deadline.
    pub(crate) grace: Option<Nanos>,
    /// After a forwarded terminating signal, SIGKILL the tree this much later.
    pub(crate) kill_after: Option<Nanos>,
    pub(crate) leftovers: Leftovers,
}

/// Something that happened, as the keeper learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// leasehold: start the command with this fencing token; the tree must be gone by
    /// `deadline` (the lease's local validity end).
    Start { token: u64, deadline: Nanos },
    /// leasehold: a renewal moved the local validity end.
    Deadline(Nanos),
    /// leasehold received this signal: pass it on.
    Forward(Signal),
    /// leasehold: the lease was lost or became unknown; stop everything — SIGKILL at the
    /// end of the grace period, never later than `within` from now (a lease Redis says is
    /// gone is not waited out for a long `--grace`), nor than the deadline. Sent again with
    /// `within` when Redis says an unknown lease is gone.
    Stop { within: Option<Nanos> },
    /// leasehold's end of the control pipe closed: it exited or was killed.
    LeaseholdGone,
    /// The command was started.
    Spawned { pid: u32 },
    /// The command could not be started (`errno`).
    SpawnFailed { errno: i32 },
    /// The command itself exited (raw wait status); `left_behind` descendants still live.
    MainExited { status: i32, left_behind: u32 },
    /// The keeper has no descendant left.
    TreeEmpty,
    /// Time passed (the wake-up [`Keeper::poll_timeout`] asked for, or any other).
    Tick,
}

/// What the keeper must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Start the command with `LEASEHOLD_FENCING_TOKEN=token`.
    Spawn { token: u64 },
    /// Send the signal to the command's process group.
    SignalGroup(Signal),
    /// Send the signal to every descendant (and the command's process group).
    SignalTree(Signal),
    /// Tell leasehold.
    Report(Event),
    /// The keeper's work is over.
    Exit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for leasehold to hold the lease.
    Idle,
    /// The command runs.
    Running,
    /// The command exited; processes it left behind may still run.
    MainExited,
    /// Nothing of the command is left (or it never started).
    Done,
}

/// The keeper's state.
#[derive(Debug)]
pub(crate) struct Keeper {
    policy: Policy,
    phase: Phase,
    /// Local validity end: nothing of the command may run past it.
    deadline: Option<Nanos>,
    /// SIGTERM went to the tree; SIGKILL follows at this instant.
    kill_at: Option<Nanos>,
    /// A forwarded terminating signal's `--kill-after` instant.
    kill_after_at: Option<Nanos>,
    /// SIGKILL was sent; it is sent again at this instant until the tree is empty.
    rekill_at: Option<Nanos>,
}

impl Keeper {
    pub(crate) fn new(policy: Policy) -> Keeper {
        Keeper {
            policy,
            phase: Phase::Idle,
            deadline: None,
            kill_at: None,
            kill_after_at: None,
            rekill_at: None,
        }
    }

    /// Whether the command (or anything it started) may still be running.
    fn tree_may_live(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::MainExited)
    }

    fn killing(&self) -> bool {
        self.rekill_at.is_some()
    }

    /// When the keeper must be woken with [`Input::Tick`] even if nothing else happens.
    pub(crate) fn poll_timeout(&self) -> Option<Nanos> {
        if !self.tree_may_live() {
            return None;
        }
        if let Some(at) = self.rekill_at {
            return Some(at);
        }
        [self.deadline, self.kill_at, self.kill_after_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The decisions `input` calls for at `now`.
    pub(crate) fn handle_input(&mut self, input: Input, now: Nanos) -> Vec<Action> {
        let mut actions = Vec::new();
        match (input, self.phase) {
            (Input::Start { token, deadline }, Phase::Idle) => {
                self.deadline = Some(deadline);
                if deadline <= now {
                    // Validity already over: the command must not start at all.
                    self.phase = Phase::Done;
                    actions.extend([
                        Action::Report(Event::DeadlinePassed),
                        Action::Report(Event::Gone),
                        Action::Exit,
                    ]);
                } else {
                    actions.push(Action::Spawn { token });
                }
            }
            (Input::Spawned { pid }, Phase::Idle) => {
                self.phase = Phase::Running;
                actions.push(Action::Report(Event::Started { pid }));
            }
            (Input::SpawnFailed { errno }, Phase::Idle) => {
                self.phase = Phase::Done;
                actions.extend([Action::Report(Event::SpawnFailed { errno }), Action::Exit]);
            }
            (Input::LeaseholdGone, Phase::Idle) => {
                self.phase = Phase::Done;
                actions.push(Action::Exit);
            }
            (Input::LeaseholdGone, Phase::Running | Phase::MainExited) => {
                self.kill(now, &mut actions);
            }
            (Input::Deadline(at), Phase::Running | Phase::MainExited) => {
                self.deadline = Some(at);
                self.kill_at = self.kill_at.map(|k| k.min(at));
            }
            (Input::Forward(signal), Phase::Running | Phase::MainExited) => {
                actions.push(if self.phase == Phase::Running {
                    Action::SignalGroup(signal)
                } else {
                    Action::SignalTree(signal)
                });
                if signal.is_terminating()
                    && let Some(after) = self.policy.kill_after
                {
                    self.kill_after_at.get_or_insert(now.saturating_add(after));
                }
            }
            (Input::Stop { within }, Phase::Running | Phase::MainExited) => {
                self.stop(now, within, &mut actions);
            }
            (
                Input::MainExited {
                    status,
                    left_behind,
                },
                Phase::Running,
            ) => {
                self.phase = Phase::MainExited;
                actions.push(Action::Report(Event::Exited { status }));
                if left_behind > 0 {
                    actions.push(Action::Report(Event::LeftBehind { count: left_behind }));
                    if self.policy.leftovers == Leftovers::Stop {
                        self.stop(now, None, &mut actions);
                    }
                }
            }
            (Input::TreeEmpty, Phase::MainExited) => {
                self.phase = Phase::Done;
                actions.extend([Action::Report(Event::Gone), Action::Exit]);
            }
            (Input::Tick, Phase::Running | Phase::MainExited) => self.tick(now, &mut actions),
            // Anything else changes nothing: a message for a phase that is over (a renewal
            // after the command ended, a second Stop), or an input that cannot happen.
            _ => {}
        }
        actions
    }

    /// SIGTERM to the tree, SIGKILL at the end of the grace period, `within` or the
    /// deadline, whichever is first. SIGTERM once only; a later stop (Redis said the lease
    /// is gone after it had become unknown) can only bring the SIGKILL forward.
    fn stop(&mut self, now: Nanos, within: Option<Nanos>, actions: &mut Vec<Action>) {
        if self.killing() {
            return;
        }
        if let Some(kill_at) = &mut self.kill_at {
            if let Some(within) = within {
                *kill_at = (*kill_at).min(now.saturating_add(within));
            }
            return;
        }
        let at = [self.policy.grace, within]
            .into_iter()
            .flatten()
            .map(|g| now.saturating_add(g))
            .chain(self.deadline)
            .min()
            .unwrap_or(now);
        self.kill_at = Some(at);
        actions.push(Action::SignalTree(Signal::Term));
    }

    /// SIGKILL to the tree, now and every [`REKILL_EVERY`] until it is empty.
    fn kill(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        self.rekill_at = Some(now.saturating_add(REKILL_EVERY));
        actions.push(Action::SignalTree(Signal::Kill));
    }

    fn tick(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        if let Some(at) = self.rekill_at {
            if now >= at {
                self.kill(now, actions);
            }
            return;
        }
        let due = |at: Option<Nanos>| at.is_some_and(|at| now >= at);
        // A planned SIGKILL (end of grace, which never passes the deadline, or kill-after)
        // comes first: only a deadline nobody planned for is reported.
        if due(self.kill_at) || due(self.kill_after_at) {
            self.kill(now, actions);
        } else if due(self.deadline) {
            actions.push(Action::Report(Event::DeadlinePassed));
            self.kill(now, actions);
        }
    }
}
