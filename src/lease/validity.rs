//! `ValidityBudget`: how long this process may act as the holder, from its own clock.
//!
//! # Invariants
//!
//! 1. The reference point is the monotonic instant taken just before the command was sent,
//!    never the instant the reply arrived: the server started counting no earlier than that.
//! 2. The budget is never longer than what the server said it granted (the TTL it set, or the
//!    PTTL it reported on a replay) minus the drift budget.
//! 3. [`ValidityBudget::remaining`] saturates at zero; it never goes negative and never
//!    panics, whatever instant it is given.
//!
//! Times are `tokio::time::Instant`, so paused-time tests control them; there is no wall
//! clock (`SystemTime`) anywhere in the lease core.

use std::time::Duration;

use tokio::time::Instant;

/// What one confirmed server answer lets this process rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ValidityBudget {
    valid_until: Instant,
    server_expiry_at: Instant,
}

impl ValidityBudget {
    /// After `ACQUIRED`: the granted TTL (never more than requested) minus drift.
    pub(crate) fn acquired(
        sent_at: Instant,
        requested: Duration,
        granted: Duration,
        drift: Duration,
    ) -> Self {
        Self::from_grant(sent_at, granted.min(requested), drift)
    }

    /// After `REPLAYED`: the server's remaining time, never a fresh full TTL (invariant 2).
    pub(crate) fn replayed(
        sent_at: Instant,
        requested: Duration,
        pttl: Duration,
        drift: Duration,
    ) -> Self {
        Self::from_grant(sent_at, pttl.min(requested), drift)
    }

    /// After `RENEWED`: a full TTL from this renewal's send instant.
    pub(crate) fn renewed(sent_at: Instant, ttl: Duration, drift: Duration) -> Self {
        Self::from_grant(sent_at, ttl, drift)
    }

    fn from_grant(sent_at: Instant, granted: Duration, drift: Duration) -> Self {
        Self {
            // Saturating: a grant shorter than the drift budget leaves no validity at all,
            // rather than wrapping around (invariant 3).
            valid_until: sent_at + granted.saturating_sub(drift),
            server_expiry_at: sent_at + granted,
        }
    }

    /// Validity left at `now`; zero once `now` reaches [`valid_until`](Self::valid_until).
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }

    /// Whether no validity is left at `now`.
    pub(crate) fn is_exhausted(&self, now: Instant) -> bool {
        now >= self.valid_until
    }

    /// The instant local validity ends: send instant + granted time − drift budget.
    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The earliest instant the server's key can expire, from what the server said: send
    /// instant + the TTL it set (or the PTTL it reported on a replay).
    pub(crate) fn observed_server_expiry(&self) -> Instant {
        self.server_expiry_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn replay_uses_the_servers_remaining_time_not_a_fresh_ttl() {
        let t0 = Instant::now();
        let b = ValidityBudget::replayed(t0, 30_000 * MS, 1_000 * MS, 10 * MS);
        assert_eq!(b.remaining(t0), 990 * MS);
        assert_eq!(b.observed_server_expiry(), t0 + 1_000 * MS);
    }

    #[test]
    fn grant_is_capped_by_the_request() {
        let t0 = Instant::now();
        let b = ValidityBudget::acquired(t0, 100 * MS, 5_000 * MS, 10 * MS);
        assert_eq!(b.valid_until(), t0 + 90 * MS);
    }

    #[test]
    fn remaining_saturates_at_zero() {
        let t0 = Instant::now();
        let b = ValidityBudget::renewed(t0, 5 * MS, 10 * MS);
        assert_eq!(b.remaining(t0), Duration::ZERO);
        assert!(b.is_exhausted(t0));
        let b = ValidityBudget::renewed(t0, 100 * MS, 10 * MS);
        assert_eq!(b.remaining(t0 + 1_000 * MS), Duration::ZERO);
    }
}
