//! `LeaseReport`: how a supervised job ended, and what happened to its lease.

use crate::lease::ReleaseOutcome;
use crate::protocol::FencingToken;
use crate::runtime::{CancelReason, LeaseCancelled};

/// How the worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEnd {
    /// The worker exited normally while the lease was held.
    Completed,
    /// The lease was cancelled; the worker then exited (`killed: false`) or was stopped by
    /// the [`Kill`](crate::runtime::CancelPolicy::Kill) policy (`killed: true`).
    Cancelled {
        /// Why the lease was cancelled.
        reason: CancelReason,
        /// Whether the runtime had to stop the worker.
        killed: bool,
    },
    /// The worker panicked or returned an error.
    Failed {
        /// The error text.
        error: String,
    },
    /// The LeaseActor was stopped or killed from outside and the worker did not end on its
    /// own: it was stopped, then the lease released ([`LeaseReport::release`] says how that
    /// went). A stop (not a kill) first sends the worker [`LeaseCancelled`] with
    /// [`CancelReason::Shutdown`] and gives it a second; a worker that ends within it is
    /// `Cancelled`.
    Aborted,
}

impl JobEnd {
    /// snake_case name for logs, metrics and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Cancelled { .. } => "cancelled",
            Self::Failed { .. } => "failed",
            Self::Aborted => "aborted",
        }
    }
}

/// The final report of a LeaseActor.
///
/// Non-exhaustive: later versions may report more; match it with `..`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseReport {
    /// How the worker ended.
    pub end: JobEnd,
    /// The cancellation sent to the worker, if one was.
    pub cancelled: Option<LeaseCancelled>,
    /// The owner-checked release made after the worker ended — also when the LeaseActor
    /// was killed, whose release then runs in a task of its own before this report is sent.
    pub release: ReleaseOutcome,
    /// The lease's fencing token.
    pub token: FencingToken,
}
