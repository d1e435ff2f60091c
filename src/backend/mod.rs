//! Backend layer: where leases are stored. Imports only [`crate::protocol`] and the crate's
//! error type.
//!
//! [`Operations`] — what the sealed [`LeaseBackend`] carries, crate-private — is
//! deliberately small: one method per operation of the script of
//! docs/design.md §4 (acquire — also waiting for replicas —, renew, release, inspect), the
//! scan of lease keys behind listing, and the two notice subscriptions (releases; releases
//! and acquisitions). A backend answers with the typed reply of the script, or with a
//! [`SendFailure`] that says how sure it is that nothing happened. It knows nothing about
//! handles, validity or retries: those belong to the lease core.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::{FutureExt as _, Stream, StreamExt as _};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::protocol::{
    AcquireReply, Attempt, Holding, Inspected, LeaseKeys, LeaseRequest, LinePlace, LineSession,
    ReleaseReply, RenewReply, ReplicaWait, WaiterId,
};

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod memory;
mod redis;

pub use memory::{MemoryBackend, MemoryFault};
pub use redis::{RedisBackend, RedisConfig, ServerCapabilities};

/// The future every backend operation returns.
pub(crate) type BackendFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, SendFailure>> + Send + 'a>>;

/// The pages of lease keys [`Operations::scan_leases`] finds.
pub(crate) type KeyPages<'a> =
    Pin<Box<dyn Stream<Item = Result<Vec<String>, SendFailure>> + Send + 'a>>;

/// Storage for leases: [`MemoryBackend`] or [`RedisBackend`], handed to
/// [`LeaseClient::new`](crate::LeaseClient::new).
///
/// # Sealed
///
/// Implemented by [`MemoryBackend`] and [`RedisBackend`] only. Its operations — one script
/// call each, without a handle's state or retries — are the crate's own: a backend must
/// answer with the scripts' semantics, and what a caller does with a lease goes through
/// [`LeaseClient`](crate::LeaseClient) and [`LeaseHandle`](crate::LeaseHandle), which keep
/// validity, retries and outcomes right. A backend of one's own does not compile, however
/// complete — its one error is the seal:
///
/// ```compile_fail
/// use leasehold::{LeaseBackend, MemoryBackend};
///
/// // A backend of one's own: here, one that hands every call to leasehold's.
/// #[derive(Debug)]
/// struct Mine(MemoryBackend);
///
/// impl LeaseBackend for Mine {}
/// ```
///
/// Nor can a caller run an operation through it:
///
/// ```compile_fail
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LeaseError> {
/// use std::time::Duration;
/// use leasehold::*;
///
/// let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?;
/// let keys = client.keys(&Purpose::new("billing")?, &ResourceDigest::of(b"account-42"));
/// let attempt = client.new_attempt("stranger")?;
/// let _ = MemoryBackend::new().inspect(&keys, &attempt, Duration::from_secs(1)).await;
/// # Ok(()) }
/// ```
// The bound is the seal: `Operations` is crate-private, so no other crate can implement
// it or call its methods.
#[allow(private_bounds)]
pub trait LeaseBackend: Operations + Send + Sync + fmt::Debug + 'static {}

impl LeaseBackend for MemoryBackend {}
impl LeaseBackend for RedisBackend {}

/// How long a renewal may take: its round trip at most `round_trip` from the instant its
/// command is written, and its reply by `by`, the caller's absolute deadline. Until `by` it
/// may wait unsent behind other calls: an unsent renewal given up and asked again would
/// only wait again, behind everything queued meanwhile — a process behind its renewals
/// would spend its time on renewals that never leave (docs/performance.md, "R100k on one
/// thread").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RenewBound {
    /// The longest round trip, from the instant the command is written.
    pub(crate) round_trip: Duration,
    /// No reply counts after it, and nothing is sent at or after it.
    pub(crate) by: Instant,
}

impl RenewBound {
    /// A renewal that must be answered within `timeout` of now, local wait included.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn within(timeout: Duration) -> Self {
        Self {
            round_trip: timeout,
            by: crate::protocol::limits::deadline_after(Instant::now(), timeout),
        }
    }

    /// The time left from `now`, at most one round trip: how long a call made now may take.
    pub(crate) fn timeout_at(self, now: Instant) -> Duration {
        self.round_trip.min(self.by.saturating_duration_since(now))
    }
}

/// A backend's operations: one method per operation of the script of docs/design.md §4.
///
/// Each call is atomic and bounded by `timeout`: a call that has not answered by then
/// fails with [`SendFailure::MaybeSent`]. The timeout bounds the round trip, from the
/// instant just before the command is sent; a backend that keeps operations waiting
/// locally before that ([`RedisBackend`] under a burst) does not count the wait against it
/// — [`renew`](Self::renew) is bounded by a [`RenewBound`] instead. An operation
/// refused locally before anything was sent, for want of room in such a wait, is
/// [`SendFailure::NotSent`] of kind [`FailureKind::QueueFull`]. Every duration is taken,
/// `Duration::MAX` included: the deadline saturates
/// ([`NO_DEADLINE`](crate::protocol::limits::NO_DEADLINE)).
pub(crate) trait Operations {
    /// Runs the acquire script for `request`'s attempt: take the lease (a free slot of a
    /// counted lease, when `keys` name one) if absent, replay if this attempt holds it.
    /// The request's ttl, holder label and lock-delay are stored with a lease it takes (a
    /// replay keeps what is stored); the label is reported by [`inspect`](Self::inspect).
    ///
    /// `place` says how it stands towards the lease's line of waiters (`lua/line.lua`): a
    /// waiting try joins it as `id`, or keeps its place, when it may not take the lease.
    fn acquire<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        request: &'a LeaseRequest,
        place: LinePlace,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, AcquireReply>;

    /// Runs the acquire script and, if it acquired, waits until `wait.replicas()` replicas
    /// acknowledged it, for at most `wait.timeout()` (Redis `WAIT`, on the connection the
    /// script ran on). `timeout` bounds the whole call. Other operations must not wait
    /// behind it: `WAIT` blocks its connection.
    fn acquire_replicated<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        request: &'a LeaseRequest,
        place: LinePlace,
        id: &'a WaiterId,
        wait: ReplicaWait,
        timeout: Duration,
    ) -> BackendFuture<'a, ReplicatedReply>;

    /// Renews: resets the expiry to `ttl` if `holding`'s attempt holds the lease. The renew
    /// script does it — or, on a server with compare-and-set (`SET … IFEQ`, see
    /// [`RedisBackend`]), one `SET` of the value `holding` knows, with the same replies.
    /// Bounded by `bound`: the caller's deadline is absolute (a renewal's reply is worth
    /// something only while local validity lasts). Never refused for want of room.
    fn renew<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        holding: &'a Holding,
        ttl: Duration,
        bound: RenewBound,
    ) -> BackendFuture<'a, RenewReply>;

    /// Releases: deletes and announces if `holding`'s attempt holds the lease — by the
    /// release script, or on a server with `DELIFEQ` by that command and a `PUBLISH`, with
    /// the same replies. Never refused for want of room.
    fn release<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        holding: &'a Holding,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseReply>;

    /// Runs the read-only inspect script: the lease's state and its line's length.
    fn inspect<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, Inspected>;

    /// Subscribes to release notices of one lease. The subscription is live when the future
    /// resolves: a release after that point is delivered.
    fn subscribe_releases<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices>;

    /// The waiter `id` (`attempt`'s) leaves the lease's line (its wait ended without the
    /// lease); the waiter that moves up into the first `permits` by it is told its turn.
    fn leave_line<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, ()>;

    /// The line session `session` keeps its waiters in the lease's line alive for
    /// [`LINE_KEEP`](crate::protocol::LINE_KEEP) more (`lua/line.lua`); with `extend`, the
    /// line itself too, for its whole life again.
    fn keep_in_line<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        session: &'a LineSession,
        extend: bool,
        timeout: Duration,
    ) -> BackendFuture<'a, ()>;

    /// Subscribes to the notice that tells the waiter `id` it is next in the lease's line
    /// (an acquisition that took the lease from ahead of it sends it). Live when the
    /// future resolves, as [`subscribe_releases`](Self::subscribe_releases).
    fn subscribe_turn<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices>;

    /// The lease keys (never a fence counter) that start with `prefix`
    /// (`<namespace>:lease:v2:` and maybe a purpose and `:`), a page at a time: on Redis one
    /// page per `SCAN` step (on every primary of a Cluster, one after another), each step
    /// bounded by `timeout` of its own. Read only. The stream ends after the last page, or
    /// after a step failed (on Redis, three times), yielding the failure; a key may come
    /// twice (`SCAN` promises only that a key present throughout comes at least once). The
    /// caller bounds the whole: dropping the stream stops the scan.
    fn scan_leases<'a>(&'a self, prefix: &'a str, timeout: Duration) -> KeyPages<'a>;

    /// Subscribes to the release and the acquisition notices of one lease: every change of
    /// holder but an expiry or a deletion from outside. Live when the future resolves.
    fn subscribe_changes<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices>;
}

/// What [`Operations::acquire_replicated`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplicatedReply {
    /// The acquire script's reply.
    pub(crate) reply: AcquireReply,
    /// After `ACQUIRED`: how many replicas acknowledged it, or why the wait did not answer.
    /// `None` for every other reply (nothing was written to wait for).
    pub(crate) acked: Option<Result<u32, FailureDetail>>,
}

/// Why a backend call produced no reply. Maps onto the outcomes `Unavailable` and
/// `Indeterminate` — a `NotSent` of kind [`FailureKind::QueueFull`] onto `QueueFull`, for
/// the operations that have it (acquisitions and reads): a local refusal, not the server's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendFailure {
    /// The command provably did not execute: no connection could be had, the connection was
    /// refused, the server rejected it before running it (`LOADING`, `BUSY`, `OOM`…), or
    /// the backend refused it before sending it ([`FailureKind::QueueFull`]).
    #[error("not executed: {0}")]
    NotSent(FailureDetail),
    /// The command may have executed: a timeout, a connection lost after the write, or a
    /// reply that could not be read.
    #[error("may have executed: {0}")]
    MaybeSent(FailureDetail),
}

impl SendFailure {
    /// The detail, whichever the certainty.
    pub fn detail(&self) -> &FailureDetail {
        match self {
            Self::NotSent(d) | Self::MaybeSent(d) => d,
        }
    }
}

/// What went wrong, for logs and for callers who want to tell faults apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct FailureDetail {
    /// The class of failure.
    pub kind: FailureKind,
    /// Human-readable text; never an owner token or a password.
    pub message: String,
}

impl FailureDetail {
    /// A detail of `kind` with `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// The class of a [`FailureDetail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// No connection could be established (refused, unreachable, connect timeout).
    Connect,
    /// The call did not answer within its bound.
    Timeout,
    /// The connection broke while the call was in flight.
    ConnectionLost,
    /// The server refused the command without running it (`LOADING`, `BUSY`, `OOM`,
    /// `MASTERDOWN`, `NOPERM`, `READONLY`…).
    ServerRefused,
    /// The server reported an error after the script may have run.
    ServerError,
    /// The reply had an unexpected type or status.
    MalformedReply,
    /// A fault injected into [`MemoryBackend`].
    Injected,
    /// Refused locally, before anything was sent: the backend already had as many
    /// operations waiting to be sent as it admits
    /// ([`RedisConfig::queue_limit`](crate::RedisConfig::queue_limit)). Not the server's
    /// failure: the caller's own burst.
    QueueFull,
    /// No call was made here: the outcome was left to a best-effort path that reports to
    /// nobody — a lease actor that ended (or vanished with its runtime) before it released,
    /// whose handle's drop releases. The TTL is the backstop.
    Abandoned,
}

impl FailureKind {
    /// snake_case name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::ConnectionLost => "connection_lost",
            Self::ServerRefused => "server_refused",
            Self::ServerError => "server_error",
            Self::MalformedReply => "malformed_reply",
            Self::Injected => "injected",
            Self::QueueFull => "queue_full",
            Self::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A live subscription to one lease's release notices.
///
/// Notices are coalesced: several releases before the next [`next`](Self::next) count once.
/// Dropping it unsubscribes.
pub struct ReleaseNotices {
    /// Read in the waiter's own task: a notice wakes the waiter directly, with no task in
    /// between to forward it.
    notices: futures_util::stream::Fuse<Pin<Box<dyn Stream<Item = ()> + Send>>>,
}

impl ReleaseNotices {
    /// Notices as the backend's stream yields them; the subscription ends with the stream.
    pub(crate) fn new(notices: impl Stream<Item = ()> + Send + 'static) -> Self {
        let notices: Pin<Box<dyn Stream<Item = ()> + Send>> = Box::pin(notices);
        Self {
            notices: notices.fuse(),
        }
    }

    /// Notices sent on a channel; the subscription ends when every sender is gone.
    pub(crate) fn from_channel(rx: mpsc::Receiver<()>) -> Self {
        Self::new(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|()| ((), rx))
        }))
    }

    /// Drops the notices already delivered, without waiting. A notice delivered before a
    /// try is sent tells of a release that try will see: the waiter drains them before
    /// each try, so one release wakes it once.
    pub(crate) fn drain(&mut self) {
        while let Some(Some(())) = self.notices.next().now_or_never() {}
    }

    /// Waits for the next release notice. Returns `false` if the subscription ended (the
    /// backend connection dropped); the caller then falls back to polling.
    ///
    /// # Cancel safety
    /// Cancel safe: a notice that arrives while no `next` is pending is kept for the next call.
    pub async fn next(&mut self) -> bool {
        if self.notices.next().await.is_none() {
            return false;
        }
        // Coalesce the notices already there: one try answers them all.
        while let Some(Some(())) = self.notices.next().now_or_never() {}
        true
    }
}

impl fmt::Debug for ReleaseNotices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseNotices")
            .field("ended", &self.notices.is_done())
            .finish()
    }
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
