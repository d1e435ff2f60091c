//! One trace: a random walk of the model, each step that reaches the server run by the
//! code as well, and the code's reply compared with the model's.

use std::collections::BTreeMap;

use leasehold_model::replay::{LineAnswer, LineSent, LineStep, Sent, ServerStep};
use leasehold_model::{Acquisition, Action, LeaseModel};
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
    let mut firsts = Firsts::default();
    while trail.len() < walk::STEPS {
        let Some(action) = walk::choose(model, &state, &mut rng) else {
            break;
        };
        trail.push(action);
        *explored.actions.entry(name(action)).or_default() += 1;
        let first = firsts.note(&state, action);
        match action {
            Action::Tick => code.advance().await,
            Action::Evict => code.evict().await,
            Action::Flush => code.flush().await,
            _ => {
                if let Some(step) = model.line_step(&state, action) {
                    if !code.in_window() {
                        explored.spoiled = true;
                        break;
                    }
                    let kind = run_line(code, &state, &step, first, &mut tokens)
                        .await
                        .map_err(|e| {
                            format!("{e}\n  seed {seed:#x}, steps {trail:?}\n  model {state:?}")
                        })?;
                    if !code.in_window() {
                        explored.spoiled = true;
                        break;
                    }
                    for kind in kind {
                        *explored.replies.entry(kind).or_default() += 1;
                    }
                } else if let Some(step) = model.server_step(&state, action) {
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
                    let tie = code.sub_tick() && step.sent == Sent::Acquire && refusal_tie(&state);
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
    // A turn notice the model did not send, by the trace's last look.
    let stray = code.settle().await;
    if !stray.is_empty() {
        let e = format!("turn notices the model did not send, to {stray:?}");
        return Err(format!(
            "{e}\n  seed {seed:#x}, steps {trail:?}\n  model {state:?}"
        ));
    }
    Ok(explored)
}

/// Whether each client's W on its way, and the one it gave up on, is its attempt's first
/// (`+`: it joins at once) or a later one (`=`), as the wait loop marks it: every try after
/// the first is a later one, whatever the first's reply (a lost one may have joined).
#[derive(Default)]
struct Firsts {
    waiting: BTreeMap<u8, bool>,
    late: BTreeMap<u8, bool>,
}

impl Firsts {
    /// Notes what `action` sends or gives up on from `state`; returns the first-ness of
    /// the W the action runs (meaningless for others).
    fn note(&mut self, state: &leasehold_model::state::State, action: Action) -> bool {
        match action {
            Action::Acquire(Acquisition::Wait(id)) => {
                let first = !state.clients[usize::from(id)].waits;
                self.waiting.insert(id, first);
                first
            }
            Action::GiveUp(id) => {
                if let Some(first) = self.waiting.get(&id) {
                    self.late.insert(id, *first);
                }
                false
            }
            Action::Deliver(id) | Action::LoseReply(id) => {
                self.waiting.get(&id).copied().unwrap_or(false)
            }
            Action::LateArrives(id) => self.late.get(&id).copied().unwrap_or(false),
            _ => false,
        }
    }
}

/// The code runs what the model's W or K sends, and its reply is compared: the
/// acquisition's as a try's, the rank, and the turn notice (none but the model's may come).
/// Returns the kinds to count.
async fn run_line(
    code: &mut Code,
    state: &leasehold_model::state::State,
    step: &LineStep,
    first: bool,
    tokens: &mut Tokens,
) -> Result<Vec<String>, String> {
    let failed = |failure| format!("the code's call failed: {failure}");
    let answer = match (step.sent, step.answer) {
        (LineSent::KeepAlive, _) => {
            code.keep_alive(step.attempt).await.map_err(failed)?;
            return Ok(vec!["keep KEPT".to_owned()]);
        }
        (LineSent::Wait, LineAnswer::Wait(answer)) => answer,
        (LineSent::Wait, answer) => return Err(format!("a W answered {answer:?}")),
    };
    let stray = code.turns_told().await;
    if !stray.is_empty() {
        return Err(format!("turn notices the model did not send, to {stray:?}"));
    }
    let reply = code.wait(step.attempt, first).await.map_err(failed)?;
    let tie = code.sub_tick() && refusal_tie(state);
    compare::compare_wait(answer, reply, tie, tokens, code.tick())?;
    let mut kinds = vec![format!("wait {}", compare::kind_of(answer.reply))];
    if let Some(told) = answer.turn {
        if !code.told(told).await {
            return Err(format!(
                "the model tells {told:?} its turn, the code did not"
            ));
        }
        kinds.push("wait TURN told".to_owned());
    }
    Ok(kinds)
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
fn refusal_tie(state: &leasehold_model::state::State) -> bool {
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
