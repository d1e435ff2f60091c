//! Asking Redis again about a lease that became unknown.
//!
//! A renewal that failed while Redis restarted (or whose reply was lost) leaves the lease
//! unknown: it may still be this run's, so `--grace` governs the command's end. Redis
//! answering again may settle it — the key is gone (an empty restart, a deletion, an
//! expiry) or someone else's — and then nothing is vouched for any more: the command gets
//! SIGKILL within one renewal period, as when a renewal itself finds the lease gone.

use leasehold::{InspectOutcome, LeaseClient, LeaseRequest, LostReason};

/// Where to ask: the run's client and its request (the attempt it holds the lease by).
#[derive(Clone, Copy)]
pub(crate) struct Recheck<'a> {
    pub(crate) client: &'a LeaseClient,
    pub(crate) request: &'a LeaseRequest,
}

impl Recheck<'_> {
    /// What Redis says of the lease: `Some(reason)` once it is gone or someone else's;
    /// `None` while it is still this run's or Redis did not answer. A counted lease is read
    /// whole: `inspect` answers this attempt's own slot while it holds one.
    pub(crate) async fn gone(self) -> Option<LostReason> {
        verdict(&self.client.inspect(self.request).await)
    }
}

/// A lease this run held, as one read of its key finds it.
fn verdict(outcome: &InspectOutcome) -> Option<LostReason> {
    match outcome {
        InspectOutcome::HeldByOther { .. } => Some(LostReason::NotOwner),
        // Absent, or its lock-delay: the lease ended without a release.
        InspectOutcome::Absent | InspectOutcome::LockDelayed { .. } => Some(LostReason::Absent),
        // Still this attempt's; or nothing is known.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold::{FailureDetail, FailureKind, FencingToken};

    use super::*;

    #[test]
    fn only_an_answer_that_the_lease_is_not_ours_is_a_verdict() {
        let token = FencingToken::new(7);
        let remaining = Duration::from_secs(1);
        let detail = FailureDetail::new(FailureKind::Timeout, "no reply");
        let cases = [
            (InspectOutcome::Absent, Some(LostReason::Absent)),
            (
                InspectOutcome::LockDelayed {
                    remaining,
                    token,
                    holder: None,
                },
                Some(LostReason::Absent),
            ),
            (
                InspectOutcome::HeldByOther {
                    remaining,
                    token,
                    holder: None,
                },
                Some(LostReason::NotOwner),
            ),
            (
                InspectOutcome::HeldByAttempt {
                    remaining,
                    token,
                    holder: None,
                },
                None,
            ),
            (
                InspectOutcome::Unavailable {
                    detail: detail.clone(),
                },
                None,
            ),
            (InspectOutcome::Indeterminate { detail }, None),
        ];
        for (outcome, expected) in cases {
            assert_eq!(verdict(&outcome), expected, "{outcome:?}");
        }
    }
}
