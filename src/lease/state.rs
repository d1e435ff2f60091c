//! The handle's state machine of docs/design.md §7, sans I/O: every transition is a pure
//! function of the current state, what happened (a reply, a failure, the clock) and `now`,
//! returning the next state and the outcome the caller sees. [`LeaseHandle`] sends, retries,
//! records telemetry and applies what this module decides.
//!
//! `HandleState` is the machine's state; what callers see of it, [`LeaseState`], lives with
//! the outcomes that carry it (`lease/outcome/state.rs`): this machine produces outcomes, so
//! the outcomes cannot name it back (`tests/layers/circles.rs`).
//!
//! [`LeaseHandle`]: crate::LeaseHandle
//! [`LeaseState`]: crate::LeaseState

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::FailureDetail;
use crate::lease::outcome::{LeaseState, LostReason, ReleaseOutcome, RenewOutcome};
use crate::lease::validity::ValidityBudget;
use crate::protocol::RenewReply;

/// A handle's state; the data a state needs lives in its variant. No transition leads
/// back to `Active`: only a renewal confirmed *while* `Active` produces `Active` again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandleState {
    Active { budget: ValidityBudget },
    Lost { reason: LostReason },
    Unknown,
    Released,
}

/// Everything a renewal needs to know besides the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RenewParams {
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
}

impl HandleState {
    /// The state as callers see it.
    pub(crate) fn public(self) -> LeaseState {
        match self {
            Self::Active { .. } => LeaseState::Active,
            Self::Lost { reason } => LeaseState::Lost(reason),
            Self::Unknown => LeaseState::Unknown,
            Self::Released => LeaseState::Released,
        }
    }

    /// Applies the clock: `Active` with no validity left at `now` is `Lost`, for good.
    pub(crate) fn observe(self, now: Instant) -> HandleState {
        match self {
            Self::Active { budget } if budget.is_exhausted(now) => Self::Lost {
                reason: LostReason::ValidityExpired,
            },
            other => other,
        }
    }

    /// Validity left at `now`: zero unless `Active`.
    pub(crate) fn remaining(self, now: Instant) -> Duration {
        match self.observe(now) {
            Self::Active { budget } => budget.remaining(now),
            _ => Duration::ZERO,
        }
    }

    /// The budget a renewal may spend, or the outcome of refusing it without a call.
    pub(crate) fn renewable(self, now: Instant) -> Result<ValidityBudget, RenewOutcome> {
        match self.observe(now) {
            Self::Active { budget } => Ok(budget),
            other => Err(RenewOutcome::Refused {
                state: other.public(),
            }),
        }
    }

    /// The end of the lease by `reason`: `Lost`, unless already in a terminal state (a
    /// `Lost` keeps its first reason; `Released` stays released).
    pub(crate) fn lose(self, reason: LostReason) -> (HandleState, RenewOutcome) {
        match self {
            Self::Active { .. } | Self::Unknown => {
                (Self::Lost { reason }, RenewOutcome::Lost { reason })
            }
            Self::Lost { reason } => (self, RenewOutcome::Lost { reason }),
            Self::Released => (
                self,
                RenewOutcome::Refused {
                    state: LeaseState::Released,
                },
            ),
        }
    }

    /// A renewal sent at `sent_at` was answered `reply` at `now`.
    pub(crate) fn handle_renew_reply(
        self,
        reply: RenewReply,
        sent_at: Instant,
        now: Instant,
        params: RenewParams,
    ) -> (HandleState, RenewOutcome) {
        match LostReason::try_from(reply) {
            Ok(reason) => self.lose(reason),
            Err(_renewed) => match self {
                // The reply came after validity ended: the holder may already have been
                // told to stop, so it stays stopped.
                Self::Active { budget } if budget.is_exhausted(now) => {
                    self.lose(LostReason::ValidityExpired)
                }
                Self::Active { .. } => {
                    let renewed = ValidityBudget::renewed(sent_at, params.ttl, params.drift);
                    (
                        Self::Active { budget: renewed },
                        RenewOutcome::Renewed {
                            remaining: renewed.remaining(now),
                        },
                    )
                }
                // Not `Active` any more: nothing revives it.
                other => (
                    other,
                    RenewOutcome::Refused {
                        state: other.public(),
                    },
                ),
            },
        }
    }

    /// Every attempt of a renewal failed, the last with `detail`; `maybe_sent` if any may
    /// have reached Redis. Seen at `now`.
    pub(crate) fn handle_renew_failed(
        self,
        maybe_sent: bool,
        detail: FailureDetail,
        now: Instant,
    ) -> (HandleState, RenewOutcome) {
        match self.observe(now) {
            Self::Lost { reason } => (Self::Lost { reason }, RenewOutcome::Lost { reason }),
            Self::Active { .. } if maybe_sent => {
                (Self::Unknown, RenewOutcome::Indeterminate { detail })
            }
            Self::Active { budget } => (
                self,
                RenewOutcome::Unavailable {
                    detail,
                    remaining: budget.remaining(now),
                },
            ),
            other => (
                other,
                RenewOutcome::Refused {
                    state: other.public(),
                },
            ),
        }
    }

    /// A release answered `outcome`.
    pub(crate) fn handle_release(self, outcome: &ReleaseOutcome) -> HandleState {
        match outcome {
            ReleaseOutcome::Released => Self::Released,
            ReleaseOutcome::AlreadyAbsent => self.lose(LostReason::Absent).0,
            ReleaseOutcome::NotOwner => self.lose(LostReason::NotOwner).0,
            ReleaseOutcome::Indeterminate { .. } => match self {
                Self::Active { .. } => Self::Unknown,
                other => other,
            },
            ReleaseOutcome::Unavailable { .. } => self,
        }
    }
}

#[cfg(test)]
mod tests;
