//! One operation as it waits in the queue and travels in a script call: its keys and the two
//! arguments `lua/batch.lua` takes per item, and the `EVALSHA` of a batch of them.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisWrite, ToRedisArgs, Value};

use super::super::{ServerCapabilities, scripts};
use super::text::Text;
use crate::protocol::{
    Attempt, Holding, LeaseKeys, LeaseRequest, LinePlace, LineSession, WaiterId,
};

/// What an item does, as far as the queue cares (see `Item::urgent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Renew,
    Release,
    Inspect,
    Leave,
    Keep,
}

/// One operation on one lease, owning its keys and arguments so it can wait in the queue:
/// the two arguments `lua/batch.lua` takes per item, ready to send.
///
/// No `Debug`: it holds the owner token, a bearer secret.
#[derive(Clone)]
pub(in super::super) struct Item {
    kind: Kind,
    lease: Text,
    /// The slot keys a counted lease's acquisition reads (`LeaseKeys::slot_keys`), in
    /// place of `lease`; empty for every other item.
    slots: Vec<String>,
    /// The keys after the lease's (or its slots'): the group's fence counter and the
    /// lease's line for an acquisition, the line for an inspection (which counts it); none
    /// for the other items.
    after: Vec<Text>,
    /// The kind letter, then for a counted acquisition the number of slots and a space,
    /// then the ttl in milliseconds for acquire and renew (for an acquire, then its
    /// lock-delay after a slash if it has one), then for an acquire a space, `+` (it
    /// joins), `=` (it waits in line already) or `-` (a try), its waiter id, and the
    /// holder label if any, after a space:
    /// `A30000 +0123456789abcdef`, `A30000/2000 -0123456789abcdef web-7`,
    /// `P4 30000 +0123456789abcdef`.
    head: Head,
    /// `"<owner> <op> "`: the lease value's prefix while this attempt holds it.
    mine: Text,
    /// The lease key's exact value, for an operation a node's compare-and-set command can
    /// run (`Item::native`): a renewal of a lease without lock-delay, a release — when the
    /// holding knows it. `None`: the script only.
    value: Option<Arc<str>>,
    /// A release's notice channel (`LeaseKeys::release_channel`), which its native form
    /// publishes on itself; `None` for every other item.
    channel: Option<Text>,
}

/// An item's first argument (`Item::head`): a renewal's is made as it is written, the
/// others' are text.
#[derive(Clone)]
enum Head {
    Text(String),
    /// A kind letter alone: `R`, `I`, `I-`.
    Static(&'static str),
    /// `N<ttl in ms>`.
    Renew {
        ttl_ms: u64,
    },
}

impl ToRedisArgs for Head {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            Self::Text(text) => out.write_arg(text.as_bytes()),
            Self::Static(text) => out.write_arg(text.as_bytes()),
            Self::Renew { ttl_ms } => out.write_arg_fmt(format_args!("N{ttl_ms}")),
        }
    }
}

/// What a node's own command answered for an item, in the script's words.
pub(in super::super) enum NativeReply {
    /// The reply the script would have given (a status word), or the item's error.
    Reply(Value),
    /// The key holds this attempt's lease under another value than the one the item
    /// compared with (a replay that kept another holder label, say): only the script,
    /// which checks the `"<owner> <op> "` prefix, can answer.
    Script,
}

/// `keys`' name at `range` of the string they keep, shared; a copy if the range is not one
/// of theirs (never: the ranges come from `keys`).
fn shared(keys: &LeaseKeys, range: std::ops::Range<usize>) -> Text {
    let (whole, _) = keys.lease_part();
    Text::part(whole, range.clone())
        .unwrap_or_else(|| Text::Own(whole.get(range).unwrap_or_default().to_owned()))
}

impl Item {
    fn new(kind: Kind, keys: &LeaseKeys, attempt: &Attempt, head: Head) -> Self {
        let (owner, operation) = (attempt.owner().expose(), attempt.operation().as_str());
        let mut mine = String::with_capacity(owner.len() + operation.len() + 2);
        for part in [owner, " ", operation, " "] {
            mine.push_str(part);
        }
        Self::with_mine(kind, keys, Text::Own(mine), head)
    }

    /// An item on a lease this process holds: its key and its `mine` are parts of what
    /// the lease keeps (`keys`, the holding's value), not copies — when the value is known
    /// and starts as `mine` does.
    fn held(kind: Kind, keys: &LeaseKeys, holding: &Holding, head: Head) -> Self {
        let attempt = holding.attempt();
        let (owner, operation) = (attempt.owner().expose(), attempt.operation().as_str());
        // The value starts "<owner> <op> " when this attempt's acquisition stored it.
        let shared = holding.value().and_then(|value| {
            let rest = value
                .strip_prefix(owner)?
                .strip_prefix(' ')?
                .strip_prefix(operation)?
                .strip_prefix(' ')?;
            Text::part(value, 0..value.len() - rest.len())
        });
        match shared {
            Some(mine) => Self::with_mine(kind, keys, mine, head),
            None => Self::new(kind, keys, attempt, head),
        }
    }

    fn with_mine(kind: Kind, keys: &LeaseKeys, mine: Text, head: Head) -> Self {
        Self {
            kind,
            lease: shared(keys, keys.lease_part().1),
            slots: Vec::new(),
            after: match kind {
                Kind::Acquire => vec![shared(keys, keys.fence_range()), Text::Own(keys.line())],
                Kind::Inspect => vec![Text::Own(keys.line())],
                Kind::Renew | Kind::Release | Kind::Leave | Kind::Keep => Vec::new(),
            },
            head,
            mine,
            value: None,
            channel: None,
        }
    }

    pub(in super::super) fn acquire(
        keys: &LeaseKeys,
        request: &LeaseRequest,
        place: LinePlace,
        id: &WaiterId,
    ) -> Self {
        // A counted lease's acquisition reads every slot; keys that already name a slot
        // are read as a lease of their own.
        let slots = match keys.slot() {
            None if keys.permits() > 1 => keys.permits(),
            _ => 0,
        };
        // Written into one string: `A30000 +<id>`, `P4 30000/2000 -<id> web-7` — the kind
        // (a counted lease's with its slots), the ttl, its lock-delay after a slash, the
        // place, the waiter id, the holder label. (Writing to a `String` cannot fail.)
        let mut head = String::with_capacity(64);
        let _ = match slots {
            0 => write!(head, "A{}", request.ttl().as_millis()),
            n => write!(head, "P{n} {}", request.ttl().as_millis()),
        };
        if let Some(delay) = request.lock_delay() {
            let _ = write!(head, "/{}", delay.as_millis());
        }
        head.push_str(match place {
            LinePlace::Joins => " +",
            LinePlace::Waits => " =",
            LinePlace::Tries => " -",
        });
        head.push_str(id.as_str());
        // A label holds no space (`HolderLabel`): the script splits at the first one.
        if let Some(holder) = request.holder() {
            head.push(' ');
            head.push_str(holder.as_str());
        }
        let mut item = Self::new(Kind::Acquire, keys, request.attempt(), Head::Text(head));
        if slots > 0 {
            item.slots = keys.slot_keys();
        }
        item
    }

    pub(in super::super) fn renew(keys: &LeaseKeys, holding: &Holding, ttl: Duration) -> Self {
        let head = Head::Renew {
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let mut item = Self::held(Kind::Renew, keys, holding, head);
        // A lock-delay's renewal must also find the lease not ended: the script's test.
        if !holding.has_lock_delay() {
            item.value = holding.value().cloned();
        }
        item
    }

    /// The script publishes the release notice on `keys.release_channel`, which it derives
    /// from the lease key by the same rule ([`LeaseKeys`]).
    pub(in super::super) fn release(keys: &LeaseKeys, holding: &Holding) -> Self {
        let mut item = Self::held(Kind::Release, keys, holding, Head::Static("R"));
        if let Some(value) = holding.value() {
            item.value = Some(Arc::clone(value));
            item.channel = Some(shared(keys, keys.release_channel_range()));
        }
        item
    }

    pub(in super::super) fn inspect(keys: &LeaseKeys, attempt: &Attempt) -> Self {
        Self::new(Kind::Inspect, keys, attempt, Head::Static("I"))
    }

    /// An inspection of the lease alone, its line not read (its reply's count is `-`): for
    /// a Cluster slot that is migrating, where the importing node refuses (`TRYAGAIN`) a
    /// call naming the line, which has not moved, beside the lease, which has.
    pub(in super::super) fn inspect_lease(keys: &LeaseKeys, attempt: &Attempt) -> Self {
        let mut item = Self::new(Kind::Inspect, keys, attempt, Head::Static("I-"));
        item.after.clear();
        item
    }

    /// The waiter `id` (`attempt`'s) leaves the lease's line: its key is the line's (which
    /// routes as the lease does: one hash tag).
    pub(in super::super) fn leave(keys: &LeaseKeys, attempt: &Attempt, id: &WaiterId) -> Self {
        let head = format!("L{} {}", keys.permits(), id.as_str());
        let mut item = Self::new(Kind::Leave, keys, attempt, Head::Text(head));
        item.lease = Text::Own(keys.line());
        item
    }

    /// The line session `session` keeps its waiters in the lease's line alive (with
    /// `extend`, the line too): its key is the line's, and it carries no owner (its second
    /// argument is empty).
    pub(in super::super) fn keep(keys: &LeaseKeys, session: &LineSession, extend: bool) -> Self {
        Self {
            kind: Kind::Keep,
            lease: Text::Own(keys.line()),
            slots: Vec::new(),
            after: Vec::new(),
            head: Head::Text(format!(
                "K{}{}",
                session.as_str(),
                if extend { "+" } else { "" }
            )),
            mine: Text::Own(String::new()),
            value: None,
            channel: None,
        }
    }

    /// The key a cluster routes the item by.
    pub(in super::super) fn route(&self) -> &str {
        &self.lease
    }

    /// A renewal or a release: an operation on a lease this process holds — at most one at
    /// a time per lease, so their number is bounded by the leases held. They go ahead of
    /// acquisitions and reads, and are never refused for want of room.
    pub(super) fn urgent(&self) -> bool {
        matches!(self.kind, Kind::Renew | Kind::Release)
    }

    /// Whether a node with `capabilities` runs this item by its own command rather than
    /// by the script.
    pub(in super::super) fn native(&self, capabilities: ServerCapabilities) -> bool {
        self.value.is_some()
            && match self.kind {
                Kind::Renew => capabilities.renews_natively(),
                Kind::Release => capabilities.releases_natively(),
                Kind::Acquire | Kind::Inspect | Kind::Leave | Kind::Keep => false,
            }
    }

    /// How many commands `add_native` adds.
    pub(in super::super) fn native_commands(&self) -> usize {
        if self.kind == Kind::Release { 2 } else { 1 }
    }

    /// The item as the script runs it, whatever the node can do.
    pub(in super::super) fn scripted(&self) -> Self {
        Self {
            value: None,
            ..self.clone()
        }
    }

    /// Adds this item's own commands to `pipe` (an item `native` accepted), its reply's
    /// first:
    /// * a renewal: `SET lease value IFEQ value GET PX ttl`, which resets the expiry only if
    ///   the key holds exactly this lease, and answers what it held;
    /// * a release: `DELIFEQ lease value`, which deletes the key only if it holds exactly
    ///   this lease, then the notice's `PUBLISH` — sent whatever `DELIFEQ` finds, since
    ///   nothing can make it depend on that but a script. A notice after a release that
    ///   deleted nothing (the lease was gone already: rare) wakes waiters for one try that
    ///   finds what they would have found at their next; a refused `PUBLISH` (an ACL) is
    ///   ignored, as the script ignores it.
    pub(in super::super) fn add_native(&self, pipe: &mut Pipeline) {
        let value = self.value.as_deref().unwrap_or_default().as_bytes();
        if self.kind == Kind::Release {
            let channel = self.channel.as_deref().unwrap_or_default();
            pipe.cmd("DELIFEQ").arg(&self.lease).arg(value);
            pipe.cmd("PUBLISH").arg(channel).arg("released");
            return;
        }
        let cmd = pipe
            .cmd("SET")
            .arg(&self.lease)
            .arg(value)
            .arg("IFEQ")
            .arg(value)
            .arg("GET")
            .arg("PX");
        match &self.head {
            Head::Renew { ttl_ms } => cmd.arg(*ttl_ms),
            // Only a renewal is added so (`native`); a head of text is its kind letter, then
            // the ttl.
            Head::Text(head) => cmd.arg(head.get(1..).unwrap_or_default()),
            Head::Static(head) => cmd.arg(head.get(1..).unwrap_or_default()),
        };
    }

    /// What the script would have answered, from what the item's first command answered
    /// (`reply`):
    /// * a renewal, from the value `SET … IFEQ … GET` found: exactly this lease's: renewed;
    ///   none: absent; another attempt's: not the owner; this attempt's under another value:
    ///   only the script can tell.
    /// * a release, from what `DELIFEQ` deleted: the lease: released; nothing: only the
    ///   script can tell absent from not the owner (and release this attempt's lease held
    ///   under another value).
    pub(in super::super) fn native_reply(&self, reply: Value) -> NativeReply {
        let status = |word: &str| NativeReply::Reply(Value::SimpleString(word.to_owned()));
        if self.kind == Kind::Release {
            return match reply {
                Value::Int(1) => status("RELEASED"),
                Value::Int(0) => NativeReply::Script,
                reply => NativeReply::Reply(reply),
            };
        }
        let held = match &reply {
            Value::Nil => return status("ABSENT"),
            Value::BulkString(held) => held.as_slice(),
            Value::SimpleString(held) => held.as_bytes(),
            // An error (WRONGTYPE…) is the item's; anything else is malformed, for the
            // parser to say so.
            _ => return NativeReply::Reply(reply),
        };
        if Some(held) == self.value.as_deref().map(str::as_bytes) {
            status("RENEWED")
        } else if held.starts_with(self.mine.as_bytes()) {
            NativeReply::Script
        } else {
            status("NOT_OWNER")
        }
    }
}

/// The `EVALSHA` of `lua/batch.lua` for `items` under call id `id`: their keys, then the
/// id and their arguments.
pub(in super::super) fn command(id: u64, items: &[&Item]) -> Cmd {
    let (mut keys, mut bytes) = (0, 0);
    for item in items {
        keys += item.slots.len().max(1) + item.after.len();
        bytes += item.slots.iter().map(String::len).sum::<usize>()
            + item.after.iter().map(|key| key.len()).sum::<usize>()
            + item.lease.len()
            + item.mine.len()
            + HEAD_BYTES;
    }
    // Sized for the whole call up front: grown argument by argument, a call of 32 items
    // was reallocated and copied about ten times.
    let mut cmd = Cmd::with_capacity(keys + 2 * items.len() + 4, bytes + 64);
    cmd.arg("EVALSHA").arg(scripts::BATCH.get_hash()).arg(keys);
    for item in items {
        if item.slots.is_empty() {
            cmd.arg(&item.lease);
        }
        for slot in &item.slots {
            cmd.arg(slot);
        }
        for key in &item.after {
            cmd.arg(key);
        }
    }
    cmd.arg(id);
    for item in items {
        cmd.arg(&item.head).arg(&item.mine);
    }
    cmd
}

/// Room for an item's head in a call's size estimate: a renewal's `N<ttl>`, most
/// acquisitions' (an estimate; a longer head only grows the buffer once).
const HEAD_BYTES: usize = 48;

/// The pipeline of `items`' own commands (each one `Item::native` accepted), each item's
/// after `ASKING` when `asking` (a Cluster node named by an `ASK` redirection: `ASKING`
/// applies to the next command only, the item's key's), then `PING id`: the last reply
/// proves the others are this call's (`parse::native`). (`PING`, which every leasehold user
/// may run, rather than `ECHO`, which an ACL written for the script may not grant.)
pub(in super::super) fn native_pipeline(id: u64, items: &[&Item], asking: bool) -> Pipeline {
    let commands: usize = items.iter().map(|i| i.native_commands()).sum();
    let mut pipe = Pipeline::with_capacity(commands + items.len() * usize::from(asking) + 1);
    for item in items {
        if asking {
            pipe.cmd("ASKING");
        }
        item.add_native(&mut pipe);
    }
    pipe.cmd("PING").arg(id);
    pipe
}

#[cfg(test)]
mod tests;
