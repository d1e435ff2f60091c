//! The messages every renewal brings — the timer's tick and the renewal's end — handled in
//! the call to the actor's `handle`, without a boxed future per message: the decision is the
//! watchdog's and the effects are sans await, up to a release.

use ractor::{ActorRef, Message};
use tokio::time::Instant;

use super::LeaseActorState;
use super::message::{Command, LeaseActorMsg};
use super::watchdog::Actions;
use crate::runtime::LeaseCancelled;

/// What `LeaseActor::handle` did at once with a message.
pub(super) enum AtOnce {
    /// All of it.
    Done,
    /// All but the attached worker's finish (a release, which awaits) and what follows it,
    /// decided at the instant given.
    Finish(Actions, Instant),
    /// Nothing: a message other than a tick or a renewal's end.
    Message(LeaseActorMsg),
}

/// A tick or a renewal's end, decided and carried out without awaiting, up to a finish
/// (invariant 8: the clock read once for all of it); any other message handed back.
pub(super) fn at_once<M: Message + From<LeaseCancelled>>(
    myself: &ActorRef<LeaseActorMsg>,
    state: &mut LeaseActorState<M>,
    message: LeaseActorMsg,
) -> AtOnce {
    let now = Instant::now();
    let actions = match message.0 {
        Command::Tick(generation) if !state.armed.is_current(generation) || state.finishing() => {
            return AtOnce::Done;
        }
        Command::Tick(_) => {
            state.armed.ticked();
            let (worker, reached) = (state.worker.view(), state.renewal_reached());
            state.watchdog.handle_timeout(now, worker, reached)
        }
        // The lease finishing abandoned its renewal; an end that still came says nothing.
        Command::Renewed(_) if state.finishing() => return AtOnce::Done,
        // The handle applies what the renewal's calls got; the watchdog decides.
        Command::Renewed(sent) => {
            state.renewal = None;
            let renewal = state.handle.end_renewal(sent, now);
            let worker = state.worker.view();
            state.watchdog.handle_renewal(&renewal, now, worker)
        }
        _ => return AtOnce::Message(message),
    };
    let mut pending = actions;
    if state.carry_out_now(myself, &mut pending, now) {
        return AtOnce::Finish(pending, now);
    }
    state.arm(myself);
    AtOnce::Done
}
