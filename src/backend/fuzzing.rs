//! Not API: the script level, reachable from outside the crate only with the `fuzzing`
//! feature. The script-reply decoders, for the fuzz targets in `fuzz/` and
//! `tests/fuzz_corpus.rs`; one backend operation at a time ([`calls`]) with the replies and
//! failures it answers and the [`Holding`] a handle builds, for the model's conformance
//! replay (`model/tests/`) and the tests of the backends' contract, which run each script
//! as a handle or a waiter does; and the batching bounds the batching tests size their
//! bursts by.
//!
//! Each item is the crate's own code, unchanged; nothing here may hold logic of its own, or
//! the fuzz targets and the tests would check it instead of the code. No stability
//! promise: names and signatures follow the crate's.

pub use super::redis::fuzzing::*;
pub use super::redis::{CALLS_IN_FLIGHT, OPERATIONS_FOR_ANOTHER_CALL};
pub use super::{ReleaseNotices, SendFailure};
pub use crate::protocol::holding::Holding;
pub use crate::protocol::reply::{AcquireReply, InspectReply, ReleaseReply, RenewReply};

/// One backend operation each, as the lease core calls it: one script call (or, on a server
/// with compare-and-set, its commands), without a handle's state or retries.
pub mod calls {
    use std::time::Duration;

    use super::{Holding, ReleaseNotices, SendFailure};
    use crate::backend::{LeaseBackend, RenewBound};
    use crate::protocol::reply::{AcquireReply, InspectReply, ReleaseReply, RenewReply};
    use crate::protocol::{Attempt, LeaseKeys, LeaseRequest, LinePlace, WaiterId};

    /// The acquire script for `request`'s attempt.
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn acquire(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        request: &LeaseRequest,
        timeout: Duration,
    ) -> Result<AcquireReply, SendFailure> {
        let id = WaiterId::alone(request.attempt());
        backend
            .acquire(keys, request, LinePlace::Tries, &id, timeout)
            .await
    }

    /// The acquire script for `request`'s attempt as the wait loop sends it: when it may
    /// not take the lease, it joins the lease's line (or keeps its place there) — as a
    /// waiter of no line session, which nothing keeps alive after its join (a waiter
    /// whose client was killed right after it joined).
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn acquire_waiting(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        request: &LeaseRequest,
        timeout: Duration,
    ) -> Result<AcquireReply, SendFailure> {
        let id = WaiterId::alone(request.attempt());
        backend
            .acquire(keys, request, LinePlace::Joins, &id, timeout)
            .await
    }

    /// The key of the lease's line of waiters (`lua/line.lua`).
    pub fn line_key(keys: &LeaseKeys) -> String {
        keys.line()
    }

    /// A renewal by `holding`, to `ttl`.
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn renew(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        holding: &Holding,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<RenewReply, SendFailure> {
        backend
            .renew(keys, holding, ttl, RenewBound::within(timeout))
            .await
    }

    /// A release by `holding`.
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn release(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        holding: &Holding,
        timeout: Duration,
    ) -> Result<ReleaseReply, SendFailure> {
        backend.release(keys, holding, timeout).await
    }

    /// The read-only inspect script, as `attempt`: the lease's state (not its line's
    /// length).
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn inspect(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        attempt: &Attempt,
        timeout: Duration,
    ) -> Result<InspectReply, SendFailure> {
        backend
            .inspect(keys, attempt, timeout)
            .await
            .map(|inspected| inspected.reply)
    }

    /// A subscription to the lease's release notices, as a waiter makes it.
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn subscribe_releases(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        timeout: Duration,
    ) -> Result<ReleaseNotices, SendFailure> {
        backend.subscribe_releases(keys, timeout).await
    }
}
