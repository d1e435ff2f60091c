//! `LeaseRequest`: everything one acquisition needs, validated before it can exist.

use std::fmt;
use std::time::Duration;

use crate::error::LeaseError;
use crate::protocol::limits::{
    LOCK_DELAY, MAX_REPLICAS, REPLICA_WAIT, TTL, WAIT_TIMEOUT, check_permits,
};
use crate::protocol::{Attempt, HolderLabel, Purpose, ResourceDigest};

/// Default wait timeout: try once (docs/design.md §11).
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::ZERO;

/// A validated acquisition request.
///
/// `ttl` is in `100ms ..= 1h` and held in whole milliseconds (what Redis stores);
/// `wait_timeout` is in `0 ..= 1h`, where 0 means "try once". The relation to the client's
/// drift budget (`ttl > drift_budget`) is checked by the client, which knows the budget.
///
/// ```
/// # use std::time::Duration;
/// use leasehold::{Attempt, LeaseRequest, OperationId, Purpose, ResourceDigest};
/// let request = LeaseRequest::builder(
///     Purpose::new("reports")?,
///     ResourceDigest::of(b"tenant-7"),
///     Attempt::new(OperationId::new("nightly-2026-12-02")?)?,
/// )
/// .ttl(Duration::from_secs(30))
/// .wait_timeout(Duration::from_secs(5))
/// .build()?;
/// assert_eq!(request.ttl(), Duration::from_secs(30));
/// # Ok::<(), leasehold::LeaseError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    purpose: Purpose,
    resource: ResourceDigest,
    ttl: Duration,
    wait_timeout: Duration,
    attempt: Attempt,
    permits: u16,
    /// The options most requests leave out, boxed: a caller of `run_under_lease` keeps
    /// its request for as long as the lease is held (docs/performance.md, "R with one
    /// actor per lease").
    rare: Option<Box<RareOptions>>,
}

/// A request's options most requests leave out; `None` in [`LeaseRequest`] when all are.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RareOptions {
    replicas: Option<ReplicaWait>,
    holder: Option<HolderLabel>,
    lock_delay: Option<Duration>,
}

impl fmt::Debug for LeaseRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRequest")
            .field("purpose", &self.purpose)
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("wait_timeout", &self.wait_timeout)
            .field("attempt", &self.attempt)
            .field("replicas", &self.replica_wait())
            .field("holder", &self.holder())
            .field("permits", &self.permits)
            .field("lock_delay", &self.lock_delay())
            .finish()
    }
}

/// How many replicas an acquisition waits for, and for how long (Redis `WAIT`); see
/// [`LeaseRequestBuilder::wait_for_replicas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaWait {
    /// Replicas to wait for, 1 ..= [`MAX_REPLICAS`].
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Longest wait for them, measured by the server from when it runs `WAIT`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl LeaseRequest {
    /// Starts a request; `ttl` defaults to 30 s and `wait_timeout` to 0 (try once).
    pub fn builder(
        purpose: Purpose,
        resource: ResourceDigest,
        attempt: Attempt,
    ) -> LeaseRequestBuilder {
        LeaseRequestBuilder {
            purpose,
            resource,
            attempt,
            ttl: LeaseRequestBuilder::DEFAULT_TTL,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            replicas: None,
            holder: None,
            permits: 1,
            lock_delay: None,
        }
    }

    /// What the lease is for.
    pub fn purpose(&self) -> &Purpose {
        &self.purpose
    }
    /// Which resource.
    pub fn resource(&self) -> &ResourceDigest {
        &self.resource
    }
    /// Time to live set on acquisition and on every renewal (whole milliseconds).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// How long `acquire` keeps trying, measured from its call.
    pub fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }
    /// The attempt sent (and re-sent, after an indeterminate reply).
    pub fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    /// The replicas each acquisition waits for, if any
    /// ([`LeaseRequestBuilder::wait_for_replicas`]).
    pub fn replica_wait(&self) -> Option<ReplicaWait> {
        self.rare.as_ref().and_then(|rare| rare.replicas)
    }

    /// The label stored with the lease for whoever inspects or observes it, if any
    /// ([`LeaseRequestBuilder::holder`]).
    pub fn holder(&self) -> Option<&HolderLabel> {
        self.rare.as_ref().and_then(|rare| rare.holder.as_ref())
    }

    /// How many holders the lease admits at once: 1 for a lease (the default), more for a
    /// counted lease ([`LeaseRequestBuilder::permits`]).
    pub fn permits(&self) -> u16 {
        self.permits
    }

    /// How long the resource refuses new holders after this lease ends without a release,
    /// if at all ([`LeaseRequestBuilder::lock_delay`]).
    pub fn lock_delay(&self) -> Option<Duration> {
        self.rare.as_ref().and_then(|rare| rare.lock_delay)
    }

    /// The same request under a fresh attempt (a new owner token, same operation id), for
    /// re-acquiring after a loss.
    ///
    /// # Errors
    /// [`LeaseError::EntropyUnavailable`].
    pub fn with_new_attempt(&self) -> Result<Self, LeaseError> {
        Ok(Self {
            attempt: Attempt::new(self.attempt.operation().clone())?,
            ..self.clone()
        })
    }
}

/// Builder for [`LeaseRequest`]; checks every bound in [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct LeaseRequestBuilder {
    purpose: Purpose,
    resource: ResourceDigest,
    attempt: Attempt,
    ttl: Duration,
    wait_timeout: Duration,
    replicas: Option<(u32, Duration)>,
    holder: Option<HolderLabel>,
    permits: u32,
    lock_delay: Option<Duration>,
}

impl LeaseRequestBuilder {
    const DEFAULT_TTL: Duration = Duration::from_secs(30);

    /// Time to live (100 ms ..= 1 h). Sub-millisecond parts are dropped.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long `acquire` may wait (0 ..= 1 h).
    pub fn wait_timeout(mut self, wait_timeout: Duration) -> Self {
        self.wait_timeout = wait_timeout;
        self
    }

    /// After each acquisition (not after a replay, which writes nothing to wait for), wait
    /// until `replicas` replicas have acknowledged it, for at most `timeout` (Redis `WAIT`),
    /// and report how many did in [`LeaseHandle::replication`](crate::LeaseHandle::replication).
    ///
    /// What it buys: a lease that `replicas` replicas hold survives the failover to one of
    /// them. What it costs: the acquisition takes up to `timeout` longer (its validity is
    /// still measured from the instant before the first send, so the wait comes out of
    /// it), and runs on a connection of its own, not batched with other operations. Short of
    /// the acknowledgements the lease is held all the same: the count says how exposed it is.
    ///
    /// `replicas` is 1 ..= 16; `timeout` 1 ms ..= 10 s.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// A public label stored with the lease — a hostname, a pod, `host:pid` — that
    /// `inspect` and `observe` report, so a follower or an operator sees who holds it.
    /// Default: none.
    pub fn holder(mut self, holder: HolderLabel) -> Self {
        self.holder = Some(holder);
        self
    }

    /// Makes this a counted lease: at most `permits` holders at once, each in a slot of
    /// its own and each a lease in every other way — its own fencing token (tokens
    /// increase across all slots of the resource), renewal, loss, release. A contender
    /// finds a free slot or waits for the earliest to free; a release wakes the waiters.
    /// `1` (the default) is a plain lease.
    ///
    /// The number is part of the lease's name: requests for one resource with different
    /// `permits` do not count against each other, so every holder must agree on it.
    ///
    /// `permits` is 1 ..= [`MAX_PERMITS`](crate::protocol::limits::MAX_PERMITS) (64).
    ///
    /// ```
    /// # fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{LeaseClient, LeaseSettings, MemoryBackend};
    /// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
    /// let request = client.request("exports", "fleet")?.permits(4).build()?;
    /// assert_eq!(request.permits(), 4);
    /// # Ok(()) }
    /// ```
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = permits;
        self
    }

    /// After this lease ends without a release — it expired: its holder crashed, was
    /// partitioned or paused — the resource refuses every acquisition for `delay` more
    /// (Chubby's and Consul's lock-delay), so work the lost holder may still have in flight
    /// has that long to notice and stop before anyone else starts. A contender is told
    /// [`AcquireOutcome::LockDelayed`] with the time left, never a plain contention. A
    /// release ends the lease cleanly and skips the delay: the holder says its work is
    /// over. Default: none.
    ///
    /// It is the holder's: the delay stored with a lease is the one its acquisition asked
    /// for. It is not a substitute for fencing: a holder paused longer than the delay
    /// still wakes up believing it holds the lease; only the token refuses its writes.
    ///
    /// `delay` is 1 ms ..= 1 h (whole milliseconds).
    ///
    /// [`AcquireOutcome::LockDelayed`]: crate::AcquireOutcome::LockDelayed
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// Validates every field.
    ///
    /// # Errors
    /// [`LeaseError::InvalidDuration`] for a `ttl`, `wait_timeout` or `replica_wait` out of
    /// its bounds (the ttl is truncated to whole milliseconds first);
    /// [`LeaseError::InvalidReplicas`] for a replica count of 0 or above 16;
    /// [`LeaseError::InvalidPermits`] for permits of 0 or above 64;
    /// [`LeaseError::InvalidDuration`] for a `lock_delay` out of its bounds.
    pub fn build(self) -> Result<LeaseRequest, LeaseError> {
        let lock_delay = match self.lock_delay {
            None => None,
            Some(delay) => Some(LOCK_DELAY.check(whole_millis(delay))?),
        };
        let permits = check_permits(self.permits)?;
        let ttl = TTL.check(whole_millis(self.ttl))?;
        let wait_timeout = WAIT_TIMEOUT.check(self.wait_timeout)?;
        let replicas = match self.replicas {
            None => None,
            Some((replicas, timeout)) => {
                if !(1..=MAX_REPLICAS).contains(&replicas) {
                    return Err(LeaseError::InvalidReplicas {
                        value: replicas,
                        max: MAX_REPLICAS,
                    });
                }
                let timeout = REPLICA_WAIT.check(whole_millis(timeout))?;
                Some(ReplicaWait { replicas, timeout })
            }
        };
        Ok(LeaseRequest {
            purpose: self.purpose,
            resource: self.resource,
            ttl,
            wait_timeout,
            attempt: self.attempt,
            permits,
            rare: match (replicas, self.holder, lock_delay) {
                (None, None, None) => None,
                (replicas, holder, lock_delay) => Some(Box::new(RareOptions {
                    replicas,
                    holder,
                    lock_delay,
                })),
            },
        })
    }
}

fn whole_millis(d: Duration) -> Duration {
    // Saturates for absurd values; the bound check rejects them right after.
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::DurationProblem;
    use crate::protocol::OperationId;

    fn builder() -> LeaseRequestBuilder {
        LeaseRequest::builder(
            Purpose::new("p").unwrap(),
            ResourceDigest::of(b"r"),
            Attempt::new(OperationId::new("op").unwrap()).unwrap(),
        )
    }

    #[test]
    fn defaults_are_30s_ttl_and_try_once() {
        let r = builder().build().unwrap();
        assert_eq!(r.ttl(), Duration::from_secs(30));
        assert_eq!(r.wait_timeout(), Duration::ZERO);
    }

    #[test]
    fn ttl_and_wait_bounds_are_checked() {
        assert!(matches!(
            builder().ttl(Duration::from_millis(99)).build(),
            Err(LeaseError::InvalidDuration {
                param: "ttl",
                problem: DurationProblem::BelowMinimum { .. }
            })
        ));
        assert!(matches!(
            builder().wait_timeout(Duration::from_secs(3601)).build(),
            Err(LeaseError::InvalidDuration {
                param: "wait_timeout",
                ..
            })
        ));
        assert_eq!(
            builder()
                .ttl(Duration::from_micros(150_900))
                .build()
                .unwrap()
                .ttl(),
            Duration::from_millis(150)
        );
    }

    #[test]
    fn replica_waits_are_checked_and_off_by_default() {
        assert_eq!(builder().build().unwrap().replica_wait(), None);
        let r = builder()
            .wait_for_replicas(2, Duration::from_millis(250))
            .build()
            .unwrap();
        let wait = r.replica_wait().unwrap();
        assert_eq!(
            (wait.replicas(), wait.timeout()),
            (2, Duration::from_millis(250))
        );
        for n in [0, 17] {
            let err = builder()
                .wait_for_replicas(n, Duration::from_secs(1))
                .build()
                .unwrap_err();
            assert_eq!(err, LeaseError::InvalidReplicas { value: n, max: 16 });
            assert_eq!(
                err.to_string(),
                format!("replicas {n} is invalid: must be 1 ..= 16")
            );
        }
        let err = builder()
            .wait_for_replicas(1, Duration::from_secs(11))
            .build()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "replica_wait 11s is above the maximum of 10s"
        );
        assert!(
            builder()
                .wait_for_replicas(1, Duration::ZERO)
                .build()
                .is_err()
        );
    }

    #[test]
    fn permits_default_to_one_and_are_bounded() {
        assert_eq!(builder().build().unwrap().permits(), 1);
        assert_eq!(builder().permits(64).build().unwrap().permits(), 64);
        for n in [0, 65, 70_000] {
            let err = builder().permits(n).build().unwrap_err();
            assert_eq!(err, LeaseError::InvalidPermits { value: n, max: 64 });
            assert_eq!(
                err.to_string(),
                format!("permits {n} is invalid: must be 1 ..= 64")
            );
        }
    }

    #[test]
    fn lock_delay_is_off_by_default_and_bounded() {
        assert_eq!(builder().build().unwrap().lock_delay(), None);
        let r = builder()
            .lock_delay(Duration::from_micros(2_000_900))
            .build()
            .unwrap();
        assert_eq!(r.lock_delay(), Some(Duration::from_millis(2000)));
        for bad in [Duration::from_micros(999), Duration::from_secs(3601)] {
            assert!(matches!(
                builder().lock_delay(bad).build(),
                Err(LeaseError::InvalidDuration {
                    param: "lock_delay",
                    ..
                })
            ));
        }
    }

    #[test]
    fn new_attempt_keeps_operation_and_changes_owner() {
        let r = builder().build().unwrap();
        let r2 = r.with_new_attempt().unwrap();
        assert_eq!(r.attempt().operation(), r2.attempt().operation());
        assert_ne!(r.attempt().owner(), r2.attempt().owner());
    }
}
