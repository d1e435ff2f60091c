//! The outcome of every lease operation (docs/design.md §5), and each outcome's one mapping
//! from what the backend answered. Certainty is part of the type: only `Unavailable` (and
//! `QueueFull`, a local refusal) promise that nothing happened; anything that may have
//! reached Redis is `Indeterminate`.
//!
//! Outcome enums are exhaustive on purpose: a new certainty level must break callers'
//! matches. Reasons are `#[non_exhaustive]`.
//!
//! # From replies
//!
//! This file and the acquisition's (`lease/acquire/outcome.rs`, `AcquireOutcome::from_reply`:
//! the caller makes the handle of a lease held, from what the mapping hands it) are where a
//! script's result becomes an outcome: `From<Result<ReleaseReply, SendFailure>>` for
//! [`ReleaseOutcome`],
//! `From<Result<InspectReply, SendFailure>>` for [`InspectOutcome`],
//! `Replication::of_wait`, and `TryFrom<RenewReply>` for [`LostReason`]. A renewal's
//! outcome also depends on the handle's state and clock: the handle's state machine
//! (`lease/state.rs`) decides it, reading the reply through that `TryFrom`.

use crate::backend::{FailureDetail, FailureKind, ReplicatedReply, SendFailure};
use crate::protocol::{InspectReply, ReleaseReply, RenewReply};

mod operations;
mod reading;
mod state;

pub use operations::{InspectOutcome, ReleaseOutcome, RenewOutcome};
pub use reading::LeaseReading;
pub use state::{LeaseState, LostReason, Replication};

/// How sure a backend's failure is that nothing happened, in the words outcomes use.
pub(crate) enum Certainty {
    /// Refused locally before anything was sent: the backend's queue was full.
    QueueFull(FailureDetail),
    /// Provably not executed.
    Unavailable(FailureDetail),
    /// May have executed.
    Indeterminate(FailureDetail),
}

impl From<SendFailure> for Certainty {
    fn from(failure: SendFailure) -> Self {
        match failure {
            SendFailure::NotSent(detail) if detail.kind == FailureKind::QueueFull => {
                Self::QueueFull(detail)
            }
            SendFailure::NotSent(detail) => Self::Unavailable(detail),
            SendFailure::MaybeSent(detail) => Self::Indeterminate(detail),
        }
    }
}

impl Replication {
    /// What an acquisition that waited for `wanted` replicas learnt of them: the count
    /// `WAIT` answered, or why it did not; `NotWaited` when nothing was written to wait for
    /// (a replay, a refusal) or the call itself failed.
    pub(crate) fn of_wait(result: &Result<ReplicatedReply, SendFailure>, wanted: u32) -> Self {
        match result {
            Ok(ReplicatedReply {
                acked: Some(Ok(acked)),
                ..
            }) => Self::Acknowledged {
                acked: *acked,
                wanted,
            },
            Ok(ReplicatedReply {
                acked: Some(Err(detail)),
                ..
            }) => Self::Unknown {
                detail: detail.clone(),
            },
            _ => Self::NotWaited,
        }
    }
}

/// A renew reply that ends the lease, as the reason it is LOST; `RENEWED`, no loss, comes
/// back as the error. Whether a `RENEWED` renews is for the handle's state machine to say:
/// local validity may have run out while the reply travelled.
impl TryFrom<RenewReply> for LostReason {
    type Error = RenewReply;

    fn try_from(reply: RenewReply) -> Result<Self, RenewReply> {
        match reply {
            RenewReply::Absent => Ok(Self::Absent),
            RenewReply::NotOwner => Ok(Self::NotOwner),
            RenewReply::Renewed => Err(reply),
        }
    }
}

/// The one mapping from a release script's result to its outcome. A release is never
/// refused for want of room: any `NotSent` is `Unavailable`.
impl From<Result<ReleaseReply, SendFailure>> for ReleaseOutcome {
    fn from(result: Result<ReleaseReply, SendFailure>) -> Self {
        match result {
            Ok(ReleaseReply::Released) => Self::Released,
            Ok(ReleaseReply::Absent) => Self::AlreadyAbsent,
            Ok(ReleaseReply::NotOwner) => Self::NotOwner,
            Err(failure) => match Certainty::from(failure) {
                Certainty::QueueFull(detail) | Certainty::Unavailable(detail) => {
                    Self::Unavailable { detail }
                }
                Certainty::Indeterminate(detail) => Self::Indeterminate { detail },
            },
        }
    }
}

/// The one mapping from an inspect script's result to its outcome: the server's PTTL is
/// what `remaining` says.
impl From<Result<InspectReply, SendFailure>> for InspectOutcome {
    fn from(result: Result<InspectReply, SendFailure>) -> Self {
        match result {
            Ok(InspectReply::HeldByAttempt {
                pttl,
                token,
                holder,
            }) => Self::HeldByAttempt {
                remaining: pttl,
                token,
                holder,
            },
            Ok(InspectReply::HeldByOther {
                pttl,
                token,
                holder,
            }) => Self::HeldByOther {
                remaining: pttl,
                token,
                holder,
            },
            Ok(InspectReply::Delayed {
                pttl,
                token,
                holder,
            }) => Self::LockDelayed {
                remaining: pttl,
                token,
                holder,
            },
            Ok(InspectReply::Absent) => Self::Absent,
            Err(failure) => match Certainty::from(failure) {
                Certainty::QueueFull(detail) => Self::QueueFull { detail },
                Certainty::Unavailable(detail) => Self::Unavailable { detail },
                Certainty::Indeterminate(detail) => Self::Indeterminate { detail },
            },
        }
    }
}

#[cfg(test)]
mod tests;
