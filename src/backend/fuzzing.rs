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

    /// How long a waiter's place outlives its join or its session's last keep-alive
    /// (`lua/line.lua` `KEEP_MS`): the crate's own constant, for a test's clock.
    pub const LINE_KEEP: Duration = crate::protocol::LINE_KEEP;

    /// A line session, as each [`LeaseClient`](crate::LeaseClient) has one: its waiters
    /// are named by it in a lease's line, kept alive there by its keep-alive
    /// ([`keep_in_line`]) and told their turn on its channel. For tests: a replay may give
    /// each attempt a session of its own.
    #[derive(Debug)]
    pub struct LineSession(crate::protocol::LineSession);

    impl LineSession {
        /// A new session, with a random id as a client's.
        pub fn new() -> Self {
            Self(crate::protocol::LineSession::new())
        }
    }

    impl Default for LineSession {
        fn default() -> Self {
            Self::new()
        }
    }

    /// The acquire script for `request`'s attempt as the wait loop sends it for a waiter
    /// of `session` (`src/lease/wait/driver.rs`): `first`, the wait's first try, which
    /// joins the line at once when it may not take the lease; else a later one, which
    /// looks for its place first. A refusal carries the waiter's rank.
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn acquire_in_line(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        request: &LeaseRequest,
        session: &LineSession,
        first: bool,
        timeout: Duration,
    ) -> Result<AcquireReply, SendFailure> {
        let id = WaiterId::of(&session.0, request.attempt());
        let place = match first {
            true => LinePlace::Joins,
            false => LinePlace::Waits,
        };
        backend.acquire(keys, request, place, &id, timeout).await
    }

    /// The keep-alive `session`'s keeper writes in the lease's line every
    /// `LINE_KEEP_EVERY` (`src/protocol/line.rs`) while the session has waiters there
    /// (`src/lease/line_keeper.rs`), without extending the line's own life.
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn keep_in_line(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        session: &LineSession,
        timeout: Duration,
    ) -> Result<(), SendFailure> {
        backend.keep_in_line(keys, &session.0, false, timeout).await
    }

    /// A subscription to the turn notices of `attempt`'s waiter of `session`, as the wait
    /// loop makes it (`src/lease/wait/notices.rs`).
    ///
    /// # Errors
    /// The backend's [`SendFailure`].
    pub async fn subscribe_turn(
        backend: &dyn LeaseBackend,
        keys: &LeaseKeys,
        attempt: &Attempt,
        session: &LineSession,
        timeout: Duration,
    ) -> Result<ReleaseNotices, SendFailure> {
        let id = WaiterId::of(&session.0, attempt);
        backend.subscribe_turn(keys, &id, timeout).await
    }

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
