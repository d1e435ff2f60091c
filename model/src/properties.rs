//! What must hold in every state the checker reaches, and what must be reachable.
//!
//! Safety properties read the state (a) or the ghost record of the step that broke them
//! (a, b, c, e); a counterexample's last step is the breach. Their names are what the
//! tests ask the checker's discoveries for.

use stateright::{Checker, HasDiscoveries, Model, Property};

use crate::client::Handle;
use crate::model::LeaseModel;
use crate::server::{AcquireReply, Call};
use crate::state::{State, breach};

pub const AT_MOST_PERMITS: &str = "(a) at most permits clients believe they hold";
pub const BACKED: &str = "(a) a belief from a reply is backed by the client's own key";
pub const TOKENS_INCREASE: &str = "(b) successive grants carry strictly increasing tokens";
pub const ONE_GRANT_PER_ATTEMPT: &str = "(c) one attempt never holds two grants";
pub const TERMINAL_STAYS: &str = "(d) a handle that left ACTIVE never sends as ACTIVE again";
pub const LOCK_DELAY: &str = "(e) lock-delay refuses every acquisition until it ends";
pub const FREE_IS_GRANTED: &str = "(f) a free slot is granted to a contender in two steps";
pub const EVERY_CLIENT_GRANTED: &str = "(f) every client is granted at some point";

pub fn all() -> Vec<Property<LeaseModel>> {
    vec![
        Property::always(AT_MOST_PERMITS, at_most_permits),
        Property::always(BACKED, |_, s: &State| clean(s, breach::BACKED)),
        Property::always(TOKENS_INCREASE, |_, s: &State| clean(s, breach::TOKENS)),
        Property::always(ONE_GRANT_PER_ATTEMPT, |_, s: &State| {
            clean(s, breach::ATTEMPT)
        }),
        Property::always(TERMINAL_STAYS, terminal_stays),
        Property::always(LOCK_DELAY, |_, s: &State| clean(s, breach::DELAY)),
        Property::always(FREE_IS_GRANTED, free_is_granted),
        Property::sometimes(EVERY_CLIENT_GRANTED, |_, s: &State| {
            s.ghost.granted.iter().all(|&g| g)
        }),
    ]
}

/// No step so far breached the property of `bit`.
fn clean(s: &State, bit: u8) -> bool {
    s.ghost.breaches & bit == 0
}

/// (a) Under the drift assumption, and while the server keeps its acknowledged writes
/// (no flush, no failover that lost one): the believers are at most the permits.
fn at_most_permits(model: &LeaseModel, s: &State) -> bool {
    s.ghost.data_lost || s.believers(model.config.drift) <= usize::from(model.config.permits)
}

/// (d) LOST, UNKNOWN and RELEASED lead nowhere back: a handle that left ACTIVE for this
/// attempt is not ACTIVE (so it renews no more), and a RELEASED one waits for no reply.
fn terminal_stays(_: &LeaseModel, s: &State) -> bool {
    s.clients.iter().all(|c| {
        let revived = c.left_active && matches!(c.handle, Handle::Active { .. });
        let released_sends = c.handle == Handle::Released && c.waiting.is_some();
        !revived && !released_sends
    })
}

/// (f) Bounded liveness: whenever a slot is free and a client is ready to send its
/// acquisition (idle, owning no key), sending it and delivering it grants — two steps.
fn free_is_granted(model: &LeaseModel, s: &State) -> bool {
    let now = s.server_now();
    let permits = usize::from(model.config.permits);
    let data = &s.server.data;
    if data.slots[..permits].iter().all(Option::is_some) {
        return true;
    }
    s.clients.iter().enumerate().all(|(id, c)| {
        let owns_a_key = data
            .slots
            .iter()
            .any(|k| k.is_some_and(|k| usize::from(k.attempt.client) == id));
        if c.handle != Handle::Idle || c.waiting.is_some() || owns_a_key {
            return true;
        }
        let mut data = data.clone();
        let mut call = Call {
            config: &model.config,
            data: &mut data,
            now,
        };
        let reply = call.acquire(c.attempt(id as u8));
        matches!(reply, AcquireReply::Acquired { .. })
    })
}

/// Checks `model` exhaustively (breadth first, so every counterexample is a shortest one)
/// and returns the checker for its discoveries.
pub fn check(model: LeaseModel) -> impl Checker<LeaseModel> {
    model.checker().threads(threads()).spawn_bfs().join()
}

/// Checks `model` breadth first until `property` fails, and returns the shortest
/// counterexample, if any.
pub fn counterexample(
    model: LeaseModel,
    property: &'static str,
) -> Option<stateright::Path<State, crate::model::Action>> {
    let wanted = HasDiscoveries::AnyOf([property].into());
    let checker = model.checker().threads(threads()).finish_when(wanted);
    checker.spawn_bfs().join().discovery(property)
}

/// At most two threads: the model shares a small machine with others.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}
