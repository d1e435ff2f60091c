//! The lease protocol as a `stateright` model: which actions each state allows. What an
//! action does is `step.rs`; what must hold is `properties.rs`.

use stateright::{Model, Property};

use crate::client::{Handle, Request};
use crate::config::Config;
use crate::properties;
use crate::state::State;

/// One step of the system. Each maps to a branch of a script or a native command when it
/// reaches the server (README.md, "Actions").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The real clock advances a tick; expired keys go; handles without validity are LOST.
    Tick,
    /// A client sends its attempt's acquisition (the first time, or a replay): a try (A)
    /// or, in its wait loop, a waiting one (W).
    Acquire(Acquisition),
    /// An ACTIVE client sends a renewal; a client in its wait loop (idle) sends its line
    /// session's keep-alive K, which runs at once and answers nothing the waiter reads.
    Renew(u8),
    /// A client whose handle may release sends its release.
    Release(u8),
    /// A client whose handle is done (or who gives up waiting) starts its next attempt; a
    /// waiter doing so dies, its entry left in the line.
    NextAttempt(u8),
    /// The client's request runs and its reply arrives.
    Deliver(u8),
    /// The client's request runs and its reply is lost: the client learns nothing.
    LoseReply(u8),
    /// The client gives up on its request, which is still on its way.
    GiveUp(u8),
    /// A request given up on reaches the server; nobody reads the reply.
    LateArrives(u8),
    /// A request given up on never reaches the server.
    LateLost(u8),
    /// A client inspects its attempt's lease (read only).
    Inspect(u8),
    /// The fence counter is evicted.
    Evict,
    /// `FLUSHALL`, or a restart with no data.
    Flush,
    /// The replica is promoted, missing the last `lost` writes, its clock `lag` ticks
    /// behind the real time (within the bounds of the old primary's lag).
    Failover { lost: u8, lag: u8 },
}

/// Which acquisition a client sends. (A payload, not two actions: the conformance replay
/// names every action, and gains the line's when it replays them.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Acquisition {
    /// A: try_acquire's, which never joins the line.
    Try(u8),
    /// W: the wait loop's, which joins the line when refused.
    Wait(u8),
}

impl Acquisition {
    /// The client that sends it.
    pub fn client(self) -> u8 {
        match self {
            Acquisition::Try(id) | Acquisition::Wait(id) => id,
        }
    }
}

/// The model of one configuration.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    pub config: Config,
}

impl LeaseModel {
    pub fn new(config: Config) -> LeaseModel {
        LeaseModel { config }
    }

    fn client_actions(&self, state: &State, id: u8, actions: &mut Vec<Action>) {
        let config = &self.config;
        let client = &state.clients[usize::from(id)];
        if client.waiting.is_some() {
            actions.extend([Action::Deliver(id), Action::LoseReply(id)]);
            if config.late_requests && client.late.is_none() {
                actions.push(Action::GiveUp(id));
            }
        } else {
            match client.handle {
                Handle::Idle if client.waits => {
                    let rank = state.server.data.rank_of(client.attempt(id));
                    if !config.head_looks_only || rank.is_none_or(|r| r == 0) {
                        actions.push(Action::Acquire(Acquisition::Wait(id)));
                    }
                    actions.push(Action::Renew(id));
                }
                Handle::Idle if id < config.waiters => {
                    actions.push(Action::Acquire(Acquisition::Wait(id)))
                }
                Handle::Idle => actions.push(Action::Acquire(Acquisition::Try(id))),
                Handle::Active { .. } => actions.push(Action::Renew(id)),
                _ => {}
            }
            if client.handle.releasable().is_some() {
                actions.push(Action::Release(id));
            }
            let done = !matches!(client.handle, Handle::Active { .. });
            // A death is an attempt of its own: the waiter's next, beyond `attempts`.
            let dies = client.handle == Handle::Idle && client.waits;
            let next = match dies {
                true => state.deaths_left > 0,
                false => client.op + 1 < config.attempts,
            };
            if done && next {
                actions.push(Action::NextAttempt(id));
            }
            if !matches!(client.handle, Handle::Idle) {
                actions.push(Action::Inspect(id));
            }
        }
        if client.late.is_some() {
            actions.extend([Action::LateArrives(id), Action::LateLost(id)]);
        }
    }

    fn fault_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let config = &self.config;
        if state.faults_left == 0 {
            return;
        }
        // The TIME floor's clock assumption: after the fault, either the counter still
        // holds the largest token issued, or the node's clock is past it.
        let max = state.ghost.max_token;
        let past = |fence: Option<u16>, lag: u8| {
            !config.time_past_counter
                || fence.is_some_and(|f| f >= max)
                || max < u16::from(state.now.saturating_sub(lag))
        };
        let lag = state.server.behind;
        if config.evict && state.server.data.fence.is_some() && past(None, lag) {
            actions.push(Action::Evict);
        }
        if config.flush && past(None, lag) {
            actions.push(Action::Flush);
        }
        let stored = state.server.before.len() as u8;
        let old = state.server.behind;
        let lags = old.saturating_sub(config.replica_ahead)..=old + config.replica_behind;
        for lost in 0..=config.lost_writes.min(stored) {
            let fence = match lost {
                0 => state.server.data.fence,
                _ => state.server.before[usize::from(lost) - 1].fence,
            };
            for lag in lags.clone() {
                if (lost, lag) != (0, old) && past(fence, lag) {
                    actions.push(Action::Failover { lost, lag });
                }
            }
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::initial(&self.config)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.config.max_time {
            actions.push(Action::Tick);
        }
        for id in 0..self.config.clients {
            self.client_actions(state, id, actions);
        }
        self.fault_actions(state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        self.apply(&mut next, action);
        next.forget_unread_alive_keys();
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// The request an action sends, read from the client's handle.
pub(crate) fn request_of(action: Action, handle: Handle, now: u8) -> Option<Request> {
    match (action, handle) {
        (Action::Acquire(Acquisition::Try(_)), Handle::Idle) => {
            Some(Request::Acquire { sent: now })
        }
        (Action::Acquire(Acquisition::Wait(_)), Handle::Idle) => Some(Request::Wait { sent: now }),
        (Action::Renew(_), Handle::Active { slot, token, .. }) => Some(Request::Renew {
            sent: now,
            slot,
            token,
        }),
        (Action::Release(_), handle) => handle
            .releasable()
            .map(|(slot, token)| Request::Release { slot, token }),
        _ => None,
    }
}
