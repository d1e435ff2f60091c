//! The acquisition, as `lua/acquire.lua` runs it (with `lua/line.lua`'s line), on the
//! store.

use std::time::Duration;

use tokio::time::Instant;

use super::{Entry, Store, line};
use crate::protocol::limits::deadline_after;
use crate::protocol::{AcquireReply, FencingToken, LeaseKeys, LeaseRequest, LinePlace, WaiterId};

impl Store {
    /// `request`'s acquisition of the lease `keys` name, at `now`.
    pub(super) fn acquire(
        &mut self,
        keys: &LeaseKeys,
        request: &LeaseRequest,
        place: LinePlace,
        id: &WaiterId,
        now: Instant,
    ) -> AcquireReply {
        let (attempt, ttl) = (request.attempt(), request.ttl());
        // A plain lease is its one key; a counted lease's acquisition reads each slot
        // (lua/acquire.lua's acquire_slot).
        let slots = keys.slot_keys();
        let (mut free, mut least, mut conflict) = (None, None::<(Duration, bool)>, None);
        let (mut frees, mut without_delay) = (0, true);
        for (slot, key) in (0u16..).zip(&slots) {
            let Some(entry) = self.live(key, now) else {
                free = free.or(Some((slot, key)));
                frees += 1;
                continue;
            };
            let (pttl, ended) = entry.left(now);
            without_delay &= entry.lock_delay.is_zero();
            if !ended && entry.is(attempt) {
                let token = FencingToken::new(entry.token);
                return AcquireReply::Replayed { pttl, token, slot };
            }
            if !ended && entry.owner == attempt.owner().expose() {
                conflict = conflict.or(Some(pttl));
            }
            if least.is_none_or(|(least, _)| pttl < least) {
                least = Some((pttl, ended));
            }
        }
        if let Some(pttl) = conflict {
            return AcquireReply::Conflict { pttl };
        }
        let line = keys.line();
        let Some((slot, key)) = free else {
            let rank = self.wait_in_line(&line, id, place, now);
            let (pttl, ended) = least.unwrap_or_default();
            // As lua/acquire.lua: no PTTL for a waiter behind others on a plain lease
            // without lock-delay (it sleeps through releases).
            let behind = slots.len() == 1 && without_delay && rank.is_some_and(|r| r > 0);
            let pttl = if behind { Duration::ZERO } else { pttl };
            return if ended {
                AcquireReply::Delayed { pttl, rank }
            } else {
                AcquireReply::Contended { pttl, rank }
            };
        };
        let next = match self.entitled(&line, id, frees, slots.len(), now) {
            line::Entitled::No => {
                let rank = self.wait_in_line(&line, id, place, now);
                let pttl = Duration::ZERO;
                return AcquireReply::Contended { pttl, rank };
            }
            line::Entitled::InLine { next } => {
                if let Some(line) = self.lines.get_mut(&line) {
                    line.leave(id.as_str(), 0);
                }
                next
            }
            line::Entitled::Outside => None,
        };
        if let Some(next) = next {
            self.notify(&line::turn_channel(keys, &next));
        }
        let token = self.take(keys, request, key, now);
        AcquireReply::Acquired { ttl, token, slot }
    }

    /// `lua/acquire.lua`'s `take`: the next token of the group, and `key` written for
    /// `request`'s attempt; the acquisition notice.
    fn take(
        &mut self,
        keys: &LeaseKeys,
        request: &LeaseRequest,
        key: &str,
        now: Instant,
    ) -> FencingToken {
        let last = self.fences.get(keys.fence()).copied().unwrap_or(0);
        let token = last + 1;
        self.fences.insert(keys.fence().to_owned(), token);
        self.leases.insert(
            key.to_owned(),
            Entry {
                owner: request.attempt().owner().expose().to_owned(),
                operation: request.attempt().operation().as_str().to_owned(),
                token,
                holder: request.holder().cloned(),
                expires_at: deadline_after(now, request.ttl()),
                lock_delay: request.lock_delay().unwrap_or_default(),
            },
        );
        if !self.watchers.is_empty() {
            // The channel's name is made only when someone may listen.
            self.notify(&keys.acquire_channel());
        }
        FencingToken::new(token)
    }

    /// Whether `id` may take one of `free` free slots of the lease whose line is `line`
    /// (`lua/line.lua`): dead waiters ahead of it are removed.
    fn entitled(
        &mut self,
        line: &str,
        id: &WaiterId,
        free: usize,
        permits: usize,
        now: Instant,
    ) -> line::Entitled {
        let Some(waiting) = self.lines.get_mut(line) else {
            return line::Entitled::Outside;
        };
        if waiting.is_gone(now) {
            self.lines.remove(line);
            return line::Entitled::Outside;
        }
        let kept_alive = &self.kept;
        // The session's keep-alive key, as `LeaseKeys::keep_alive` names it.
        let kept = |waiter: &str| {
            let key = [line, ":", line::session_of(waiter)].concat();
            kept_alive.get(&key).is_some_and(|until| now < *until)
        };
        let entitled = waiting.entitled(id.as_str(), free, permits, now, &kept);
        if waiting.is_gone(now) {
            self.lines.remove(line);
        }
        entitled
    }

    /// A refused acquisition that waits joins `line`, or keeps its place: its rank. A try
    /// leaves the line as it is.
    fn wait_in_line(
        &mut self,
        line: &str,
        id: &WaiterId,
        place: LinePlace,
        now: Instant,
    ) -> Option<u32> {
        if !place.waits() {
            return None;
        }
        let waiting = self
            .lines
            .entry(line.to_owned())
            .or_insert_with(|| line::Line::new(now));
        if waiting.is_gone(now) {
            *waiting = line::Line::new(now);
        }
        Some(waiting.wait(id.as_str(), now))
    }
}
