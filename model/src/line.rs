//! The resource's line of waiters (issue #39): who is served next when a slot is free.
//!
//! On the server the line is a ZSET of attempt ids scored by the server time they joined
//! at, and one alive key per entry (`SET alive PX KEEP`). An entry is alive while its
//! alive key lives or for KEEP after it joined; it leaves the line only when a pruning
//! walk finds it dead, or when its own attempt is granted — never by time alone.
//!
//! Every acquisition first scans the lease's keys as before (`server.rs`, `Scan`): a
//! replay and a conflict are answered from the keys, the line untouched. Only where a slot
//! is free does the line decide who takes it: the first `f` live entries, for `f` free
//! slots, or a newcomer while fewer than `f` entries remain after pruning.

use crate::server::{AcquireReply, Attempt, Call, Data, Scan, Time};

/// One waiter: its attempt id (the same for every replay of the attempt), the server time
/// it joined at (the ZSET score), and its alive key's expiry, if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub attempt: Attempt,
    pub joined: Time,
    pub alive_until: Option<Time>,
}

impl Entry {
    /// Alive at server time `now`: its alive key lives, or it joined less than `keep` ago
    /// (a clock set back by a failover counts the time since joining as none).
    pub fn alive(&self, now: Time, keep: Time) -> bool {
        self.alive_until.is_some_and(|until| until > now) || now.saturating_sub(self.joined) < keep
    }
}

/// A waiting acquisition's reply: the acquisition's own (ACQUIRED, REPLAYED, CONFLICT,
/// CONTENDED, DELAYED), the attempt's rank in the line when it was left waiting, and the
/// attempt told it is now its turn (a notice on that waiter's channel) after a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitReply {
    pub reply: AcquireReply,
    pub rank: Option<u8>,
    pub turn: Option<Attempt>,
}

/// A keep-alive's reply: the attempt's rank (none when it is not in the line: nothing
/// joins), and whether a slot is free (`EXISTS` on the lease's keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeepAliveReply {
    pub rank: Option<u8>,
    pub free: bool,
}

impl Data {
    /// `attempt`'s rank in the line (`ZRANK`), if it is in it.
    pub fn rank_of(&self, attempt: Attempt) -> Option<usize> {
        self.line.iter().position(|e| e.attempt == attempt)
    }

    /// Slots with no key: free to be granted (a key in its lock-delay is not free).
    pub fn free_slots(&self) -> usize {
        self.slots.iter().filter(|k| k.is_none()).count()
    }

    /// The live entries ahead of `attempt`'s place: those before its entry if that is
    /// alive, else every live entry (a dead entry holds no place).
    pub fn alive_ahead(&self, attempt: Attempt, now: Time, keep: Time) -> usize {
        let alive = |e: &&Entry| e.alive(now, keep);
        match self.rank_of(attempt) {
            Some(rank) if self.line[rank].alive(now, keep) => {
                self.line[..rank].iter().filter(alive).count()
            }
            _ => self
                .line
                .iter()
                .filter(|e| e.attempt != attempt)
                .filter(alive)
                .count(),
        }
    }

    /// The first live entry of the line, if any.
    pub fn first_alive(&self, now: Time, keep: Time) -> Option<Entry> {
        self.line.iter().copied().find(|e| e.alive(now, keep))
    }
}

impl Call<'_> {
    /// A: try_acquire's acquisition. It never joins the line; on a free slot it prunes
    /// and takes the slot only if the line lets it (removing its entry if it had one).
    pub fn acquire(&mut self, attempt: Attempt) -> AcquireReply {
        match self.scan(attempt) {
            Scan::Decided(reply) | Scan::Full(reply) => reply,
            Scan::Free { slot, free } => {
                if !self.bugs().try_jumps && !self.may_take(attempt, free) {
                    return AcquireReply::Contended;
                }
                self.leave(attempt);
                self.take(slot, attempt)
            }
        }
    }

    /// W: the wait loop's acquisition. Refused, it joins the line (or refreshes its
    /// entry) and learns its rank; granted, it leaves the line and the entry that has just
    /// come within the first `permits` is told it is its turn.
    pub fn wait(&mut self, attempt: Attempt) -> WaitReply {
        let (reply, rank, turn) = match self.scan(attempt) {
            Scan::Decided(reply) => (reply, None, None),
            Scan::Full(reply) => (reply, Some(self.join(attempt)), None),
            Scan::Free { slot, free } if self.may_take(attempt, free) => {
                self.leave(attempt);
                let reply = self.take(slot, attempt);
                let n = usize::from(self.config.permits);
                (reply, None, self.data.line.get(n - 1).map(|e| e.attempt))
            }
            Scan::Free { .. } => (AcquireReply::Contended, Some(self.join(attempt)), None),
        };
        WaitReply { reply, rank, turn }
    }

    /// K: `SET alive PX KEEP` for the attempt's entry if it has one, `ZRANK`, `EXISTS`.
    pub fn keep_alive(&mut self, attempt: Attempt) -> KeepAliveReply {
        let until = self.now + self.config.keep;
        let rank = self.data.rank_of(attempt);
        if let Some(rank) = rank {
            self.data.line[rank].alive_until = Some(until);
        }
        let permits = usize::from(self.config.permits);
        KeepAliveReply {
            rank: rank.map(|r| r as u8),
            free: self.data.slots[..permits].iter().any(Option::is_none),
        }
    }

    /// Whether `attempt` may take one of `free` free slots: after pruning, it is among the
    /// first `free` entries, or it is not in the line and fewer than `free` entries are.
    fn may_take(&mut self, attempt: Attempt, free: usize) -> bool {
        if self.bugs().line_ignored {
            return true;
        }
        self.prune(free);
        match self.data.rank_of(attempt) {
            Some(rank) => rank < free,
            None => self.data.line.len() < free,
        }
    }

    /// The walk from the head: entries that are not alive are removed until the first
    /// `free` entries are alive or the line ends. Dead entries further back stay until
    /// they come within reach: they can block nobody before then.
    fn prune(&mut self, free: usize) {
        if self.bugs().no_prune {
            return;
        }
        let (now, keep) = (self.now, self.config.keep);
        let mut at = 0;
        while at < free && at < self.data.line.len() {
            if self.data.line[at].alive(now, keep) {
                at += 1;
            } else {
                self.data.line.remove(at);
            }
        }
    }

    /// Joins the line at its tail, scored `max(tail's score + 1, now)` as a fencing token
    /// is (so a clock set back by a failover cannot put a newcomer ahead), or refreshes the
    /// entry's alive key.
    fn join(&mut self, attempt: Attempt) -> u8 {
        let (now, keep) = (self.now, self.config.keep);
        let line = &mut self.data.line;
        if let Some(rank) = line.iter().position(|e| e.attempt == attempt) {
            line[rank].alive_until = Some(now + keep);
            return rank as u8;
        }
        let (at, joined) = if self.config.bugs.join_at_time {
            // The broken score: `TIME` alone, after every entry that joined at or before
            // now, ahead of any a clock set back left later.
            let at = line
                .iter()
                .position(|e| e.joined > now)
                .unwrap_or(line.len());
            (at, now)
        } else {
            let tail = line.last().map(|e| e.joined.saturating_add(1));
            (line.len(), tail.map_or(now, |t| t.max(now)))
        };
        let entry = Entry {
            attempt,
            joined,
            alive_until: None,
        };
        line.insert(at, entry);
        at as u8
    }

    /// The attempt's entry leaves the line (`ZREM` and its alive key), if it has one.
    fn leave(&mut self, attempt: Attempt) {
        self.data.line.retain(|e| e.attempt != attempt);
    }
}

#[cfg(test)]
#[path = "line_tests.rs"]
mod tests;
