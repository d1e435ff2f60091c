//! `Holding`: the attempt a renewal or a release speaks for, and — once its acquisition is
//! known — the exact value its lease key holds, which a server's own compare-and-set
//! commands compare against.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use crate::protocol::{Attempt, FencingToken, LeaseRequest};

/// The attempt that holds (or held) a lease, as a renewal or a release names it: always
/// its [`Attempt`], and for a lease this process acquired also its fencing token and the
/// exact value of its lease key (`"<owner> <op> [<holder> ]<token>[ d<delay_ms>]"`,
/// docs/design.md §4).
///
/// The value lets a server that has compare-and-set commands (`SET … IFEQ`, `DELIFEQ`)
/// renew and release without a script. A `Holding` built from an attempt alone
/// ([`of_attempt`](Self::of_attempt): its token and label are not known) is renewed and
/// released by the script, which checks the value's `"<owner> <op> "` prefix instead; both
/// forms refuse every other attempt's lease.
///
/// Cheap to clone. Printed, it shows the attempt (owner redacted) and the token, never
/// the value, which holds the owner token.
#[derive(Clone, PartialEq, Eq)]
pub struct Holding {
    attempt: Attempt,
    acquired: Option<Acquired>,
}

#[derive(Clone, PartialEq, Eq)]
struct Acquired {
    token: FencingToken,
    value: Arc<str>,
    lock_delay: bool,
}

impl Holding {
    /// `attempt`, its lease's token and value not known (a release by attempt).
    pub fn of_attempt(attempt: Attempt) -> Self {
        Self {
            attempt,
            acquired: None,
        }
    }

    /// The holding `request`'s acquisition created, which issued `token`.
    pub(crate) fn acquired(request: &LeaseRequest, token: FencingToken) -> Self {
        let attempt = request.attempt().clone();
        let (owner, operation) = (attempt.owner().expose(), attempt.operation().as_str());
        let lock_delay = request.lock_delay();
        // Writing into a String cannot fail: the results are ignored.
        let mut value = String::with_capacity(owner.len() + operation.len() + 48);
        let _ = write!(value, "{owner} {operation} ");
        if let Some(holder) = request.holder() {
            let _ = write!(value, "{} ", holder.as_str());
        }
        let _ = write!(value, "{}", token.get());
        if let Some(delay) = lock_delay {
            let _ = write!(value, " d{}", delay.as_millis());
        }
        Self {
            attempt,
            acquired: Some(Acquired {
                token,
                value: value.into(),
                lock_delay: lock_delay.is_some(),
            }),
        }
    }

    /// The attempt.
    pub fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    /// The fencing token of the acquisition, when known.
    pub fn token(&self) -> Option<FencingToken> {
        self.acquired.as_ref().map(|a| a.token)
    }

    /// The exact value of the lease key, when known (shared, not copied, by each
    /// operation that sends it). A bearer secret: never log it.
    pub(crate) fn value(&self) -> Option<&Arc<str>> {
        self.acquired.as_ref().map(|a| &a.value)
    }

    /// Whether the lease was acquired with a lock-delay (its renewal must also check that it
    /// has not ended, which only the script does). False when not known.
    pub(crate) fn has_lock_delay(&self) -> bool {
        self.acquired.as_ref().is_some_and(|a| a.lock_delay)
    }
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holding")
            .field("attempt", &self.attempt)
            .field("token", &self.token())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::protocol::{HolderLabel, OperationId, Purpose, ResourceDigest};
    use crate::{Attempt, OwnerToken};

    fn request(holder: Option<&str>, delay: Option<Duration>) -> LeaseRequest {
        let owner = OwnerToken::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let attempt = Attempt::from_parts(owner, OperationId::new("op-1").unwrap());
        let mut builder =
            LeaseRequest::builder(Purpose::new("p").unwrap(), ResourceDigest::of("r"), attempt);
        if let Some(holder) = holder {
            builder = builder.holder(HolderLabel::new(holder).unwrap());
        }
        if let Some(delay) = delay {
            builder = builder.lock_delay(delay);
        }
        builder.build().unwrap()
    }

    #[test]
    fn the_value_is_the_one_the_acquire_script_writes() {
        let token = FencingToken::new(1_733_000_000_000_001);
        let owner = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let rows = [
            (None, None, format!("{owner} op-1 1733000000000001"), false),
            (
                Some("web-7"),
                None,
                format!("{owner} op-1 web-7 1733000000000001"),
                false,
            ),
            (
                Some("web-7"),
                Some(Duration::from_secs(2)),
                format!("{owner} op-1 web-7 1733000000000001 d2000"),
                true,
            ),
            (
                None,
                Some(Duration::from_millis(250)),
                format!("{owner} op-1 1733000000000001 d250"),
                true,
            ),
        ];
        for (holder, delay, value, lock_delay) in rows {
            let holding = Holding::acquired(&request(holder, delay), token);
            assert_eq!(holding.value().map(|v| &**v), Some(value.as_str()));
            assert_eq!(holding.has_lock_delay(), lock_delay);
            assert_eq!(holding.token(), Some(token));
        }
    }

    #[test]
    fn an_attempt_alone_has_no_value_and_prints_no_owner() {
        let holding = Holding::of_attempt(request(None, None).attempt().clone());
        assert_eq!(holding.value(), None);
        assert!(!holding.has_lock_delay());
        let printed = format!("{holding:?}");
        assert!(!printed.contains("AAAAAAAA"), "{printed}");
        let acquired = Holding::acquired(&request(None, None), FencingToken::new(7));
        assert!(!format!("{acquired:?}").contains("AAAAAAAA"));
    }
}
