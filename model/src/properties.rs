//! What must hold in every state the checker reaches, and what must be reachable.
//!
//! Safety properties read the state (a) or the ghost record of the step that broke them
//! (a, b, c, e, g); a counterexample's last step is the breach. Their names are what the
//! tests ask the checker's discoveries for.

use stateright::{Checker, HasDiscoveries, Model, Property};

use crate::client::Handle;
use crate::model::{Acquisition, Action, LeaseModel};
use crate::server::{AcquireReply, Attempt, Call};
use crate::state::{State, breach};

pub const AT_MOST_PERMITS: &str = "(a) at most permits clients believe they hold";
pub const BACKED: &str = "(a) a belief from a reply is backed by the client's own key";
pub const TOKENS_INCREASE: &str = "(b) successive grants carry strictly increasing tokens";
pub const ONE_GRANT_PER_ATTEMPT: &str = "(c) one attempt never holds two grants";
pub const TERMINAL_STAYS: &str = "(d) a handle that left ACTIVE never sends as ACTIVE again";
pub const LOCK_DELAY: &str = "(e) lock-delay refuses every acquisition until it ends";
pub const FREE_IS_GRANTED: &str = "(f) a free slot is granted to an entitled contender at once";
pub const EVERY_CLIENT_GRANTED: &str = "(f) every client is granted at some point";
pub const FIRST_COME: &str = "(g) a free slot goes past fewer live waiters than free slots";
pub const JOINS_BEHIND: &str = "(g) a waiter joins behind every waiter already in the line";
pub const WAITER_SERVED: &str = "(g) a waiter is granted after waiting in the line";
pub const DEAD_WAITER_LEAVES: &str = "(h) dead entries never keep a free slot from the first live";
pub const FIRST_LIVE_LOOKS: &str = "(h) the first live waiter may look when a slot is free";
pub const DEAD_PRUNED: &str = "(h) a dead entry is pruned from the line";

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
        Property::always(FIRST_COME, |_, s: &State| clean(s, breach::FCFS)),
        Property::always(JOINS_BEHIND, |_, s: &State| clean(s, breach::ORDER)),
        Property::always(DEAD_WAITER_LEAVES, dead_waiter_leaves),
        Property::always(FIRST_LIVE_LOOKS, first_live_looks),
        // Without waiting the line stays empty: nothing to see there.
        Property::sometimes(WAITER_SERVED, |m: &LeaseModel, s: &State| {
            !m.config.waiting() || s.ghost.served_from_line
        }),
        Property::sometimes(DEAD_PRUNED, |m: &LeaseModel, s: &State| {
            !m.config.waiting() || s.ghost.pruned
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

/// Free slots among the lease's `permits`, at server time.
fn free_slots(model: &LeaseModel, s: &State) -> usize {
    let permits = usize::from(model.config.permits);
    s.server.data.slots[..permits]
        .iter()
        .filter(|k| k.is_none())
        .count()
}

/// Whether client `id` owns a key of the resource (under any of its attempts).
fn owns_a_key(s: &State, id: u8) -> bool {
    let slots = &s.server.data.slots;
    slots
        .iter()
        .any(|k| k.is_some_and(|k| k.attempt.client == id))
}

/// Whether `attempt`'s acquisition (`wait`: W, else A), delivered now, is granted.
fn granted(model: &LeaseModel, s: &State, attempt: Attempt, wait: bool) -> bool {
    let mut data = s.server.data.clone();
    let mut call = Call {
        config: &model.config,
        data: &mut data,
        now: s.server_now(),
    };
    let reply = match wait {
        true => call.wait(attempt).reply,
        false => call.acquire(attempt),
    };
    matches!(reply, AcquireReply::Acquired { .. })
}

/// A client that could send its acquisition now: idle, no reply awaited, owning no key.
fn ready(s: &State, id: u8) -> bool {
    let c = &s.clients[usize::from(id)];
    c.handle == Handle::Idle && c.waiting.is_none() && !owns_a_key(s, id)
}

/// (f) Bounded liveness: whenever a slot is free, a ready client that the line entitles
/// to it — fewer live entries ahead of its entry than free slots (all live entries, if it
/// has no entry) — is granted on delivery, by a try and by a waiting acquisition alike.
fn free_is_granted(model: &LeaseModel, s: &State) -> bool {
    let free = free_slots(model, s);
    if free == 0 {
        return true;
    }
    let (now, keep) = (s.server_now(), model.config.keep);
    (0..model.config.clients).all(|id| {
        let attempt = s.clients[usize::from(id)].attempt(id);
        if !ready(s, id) || s.server.data.alive_ahead(attempt, now, keep) >= free {
            return true;
        }
        granted(model, s, attempt, false)
            && (!model.config.waiting() || granted(model, s, attempt, true))
    })
}

/// (h) Bounded liveness of the line: whenever a slot is free, the first live entry's W
/// is granted, however many dead entries are ahead of it (unless its client holds a key
/// under another attempt: a conflict, which KEEP ends); with no live entry, any ready
/// client's W is.
fn dead_waiter_leaves(model: &LeaseModel, s: &State) -> bool {
    if !model.config.waiting() || free_slots(model, s) == 0 {
        return true;
    }
    let (now, keep) = (s.server_now(), model.config.keep);
    match s.server.data.first_alive(now, keep) {
        Some(first) => {
            owns_a_key(s, first.attempt.client) || granted(model, s, first.attempt, true)
        }
        None => (0..model.config.clients).all(|id| {
            let attempt = s.clients[usize::from(id)].attempt(id);
            !ready(s, id) || granted(model, s, attempt, true)
        }),
    }
}

/// (h), the wait loop's part: whenever a slot is free and the line's first live entry is
/// a client still in its wait loop for that attempt, idle, that client may send W (the
/// look that prunes dead entries ahead of it and is granted).
fn first_live_looks(model: &LeaseModel, s: &State) -> bool {
    if !model.config.waiting() || free_slots(model, s) == 0 {
        return true;
    }
    let Some(first) = s.server.data.first_alive(s.server_now(), model.config.keep) else {
        return true;
    };
    let id = first.attempt.client;
    let c = &s.clients[usize::from(id)];
    let looping = c.waits && c.op == first.attempt.op && c.handle == Handle::Idle;
    if !looping || c.waiting.is_some() {
        return true;
    }
    let mut actions = Vec::new();
    model.actions(s, &mut actions);
    actions.contains(&Action::Acquire(Acquisition::Wait(id)))
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
