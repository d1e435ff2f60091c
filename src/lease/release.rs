//! The one release path: an owner-checked release of one attempt's lease, in its span, with
//! its metric — for [`LeaseHandle::release`](crate::LeaseHandle::release), the handle's
//! drop, and [`LeaseClient::release_attempt`](crate::LeaseClient::release_attempt).

use tokio::time::Instant;
use tracing::Instrument as _;

use crate::lease::outcome::{ReleaseOutcome, release_outcome};
use crate::lease::session::Session;
use crate::lease::trace;
use crate::protocol::{Attempt, FencingToken, LeaseKeys, Purpose, ResourceDigest};
use crate::telemetry::Operation;

/// Which lease to release, and what its span says of it.
pub(crate) struct Release<'a> {
    pub(crate) keys: &'a LeaseKeys,
    pub(crate) purpose: &'a Purpose,
    pub(crate) resource: &'a ResourceDigest,
    pub(crate) attempt: &'a Attempt,
    /// The lease's fencing token, when known (a handle's).
    pub(crate) token: Option<FencingToken>,
}

/// Releases the lease if `release.attempt` holds it: one call, owner-checked.
pub(crate) async fn release(session: &Session, release: Release<'_>) -> ReleaseOutcome {
    let span = trace::span!(
        "lease.release",
        release.purpose,
        release.resource,
        release.attempt
    );
    if let Some(token) = release.token {
        span.record("token", token.get());
    }
    let started = Instant::now();
    let timeout = session.settings().command_timeout;
    let result = session
        .backend()
        .release(release.keys, release.attempt, timeout)
        .instrument(span.clone())
        .await;
    let outcome = release_outcome(result);
    let metric = Some((Operation::Release, release.purpose));
    trace::finish(&span, metric, outcome.as_str(), started);
    outcome
}
