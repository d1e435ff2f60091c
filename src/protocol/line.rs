//! The line of waiters (docs/design.md §4, "The line"; `lua/line.lua`): a waiter's id, the
//! two ways an acquisition stands towards the line, and its keep-alive.

use std::fmt;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::protocol::Attempt;

/// How long a waiter's place outlives the last sign of life of its client's line session
/// (its join, or the session's keep-alive): the keep-alive key's PX, `KEEP_MS` in
/// `lua/line.lua`. A client that died (killed, frozen, dropped) stops blocking the line this
/// long after its last one.
pub(crate) const LINE_KEEP: Duration = Duration::from_secs(2);

/// How often a line session writes its keep-alive in each line it has waiters in: two fit
/// in [`LINE_KEEP`], with room for a slow one.
pub(crate) const LINE_KEEP_EVERY: Duration = Duration::from_millis(900);

/// Hex digits of a line session's id, and of the attempt's part of a waiter id: 64 bits
/// each, so two live waiters of one lease share an id only by a chance of about one in
/// 2^64 / W² (a shared id would share a place, nothing more).
const ID_HEX_DIGITS: usize = 16;
/// Domain separation from every other digest leasehold makes.
const DOMAIN: &[u8] = b"leasehold:waiter:v1\0";
/// The session part of a waiter id that belongs to no session (`WaiterId::alone`).
#[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
const ALONE_DOMAIN: &[u8] = b"leasehold:waiter-alone:v1\0";

/// The line session of one client (`Session`): every waiter of the client is alive in a
/// lease's line while the session keeps it alive there (`<line>:<session>`, written every
/// [`LINE_KEEP_EVERY`] while the client has waiters in that line). A random id, not a
/// secret: it names the session in the line, nothing more.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct LineSession(String);

impl LineSession {
    pub(crate) fn new() -> Self {
        Self(format!("{:016x}", rand::random::<u64>()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LineSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LineSession({})", self.0)
    }
}

/// A waiter's name in a lease's line: its client's line session, then a digest of its
/// attempt (owner token and operation id), so a replay keeps its place, the line tells
/// whose keep-alive keeps it, and the owner token, a bearer secret, is not what the line,
/// its keep-alive keys or its notices show.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct WaiterId(String);

impl WaiterId {
    pub(crate) fn of(session: &LineSession, attempt: &Attempt) -> Self {
        let mut id = String::with_capacity(2 * ID_HEX_DIGITS);
        id.push_str(session.as_str());
        push_digest(&mut id, DOMAIN, attempt);
        Self(id)
    }

    /// The id of `attempt` sent by no session: nothing keeps it alive but its join. A
    /// script-level call's (`crate::backend::fuzzing::calls`): a waiter that joins once
    /// and says nothing more, as one killed right after would.
    #[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
    pub(crate) fn alone(attempt: &Attempt) -> Self {
        let mut id = String::with_capacity(2 * ID_HEX_DIGITS);
        push_digest(&mut id, ALONE_DOMAIN, attempt);
        push_digest(&mut id, DOMAIN, attempt);
        Self(id)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Its line session's part: whose keep-alive keeps it, on whose channel it is told
    /// its turn.
    pub(crate) fn session(&self) -> &str {
        self.0.get(..ID_HEX_DIGITS).unwrap_or(&self.0)
    }
}

/// Appends [`ID_HEX_DIGITS`] hex digits of a digest of `attempt` under `domain`.
fn push_digest(id: &mut String, domain: &[u8], attempt: &Attempt) {
    let mut hasher = Sha256::new();
    hasher.update(domain);
    hasher.update(attempt.owner().expose().as_bytes());
    hasher.update(b" ");
    hasher.update(attempt.operation().as_str().as_bytes());
    let digest = hasher.finalize();
    for b in &digest[..ID_HEX_DIGITS / 2] {
        id.push_str(&format!("{b:02x}"));
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
    /// The first try of the wait loop: it takes a free lease when it is first in line (or
    /// the line is empty), else it joins the line (`ZADD` at once, no rank read first: a
    /// replay of it finds its place).
    Joins,
    /// A later try of the wait loop: as `Joins`, but it looks for its place first (it is
    /// in the line, unless its place was lost), and joins only if it is not.
    Waits,
    /// A try without a wait: it takes a free lease only when no live waiter is ahead of
    /// it, and never joins.
    Tries,
}

impl LinePlace {
    /// Whether it joins the line (or keeps its place) when it may not take the lease.
    pub(crate) fn waits(self) -> bool {
        self != Self::Tries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OwnerToken;
    use crate::protocol::OperationId;

    #[test]
    fn a_waiter_id_is_its_session_and_its_attempt_and_shows_no_owner_token() {
        let owner = OwnerToken::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let op = |o: &str| OperationId::new(o).unwrap();
        let attempt = Attempt::from_parts(owner.clone(), op("op-1"));
        let session = LineSession::new();
        let id = WaiterId::of(&session, &attempt);
        assert_eq!(
            id,
            WaiterId::of(&session, &attempt.clone()),
            "a replay keeps its place"
        );
        assert_ne!(
            id,
            WaiterId::of(&session, &Attempt::from_parts(owner.clone(), op("op-2")))
        );
        assert_ne!(id, WaiterId::of(&LineSession::new(), &attempt));
        assert!(
            id.as_str().starts_with(session.as_str()),
            "its session first"
        );
        assert_eq!(WaiterId::alone(&attempt), WaiterId::alone(&attempt.clone()));
        for id in [id, WaiterId::alone(&attempt)] {
            assert_eq!(id.as_str().len(), 2 * ID_HEX_DIGITS);
            assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(!id.as_str().contains("AAAA"));
        }
    }
}
