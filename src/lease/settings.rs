//! `LeaseSettings`: everything a client needs besides the backend, with the defaults of
//! docs/design.md §11.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{DurationProblem, LeaseError};
use crate::lease::variables::{
    COMMAND_TIMEOUT, CONNECT_TIMEOUT, DRIFT_BUDGET, NAMESPACE, RENEW_EVERY, RETRY_AFTER_FALLBACK,
    SAFETY_MARGIN,
};
use crate::protocol::limits::{self, DEFAULT_CONNECT_TIMEOUT};
use crate::protocol::{LeaseRequest, Namespace};

/// Default command timeout (docs/design.md §11).
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_millis(200);
/// Default drift budget (docs/design.md §11).
const DEFAULT_DRIFT_BUDGET: Duration = Duration::from_millis(10);
/// Default contention retry-after fallback (docs/design.md §11).
const DEFAULT_RETRY_AFTER_FALLBACK: Duration = Duration::from_millis(50);

/// Client settings. Build in code from [`Default`], or deserialise from a config file
/// (durations as humantime text: `command_timeout = "200ms"`), or read the environment with
/// [`from_env`](Self::from_env). [`LeaseClient::new`](crate::LeaseClient::new) validates them.
///
/// ```
/// # use std::time::Duration;
/// use leasehold::LeaseSettings;
/// let settings = LeaseSettings::default().with_command_timeout(Duration::from_millis(100));
/// assert!(settings.validate().is_ok());
///
/// let text = r#"command_timeout = "150ms"
/// drift_budget = "20ms""#;
/// # let _ = text; // e.g. with the `toml` crate: toml::from_str::<LeaseSettings>(text)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LeaseSettings {
    /// Prefix of every key; isolates tenants. Default `leasehold`.
    pub namespace: Namespace,
    /// Bound on one Redis command, from the instant just before send to its reply.
    /// Default 200 ms.
    #[serde(deserialize_with = "de::duration")]
    pub command_timeout: Duration,
    /// Bound on establishing one connection. Default 1 s.
    #[serde(deserialize_with = "de::duration")]
    pub connect_timeout: Duration,
    /// Clock drift allowed for between this process and Redis over one TTL; subtracted from
    /// every grant. Default 10 ms.
    #[serde(deserialize_with = "de::duration")]
    pub drift_budget: Duration,
    /// Wait before retrying a contended acquisition whose reply carried no positive PTTL.
    /// Default 50 ms.
    #[serde(deserialize_with = "de::duration")]
    pub retry_after_fallback: Duration,
    /// Renewal cadence for the runtime, measured from the previous renewal's send instant.
    /// Default (`None`): ttl / 3.
    #[serde(deserialize_with = "de::optional_duration")]
    pub renew_every: Option<Duration>,
    /// How long before local validity ends the runtime stops relying on a renewal arriving.
    /// At least one command timeout, at most 1 h. Default (`None`): the command timeout.
    #[serde(deserialize_with = "de::optional_duration")]
    pub safety_margin: Option<Duration>,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            namespace: Namespace::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            drift_budget: DEFAULT_DRIFT_BUDGET,
            retry_after_fallback: DEFAULT_RETRY_AFTER_FALLBACK,
            renew_every: None,
            safety_margin: None,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $field:ident: $ty:ty => $wrap:expr;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, value: $ty) -> Self {
                self.$field = $wrap(value);
                self
            }
        )*
    };
}

impl LeaseSettings {
    setters! {
        /// Sets [`namespace`](Self::namespace).
        with_namespace: namespace: Namespace => std::convert::identity;
        /// Sets [`command_timeout`](Self::command_timeout).
        with_command_timeout: command_timeout: Duration => std::convert::identity;
        /// Sets [`connect_timeout`](Self::connect_timeout).
        with_connect_timeout: connect_timeout: Duration => std::convert::identity;
        /// Sets [`drift_budget`](Self::drift_budget).
        with_drift_budget: drift_budget: Duration => std::convert::identity;
        /// Sets [`retry_after_fallback`](Self::retry_after_fallback).
        with_retry_after_fallback: retry_after_fallback: Duration => std::convert::identity;
        /// Sets [`renew_every`](Self::renew_every).
        with_renew_every: renew_every: Duration => Some;
        /// Sets [`safety_margin`](Self::safety_margin).
        with_safety_margin: safety_margin: Duration => Some;
    }

    /// Checks every bound and relation; one error per rule, naming the parameters.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for a bound or for `safety_margin < command_timeout`.
    pub fn validate(&self) -> Result<(), LeaseError> {
        limits::COMMAND_TIMEOUT.check(self.command_timeout)?;
        limits::CONNECT_TIMEOUT.check(self.connect_timeout)?;
        limits::DRIFT_BUDGET.check(self.drift_budget)?;
        limits::RETRY_AFTER_FALLBACK.check(self.retry_after_fallback)?;
        if let Some(every) = self.renew_every {
            limits::RENEW_EVERY.check(every)?;
        }
        if let Some(margin) = self.safety_margin {
            limits::SAFETY_MARGIN.check(margin)?;
        }
        if self.safety_margin() < self.command_timeout {
            return Err(LeaseError::InvalidDuration {
                param: "safety_margin",
                problem: DurationProblem::NotAtLeast {
                    value: self.safety_margin(),
                    other: "command_timeout",
                    other_value: self.command_timeout,
                },
            });
        }
        Ok(())
    }

    /// The safety margin in force: the configured one, or one command timeout.
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin.unwrap_or(self.command_timeout)
    }

    /// The renewal cadence for a lease of `ttl`: [`renew_every`](Self::renew_every) if set,
    /// or `ttl / 3`.
    pub fn renewal_cadence(&self, ttl: Duration) -> Duration {
        self.renew_every.unwrap_or(ttl / 3)
    }

    /// Checks that `ttl` leaves validity after the drift budget (`ttl > drift_budget`).
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for `ttl`.
    pub fn check_ttl(&self, ttl: Duration) -> Result<(), LeaseError> {
        if ttl <= self.drift_budget {
            return Err(LeaseError::InvalidDuration {
                param: "ttl",
                problem: DurationProblem::NotGreaterThan {
                    value: ttl,
                    other: "drift_budget",
                    other_value: self.drift_budget,
                },
            });
        }
        Ok(())
    }

    /// Checks that renewals at the [cadence](Self::renewal_cadence) fit a lease of `ttl`:
    /// `renew_every < ttl − drift_budget − safety_margin`, so one renewal can fail and the
    /// next still arrive before the runtime must cancel the worker.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for `renew_every` (or for `ttl`, via
    /// [`check_ttl`](Self::check_ttl)).
    pub fn check_renewal_cadence(&self, ttl: Duration) -> Result<(), LeaseError> {
        self.check_ttl(ttl)?;
        let window = ttl
            .saturating_sub(self.drift_budget)
            .saturating_sub(self.safety_margin());
        let every = self.renewal_cadence(ttl);
        if every >= window {
            return Err(LeaseError::InvalidDuration {
                param: "renew_every",
                problem: DurationProblem::NotLessThan {
                    value: every,
                    other: "ttl - drift_budget - safety_margin",
                    other_value: window,
                },
            });
        }
        Ok(())
    }

    /// Checks what renewing `request`'s lease needs, before it is acquired: the renewal
    /// cadence ([`check_renewal_cadence`](Self::check_renewal_cadence)) and, if the request
    /// waits for replicas, that the longest wait leaves the cadence its room.
    ///
    /// The replica wait comes out of the lease's validity (validity is measured from the
    /// instant before the send), so it must satisfy
    /// `replica_wait < ttl − drift_budget − safety_margin − renew_every`: after a wait that
    /// runs to its end, one renewal can still fail and the next arrive before the runtime
    /// must cancel the worker — the guarantee the cadence check gives a lease without one.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for `renew_every` or `ttl` (as
    /// [`check_renewal_cadence`](Self::check_renewal_cadence)), or for `replica_wait`.
    pub fn check_request(&self, request: &LeaseRequest) -> Result<(), LeaseError> {
        let ttl = request.ttl();
        self.check_renewal_cadence(ttl)?;
        let Some(wait) = request.replica_wait() else {
            return Ok(());
        };
        let room = ttl
            .saturating_sub(self.drift_budget)
            .saturating_sub(self.safety_margin())
            .saturating_sub(self.renewal_cadence(ttl));
        if wait.timeout() >= room {
            return Err(LeaseError::InvalidDuration {
                param: "replica_wait",
                problem: DurationProblem::NotLessThan {
                    value: wait.timeout(),
                    other: "ttl - drift_budget - safety_margin - renew_every",
                    other_value: room,
                },
            });
        }
        Ok(())
    }

    /// Defaults overridden by the variables that are set, then validated: each setting's
    /// variable is `LEASEHOLD_` and its name in capitals (`LEASEHOLD_NAMESPACE`,
    /// `LEASEHOLD_COMMAND_TIMEOUT`, `LEASEHOLD_CONNECT_TIMEOUT`, `LEASEHOLD_DRIFT_BUDGET`,
    /// `LEASEHOLD_RETRY_AFTER_FALLBACK`, `LEASEHOLD_RENEW_EVERY`, `LEASEHOLD_SAFETY_MARGIN`).
    /// A value that is not UTF-8 is invalid, never taken for unset (an unreadable
    /// namespace must not become the default one: that would be another lease).
    ///
    /// # Errors
    /// The first invalid value, as [`LeaseError`].
    pub fn from_env() -> Result<Self, LeaseError> {
        Self::from_lookup(env_text)
    }

    /// As [`from_env`](Self::from_env), reading variables through `lookup` (for tests and
    /// for programs with their own configuration source). `lookup` is asked for every
    /// variable, once each and in the order above, before any value is judged.
    ///
    /// # Errors
    /// The first invalid value, as [`LeaseError`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, LeaseError> {
        let [
            namespace,
            command_timeout,
            connect_timeout,
            drift_budget,
            retry_after_fallback,
            renew_every,
            safety_margin,
        ] = [
            NAMESPACE,
            COMMAND_TIMEOUT,
            CONNECT_TIMEOUT,
            DRIFT_BUDGET,
            RETRY_AFTER_FALLBACK,
            RENEW_EVERY,
            SAFETY_MARGIN,
        ]
        .map(&lookup);
        let duration = |text: Option<String>, param: &'static str| {
            text.map(|text| limits::parse_duration(param, &text))
                .transpose()
        };
        let mut s = Self::default();
        if let Some(ns) = namespace {
            s.namespace = Namespace::new(&ns)?;
        }
        if let Some(d) = duration(command_timeout, "command_timeout")? {
            s.command_timeout = d;
        }
        if let Some(d) = duration(connect_timeout, "connect_timeout")? {
            s.connect_timeout = d;
        }
        if let Some(d) = duration(drift_budget, "drift_budget")? {
            s.drift_budget = d;
        }
        if let Some(d) = duration(retry_after_fallback, "retry_after_fallback")? {
            s.retry_after_fallback = d;
        }
        if let Some(d) = duration(renew_every, "renew_every")? {
            s.renew_every = Some(d);
        }
        if let Some(d) = duration(safety_margin, "safety_margin")? {
            s.safety_margin = Some(d);
        }
        s.validate()?;
        Ok(s)
    }
}

/// A variable's value as text; one that is not UTF-8 keeps its bytes' replacement
/// characters, which no setting accepts.
pub(crate) fn env_text(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

mod de {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(text.trim()).map_err(serde::de::Error::custom)
    }

    pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| humantime::parse_duration(text.trim()).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_design_section_11() {
        let s = LeaseSettings::default();
        assert_eq!(s.command_timeout, Duration::from_millis(200));
        assert_eq!(s.connect_timeout, Duration::from_secs(1));
        assert_eq!(s.drift_budget, Duration::from_millis(10));
        assert_eq!(s.retry_after_fallback, Duration::from_millis(50));
        assert_eq!(
            s.renewal_cadence(Duration::from_secs(30)),
            Duration::from_secs(10)
        );
        assert_eq!(s.safety_margin(), s.command_timeout);
        assert!(s.validate().is_ok());
    }

    #[test]
    fn safety_margin_below_command_timeout_is_rejected() {
        let s = LeaseSettings::default().with_safety_margin(Duration::from_millis(100));
        let err = s.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "safety_margin 100ms must be at least command_timeout (200ms)"
        );
    }

    #[test]
    fn env_lookup_overrides_defaults_and_reports_bad_text() {
        let s = LeaseSettings::from_lookup(|k| match k {
            "LEASEHOLD_NAMESPACE" => Some("tenant:a".into()),
            "LEASEHOLD_COMMAND_TIMEOUT" => Some("150ms".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.namespace.as_str(), "tenant:a");
        assert_eq!(s.command_timeout, Duration::from_millis(150));
        let err = LeaseSettings::from_lookup(|k| {
            (k == "LEASEHOLD_DRIFT_BUDGET").then(|| "soon".to_owned())
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("drift_budget \"soon\" is not a duration")
        );
    }

    #[test]
    fn settings_deserialise_with_humantime_durations() {
        // JSON stands in for any self-describing format (TOML, YAML): durations are
        // humantime strings, an unknown field is an error.
        let from = serde_json::from_str::<LeaseSettings>;
        let s =
            from(r#"{"namespace": "billing", "command_timeout": "150ms", "renew_every": "5s"}"#)
                .unwrap();
        assert_eq!(s.namespace.as_str(), "billing");
        assert_eq!(s.command_timeout, Duration::from_millis(150));
        assert_eq!(s.renew_every, Some(Duration::from_secs(5)));
        assert_eq!(s.drift_budget, Duration::from_millis(10));
        assert!(from(r#"{"namespace": "Bad"}"#).is_err());
        assert!(from(r#"{"command_timeout": "x"}"#).is_err());
        assert!(from(r#"{"unknown": "1s"}"#).is_err());
    }

    #[test]
    fn renewal_cadence_must_leave_room_before_the_safety_margin() {
        let s = LeaseSettings::default();
        assert!(s.check_renewal_cadence(Duration::from_secs(30)).is_ok());
        let err = s
            .check_renewal_cadence(Duration::from_millis(300))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "renew_every 100ms must be less than ttl - drift_budget - safety_margin (90ms)"
        );
        let fast = s.with_command_timeout(Duration::from_millis(50));
        assert!(
            fast.check_renewal_cadence(Duration::from_millis(300))
                .is_ok()
        );
    }

    #[test]
    fn a_replica_wait_must_leave_the_renewal_cadence_its_room() {
        use crate::protocol::{Attempt, OperationId, Purpose, ResourceDigest};
        let request = |ttl: u64, wait: u64| {
            LeaseRequest::builder(
                Purpose::new("p").unwrap(),
                ResourceDigest::of(b"r"),
                Attempt::new(OperationId::new("op").unwrap()).unwrap(),
            )
            .ttl(Duration::from_millis(ttl))
            .wait_for_replicas(1, Duration::from_millis(wait))
            .build()
            .unwrap()
        };
        let s = LeaseSettings::default();
        // 3 s − 10 ms − 200 ms − 1 s = 1.79 s of room.
        assert!(s.check_request(&request(3000, 1789)).is_ok());
        let err = s.check_request(&request(3000, 1790)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "replica_wait 1s 790ms must be less than \
             ttl - drift_budget - safety_margin - renew_every (1s 790ms)"
        );
        // The cadence is checked first, and a request without a replica wait needs only it.
        let plain = LeaseRequest::builder(
            Purpose::new("p").unwrap(),
            ResourceDigest::of(b"r"),
            Attempt::new(OperationId::new("op").unwrap()).unwrap(),
        )
        .ttl(Duration::from_millis(300))
        .build()
        .unwrap();
        assert!(matches!(
            s.check_request(&plain),
            Err(LeaseError::InvalidDuration {
                param: "renew_every",
                ..
            })
        ));
    }

    #[test]
    fn check_ttl_requires_more_than_the_drift_budget() {
        let s = LeaseSettings::default();
        assert!(s.check_ttl(Duration::from_millis(10)).is_err());
        assert!(s.check_ttl(Duration::from_millis(11)).is_ok());
    }
}
