//! What a step sends to the server and what the model answers, for replaying the model's
//! traces against leasehold's backends (`tests/conformance/`): the same dispatch the
//! model's own steps run (`step.rs`), on a copy of the server's data.

use crate::client::Request;
use crate::config::Config;
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
) -> Answer {
    let mut call = Call { config, data, now };
    match request {
        Request::Acquire { .. } => Answer::Acquire(call.acquire(attempt)),
        Request::Renew { slot, token, .. } if config.native => {
            Answer::Renew(call.renew_native(slot, attempt, token))
        }
        Request::Renew { slot, .. } => Answer::Renew(call.renew(slot, attempt)),
        Request::Release { slot, token } if config.native => {
            Answer::Release(call.release_native(slot, attempt, token))
        }
        Request::Release { slot, .. } => Answer::Release(call.release(slot, attempt)),
    }
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
            Request::Renew { slot, token, .. } => Sent::Renew { slot, token },
            Request::Release { slot, token } => Sent::Release { slot, token },
        };
        let mut data = state.server.data.clone();
        let now = state.server_now();
        let answer = execute(&self.config, &mut data, now, attempt, request);
        Some(ServerStep {
            attempt,
            sent,
            answer,
        })
    }
}
