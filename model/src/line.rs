//! The resource's line of waiters (issue #39): who is served next when a slot is free,
//! as `lua/line.lua` (and `src/backend/memory/line.rs`) keep it.
//!
//! On the server the line is a ZSET of waiter ids scored by the server time they joined
//! at, and one alive key per line session (`SET <line>:<session> PX KEEP`, K). A client's
//! waiters share its session; here every attempt has a session of its own (the
//! conformance replay gives each attempt one), so a dead waiter's entry is never kept
//! alive by its client's next attempt. An entry is alive while its session's alive key
//! lives or for KEEP after it joined; it leaves the line only when a walk from the head
//! finds it dead, or when its own attempt is granted — never by time alone.
//!
//! Every acquisition first scans the lease's keys as before (`server.rs`, `Scan`): a
//! replay and a conflict are answered from the keys, the line untouched. Only where a slot
//! is free does the line decide who takes it (`entitled`): an attempt whose entry has
//! fewer than `f` live entries ahead of it, for `f` free slots, or a newcomer while fewer
//! than `f` live entries are in the line.

use crate::server::{AcquireReply, Attempt, Call, Data, Scan, Time};

/// One waiter: its attempt id (the same for every replay of the attempt) and the server
/// time it joined at (the ZSET score). Whether it is alive is its session's alive key's
/// (`Data::alive`) and its join's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub attempt: Attempt,
    pub joined: Time,
}

/// A line session's alive key: the attempt whose session wrote it (one session per
/// attempt here) and its expiry. It lives apart from the entries: a K before the join
/// keeps the entry the join makes, and it outlives its entry's removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AliveKey {
    pub attempt: Attempt,
    pub until: Time,
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

/// What the walk from the head (`lua/line.lua` `entitled`) decides for an attempt and
/// `f` free slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entitled {
    /// Live entries ahead of it take the free slots.
    No,
    /// It may, and it is in the line: it leaves it.
    InLine,
    /// It may, and it is not in the line.
    Outside,
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

    /// Whether `attempt`'s session keeps its waiters alive at server time `now`: its
    /// alive key lives.
    pub fn kept(&self, attempt: Attempt, now: Time) -> bool {
        self.alive
            .iter()
            .any(|k| k.attempt == attempt && k.until > now)
    }

    /// Whether `entry` is alive at server time `now`: its session's alive key lives, or it
    /// joined less than `keep` ago (a clock set back by a failover counts the time since
    /// joining as none).
    pub fn is_alive(&self, entry: &Entry, now: Time, keep: Time) -> bool {
        now.saturating_sub(entry.joined) < keep || self.kept(entry.attempt, now)
    }

    /// The live entries ahead of `attempt`'s place: those before its entry, alive or not
    /// (its own call shows it alive: the walk never removes the caller's entry), else
    /// every live entry.
    pub fn alive_ahead(&self, attempt: Attempt, now: Time, keep: Time) -> usize {
        let ahead = match self.rank_of(attempt) {
            Some(rank) => &self.line[..rank],
            None => &self.line[..],
        };
        ahead.iter().filter(|e| self.is_alive(e, now, keep)).count()
    }

    /// The first live entry of the line, if any.
    pub fn first_alive(&self, now: Time, keep: Time) -> Option<Entry> {
        self.line
            .iter()
            .copied()
            .find(|e| self.is_alive(e, now, keep))
    }
}

impl Call<'_> {
    /// A: try_acquire's acquisition. It never joins the line; on a free slot it takes the
    /// slot only if the line lets it (removing its entry if it had one).
    pub fn acquire(&mut self, attempt: Attempt) -> AcquireReply {
        match self.scan(attempt) {
            Scan::Decided(reply) | Scan::Full(reply) => reply,
            Scan::Free { slot, free } => {
                if !self.bugs().try_jumps && self.entitled(attempt, free) == Entitled::No {
                    return AcquireReply::Contended;
                }
                self.leave(attempt);
                self.take(slot, attempt)
            }
        }
    }

    /// W: the wait loop's acquisition (`+` its first, `=` a later one: both answer alike).
    /// Refused, it joins the line (or finds its place there, writing nothing) and learns
    /// its rank; granted from the line, it leaves the line and the entry that has just come
    /// within the first `permits` is told it is its turn.
    pub fn wait(&mut self, attempt: Attempt) -> WaitReply {
        let (reply, rank, turn) = match self.scan(attempt) {
            Scan::Decided(reply) => (reply, None, None),
            Scan::Full(reply) => (reply, Some(self.join(attempt)), None),
            Scan::Free { slot, free } => match self.entitled(attempt, free) {
                Entitled::No => (AcquireReply::Contended, Some(self.join(attempt)), None),
                Entitled::Outside => (self.take(slot, attempt), None, None),
                Entitled::InLine => {
                    self.leave(attempt);
                    let reply = self.take(slot, attempt);
                    let n = usize::from(self.config.permits);
                    (reply, None, self.data.line.get(n - 1).map(|e| e.attempt))
                }
            },
        };
        WaitReply { reply, rank, turn }
    }

    /// K: the attempt's line session keeps its waiters alive, `SET alive PX KEEP`, in the
    /// line or not (`lua/line.lua` `keep`). It answers nothing the waiter reads.
    pub fn keep_alive(&mut self, attempt: Attempt) {
        let until = self.now + self.config.keep;
        let alive = &mut self.data.alive;
        alive.retain(|k| k.attempt != attempt);
        alive.push(AliveKey { attempt, until });
        alive.sort();
    }

    /// The walk from the head (`lua/line.lua` `entitled`): whether `attempt` may take one
    /// of `free` free slots — its entry has fewer than `free` live entries ahead of it, or
    /// it has none and fewer than `free` live entries are in the line. Dead entries met
    /// before its entry or the `free`-th live one are removed; entries behind stay until a
    /// walk reaches them, and so does the caller's own entry, alive or not.
    fn entitled(&mut self, attempt: Attempt, free: usize) -> Entitled {
        if self.bugs().line_ignored {
            return match self.data.rank_of(attempt) {
                Some(_) => Entitled::InLine,
                None => Entitled::Outside,
            };
        }
        let (now, keep) = (self.now, self.config.keep);
        let (mut live, mut at) = (0, 0);
        while at < self.data.line.len() {
            let entry = self.data.line[at];
            if entry.attempt == attempt {
                return if live < free {
                    Entitled::InLine
                } else {
                    Entitled::No
                };
            }
            if live >= free {
                return Entitled::No;
            }
            // With `no_prune` a dead entry is counted as a live one and left in place.
            if self.bugs().no_prune || self.data.is_alive(&entry, now, keep) {
                (live, at) = (live + 1, at + 1);
            } else {
                self.data.line.remove(at);
            }
        }
        if live < free {
            Entitled::Outside
        } else {
            Entitled::No
        }
    }

    /// Joins the line at its tail, scored `max(tail's score + 1 µs, now)` as a fencing
    /// token is (so a clock set back by a failover cannot put a newcomer ahead), or finds
    /// the entry in it (writing nothing: its session keeps it alive).
    fn join(&mut self, attempt: Attempt) -> u8 {
        let now = self.now;
        let line = &mut self.data.line;
        if let Some(rank) = line.iter().position(|e| e.attempt == attempt) {
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
            // The score's `+ 1` is a µs, far below a tick: in ticks the score is the
            // tail's or now, and the entry's place (the tail) is what orders it.
            let tail = line.last().map(|e| e.joined);
            (line.len(), tail.map_or(now, |t| t.max(now)))
        };
        line.insert(at, Entry { attempt, joined });
        at as u8
    }

    /// The attempt's entry leaves the line (`ZREM`), if it has one; its session's alive
    /// key stays (the session's, not the entry's).
    fn leave(&mut self, attempt: Attempt) {
        self.data.line.retain(|e| e.attempt != attempt);
    }
}

#[cfg(test)]
#[path = "line_tests.rs"]
mod tests;
