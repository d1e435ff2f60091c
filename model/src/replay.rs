//! What a step sends to the server and what the model answers, for replaying the model's
//! traces against leasehold's backends (`tests/conformance/`): the same dispatch the
//! model's own steps run (`step.rs`), on a copy of the server's data.
//!
//! The line's two commands, a waiting acquisition (W) and a keep-alive (K), are
//! `line_step`'s: `server_step` answers `None` for them, so a replay that knows only
//! `server_step` runs the configurations without waiting (`Config::waiting` off), where
//! neither is ever sent and the line stays empty.

use crate::client::{Handle, Request};
use crate::config::Config;
use crate::line::WaitReply;
use crate::model::{Action, LeaseModel};
use crate::server::{AcquireReply, Attempt, Call, Data, InspectReply, Reply, Time, Token};
use crate::state::State;

/// What a request's run answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Acquire(AcquireReply),
    Renew(Reply),
    Release(Reply),
    Inspect(InspectReply),
}

/// What reaches the server: the script (or native command) and what it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    Acquire,
    /// A renewal of `slot`'s key, by a handle that was granted `token`.
    Renew {
        slot: u8,
        token: Token,
    },
    /// A release of `slot`'s key, by a handle that was granted `token`.
    Release {
        slot: u8,
        token: Token,
    },
    /// A read of `slot`'s key (slot 0 for a handle that names none).
    Inspect {
        slot: u8,
    },
}

/// What the line's commands send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineSent {
    /// W: the acquisition of a wait loop, which joins the line when refused.
    Wait,
    /// K: the attempt's line session's `SET <line>:<session> PX KEEP` (`lua/line.lua`
    /// `keep`): one session per attempt.
    KeepAlive,
}

/// What the line's commands answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineAnswer {
    Wait(WaitReply),
    /// K's: nothing the waiter reads (`KEPT`).
    Kept,
}

/// One step that sends W or K: the attempt it speaks for, what it sends, and the model's
/// answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineStep {
    pub attempt: Attempt,
    pub sent: LineSent,
    pub answer: LineAnswer,
}

/// What a request's run answered: a reply `Answer` has a word for, or a W's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Answer(Answer),
    Wait(WaitReply),
}

impl Outcome {
    /// The acquisition's reply, of an A or a W.
    pub(crate) fn acquired(self) -> Option<AcquireReply> {
        match self {
            Outcome::Answer(Answer::Acquire(reply)) | Outcome::Wait(WaitReply { reply, .. }) => {
                Some(reply)
            }
            _ => None,
        }
    }
}

/// One step that reaches the server: the attempt it speaks for, what it sends, and what
/// the model's script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerStep {
    pub attempt: Attempt,
    pub sent: Sent,
    pub answer: Answer,
}

/// Runs `request` for `attempt` on `data` at the node's clock `now`: the script's branch,
/// or the native command's with `config.native`.
pub(crate) fn execute(
    config: &Config,
    data: &mut Data,
    now: Time,
    attempt: Attempt,
    request: Request,
) -> Outcome {
    let mut call = Call { config, data, now };
    let answer = match request {
        Request::Wait { .. } => return Outcome::Wait(call.wait(attempt)),
        Request::Acquire { .. } => Answer::Acquire(call.acquire(attempt)),
        Request::Renew { slot, token, .. } if config.native => {
            Answer::Renew(call.renew_native(slot, attempt, token))
        }
        Request::Renew { slot, .. } => Answer::Renew(call.renew(slot, attempt)),
        Request::Release { slot, token } if config.native => {
            Answer::Release(call.release_native(slot, attempt, token))
        }
        Request::Release { slot, .. } => Answer::Release(call.release(slot, attempt)),
    };
    Outcome::Answer(answer)
}

impl LeaseModel {
    /// What `action` sends to the server from `state`, and the model's answer; `None` for
    /// an action that reaches no server (a tick, a send, giving up, a fault).
    pub fn server_step(&self, state: &State, action: Action) -> Option<ServerStep> {
        let (attempt, request) = match action {
            Action::Deliver(id) | Action::LoseReply(id) => {
                let client = &state.clients[usize::from(id)];
                (client.attempt(id), client.waiting?)
            }
            Action::LateArrives(id) => {
                let (op, request) = state.clients[usize::from(id)].late?;
                (Attempt { client: id, op }, request)
            }
            Action::Inspect(id) => {
                let client = &state.clients[usize::from(id)];
                let slot = client.handle.releasable().map_or(0, |(slot, _)| slot);
                let mut data = state.server.data.clone();
                let call = Call {
                    config: &self.config,
                    data: &mut data,
                    now: state.server_now(),
                };
                let attempt = client.attempt(id);
                let answer = Answer::Inspect(call.inspect(slot, attempt));
                let sent = Sent::Inspect { slot };
                return Some(ServerStep {
                    attempt,
                    sent,
                    answer,
                });
            }
            _ => return None,
        };
        let sent = match request {
            Request::Acquire { .. } => Sent::Acquire,
            Request::Wait { .. } => return None,
            Request::Renew { slot, token, .. } => Sent::Renew { slot, token },
            Request::Release { slot, token } => Sent::Release { slot, token },
        };
        let mut data = state.server.data.clone();
        let now = state.server_now();
        let Outcome::Answer(answer) = execute(&self.config, &mut data, now, attempt, request)
        else {
            return None;
        };
        Some(ServerStep {
            attempt,
            sent,
            answer,
        })
    }

    /// What `action` sends to the line from `state` (W or K), and the model's answer;
    /// `None` for every other action.
    pub fn line_step(&self, state: &State, action: Action) -> Option<LineStep> {
        let (attempt, request) = match action {
            Action::Deliver(id) | Action::LoseReply(id) => {
                let client = &state.clients[usize::from(id)];
                (client.attempt(id), client.waiting?)
            }
            Action::LateArrives(id) => {
                let (op, request) = state.clients[usize::from(id)].late?;
                (Attempt { client: id, op }, request)
            }
            Action::Renew(id) => {
                let client = &state.clients[usize::from(id)];
                if client.handle != Handle::Idle || !client.waits {
                    return None;
                }
                return Some(LineStep {
                    attempt: client.attempt(id),
                    sent: LineSent::KeepAlive,
                    answer: LineAnswer::Kept,
                });
            }
            _ => return None,
        };
        let mut data = state.server.data.clone();
        let now = state.server_now();
        match execute(&self.config, &mut data, now, attempt, request) {
            Outcome::Wait(reply) => Some(LineStep {
                attempt,
                sent: LineSent::Wait,
                answer: LineAnswer::Wait(reply),
            }),
            Outcome::Answer(_) => None,
        }
    }

    /// K for `attempt` on the primary of `state`: the data after it.
    pub(crate) fn keep_alive_on(&self, state: &State, attempt: Attempt) -> Data {
        let mut data = state.server.data.clone();
        let mut call = Call {
            config: &self.config,
            data: &mut data,
            now: state.server_now(),
        };
        call.keep_alive(attempt);
        data
    }
}
