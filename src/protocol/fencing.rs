//! `FencingToken`: the number that lets the place where an effect lands refuse a stale holder.

use std::fmt;

/// Issued with every acquisition; strictly greater than every token issued before for the
/// same (namespace, purpose, resource).
///
/// The Redis backend issues `max(last + 1, server time in µs)`, so the order also holds after
/// the lease key expired, after the counter key was deleted or evicted, and after a replica
/// promotion lost the last increment — as long as the server clock does not step back past
/// the last token. Tokens stay below 2^53 (Lua numbers are doubles).
///
/// What it protects: a target that stores the largest token it accepted beside the data and
/// refuses smaller ones (`UPDATE … SET …, fence = $token WHERE fence < $token`) never
/// accepts a write from a holder older than one it already served — even a holder that was
/// paused past its lease and resumes believing it still holds it.
///
/// What it does not protect: targets that do not check the token; effects outside the
/// target (emails sent, files written elsewhere); a stale write interleaving with the
/// current holder's on a target that compares with `<=` instead of `<`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a token value, e.g. one read back from the effect target.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The token value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
