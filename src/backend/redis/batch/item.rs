//! One operation as it waits in the queue and travels in a script call: its keys and the two
//! arguments `lua/batch.lua` takes per item, and the `EVALSHA` of a batch of them.

use std::time::Duration;

use redis::Cmd;

use super::super::scripts;
use crate::protocol::{Attempt, LeaseKeys, LeaseRequest};

/// What an item does, as far as the queue cares (see `Item::urgent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Renew,
    Release,
    Inspect,
}

/// One operation on one lease, owning its keys and arguments so it can wait in the queue:
/// the two arguments `lua/batch.lua` takes per item, ready to send.
///
/// No `Debug`: it holds the owner token, a bearer secret.
pub(in super::super) struct Item {
    kind: Kind,
    lease: String,
    /// The slot keys a counted lease's acquisition reads (`LeaseKeys::slot_keys`), in
    /// place of `lease`; empty for every other item.
    slots: Vec<String>,
    /// The group's fence counter: acquire only.
    fence: Option<String>,
    /// The kind letter, then for a counted acquisition the number of slots and a space,
    /// then the ttl in milliseconds for acquire and renew (for an acquire, then its
    /// lock-delay after a slash if it has one), then for an acquire the holder label if
    /// any: `A30000`, `A30000 web-7`, `A30000/2000`, `P4 30000`.
    head: String,
    /// `"<owner> <op> "`: the lease value's prefix while this attempt holds it.
    mine: String,
}

impl Item {
    fn new(kind: Kind, keys: &LeaseKeys, attempt: &Attempt, head: String) -> Self {
        let (owner, operation) = (attempt.owner().expose(), attempt.operation().as_str());
        let mut mine = String::with_capacity(owner.len() + operation.len() + 2);
        for part in [owner, " ", operation, " "] {
            mine.push_str(part);
        }
        Self {
            kind,
            lease: keys.lease.clone(),
            slots: Vec::new(),
            fence: (kind == Kind::Acquire).then(|| keys.fence.clone()),
            head,
            mine,
        }
    }

    pub(in super::super) fn acquire(keys: &LeaseKeys, request: &LeaseRequest) -> Self {
        // The ttl, and its lock-delay after a slash: `30000/2000`.
        let ttl = match request.lock_delay() {
            None => request.ttl().as_millis().to_string(),
            Some(delay) => format!("{}/{}", request.ttl().as_millis(), delay.as_millis()),
        };
        let holder = request.holder();
        // A counted lease's acquisition reads every slot; keys that already name a slot
        // are read as a lease of their own.
        let slots = match keys.slot() {
            None if keys.permits() > 1 => keys.permits(),
            _ => 0,
        };
        let head = match (slots, holder) {
            // A label holds no space (`HolderLabel`): the script splits at the first one.
            (0, Some(holder)) => format!("A{ttl} {holder}"),
            (0, None) => format!("A{ttl}"),
            (n, Some(holder)) => format!("P{n} {ttl} {holder}"),
            (n, None) => format!("P{n} {ttl}"),
        };
        let mut item = Self::new(Kind::Acquire, keys, request.attempt(), head);
        if slots > 0 {
            item.slots = keys.slot_keys();
        }
        item
    }

    pub(in super::super) fn renew(keys: &LeaseKeys, attempt: &Attempt, ttl: Duration) -> Self {
        Self::new(Kind::Renew, keys, attempt, format!("N{}", ttl.as_millis()))
    }

    /// The script publishes the release notice on `keys.release_channel`, which it derives
    /// from the lease key by the same rule ([`LeaseKeys`]).
    pub(in super::super) fn release(keys: &LeaseKeys, attempt: &Attempt) -> Self {
        Self::new(Kind::Release, keys, attempt, "R".to_owned())
    }

    pub(in super::super) fn inspect(keys: &LeaseKeys, attempt: &Attempt) -> Self {
        Self::new(Kind::Inspect, keys, attempt, "I".to_owned())
    }

    /// The key a cluster routes the item by.
    pub(in super::super) fn route(&self) -> &str {
        &self.lease
    }

    /// A renewal: its reply is worth something only while the lease's local validity
    /// lasts, so its caller's deadline is absolute (see `Bound`).
    pub(in super::super) fn is_renewal(&self) -> bool {
        self.kind == Kind::Renew
    }

    /// A renewal or a release: an operation on a lease this process holds — at most one at
    /// a time per lease, so their number is bounded by the leases held. They go ahead of
    /// acquisitions and reads, and are never refused for want of room.
    pub(super) fn urgent(&self) -> bool {
        matches!(self.kind, Kind::Renew | Kind::Release)
    }
}

/// The `EVALSHA` of `lua/batch.lua` for `items` under call id `id`: their keys, then the
/// id and their arguments.
pub(in super::super) fn command(id: u64, items: &[Item]) -> Cmd {
    let keys: usize = items
        .iter()
        .map(|i| i.slots.len().max(1) + usize::from(i.fence.is_some()))
        .sum();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts::BATCH.get_hash()).arg(keys);
    for item in items {
        if item.slots.is_empty() {
            cmd.arg(&item.lease);
        }
        for slot in &item.slots {
            cmd.arg(slot);
        }
        if let Some(fence) = &item.fence {
            cmd.arg(fence);
        }
    }
    cmd.arg(id);
    for item in items {
        cmd.arg(&item.head).arg(&item.mine);
    }
    cmd
}
