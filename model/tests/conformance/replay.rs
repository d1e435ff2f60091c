//! One trace: a random walk of the model, each step that reaches the server run by the
//! code as well, and the code's reply compared with the model's.

use std::collections::BTreeMap;

use leasehold_model::replay::{Sent, ServerStep};
use leasehold_model::{Action, LeaseModel};
use stateright::Model as _;

use crate::code::Code;
use crate::compare::{self, Reply, Tokens};
use crate::walk::{self, Rng};

/// What one trace explored.
#[derive(Debug, Default)]
pub struct Explored {
    /// Steps taken (ticks, sends and faults included).
    pub steps: usize,
    /// Steps that reached the server, by the model's reply (`acquire ACQUIRED`).
    pub replies: BTreeMap<String, usize>,
    /// Other steps, by action (`Tick`, `LoseReply`…: the replies above count the runs).
    pub actions: BTreeMap<&'static str, usize>,
    /// The trace stopped early: a command's reply came too late in its tick for its
    /// comparison to mean anything (a loaded machine; never on the paused clock).
    pub spoiled: bool,
}

/// Replays the trace of `seed`; `Err` says where the code and the model differ, with the
/// steps that led there.
pub async fn replay(model: &LeaseModel, code: &mut Code, seed: u64) -> Result<Explored, String> {
    let mut state = model.init_states().remove(0);
    let mut rng = Rng::new(seed);
    let mut tokens = Tokens::default();
    let mut explored = Explored::default();
    let mut trail = Vec::new();
    while trail.len() < walk::STEPS {
        let Some(action) = walk::choose(model, &state, &mut rng) else {
            break;
        };
        trail.push(action);
        *explored.actions.entry(name(action)).or_default() += 1;
        match action {
            Action::Tick => code.advance().await,
            Action::Evict => code.evict().await,
            Action::Flush => code.flush().await,
            _ => {
                if let Some(step) = model.server_step(&state, action) {
                    if !code.in_window() {
                        explored.spoiled = true;
                        break;
                    }
                    let reply = run(code, &step, &tokens).await;
                    if !code.in_window() {
                        explored.spoiled = true;
                        break;
                    }
                    let left = left_of(&state, &step);
                    let tie = code.sub_tick() && refusal_tie(&state, &step);
                    let tick = code.tick();
                    reply
                        .and_then(|reply| {
                            compare::compare(step.answer, &reply, left, tie, &mut tokens, tick)
                        })
                        .map_err(|e| {
                            format!("{e}\n  seed {seed:#x}, steps {trail:?}\n  model {state:?}")
                        })?;
                    *explored
                        .replies
                        .entry(compare::kind(step.answer))
                        .or_default() += 1;
                }
            }
        }
        state = model.next_state(&state, action).expect("a next state");
        explored.steps += 1;
    }
    Ok(explored)
}

/// The code runs what the model's step sends.
async fn run(code: &Code, step: &ServerStep, tokens: &Tokens) -> Result<Reply, String> {
    let attempt = code.attempt(step.attempt);
    let token = |model| {
        tokens
            .code(model)
            .ok_or_else(|| format!("the model's token {model} was never granted"))
    };
    let reply = match step.sent {
        Sent::Acquire => code.acquire(&attempt).await.map(Reply::Acquire),
        Sent::Renew { slot, token: t } => code
            .renew(&attempt, slot, token(t)?)
            .await
            .map(Reply::Renew),
        Sent::Release { slot, token: t } => code
            .release(&attempt, slot, token(t)?)
            .await
            .map(Reply::Release),
        Sent::Inspect { slot } => code.inspect(&attempt, slot).await.map(Reply::Inspect),
    };
    reply.map_err(|failure| format!("the code's call failed: {failure}"))
}

/// What the model's key of an inspected slot has left, in ticks (an inspection's PTTL).
fn left_of(state: &leasehold_model::state::State, step: &ServerStep) -> Option<u8> {
    let Sent::Inspect { slot } = step.sent else {
        return None;
    };
    let key = state.server.data.slots[usize::from(slot)]?;
    Some(key.left(state.server_now()))
}

/// Whether a counted lease's refusal is DELAYED or CONTENDED by a tie the model's ticks
/// cannot break: the slot that frees first (the least time left, the first slot on a tie)
/// is, to the tick, both one in its lock-delay and one still held. On a real server the
/// keys' milliseconds break it, either way.
fn refusal_tie(state: &leasehold_model::state::State, step: &ServerStep) -> bool {
    if step.sent != Sent::Acquire {
        return false;
    }
    let now = state.server_now();
    let keys: Vec<_> = state.server.data.slots.iter().flatten().collect();
    let Some(least) = keys.iter().map(|k| k.left(now)).min() else {
        return false;
    };
    let at_least = |ended: bool| {
        keys.iter()
            .any(|k| k.left(now) == least && k.ended(now) == ended)
    };
    keys.len() > 1 && at_least(true) && at_least(false)
}

fn name(action: Action) -> &'static str {
    match action {
        Action::Tick => "Tick",
        Action::Acquire(_) => "Acquire",
        Action::Renew(_) => "Renew",
        Action::Release(_) => "Release",
        Action::NextAttempt(_) => "NextAttempt",
        Action::Deliver(_) => "Deliver",
        Action::LoseReply(_) => "LoseReply",
        Action::GiveUp(_) => "GiveUp",
        Action::LateArrives(_) => "LateArrives",
        Action::LateLost(_) => "LateLost",
        Action::Inspect(_) => "Inspect",
        Action::Evict => "Evict",
        Action::Flush => "Flush",
        Action::Failover { .. } => "Failover",
    }
}
