//! The line of waiters (docs/design.md §4, "The line"; `lua/line.lua`): a waiter's id, the
//! two ways an acquisition stands towards the line, and its keep-alive.

use std::fmt;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::protocol::Attempt;

/// How long a waiter's place outlives its last sign of life (a join, a look, a
/// keep-alive): the keep-alive key's PX, `KEEP_MS` in `lua/line.lua`. A waiter that died
/// stops blocking the line this long after its last one.
pub(crate) const LINE_KEEP: Duration = Duration::from_secs(2);

/// Hex digits of a waiter id: 64 bits, so two live waiters of one lease share an id only
/// by a chance of about one in 2^64 / W² (a shared id would share a place, nothing more).
const ID_HEX_DIGITS: usize = 16;
/// Domain separation from every other digest leasehold makes.
const DOMAIN: &[u8] = b"leasehold:waiter:v1\0";

/// A waiter's name in a lease's line: a digest of its attempt (owner token and operation
/// id), so a replayed attempt keeps its place and the owner token, a bearer secret, is not
/// what the line, its keep-alive keys or its notices show.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct WaiterId(String);

impl WaiterId {
    pub(crate) fn of(attempt: &Attempt) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN);
        hasher.update(attempt.owner().expose().as_bytes());
        hasher.update(b" ");
        hasher.update(attempt.operation().as_str().as_bytes());
        let digest = hasher.finalize();
        let mut hex = String::with_capacity(ID_HEX_DIGITS);
        for b in &digest[..ID_HEX_DIGITS / 2] {
            hex.push_str(&format!("{b:02x}"));
        }
        Self(hex)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for WaiterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WaiterId({})", self.0)
    }
}

/// How an acquisition stands towards the lease's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinePlace {
    /// A try of the wait loop: it takes a free lease when it is first in line (or the line
    /// is empty), else it joins the line, or keeps its place there.
    Waits,
    /// A try without a wait: it takes a free lease only when no live waiter is ahead of
    /// it, and never joins.
    Tries,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OwnerToken;
    use crate::protocol::OperationId;

    #[test]
    fn a_waiter_id_is_the_attempts_and_shows_no_owner_token() {
        let owner = OwnerToken::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let op = |o: &str| OperationId::new(o).unwrap();
        let attempt = Attempt::from_parts(owner.clone(), op("op-1"));
        let id = WaiterId::of(&attempt);
        assert_eq!(
            id,
            WaiterId::of(&attempt.clone()),
            "a replay keeps its place"
        );
        assert_ne!(id, WaiterId::of(&Attempt::from_parts(owner, op("op-2"))));
        assert_eq!(id.as_str().len(), ID_HEX_DIGITS);
        assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!id.as_str().contains("AAAA"));
    }
}
