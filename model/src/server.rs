//! The server's data and the scripts' branches over it: `lua/acquire.lua`, `renew.lua`,
//! `release.lua`, `inspect.lua` (with the reads of `owner.lua`), one function per script,
//! one `match` arm or `if` per branch, in the scripts' order.
//!
//! Values are kept as fields, not strings: a key holds the attempt (owner token and
//! operation id), the fencing token, its expiry and its lock-delay. Times are the
//! server's clock; the model passes the clock in, as a script reads `TIME` once per call.

use crate::config::{Bugs, Config};
use crate::line::{AliveKey, Entry};

/// A clock reading in ticks.
pub type Time = u8;
/// A fencing token.
pub type Token = u16;

/// One attempt: the owner token (one per client here) and the operation id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attempt {
    pub client: u8,
    pub op: u8,
}

/// A lease key's value and expiry: `"<owner> <op> <token>[ d<delay>]"` with `PX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub attempt: Attempt,
    pub token: Token,
    /// When the key expires (server time): the lease's end plus its lock-delay.
    pub expires: Time,
    /// The lock-delay the value carries, 0 for none.
    pub delay: Time,
}

impl Key {
    /// Whether the lease itself has ended and the key holds only its lock-delay
    /// (`owner.lua` `left_of`: `PTTL <= delay`).
    pub fn ended(&self, now: Time) -> bool {
        self.delay > 0 && self.expires - now <= self.delay
    }

    /// The lease's own remaining time (the delay's, once ended), as replies carry it.
    pub fn left(&self, now: Time) -> Time {
        if self.ended(now) {
            self.expires - now
        } else {
            self.expires - now - self.delay
        }
    }
}

/// What one Redis node holds for the resource: its slot keys, the group's fence counter,
/// and the resource's line of waiters with its sessions' alive keys (`line.rs`), which
/// are data like the keys: a flush empties them, a failover may lose their last writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Data {
    pub slots: Vec<Option<Key>>,
    pub fence: Option<Token>,
    pub line: Vec<Entry>,
    /// The line sessions' alive keys, by attempt (sorted: one state, one order).
    pub alive: Vec<AliveKey>,
}

impl Data {
    pub fn empty(config: &Config) -> Data {
        Data {
            slots: vec![None; config.slot_room()],
            fence: None,
            line: Vec::new(),
            alive: Vec::new(),
        }
    }

    /// Drops every key whose expiry has come (Redis never serves an expired key): lease
    /// keys and the line sessions' alive keys. A line entry itself (a ZSET member) never
    /// expires.
    pub fn expire(&mut self, now: Time) {
        for slot in &mut self.slots {
            if slot.is_some_and(|key| key.expires <= now) {
                *slot = None;
            }
        }
        self.alive.retain(|k| k.until > now);
    }

    /// The slot whose key is `attempt`'s and whose lease has not ended, if any.
    pub fn live_slot_of(&self, attempt: Attempt, now: Time) -> Option<usize> {
        self.slots
            .iter()
            .position(|k| k.is_some_and(|k| k.attempt == attempt && !k.ended(now)))
    }
}

/// `acquire.lua`'s replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    Acquired { token: Token, slot: u8 },
    Replayed { left: Time, token: Token, slot: u8 },
    Conflict,
    Contended,
    Delayed,
}

/// What the scan of the lease's keys decides before the line is consulted.
pub(crate) enum Scan {
    /// Decided by the keys alone (REPLAYED, CONFLICT): the line is not touched.
    Decided(AcquireReply),
    /// No slot is free (held by others, or in its lock-delay): the refusal.
    Full(AcquireReply),
    /// `free` slots are free; `slot` is the one a grant takes.
    Free { slot: usize, free: usize },
}

/// `renew.lua`'s and `release.lua`'s replies (RELEASED stands in for RENEWED in a release).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Done,
    Absent,
    NotOwner,
}

/// `inspect.lua`'s replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InspectReply {
    HeldByAttempt(Token),
    HeldByOther(Token),
    Delayed(Token),
    Absent,
}

/// One script call: the configuration, the node's data and its clock.
pub struct Call<'a> {
    pub config: &'a Config,
    pub data: &'a mut Data,
    pub now: Time,
}

impl Call<'_> {
    pub(crate) fn bugs(&self) -> Bugs {
        self.config.bugs
    }

    /// `take`: `token = max(last + 1, TIME)`, stored back, and the key written with
    /// `PX ttl + delay`.
    pub(crate) fn take(&mut self, slot: usize, attempt: Attempt) -> AcquireReply {
        let last = self.data.fence.unwrap_or(0);
        let token = if self.bugs().no_time_floor {
            last + 1
        } else {
            (last + 1).max(Token::from(self.now))
        };
        self.data.fence = Some(token);
        self.data.slots[slot] = Some(Key {
            attempt,
            token,
            expires: self.now + self.config.ttl + self.config.delay,
            delay: self.config.delay,
        });
        AcquireReply::Acquired {
            token,
            slot: slot as u8,
        }
    }

    /// The scan of the lease's keys, before the line is consulted: `acquire` (a plain
    /// lease) or `acquire_slot` (a counted one).
    pub(crate) fn scan(&mut self, attempt: Attempt) -> Scan {
        if self.config.permits == 1 {
            self.scan_plain(attempt)
        } else {
            self.scan_slots(attempt)
        }
    }

    fn scan_plain(&mut self, attempt: Attempt) -> Scan {
        let Some(key) = self.data.slots[0] else {
            return Scan::Free { slot: 0, free: 1 };
        };
        if key.ended(self.now) {
            if self.bugs().ignore_lock_delay {
                return Scan::Free { slot: 0, free: 1 };
            }
            return Scan::Full(AcquireReply::Delayed);
        }
        if key.attempt == attempt {
            if self.bugs().replay_new_token {
                return Scan::Decided(self.take(0, attempt));
            }
            return Scan::Decided(AcquireReply::Replayed {
                left: key.left(self.now),
                token: key.token,
                slot: 0,
            });
        }
        if key.attempt.client == attempt.client {
            return Scan::Decided(AcquireReply::Conflict);
        }
        Scan::Full(AcquireReply::Contended)
    }

    /// The slot scan: this attempt's slot is replayed, else a conflict refuses, else the
    /// free slots are counted (the first is the one taken), else the earliest slot's
    /// refusal (DELAYED or CONTENDED).
    fn scan_slots(&mut self, attempt: Attempt) -> Scan {
        let n = usize::from(self.config.permits);
        let (mut first, mut free, mut conflict) = (None, 0, false);
        let mut least = None::<(Time, bool)>;
        for i in 0..n {
            let Some(key) = self.data.slots[i] else {
                (first, free) = (first.or(Some(i)), free + 1);
                continue;
            };
            let ended = key.ended(self.now);
            if ended && self.bugs().ignore_lock_delay {
                (first, free) = (first.or(Some(i)), free + 1);
                continue;
            }
            if !ended && key.attempt == attempt {
                if self.bugs().replay_new_token {
                    return Scan::Decided(self.take(i, attempt));
                }
                let (left, token, slot) = (key.left(self.now), key.token, i as u8);
                return Scan::Decided(AcquireReply::Replayed { left, token, slot });
            }
            conflict |= !ended && key.attempt.client == attempt.client;
            let left = key.left(self.now);
            if least.is_none_or(|(l, _)| left < l) {
                least = Some((left, ended));
            }
        }
        if conflict {
            return Scan::Decided(AcquireReply::Conflict);
        }
        if let Some(slot) = first {
            return Scan::Free { slot, free };
        }
        if self.bugs().slot_scan_extra && self.data.slots[n].is_none() {
            return Scan::Free { slot: n, free: 1 };
        }
        match least {
            Some((_, true)) => Scan::Full(AcquireReply::Delayed),
            _ => Scan::Full(AcquireReply::Contended),
        }
    }

    /// `owner.lua` `not_held`: the `"<owner> <op> "` prefix, the whole attempt.
    fn owns(&self, key: &Key, attempt: Attempt) -> bool {
        if self.bugs().owner_only {
            key.attempt.client == attempt.client
        } else {
            key.attempt == attempt
        }
    }

    /// `renew`: owner-checked; a lease in its lock-delay has ended; else `PEXPIRE`.
    pub fn renew(&mut self, slot: u8, attempt: Attempt) -> Reply {
        let now = self.now;
        let Some(key) = self.data.slots[usize::from(slot)] else {
            return Reply::Absent;
        };
        if !self.bugs().renew_without_owner_check && !self.owns(&key, attempt) {
            return Reply::NotOwner;
        }
        if key.ended(now) {
            return Reply::Absent;
        }
        let expires = now + self.config.ttl + key.delay;
        self.data.slots[usize::from(slot)] = Some(Key { expires, ..key });
        Reply::Done
    }

    /// `release`: owner-checked `DEL`, a lock-delay included, ended or not.
    pub fn release(&mut self, slot: u8, attempt: Attempt) -> Reply {
        let Some(key) = self.data.slots[usize::from(slot)] else {
            return Reply::Absent;
        };
        if !self.bugs().release_without_owner_check && !self.owns(&key, attempt) {
            return Reply::NotOwner;
        }
        self.data.slots[usize::from(slot)] = None;
        Reply::Done
    }

    /// `inspect`: read only.
    pub fn inspect(&self, slot: u8, attempt: Attempt) -> InspectReply {
        match self.data.slots[usize::from(slot)] {
            None => InspectReply::Absent,
            Some(key) if key.ended(self.now) => InspectReply::Delayed(key.token),
            Some(key) if key.attempt == attempt => InspectReply::HeldByAttempt(key.token),
            Some(key) => InspectReply::HeldByOther(key.token),
        }
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
