//! The one release path: an owner-checked release of one attempt's lease, in its span, with
//! its metric — for [`LeaseHandle::release`](crate::LeaseHandle::release), the handle's
//! drop, and [`LeaseClient::release_attempt`](crate::LeaseClient::release_attempt).

use tokio::time::Instant;
use tracing::Instrument as _;

use crate::lease::outcome::ReleaseOutcome;
use crate::lease::session::Session;
use crate::lease::trace;
use crate::protocol::{Holding, LeaseKeys, Purpose, ResourceDigest};
use crate::telemetry::Operation;

/// Which lease to release, and what its span says of it.
pub(crate) struct Release<'a> {
    pub(crate) keys: &'a LeaseKeys,
    pub(crate) purpose: &'a Purpose,
    pub(crate) resource: &'a ResourceDigest,
    /// The attempt, and (a handle's) its token and the lease key's value.
    pub(crate) holding: &'a Holding,
}

/// Releases the lease if `release.holding`'s attempt holds it, owner-checked. Keys that name a
/// counted lease but no slot (an attempt whose acquisition was given up or went
/// unanswered: which slot it took, if any, is not known) release each slot the attempt
/// holds — at most one — one item per slot, sent together; another holder's slot answers
/// `NOT_OWNER` and is not touched.
pub(crate) async fn release(session: &Session, release: Release<'_>) -> ReleaseOutcome {
    let span = trace::span!(
        "lease.release",
        release.purpose,
        release.resource,
        release.holding.attempt()
    );
    if let Some(token) = release.holding.token() {
        span.record("token", token.get());
    }
    let started = Instant::now();
    let timeout = session.settings().command_timeout;
    let slots = release.keys.each_slot();
    let results = futures_util::future::join_all(
        slots
            .iter()
            .map(|keys| session.backend().release(keys, release.holding, timeout)),
    )
    .instrument(span.clone())
    .await;
    let outcome = of_slots(results.into_iter().map(ReleaseOutcome::from));
    let metric = Some((Operation::Release, release.purpose));
    trace::finish(&span, metric, &outcome, started);
    outcome
}

/// What releasing an attempt across the slots of its lease achieved, from each slot's
/// outcome (one, for a plain lease or a known slot). The attempt holds at most one slot:
/// `Released` if one was; else what may still leave it held — `Indeterminate` (a release
/// may have landed), `Unavailable` (one provably did not run) —; else `NotOwner` if every
/// slot is another's, `AlreadyAbsent` if not.
fn of_slots(outcomes: impl Iterator<Item = ReleaseOutcome>) -> ReleaseOutcome {
    let rank = |outcome: &ReleaseOutcome| match outcome {
        ReleaseOutcome::Released => 0,
        ReleaseOutcome::Indeterminate { .. } => 1,
        ReleaseOutcome::Unavailable { .. } => 2,
        ReleaseOutcome::AlreadyAbsent => 3,
        ReleaseOutcome::NotOwner => 4,
    };
    outcomes
        .min_by_key(rank)
        .unwrap_or(ReleaseOutcome::AlreadyAbsent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FailureDetail, FailureKind};

    #[test]
    fn a_release_across_slots_answers_for_the_attempts_slot_or_for_what_is_not_known() {
        let detail = FailureDetail::new(FailureKind::Timeout, "t");
        let lost = ReleaseOutcome::Indeterminate {
            detail: detail.clone(),
        };
        let not_run = ReleaseOutcome::Unavailable { detail };
        let (absent, other) = (ReleaseOutcome::AlreadyAbsent, ReleaseOutcome::NotOwner);
        let cases = [
            (
                vec![other.clone(), ReleaseOutcome::Released, lost.clone()],
                ReleaseOutcome::Released,
            ),
            (
                vec![other.clone(), not_run.clone(), lost.clone()],
                lost.clone(),
            ),
            (
                vec![absent.clone(), not_run.clone(), other.clone()],
                not_run,
            ),
            (vec![other.clone(), absent.clone()], absent.clone()),
            (vec![other.clone(), other.clone()], other.clone()),
            (vec![absent.clone()], absent),
        ];
        for (slots, combined) in cases {
            assert_eq!(of_slots(slots.clone().into_iter()), combined, "{slots:?}");
        }
    }
}
