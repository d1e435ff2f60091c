//! The handle's state machine as a table: one row per arrow of docs/design.md §7, from a
//! state, an event at a time (milliseconds after t0), to a state and an outcome. The
//! `Active` budget is confirmed at t0 for 1 s with a 10 ms drift (valid until t0 + 990 ms).

use std::time::Duration;

use tokio::time::Instant;

use super::{
    FailureDetail, HandleState, LeaseState, LostReason, ReleaseOutcome, RenewOutcome, RenewParams,
    RenewReply, ValidityBudget,
};
use crate::backend::FailureKind;

const MS: Duration = Duration::from_millis(1);
const PARAMS: RenewParams = RenewParams {
    ttl: Duration::from_secs(1),
    drift: Duration::from_millis(10),
};

/// What happens to the handle.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// The clock is read.
    Observe,
    /// A renewal sent at this time was answered.
    Reply(RenewReply, u64),
    /// Every renewal attempt failed; whether one may have reached Redis.
    Failed { maybe_sent: bool },
    /// A release answered.
    Release(ReleaseKind),
}

#[derive(Debug, Clone, Copy)]
enum ReleaseKind {
    Released,
    Absent,
    NotOwner,
    Indeterminate,
    Unavailable,
}

/// A state without its budget, for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum S {
    /// Active, valid until t0 + this many ms.
    Active(u64),
    Lost(LostReason),
    Unknown,
    Released,
}

/// The outcome's kind (renewals), or none (releases and observations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum O {
    None,
    Renewed,
    Lost(LostReason),
    Indeterminate,
    Unavailable,
    Refused(LeaseState),
}

struct Row {
    from: S,
    event: Event,
    at: u64,
    to: S,
    outcome: O,
}

const EXPIRED: LostReason = LostReason::ValidityExpired;

use Event::{Failed, Observe, Release, Reply};

#[rustfmt::skip]
const ROWS: &[Row] = &[
    // ACTIVE ──renew RENEWED──▶ ACTIVE (budget replaced: from this renewal's send instant)
    Row { from: S::Active(990), event: Reply(RenewReply::Renewed, 300), at: 310, to: S::Active(1290), outcome: O::Renewed },
    // ACTIVE ──renew RENEWED after validity ended──▶ LOST (no revival)
    Row { from: S::Active(990), event: Reply(RenewReply::Renewed, 980), at: 995, to: S::Lost(EXPIRED), outcome: O::Lost(EXPIRED) },
    // ACTIVE ──renew ABSENT/NOT_OWNER──▶ LOST
    Row { from: S::Active(990), event: Reply(RenewReply::Absent, 300), at: 310, to: S::Lost(LostReason::Absent), outcome: O::Lost(LostReason::Absent) },
    Row { from: S::Active(990), event: Reply(RenewReply::NotOwner, 300), at: 310, to: S::Lost(LostReason::NotOwner), outcome: O::Lost(LostReason::NotOwner) },
    // ACTIVE ──renew: no attempt reached Redis──▶ ACTIVE (old budget)
    Row { from: S::Active(990), event: Failed { maybe_sent: false }, at: 310, to: S::Active(990), outcome: O::Unavailable },
    // ACTIVE ──renew indeterminate after the retries──▶ UNKNOWN
    Row { from: S::Active(990), event: Failed { maybe_sent: true }, at: 310, to: S::Unknown, outcome: O::Indeterminate },
    // … unless validity ended meanwhile: LOST, recorded
    Row { from: S::Active(990), event: Failed { maybe_sent: true }, at: 990, to: S::Lost(EXPIRED), outcome: O::Lost(EXPIRED) },
    // ACTIVE ──budget reaches 0──▶ LOST (recorded), and not before
    Row { from: S::Active(990), event: Observe, at: 989, to: S::Active(990), outcome: O::None },
    Row { from: S::Active(990), event: Observe, at: 990, to: S::Lost(EXPIRED), outcome: O::None },
    // LOST, RELEASED, UNKNOWN: a renewal reply revives nothing
    Row { from: S::Unknown, event: Reply(RenewReply::Renewed, 300), at: 310, to: S::Unknown, outcome: O::Refused(LeaseState::Unknown) },
    Row { from: S::Lost(EXPIRED), event: Reply(RenewReply::Renewed, 300), at: 310, to: S::Lost(EXPIRED), outcome: O::Refused(LeaseState::Lost(EXPIRED)) },
    // A LOST keeps its first reason; RELEASED stays released
    Row { from: S::Lost(EXPIRED), event: Reply(RenewReply::Absent, 300), at: 310, to: S::Lost(EXPIRED), outcome: O::Lost(EXPIRED) },
    Row { from: S::Released, event: Reply(RenewReply::NotOwner, 300), at: 310, to: S::Released, outcome: O::Refused(LeaseState::Released) },
    // ACTIVE|UNKNOWN ──release──▶ RELEASED | LOST (absent, not owner) | UNKNOWN (indeterminate)
    Row { from: S::Active(990), event: Release(ReleaseKind::Released), at: 310, to: S::Released, outcome: O::None },
    Row { from: S::Unknown, event: Release(ReleaseKind::Released), at: 310, to: S::Released, outcome: O::None },
    Row { from: S::Lost(EXPIRED), event: Release(ReleaseKind::Released), at: 310, to: S::Released, outcome: O::None },
    Row { from: S::Active(990), event: Release(ReleaseKind::Absent), at: 310, to: S::Lost(LostReason::Absent), outcome: O::None },
    Row { from: S::Unknown, event: Release(ReleaseKind::NotOwner), at: 310, to: S::Lost(LostReason::NotOwner), outcome: O::None },
    Row { from: S::Active(990), event: Release(ReleaseKind::Indeterminate), at: 310, to: S::Unknown, outcome: O::None },
    Row { from: S::Lost(EXPIRED), event: Release(ReleaseKind::Indeterminate), at: 310, to: S::Lost(EXPIRED), outcome: O::None },
    Row { from: S::Active(990), event: Release(ReleaseKind::Unavailable), at: 310, to: S::Active(990), outcome: O::None },
];

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX)
}

fn state(t0: Instant, s: S) -> HandleState {
    match s {
        // A budget confirmed at (valid − 990 ms) for 1 s: valid until t0 + `valid` ms.
        S::Active(valid) => HandleState::Active {
            budget: ValidityBudget::renewed(at(t0, valid - 990), PARAMS.ttl, PARAMS.drift),
        },
        S::Lost(reason) => HandleState::Lost { reason },
        S::Unknown => HandleState::Unknown,
        S::Released => HandleState::Released,
    }
}

fn kind(outcome: &RenewOutcome) -> O {
    match outcome {
        RenewOutcome::Renewed { .. } => O::Renewed,
        RenewOutcome::Lost { reason } => O::Lost(*reason),
        RenewOutcome::Indeterminate { .. } => O::Indeterminate,
        RenewOutcome::Unavailable { .. } => O::Unavailable,
        RenewOutcome::Refused { state } => O::Refused(*state),
    }
}

fn release(kind: ReleaseKind) -> ReleaseOutcome {
    let detail = || FailureDetail::new(FailureKind::Timeout, "test");
    match kind {
        ReleaseKind::Released => ReleaseOutcome::Released,
        ReleaseKind::Absent => ReleaseOutcome::AlreadyAbsent,
        ReleaseKind::NotOwner => ReleaseOutcome::NotOwner,
        ReleaseKind::Indeterminate => ReleaseOutcome::Indeterminate { detail: detail() },
        ReleaseKind::Unavailable => ReleaseOutcome::Unavailable { detail: detail() },
    }
}

#[test]
fn every_arrow_of_the_handle_state_machine() {
    let t0 = Instant::now() + Duration::from_secs(1);
    for (i, row) in ROWS.iter().enumerate() {
        let from = state(t0, row.from);
        let now = at(t0, row.at);
        let (to, outcome) = match row.event {
            Observe => (from.observe(now), O::None),
            Reply(reply, sent) => {
                let (to, outcome) = from.handle_renew_reply(reply, at(t0, sent), now, PARAMS);
                (to, kind(&outcome))
            }
            Failed { maybe_sent } => {
                let detail = FailureDetail::new(FailureKind::Timeout, "test");
                let (to, outcome) = from.handle_renew_failed(maybe_sent, detail, now);
                (to, kind(&outcome))
            }
            Release(k) => (from.handle_release(&release(k)), O::None),
        };
        let what = format!("row {i}: {:?} + {:?} at {}", row.from, row.event, row.at);
        assert_eq!(to, state(t0, row.to), "{what}: state");
        assert_eq!(outcome, row.outcome, "{what}: outcome");
    }
}

#[test]
fn only_an_active_handle_may_renew_and_only_an_active_one_has_validity() {
    let t0 = Instant::now() + Duration::from_secs(1);
    let active = state(t0, S::Active(990));
    assert!(active.renewable(at(t0, 500)).is_ok());
    assert_eq!(active.remaining(at(t0, 500)), MS * 490);
    // At the end of validity: refused as LOST, zero left.
    assert!(matches!(
        active.renewable(at(t0, 990)),
        Err(RenewOutcome::Refused {
            state: LeaseState::Lost(EXPIRED)
        })
    ));
    assert_eq!(active.remaining(at(t0, 2000)), Duration::ZERO);
    for s in [S::Lost(EXPIRED), S::Unknown, S::Released] {
        let st = state(t0, s);
        assert!(st.renewable(t0).is_err(), "{s:?} renewable");
        assert_eq!(st.remaining(t0), Duration::ZERO, "{s:?} has validity");
    }
}
