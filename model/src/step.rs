//! What each action does to the state, and the ghost record of every grant and join (the
//! checks properties (a)–(e) and (g) read are made where the step happens: a grant is
//! judged against the server as it stood just before it).

use crate::client::{Client, Handle, Request, Timing};
use crate::model::{Acquisition, Action, LeaseModel, request_of};
use crate::replay::{Answer, Outcome, execute};
use crate::server::{AcquireReply, Attempt, Call, Data, InspectReply};
use crate::state::{State, breach};

impl LeaseModel {
    pub(crate) fn apply(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => self.tick(s),
            Action::Acquire(acquisition) => {
                let client = &mut s.clients[usize::from(acquisition.client())];
                client.waiting = request_of(action, client.handle, s.now);
                client.waits |= matches!(acquisition, Acquisition::Wait(_));
            }
            Action::Renew(id) if s.clients[usize::from(id)].handle == Handle::Idle => {
                self.keep_alive(s, id)
            }
            Action::Renew(id) | Action::Release(id) => {
                let client = &mut s.clients[usize::from(id)];
                client.waiting = request_of(action, client.handle, s.now);
            }
            Action::NextAttempt(id) => {
                let client = &mut s.clients[usize::from(id)];
                if client.handle == Handle::Idle && client.waits {
                    s.deaths_left -= 1;
                }
                *client = Client {
                    op: client.op + 1,
                    late: client.late,
                    ..Client::new()
                };
            }
            Action::Deliver(id) => self.deliver(s, id, true),
            Action::LoseReply(id) => self.deliver(s, id, false),
            Action::GiveUp(id) => {
                let client = &mut s.clients[usize::from(id)];
                if let Some(request) = client.waiting.take() {
                    client.on_no_reply(request);
                    client.late = Some((client.op, request));
                }
            }
            Action::LateArrives(id) => {
                if let Some((op, request)) = s.clients[usize::from(id)].late.take() {
                    self.run(s, Attempt { client: id, op }, request);
                }
            }
            Action::LateLost(id) => s.clients[usize::from(id)].late = None,
            Action::Inspect(id) => self.inspect(s, id),
            Action::Evict | Action::Flush | Action::Failover { .. } => self.fault(s, action),
        }
    }

    fn timing(&self) -> Timing {
        Timing {
            ttl: self.config.ttl,
            drift: self.config.drift,
            revive: self.config.bugs.revive_handle,
        }
    }

    fn tick(&self, s: &mut State) {
        s.now += 1;
        let server_now = s.server_now();
        s.server.data.expire(server_now);
        for client in &mut s.clients {
            client.observe(s.now, self.config.drift);
        }
    }

    /// Runs the client's request; its reply reaches the client if `arrives`.
    fn deliver(&self, s: &mut State, id: u8, arrives: bool) {
        let client = &mut s.clients[usize::from(id)];
        let Some(request) = client.waiting.take() else {
            return;
        };
        let attempt = client.attempt(id);
        let answer = self.run(s, attempt, request);
        let (now, timing) = (s.now, self.timing());
        let client = &mut s.clients[usize::from(id)];
        if !arrives {
            client.on_no_reply(request);
            return;
        }
        match (answer, request) {
            (outcome, Request::Acquire { sent } | Request::Wait { sent }) => {
                if let Some(reply) = outcome.acquired() {
                    client.on_acquire(reply, sent, now, timing)
                }
            }
            (Outcome::Answer(Answer::Renew(reply)), Request::Renew { sent, .. }) => {
                client.on_renew(reply, sent, now, timing)
            }
            (Outcome::Answer(Answer::Release(reply)), _) => client.on_release(reply),
            _ => {}
        }
        self.check_backed(s, id);
    }

    /// (a) A client that believes it holds after a reply has its own key on the server —
    /// also after writes were lost: a reply is read from the server as it now is.
    fn check_backed(&self, s: &mut State, id: u8) {
        let client = &s.clients[usize::from(id)];
        if !client.believes(s.now, self.config.drift) {
            return;
        }
        let (attempt, slot) = match client.handle {
            Handle::Active { slot, .. } => (client.attempt(id), slot),
            _ => return,
        };
        let key = s.server.data.slots[usize::from(slot)];
        if !key.is_some_and(|k| k.attempt == attempt && !k.ended(s.server_now())) {
            s.ghost.breaches |= breach::BACKED;
        }
    }

    /// Runs `request` for `attempt` on the primary, recording the write for the replica
    /// and judging a grant.
    fn run(&self, s: &mut State, attempt: Attempt, request: Request) -> Outcome {
        let before = s.server.data.clone();
        let now = s.server_now();
        let outcome = execute(&self.config, &mut s.server.data, now, attempt, request);
        if let Some(AcquireReply::Acquired { token, slot }) = outcome.acquired() {
            self.judge_grant(s, &before, attempt, token, slot);
        }
        let line = &s.server.data.line;
        s.ghost.pruned |= before
            .line
            .iter()
            .any(|e| e.attempt != attempt && !line.iter().any(|l| l.attempt == e.attempt));
        // (g) in real time: a newcomer joins behind everyone already waiting.
        let joined = s.server.data.rank_of(attempt);
        if before.rank_of(attempt).is_none() && joined.is_some_and(|r| r + 1 < line.len()) {
            s.ghost.breaches |= breach::ORDER;
        }
        if s.server.data != before {
            s.server.record_write(before, self.config.lost_writes);
        }
        outcome
    }

    /// K: the waiter's keep-alive, run at once (no reply the model's client acts on).
    fn keep_alive(&self, s: &mut State, id: u8) {
        let attempt = s.clients[usize::from(id)].attempt(id);
        let data = self.keep_alive_on(s, attempt);
        let before = std::mem::replace(&mut s.server.data, data);
        if s.server.data != before {
            s.server.record_write(before, self.config.lost_writes);
        }
    }

    /// (b) tokens increase, (c) no second grant to an attempt that holds, (e) no grant of
    /// a slot in its lock-delay, (g) first come, first served — judged against the data
    /// just before the grant.
    fn judge_grant(&self, s: &mut State, before: &Data, attempt: Attempt, token: u16, slot: u8) {
        let now = s.server_now();
        let ghost = &mut s.ghost;
        if token <= ghost.max_token {
            ghost.breaches |= breach::TOKENS;
        }
        ghost.max_token = ghost.max_token.max(token);
        if before.live_slot_of(attempt, now).is_some() {
            ghost.breaches |= breach::ATTEMPT;
        }
        if before.slots[usize::from(slot)].is_some_and(|k| k.ended(now)) {
            ghost.breaches |= breach::DELAY;
        }
        // (g): a free slot goes past fewer live waiters than there were free slots.
        let keep = self.config.keep;
        let free_slot = before.slots[usize::from(slot)].is_none();
        if free_slot && before.alive_ahead(attempt, now, keep) >= before.free_slots() {
            ghost.breaches |= breach::FCFS;
        }
        ghost.served_from_line |= before.rank_of(attempt).is_some();
        ghost.granted[usize::from(attempt.client)] = true;
    }

    /// (a) A client that believes it holds is told so by `inspect` (unless acknowledged
    /// writes were lost).
    fn inspect(&self, s: &mut State, id: u8) {
        let client = &s.clients[usize::from(id)];
        let slot = client.handle.releasable().map_or(0, |(slot, _)| slot);
        let believes = client.believes(s.now, self.config.drift);
        let now = s.server_now();
        let mut data = s.server.data.clone();
        let call = Call {
            config: &self.config,
            data: &mut data,
            now,
        };
        let told = call.inspect(slot, client.attempt(id));
        if believes && !s.ghost.data_lost && !matches!(told, InspectReply::HeldByAttempt(_)) {
            s.ghost.breaches |= breach::BACKED;
        }
    }

    fn fault(&self, s: &mut State, action: Action) {
        s.faults_left -= 1;
        match action {
            Action::Evict => {
                let before = s.server.data.clone();
                s.server.data.fence = None;
                s.server.record_write(before, self.config.lost_writes);
            }
            Action::Flush => {
                let before = std::mem::replace(&mut s.server.data, Data::empty(&self.config));
                s.ghost.data_lost |= before.slots.iter().any(Option::is_some);
                s.server.record_write(before, self.config.lost_writes);
            }
            Action::Failover { lost, lag } => {
                if lost > 0 {
                    let promoted = s.server.before[usize::from(lost) - 1].clone();
                    s.ghost.data_lost |= promoted.slots != s.server.data.slots;
                    s.server.data = promoted;
                }
                s.server.before.clear();
                s.server.behind = lag;
                let server_now = s.server_now();
                s.server.data.expire(server_now);
            }
            _ => {}
        }
    }
}
