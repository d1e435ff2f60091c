//! `LeaseHandle`: one held lease. It sends (a renewal's calls and retries in `renewal.rs`)
//! and applies what the state machine of docs/design.md §7 decides (sans I/O, in
//! `state.rs`):
//!
//! ```text
//! ACTIVE ──renew RENEWED──▶ ACTIVE            (budget replaced)
//! ACTIVE ──budget reaches 0──▶ LOST            (recorded)
//! ACTIVE ──renew ABSENT/NOT_OWNER──▶ LOST
//! ACTIVE ──renew indeterminate after bounded idempotent retries──▶ UNKNOWN
//! ACTIVE|UNKNOWN ──release──▶ RELEASED | LOST (absent, not owner) | UNKNOWN (indeterminate)
//! LOST, RELEASED, UNKNOWN: renew → Refused{state}, no Redis call. No way back to ACTIVE.
//! ```
//!
//! # Invariants
//!
//! 1. No transition leads back to ACTIVE: every method that changes the state matches the
//!    current one, and only the ACTIVE arm can produce ACTIVE.
//! 2. [`LeaseHandle::remaining_validity`] never goes below zero and is zero in every state but
//!    ACTIVE.
//! 3. Reaching zero validity moves ACTIVE to LOST and records it: every method that looks at
//!    the state first applies the clock, and a renewal whose reply arrives after validity
//!    ended does not revive the handle.
//! 4. A `Renewed` outcome is only ever returned together with the ACTIVE state.
//! 5. Nothing is sent to the backend from LOST, RELEASED or UNKNOWN by `renew`; nothing is
//!    sent from RELEASED by `release`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::outcome::{LeaseState, ReleaseOutcome, RenewOutcome, Replication};
use crate::lease::release::{self, Release};
use crate::lease::renewal::{CallResult, RenewCall, RenewReach, RenewSent, Renewal};
use crate::lease::session::Session;
use crate::lease::state::{HandleState, RenewParams};
use crate::lease::trace;
use crate::lease::validity::ValidityBudget;
use crate::protocol::limits::deadline_after;
use crate::protocol::{
    Attempt, FencingToken, Holding, LeaseKeys, Purpose, RenewReply, ResourceDigest,
};
use crate::telemetry::{self, HeldLease, Operation};

/// One acquired lease: its attempt, fencing token, local validity and state.
///
/// Obtained from [`AcquireOutcome::Acquired`](crate::AcquireOutcome::Acquired) or
/// `Replayed`. Dropping a handle that is still ACTIVE or UNKNOWN spawns a best-effort,
/// owner-checked release on the current tokio runtime and logs its outcome; call
/// [`release`](Self::release) to get the outcome yourself.
pub struct LeaseHandle {
    session: Arc<Session>,
    /// Shared with a renewal's calls while they run (`Arc`: cloned once per renewal).
    keys: Arc<LeaseKeys>,
    purpose: Purpose,
    resource: ResourceDigest,
    /// The attempt, and the exact value its lease key holds.
    holding: Arc<Holding>,
    ttl: Duration,
    token: FencingToken,
    /// The last budget the server confirmed; kept in every state for diagnostics.
    confirmed: ValidityBudget,
    state: HandleState,
    /// This handle's place in the held-leases gauges while ACTIVE.
    held: Option<HeldLease>,
    /// How many replicas acknowledged the acquisition.
    replication: Replication,
}

impl LeaseHandle {
    pub(crate) fn new(
        session: Arc<Session>,
        request: &crate::protocol::LeaseRequest,
        keys: LeaseKeys,
        token: FencingToken,
        budget: ValidityBudget,
        replication: Replication,
    ) -> Self {
        let mut handle = Self {
            session,
            keys: Arc::new(keys),
            purpose: request.purpose().clone(),
            resource: *request.resource(),
            holding: Arc::new(Holding::acquired(request, token)),
            ttl: request.ttl(),
            token,
            confirmed: budget,
            state: HandleState::Active { budget },
            held: Some(HeldLease::register(request.purpose(), budget.valid_until())),
            replication,
        };
        // A replay with less PTTL left than the drift budget is born LOST (invariant 3).
        handle.observe(Instant::now());
        handle
    }

    /// The fencing token of this acquisition; pass it to every protected write. What it
    /// protects, and what it cannot, is on [`FencingToken`].
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// How many replicas acknowledged the acquisition, if the request asked
    /// ([`LeaseRequestBuilder::wait_for_replicas`](crate::protocol::LeaseRequestBuilder::wait_for_replicas)).
    pub fn replication(&self) -> &Replication {
        &self.replication
    }

    /// The attempt that holds the lease.
    pub fn attempt(&self) -> &Attempt {
        self.holding.attempt()
    }

    /// The Redis keys of this lease.
    pub fn keys(&self) -> &LeaseKeys {
        &self.keys
    }

    /// What the lease is for.
    pub fn purpose(&self) -> &Purpose {
        &self.purpose
    }

    /// Which resource.
    pub fn resource(&self) -> &ResourceDigest {
        &self.resource
    }

    /// The TTL set on acquisition and every renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The current state, after applying the clock (invariant 3).
    pub fn state(&mut self) -> LeaseState {
        self.state_at(Instant::now())
    }

    /// The state at `now`, the clock applied (invariant 3): for an owner that read the
    /// clock once for everything an event does.
    pub(crate) fn state_at(&mut self, now: Instant) -> LeaseState {
        self.observe(now);
        self.state.public()
    }

    /// Local validity left: zero unless ACTIVE (invariant 2). Reaching zero records LOST.
    pub fn remaining_validity(&mut self) -> Duration {
        let now = Instant::now();
        self.observe(now);
        self.state.remaining(now)
    }

    /// The instant local validity ends while ACTIVE; `None` in any other state.
    pub fn valid_until(&mut self) -> Option<Instant> {
        self.valid_until_at(Instant::now())
    }

    /// As [`valid_until`](Self::valid_until), the clock read by the caller.
    pub(crate) fn valid_until_at(&mut self, now: Instant) -> Option<Instant> {
        self.observe(now);
        match self.state {
            HandleState::Active { budget } => Some(budget.valid_until()),
            _ => None,
        }
    }

    /// The earliest instant the server's key can expire, from the last confirmation the
    /// server gave (its TTL on acquire and renew, its PTTL on replay).
    pub fn observed_server_expiry(&self) -> Instant {
        self.confirmed.observed_server_expiry()
    }

    /// Renews the lease: `PEXPIRE ttl` if this attempt still holds it.
    ///
    /// Makes up to 3 idempotent attempts, each bounded by `min(command_timeout, validity
    /// left)`, and none after local validity ends. See [`renew_within`](Self::renew_within)
    /// for a tighter deadline. These are a renewal's only retries, under the runtime too:
    /// a lease actor does not retry a renewal, it renews again on its schedule.
    ///
    /// * `Renewed` — ACTIVE, budget replaced (ttl − drift from this renewal's send instant).
    /// * `Lost` — `ABSENT`, `NOT_OWNER`, or validity reached zero; now LOST.
    /// * `Indeterminate` — some attempt may have reached Redis, none confirmed; now UNKNOWN.
    /// * `Unavailable` — no attempt reached Redis; still ACTIVE with the old budget.
    /// * `Refused` — not ACTIVE; nothing sent.
    ///
    /// # Cancel safety
    /// If the future is dropped mid-flight the renewal may or may not have landed, and the
    /// handle keeps its old budget and state — which is safe, since the old budget is a
    /// lower bound either way.
    pub async fn renew(&mut self) -> RenewOutcome {
        self.renew_by(Instant::now(), None).await
    }

    /// As [`renew`](Self::renew), but gives up at `now + bound` even if validity is left
    /// (the runtime passes `remaining validity − safety margin`). Any `bound` is taken: a
    /// longer one than validity left (`Duration::MAX` included) is as [`renew`](Self::renew).
    ///
    /// # Cancel safety
    /// As for [`renew`](Self::renew).
    pub async fn renew_within(&mut self, bound: Duration) -> RenewOutcome {
        let now = Instant::now();
        self.renew_by(now, Some(deadline_after(now, bound))).await
    }

    async fn renew_by(&mut self, now: Instant, limit: Option<Instant>) -> RenewOutcome {
        let call = match self.begin_renewal(now, limit) {
            Ok(call) => call,
            Err(refused) => return refused,
        };
        let sent = call.send().await;
        let now = Instant::now();
        self.end_renewal(sent, now).outcome(now)
    }

    /// Begins a renewal at `now`, giving up at `limit` (or at local validity's end, if
    /// sooner): the calls to make, or — not ACTIVE at `now` — the outcome of refusing it
    /// without one. The calls own what they send, so they may run elsewhere (a lease
    /// actor's renewal task) while the handle stays with its owner; hand what they got to
    /// [`end_renewal`](Self::end_renewal). Until then the handle keeps its old budget.
    pub(crate) fn begin_renewal(
        &mut self,
        now: Instant,
        limit: Option<Instant>,
    ) -> Result<RenewCall, RenewOutcome> {
        let span = trace::span!("lease.renew", &self.purpose, &self.resource, self.attempt());
        span.record("token", self.token.get());
        self.observe(now);
        let budget = match self.state.renewable(now) {
            Ok(budget) => budget,
            Err(refused) => {
                let metric = Some((Operation::Renew, &self.purpose));
                trace::finish_after(&span, metric, &refused, Duration::ZERO);
                return Err(refused);
            }
        };
        Ok(RenewCall {
            session: Arc::clone(&self.session),
            keys: Arc::clone(&self.keys),
            holding: Arc::clone(&self.holding),
            ttl: self.ttl,
            // Retries never run past local validity: a confirmation after that is worthless.
            deadline: limit.map_or(budget.valid_until(), |l| l.min(budget.valid_until())),
            span,
            began: now,
            reach: RenewReach::default(),
        })
    }

    /// Applies what a renewal's calls got, seen at `now`, as the state machine decides: a
    /// reply read after local validity ended confirms nothing (invariant 3). Answers the
    /// validity a confirmation proved — the one place it is handed out — or what
    /// [`renew`](Self::renew) would answer instead.
    pub(crate) fn end_renewal(&mut self, sent: RenewSent, now: Instant) -> Renewal {
        let RenewSent {
            result,
            span,
            began,
        } = sent;
        let outcome = match result {
            CallResult::Replied { reply, sent_at } => {
                if let (RenewReply::Renewed, HandleState::Active { budget }) = (reply, self.state)
                    && !budget.is_exhausted(now)
                {
                    telemetry::renew_margin(&self.purpose, budget.remaining(now));
                }
                let params = RenewParams {
                    ttl: self.ttl,
                    drift: self.session.settings().drift_budget,
                };
                let (next, outcome) = self.state.handle_renew_reply(reply, sent_at, now, params);
                self.apply(next);
                outcome
            }
            CallResult::Failed { maybe_sent, detail } => {
                let (next, outcome) = self.state.handle_renew_failed(maybe_sent, detail, now);
                self.apply(next);
                outcome
            }
        };
        let metric = Some((Operation::Renew, &self.purpose));
        trace::finish_after(
            &span,
            metric,
            &outcome,
            now.saturating_duration_since(began),
        );
        match (&outcome, self.state) {
            // Invariant 4: `Renewed` comes only with ACTIVE, whose budget is the renewal's.
            (RenewOutcome::Renewed { .. }, HandleState::Active { budget }) => Renewal::Confirmed {
                valid_until: budget.valid_until(),
            },
            _ => Renewal::Unconfirmed(outcome),
        }
    }

    /// Releases the lease: owner-checked `DEL` and a release notice to waiters.
    ///
    /// Allowed from ACTIVE, UNKNOWN and LOST (a handle that lost its budget may still own
    /// the key; deleting it early frees the resource). From RELEASED it returns `Released`
    /// without a call.
    ///
    /// * `Released` — now RELEASED. * `AlreadyAbsent`, `NotOwner` — now LOST (if it was not).
    /// * `Indeterminate` — ACTIVE becomes UNKNOWN; call again. * `Unavailable` — unchanged.
    ///
    /// # Cancel safety
    /// If dropped mid-flight the release may or may not have landed; the state is unchanged
    /// and a later `release` (or the drop-time release) tries again.
    pub async fn release(&mut self) -> ReleaseOutcome {
        self.observe(Instant::now());
        if self.state == HandleState::Released {
            return ReleaseOutcome::Released;
        }
        let outcome = release::release(
            &self.session,
            Release {
                keys: &self.keys,
                purpose: &self.purpose,
                resource: &self.resource,
                holding: &self.holding,
            },
        )
        .await;
        let next = self.state.handle_release(&outcome);
        self.apply(next);
        outcome
    }

    /// Moves the lease out into a new handle, which releases it as this one would have;
    /// this one is left RELEASED and its drop does nothing. For an owner being dropped that
    /// must still release and say how it went (a lease actor killed from outside).
    pub(crate) fn take(&mut self) -> LeaseHandle {
        LeaseHandle {
            session: Arc::clone(&self.session),
            keys: Arc::clone(&self.keys),
            purpose: self.purpose.clone(),
            resource: self.resource,
            holding: Arc::clone(&self.holding),
            ttl: self.ttl,
            token: self.token,
            confirmed: self.confirmed,
            // Set directly, not through `apply`: the lease did not change state, it moved.
            state: std::mem::replace(&mut self.state, HandleState::Released),
            held: self.held.take(),
            replication: self.replication.clone(),
        }
    }

    /// Whether the handle is still ACTIVE at `now`, the clock applied: a handle whose
    /// local validity has run out is LOST from then on, and its drop releases nothing.
    pub(crate) fn active_at(&mut self, now: Instant) -> bool {
        self.observe(now);
        matches!(self.state, HandleState::Active { .. })
    }

    /// Applies the clock: ACTIVE with no validity left becomes LOST (invariant 3).
    fn observe(&mut self, now: Instant) {
        let next = self.state.observe(now);
        self.apply(next);
    }

    /// Moves to `next`, as the state machine decided: a renewal's new budget updates the
    /// held-leases gauge; any other change is logged and counted, and the handle no longer
    /// counts as held.
    fn apply(&mut self, next: HandleState) {
        if next == self.state {
            return;
        }
        if let HandleState::Active { budget } = next {
            // Invariant 1: the machine produces ACTIVE only from ACTIVE (a renewal).
            debug_assert!(matches!(self.state, HandleState::Active { .. }));
            if let Some(held) = &mut self.held {
                held.update(budget.valid_until());
            }
            self.confirmed = budget;
            self.state = next;
            return;
        }
        tracing::debug!(
            purpose = %self.purpose,
            digest = %self.resource.short(),
            op_id = %self.attempt().operation(),
            from = self.state.public().as_str(),
            to = next.public().as_str(),
            "lease state changed"
        );
        telemetry::transition(&self.purpose, &self.state.public(), &next.public());
        self.state = next;
        // Only ACTIVE handles count as held.
        self.held = None;
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("purpose", &self.purpose)
            .field("resource", &self.resource)
            .field("attempt", self.attempt())
            .field("token", &self.token)
            .field("state", &self.state.public())
            .field("replication", &self.replication)
            .finish_non_exhaustive()
    }
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        if !matches!(
            self.state,
            HandleState::Active { .. } | HandleState::Unknown
        ) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                purpose = %self.purpose,
                digest = %self.resource.short(),
                "lease handle dropped outside a tokio runtime; it stays held until its ttl"
            );
            return;
        };
        let session = Arc::clone(&self.session);
        let keys = Arc::clone(&self.keys);
        let holding = Arc::clone(&self.holding);
        let (purpose, resource) = (self.purpose.clone(), self.resource);
        runtime.spawn(async move {
            let release = Release {
                keys: &keys,
                purpose: &purpose,
                resource: &resource,
                holding: &holding,
            };
            let outcome = release::release(&session, release).await;
            tracing::info!(
                %purpose,
                digest = %resource.short(),
                outcome = outcome.as_str(),
                "released lease on drop (best effort)"
            );
        });
    }
}
