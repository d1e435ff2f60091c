//! [`LeaseError`]: a value rejected by local validation, before any I/O — the error of the
//! protocol types, the settings and the client. The runtime's refusals, local too, are
//! [`RuntimeError`](crate::runtime::RuntimeError), which wraps this one; a backend call's
//! [`SendFailure`](crate::backend::SendFailure) says how sure it is that nothing was sent, and the
//! lease core turns it into an outcome.
//!
//! Nothing that happens on the wire becomes an `Err` of the client or the runtime: a Redis
//! fault is an outcome variant (`Unavailable` or `Indeterminate`), because the caller's
//! next step depends on how certain the library is about what happened, and `Err` would
//! fold those together.

use std::fmt;
use std::time::Duration;

/// A value was rejected before anything was sent to a backend.
///
/// Every variant names the parameter it is about and the rule it broke; none carries an owner
/// token, a raw resource id or a Redis password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// A [`Purpose`](crate::Purpose) broke its pattern.
    #[error("purpose {value:?} is invalid: {rule}")]
    InvalidPurpose {
        /// The rejected text (truncated to 80 characters).
        value: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// A [`Namespace`](crate::Namespace) broke its pattern.
    #[error("namespace {value:?} is invalid: {rule}")]
    InvalidNamespace {
        /// The rejected text (truncated to 80 characters).
        value: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// A [`ResourceDigest`](crate::ResourceDigest) text was not `sha256:<64 lowercase hex>`.
    ///
    /// The text itself is not echoed: a caller who passes a raw resource id here by mistake
    /// must not find it in a log.
    #[error("resource digest is invalid: {rule}")]
    InvalidDigest {
        /// The rule it broke.
        rule: &'static str,
    },
    /// An [`OperationId`](crate::OperationId) was empty, too long or not printable.
    #[error("operation id is invalid: {rule}")]
    InvalidOperationId {
        /// The rule it broke.
        rule: &'static str,
    },
    /// A [`HolderLabel`](crate::HolderLabel) was empty, too long or not printable.
    #[error("holder label {value:?} is invalid: {rule}")]
    InvalidHolder {
        /// The rejected text (truncated to 80 characters).
        value: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// An [`OwnerToken`](crate::OwnerToken) text (one persisted with
    /// [`OwnerToken::expose`](crate::OwnerToken::expose)) was not one leasehold makes.
    ///
    /// The text itself is not echoed: it is a bearer secret.
    #[error("owner token is invalid: {rule}")]
    InvalidOwnerToken {
        /// The rule it broke.
        rule: &'static str,
    },
    /// A duration parameter was out of its bounds, unparsable, or in the wrong relation to
    /// another parameter.
    #[error("{param} {problem}")]
    InvalidDuration {
        /// The parameter's name as the documentation and the CLI spell it (`ttl`, `wait_timeout`).
        param: &'static str,
        /// What is wrong with it.
        problem: DurationProblem,
    },
    /// The number of replicas an acquisition is to wait for is 0 or above the maximum.
    #[error("replicas {value} is invalid: must be 1 ..= {max}")]
    InvalidReplicas {
        /// The number given.
        value: u32,
        /// The largest allowed ([`MAX_REPLICAS`](crate::protocol::limits::MAX_REPLICAS)).
        max: u32,
    },
    /// A counted lease's number of permits is 0 or above the maximum.
    #[error("permits {value} is invalid: must be 1 ..= {max}")]
    InvalidPermits {
        /// The number given.
        value: u32,
        /// The largest allowed ([`MAX_PERMITS`](crate::protocol::limits::MAX_PERMITS)).
        max: u16,
    },
    /// A Redis backend's queue limit
    /// ([`RedisConfig::queue_limit`](crate::RedisConfig::queue_limit)) is 0 or above the
    /// maximum.
    #[error("queue_limit {value} is invalid: must be 1 ..= {max}")]
    InvalidQueueLimit {
        /// The number given.
        value: usize,
        /// The largest allowed ([`MAX_QUEUE_LIMIT`](crate::protocol::limits::MAX_QUEUE_LIMIT)).
        max: usize,
    },
    /// A Redis URL could not be parsed or names an unsupported scheme.
    ///
    /// The URL is not echoed: it may carry a password.
    #[error("redis url is invalid: {reason}")]
    InvalidRedisUrl {
        /// Why it was rejected.
        reason: String,
    },
    /// [`LeaseClient::from_env`](crate::LeaseClient::from_env) found no backend:
    /// `LEASEHOLD_REDIS_URL` is unset or empty. leasehold never falls back to an in-memory
    /// backend on its own — leases nobody else can see exclude nobody; ask for one with
    /// [`LeaseClient::from_env_or_memory`](crate::LeaseClient::from_env_or_memory).
    #[error(
        "no lease backend configured: LEASEHOLD_REDIS_URL is unset or empty{}",
        unread_hint(.unread)
    )]
    NoBackendConfigured {
        /// `LEASEHOLD_*` variables that are set but that leasehold does not read — often
        /// a misspelling of the one it wanted.
        unread: Vec<String>,
    },
    /// The operating system's random source failed, so no owner token could be made.
    #[error("the operating system's random source is unavailable: {reason}")]
    EntropyUnavailable {
        /// The OS error.
        reason: String,
    },
}

fn unread_hint(unread: &[String]) -> String {
    if unread.is_empty() {
        String::new()
    } else {
        format!(" (set, but not read by leasehold: {})", unread.join(", "))
    }
}

/// What is wrong with a duration; part of [`LeaseError::InvalidDuration`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationProblem {
    /// Shorter than the bound allows.
    BelowMinimum {
        /// The value given.
        value: Duration,
        /// The smallest allowed.
        min: Duration,
    },
    /// Longer than the bound allows.
    AboveMaximum {
        /// The value given.
        value: Duration,
        /// The largest allowed.
        max: Duration,
    },
    /// Text that humantime could not read.
    NotADuration {
        /// The text given (truncated to 80 characters).
        text: String,
        /// The parser's complaint.
        reason: String,
    },
    /// Must be strictly greater than another parameter, and is not.
    NotGreaterThan {
        /// The value given.
        value: Duration,
        /// The other parameter's name.
        other: &'static str,
        /// The other parameter's value.
        other_value: Duration,
    },
    /// Must be at least another parameter, and is less.
    NotAtLeast {
        /// The value given.
        value: Duration,
        /// The other parameter's name.
        other: &'static str,
        /// The other parameter's value.
        other_value: Duration,
    },
    /// Must be strictly less than another parameter (or an expression of several), and is not.
    NotLessThan {
        /// The value given.
        value: Duration,
        /// The other parameter, or expression, spelled as in the docs (`ttl - drift_budget`).
        other: &'static str,
        /// Its value.
        other_value: Duration,
    },
}

impl fmt::Display for DurationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use humantime::format_duration as h;
        match self {
            Self::BelowMinimum { value, min } => {
                write!(f, "{} is below the minimum of {}", h(*value), h(*min))
            }
            Self::AboveMaximum { value, max } => {
                write!(f, "{} is above the maximum of {}", h(*value), h(*max))
            }
            Self::NotADuration { text, reason } => {
                write!(f, "{text:?} is not a duration: {reason}")
            }
            Self::NotGreaterThan {
                value,
                other,
                other_value,
            } => write!(
                f,
                "{} must be greater than {other} ({})",
                h(*value),
                h(*other_value)
            ),
            Self::NotAtLeast {
                value,
                other,
                other_value,
            } => write!(
                f,
                "{} must be at least {other} ({})",
                h(*value),
                h(*other_value)
            ),
            Self::NotLessThan {
                value,
                other,
                other_value,
            } => write!(
                f,
                "{} must be less than {other} ({})",
                h(*value),
                h(*other_value)
            ),
        }
    }
}

/// Keeps rejected text short in error messages.
pub(crate) fn excerpt(text: &str) -> String {
    text.chars().take(80).collect()
}
