//! Every bound of docs/design.md §3, in one table, and what more than one layer shares.
//!
//! The error texts of [`LeaseError`] are built from these values, so a message always names
//! the bound that is actually enforced. Public are the bounds a caller's input is checked
//! against, and what a caller's duration saturates at ([`NO_DEADLINE`]). Crate-private are
//! what layers that cannot import each other share: the connect timeout's default (the
//! settings' and a `RedisConfig`'s), the attempts of a listing's read and `SCAN` step (the
//! lease core's and the Redis backend's), and how a deadline is made. A default or a policy
//! one place uses lives there: the settings' defaults with `LeaseSettings`, a request's
//! with its builder, the queue limit's with `RedisConfig`, the attempts per renewal with
//! the handle.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{DurationProblem, LeaseError, excerpt};

/// An inclusive range for one duration parameter, with the name errors use for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationBounds {
    /// The parameter's name in docs, config files and the CLI.
    pub param: &'static str,
    /// The smallest allowed value.
    pub min: Duration,
    /// The largest allowed value.
    pub max: Duration,
}

impl DurationBounds {
    /// Accepts `value` if it lies in `min ..= max`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] naming the parameter and the bound it crossed.
    pub fn check(&self, value: Duration) -> Result<Duration, LeaseError> {
        let problem = if value < self.min {
            DurationProblem::BelowMinimum {
                value,
                min: self.min,
            }
        } else if value > self.max {
            DurationProblem::AboveMaximum {
                value,
                max: self.max,
            }
        } else {
            return Ok(value);
        };
        Err(LeaseError::InvalidDuration {
            param: self.param,
            problem,
        })
    }

    /// Parses humantime text (`"30s"`, `"1m 30s"`, `"500ms"`) and checks the bounds.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] with [`DurationProblem::NotADuration`] for unreadable
    /// text, or the bound it crossed.
    pub fn parse(&self, text: &str) -> Result<Duration, LeaseError> {
        self.check(parse_duration(self.param, text)?)
    }
}

/// Reads humantime text for parameter `param`, without bounds.
///
/// # Errors
/// [`LeaseError::InvalidDuration`] with [`DurationProblem::NotADuration`].
pub(crate) fn parse_duration(param: &'static str, text: &str) -> Result<Duration, LeaseError> {
    humantime::parse_duration(text.trim()).map_err(|e| LeaseError::InvalidDuration {
        param,
        problem: DurationProblem::NotADuration {
            text: excerpt(text),
            reason: e.to_string(),
        },
    })
}

/// Lease time to live: 100 ms ..= 1 h (docs/design.md §3). Redis stores it in whole milliseconds.
pub const TTL: DurationBounds = DurationBounds {
    param: "ttl",
    min: Duration::from_millis(100),
    max: Duration::from_secs(3600),
};

/// How long `acquire` may wait for a contended lease: 0 ..= 1 h (docs/design.md §3).
pub const WAIT_TIMEOUT: DurationBounds = DurationBounds {
    param: "wait_timeout",
    min: Duration::ZERO,
    max: Duration::from_secs(3600),
};

/// Upper bound on one Redis command, from just before send to the reply.
pub const COMMAND_TIMEOUT: DurationBounds = DurationBounds {
    param: "command_timeout",
    min: Duration::from_millis(1),
    max: Duration::from_secs(60),
};

/// Upper bound on establishing a connection.
pub const CONNECT_TIMEOUT: DurationBounds = DurationBounds {
    param: "connect_timeout",
    min: Duration::from_millis(1),
    max: Duration::from_secs(60),
};

/// Clock drift allowed for between this process and Redis over one TTL.
pub const DRIFT_BUDGET: DurationBounds = DurationBounds {
    param: "drift_budget",
    min: Duration::ZERO,
    max: Duration::from_secs(60),
};

/// Retry delay used when a contended reply carries no positive PTTL.
pub const RETRY_AFTER_FALLBACK: DurationBounds = DurationBounds {
    param: "retry_after_fallback",
    min: Duration::from_millis(1),
    max: Duration::from_secs(60),
};

/// Renewal cadence ([`LeaseSettings::renew_every`]); its relation to a lease's TTL is
/// checked where the TTL is known.
///
/// [`LeaseSettings::renew_every`]: crate::LeaseSettings::renew_every
pub const RENEW_EVERY: DurationBounds = DurationBounds {
    param: "renew_every",
    min: Duration::from_millis(10),
    max: Duration::from_secs(3600),
};

/// Safety margin ([`LeaseSettings::safety_margin`]): no lease (TTL ≤ 1 h) has room for
/// more. Its relation to the command timeout is checked beside.
///
/// [`LeaseSettings::safety_margin`]: crate::LeaseSettings::safety_margin
pub const SAFETY_MARGIN: DurationBounds = DurationBounds {
    param: "safety_margin",
    min: Duration::ZERO,
    max: Duration::from_secs(3600),
};

/// How long a resource refuses new holders after a lease on it ended without a release
/// ([`LeaseRequestBuilder::lock_delay`]): 1 ms ..= 1 h (stored in the lease's value as
/// whole milliseconds, at most seven digits).
///
/// [`LeaseRequestBuilder::lock_delay`]: crate::protocol::LeaseRequestBuilder::lock_delay
pub const LOCK_DELAY: DurationBounds = DurationBounds {
    param: "lock_delay",
    min: Duration::from_millis(1),
    max: Duration::from_secs(3600),
};

/// How long an acquisition may wait for replicas to acknowledge it (`WAIT`): 1 ms ..= 10 s.
pub const REPLICA_WAIT: DurationBounds = DurationBounds {
    param: "replica_wait",
    min: Duration::from_millis(1),
    max: Duration::from_secs(10),
};

/// Most replicas an acquisition may wait for.
pub const MAX_REPLICAS: u32 = 16;

/// Most holders a counted lease may admit at once ([`LeaseRequestBuilder::permits`]): one
/// acquisition reads every slot in one script step, so the bound is what keeps that step
/// short (Redis runs nothing else meanwhile).
///
/// [`LeaseRequestBuilder::permits`]: crate::protocol::LeaseRequestBuilder::permits
pub const MAX_PERMITS: u16 = 64;

/// Most operations a Redis backend may be configured to keep waiting.
pub const MAX_QUEUE_LIMIT: usize = 1 << 20;

/// Accepts a queue limit in `1 ..= MAX_QUEUE_LIMIT`.
///
/// # Errors
/// [`LeaseError::InvalidQueueLimit`] naming the value and the bound.
pub(crate) fn check_queue_limit(limit: usize) -> Result<usize, LeaseError> {
    if (1..=MAX_QUEUE_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(LeaseError::InvalidQueueLimit {
            value: limit,
            max: MAX_QUEUE_LIMIT,
        })
    }
}

/// Accepts `permits` if it lies in `1 ..= MAX_PERMITS`.
///
/// # Errors
/// [`LeaseError::InvalidPermits`] naming the value and the bound.
pub fn check_permits(permits: u32) -> Result<u16, LeaseError> {
    u16::try_from(permits)
        .ok()
        .filter(|p| (1..=MAX_PERMITS).contains(p))
        .ok_or(LeaseError::InvalidPermits {
            value: permits,
            max: MAX_PERMITS,
        })
}

/// Default connect timeout (docs/design.md §11): `LeaseSettings::default()`'s, and a
/// `RedisConfig`'s unless set.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest [`Purpose`](crate::Purpose), in bytes.
pub const PURPOSE_MAX_LEN: usize = 64;
/// Longest [`Namespace`](crate::Namespace), in bytes.
pub const NAMESPACE_MAX_LEN: usize = 64;
/// Longest [`OperationId`](crate::OperationId), in bytes.
pub const OPERATION_ID_MAX_LEN: usize = 128;
/// How often an observer reads the lease when nothing announced a change
/// ([`LeaseClient::observe`](crate::LeaseClient::observe)): 10 ms ..= 1 h.
pub const OBSERVE_POLL: DurationBounds = DurationBounds {
    param: "poll",
    min: Duration::from_millis(10),
    max: Duration::from_secs(3600),
};

/// How long [`LeaseClient::list`](crate::LeaseClient::list) may take in all: 1 ms ..= 1 h
/// ([`list_within`](crate::LeaseClient::list_within) takes it; each `SCAN` step and each
/// read is bounded by the command timeout as well).
pub const LIST_BUDGET: DurationBounds = DurationBounds {
    param: "list_budget",
    min: Duration::from_millis(1),
    max: Duration::from_secs(3600),
};
/// Attempts a listing makes at each `SCAN` step and at each read before it reports
/// `Unavailable`: both are read only, so one that did not answer in time (a starved
/// machine, a connection replaced) is simply asked again, within the budget.
pub(crate) const LIST_ATTEMPTS: u32 = 3;
/// Default budget of a listing: about ten times what a `SCAN` across a million keys takes
/// on one idle Redis (docs/design.md §8).
pub const DEFAULT_LIST_BUDGET: Duration = Duration::from_secs(10);

/// Longer than any deadline a caller can mean: a duration beyond it (`Duration::MAX`
/// included) is no deadline at all. Thirty years, as tokio's own "far future".
pub const NO_DEADLINE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The deadline `d` after `now`, for any `d` a caller may pass: a duration beyond
/// [`NO_DEADLINE`] saturates there, so no caller's duration overflows an [`Instant`]. Every
/// deadline leasehold makes from a caller's `Duration` is made here.
pub(crate) fn deadline_after(now: Instant, d: Duration) -> Instant {
    // Thirty years past a monotonic clock's reading fits every platform's `Instant` (tokio
    // relies on the same); the fallback only keeps this free of a panic path.
    now.checked_add(d.min(NO_DEADLINE)).unwrap_or(now)
}

/// Longest [`HolderLabel`](crate::HolderLabel), in bytes.
pub const HOLDER_MAX_LEN: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_below_minimum_names_parameter_and_bound() {
        let err = TTL.check(Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.to_string(), "ttl 50ms is below the minimum of 100ms");
    }

    #[test]
    fn ttl_above_maximum_is_rejected() {
        let err = TTL.parse("2h").unwrap_err();
        assert_eq!(err.to_string(), "ttl 2h is above the maximum of 1h");
    }

    #[test]
    fn humantime_text_is_parsed() {
        assert_eq!(TTL.parse("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(WAIT_TIMEOUT.parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_deadline_saturates_at_no_deadline() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(deadline_after(now, second), now + second);
        assert_eq!(deadline_after(now, Duration::MAX), now + NO_DEADLINE);
        assert_eq!(deadline_after(now, NO_DEADLINE + second), now + NO_DEADLINE);
    }

    #[test]
    fn unparsable_text_is_a_typed_error() {
        let err = TTL.parse("abc").unwrap_err();
        assert!(matches!(
            err,
            LeaseError::InvalidDuration {
                param: "ttl",
                problem: DurationProblem::NotADuration { .. }
            }
        ));
        assert!(err.to_string().starts_with("ttl \"abc\" is not a duration"));
    }
}
