//! Typed script replies, one enum per script (docs/design.md §4).
//!
//! Status words match the Lua scripts one for one; each reply's `status` is the only
//! spelling of them on the Rust side.

use std::time::Duration;

use crate::protocol::{FencingToken, HolderLabel};

/// What `lua/acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireReply {
    /// `ACQUIRED ttl token [slot]`: the key (a counted lease's free slot) was absent and is
    /// now ours for `ttl`.
    Acquired {
        /// The TTL the server set.
        ttl: Duration,
        /// The freshly issued fencing token.
        token: FencingToken,
        /// The slot taken: 0 for a plain lease.
        slot: u16,
    },
    /// `REPLAYED pttl token [slot]`: this very attempt already holds the lease (a slot of
    /// it); nothing changed.
    Replayed {
        /// What the server has left: the replay's validity is measured from this, never
        /// from a fresh TTL.
        pttl: Duration,
        /// The token of the original acquisition.
        token: FencingToken,
        /// The slot held: 0 for a plain lease.
        slot: u16,
    },
    /// `CONFLICT pttl`: held by the same owner token under another operation id.
    Conflict {
        /// The holder's remaining time.
        pttl: Duration,
    },
    /// `DELAYED pttl [rank]`: the last lease ended without a release and its lock-delay refuses
    /// acquisitions for `pttl` more (for a counted lease: every slot is taken and the
    /// earliest to free is in its lock-delay).
    Delayed {
        /// The lock-delay's remaining time.
        pttl: Duration,
        /// A waiting acquisition's rank in the line (0: first); `None` for a try.
        rank: Option<u32>,
    },
    /// `CONTENDED pttl [rank]`: held by someone else (every slot of a counted lease), or
    /// free with live waiters ahead in the line (`pttl` zero). The holder's owner token is
    /// never sent.
    Contended {
        /// The holder's remaining time (the earliest slot's); zero when the server had no
        /// positive PTTL.
        pttl: Duration,
        /// A waiting acquisition's rank in the line (0: first); `None` for a try.
        rank: Option<u32>,
    },
}

impl AcquireReply {
    /// The status word of the script reply (the fuzz targets compare the decoder's reading
    /// with it; the crate itself reads the words in `parse`).
    #[cfg(feature = "fuzzing")]
    pub fn status(&self) -> &'static str {
        match self {
            Self::Acquired { .. } => "ACQUIRED",
            Self::Replayed { .. } => "REPLAYED",
            Self::Conflict { .. } => "CONFLICT",
            Self::Delayed { .. } => "DELAYED",
            Self::Contended { .. } => "CONTENDED",
        }
    }
}

/// What `lua/renew.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewReply {
    /// `RENEWED`: the expiry was set to a full TTL from the moment the script ran.
    Renewed,
    /// `ABSENT`: no lease key (expired or deleted).
    Absent,
    /// `NOT_OWNER`: someone else holds it now.
    NotOwner,
}

/// What `lua/release.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReply {
    /// `RELEASED`: deleted; a release notice was published unless the user may not
    /// (best effort: it only wakes waiters early).
    Released,
    /// `ABSENT`: no lease key.
    Absent,
    /// `NOT_OWNER`: someone else holds it; untouched.
    NotOwner,
}

/// What `lua/inspect.lua` answered (read only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectReply {
    /// `HELD_BY_ATTEMPT pttl token [holder]`: held by exactly this attempt.
    HeldByAttempt {
        /// Server's remaining time.
        pttl: Duration,
        /// The attempt's fencing token.
        token: FencingToken,
        /// The label stored with the lease, if its acquisition gave one.
        holder: Option<HolderLabel>,
    },
    /// `HELD_BY_OTHER pttl token [holder]`: held by someone else (whose owner token stays
    /// in Redis).
    HeldByOther {
        /// Server's remaining time.
        pttl: Duration,
        /// The holder's fencing token (not a secret: it is what effect targets compare).
        token: FencingToken,
        /// The label stored with the lease, if its acquisition gave one.
        holder: Option<HolderLabel>,
    },
    /// `DELAYED pttl token [holder]`: not held — the last lease ended without a release
    /// and its lock-delay refuses acquisitions for `pttl` more.
    Delayed {
        /// The lock-delay's remaining time.
        pttl: Duration,
        /// The ended lease's fencing token.
        token: FencingToken,
        /// The ended lease's label, if its acquisition gave one.
        holder: Option<HolderLabel>,
    },
    /// `ABSENT`: not held.
    Absent,
}

/// What `lua/inspect.lua` answered in full: the lease's state and the length of its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The lease's state.
    pub reply: InspectReply,
    /// The entries in the lease's line (a counted lease's one line) — a waiter that died
    /// is counted until it is dropped from the line; `None` when the line could not be
    /// read (an ACL that refuses `ZCARD`).
    pub waiting: Option<u64>,
}

macro_rules! simple_status {
    ($ty:ident { $($variant:ident => $word:literal),* $(,)? }) => {
        impl $ty {
            /// The status word of the script reply.
            pub fn status(&self) -> &'static str {
                match self { $(Self::$variant => $word),* }
            }
            /// Reads a status word; `None` for anything else.
            pub fn from_status(word: &[u8]) -> Option<Self> {
                match word { $(w if w == $word.as_bytes() => Some(Self::$variant),)* _ => None }
            }
        }
    };
}
simple_status!(RenewReply { Renewed => "RENEWED", Absent => "ABSENT", NotOwner => "NOT_OWNER" });
simple_status!(ReleaseReply { Released => "RELEASED", Absent => "ABSENT", NotOwner => "NOT_OWNER" });

impl InspectReply {
    /// The status word of the script reply.
    pub fn status(&self) -> &'static str {
        match self {
            Self::HeldByAttempt { .. } => "HELD_BY_ATTEMPT",
            Self::HeldByOther { .. } => "HELD_BY_OTHER",
            Self::Delayed { .. } => "DELAYED",
            Self::Absent => "ABSENT",
        }
    }
}
