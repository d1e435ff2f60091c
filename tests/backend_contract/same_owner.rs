//! The owner check compares the whole attempt, owner token and operation id: the same
//! owner under another operation acquires, renews and releases nothing of the lease it does
//! not hold.

use std::time::Duration;

use leasehold::fuzzing::{Holding, RenewReply, calls};
use leasehold::*;

use super::common::backends::Harness;
use super::common::leases::acquired;
use super::request_for;

/// `lease`'s attempt with its operation id replaced by `op`: the same owner token.
fn same_owner(lease: &LeaseHandle, op: &str) -> Attempt {
    Attempt::from_parts(
        lease.attempt().owner().clone(),
        OperationId::new(op).expect("valid operation id"),
    )
}

/// Ages the lease by 10 s on the server (memory: the paused clock), so a renewal that
/// should not have happened shows as a PTTL back above 20 s.
async fn age(h: &Harness, lease: &LeaseHandle) {
    if h.is_redis() {
        h.shorten_server_ttl(lease.keys(), Duration::from_secs(10));
    } else {
        h.advance_clock(Duration::from_secs(10)).await;
    }
}

/// The lease is still held, its PTTL not extended past the 20 s it had left.
fn untouched(h: &Harness, lease: &LeaseHandle, after: &str) {
    let pttl = h.pttl(lease.keys());
    assert!(pttl.is_some(), "{after}: the holder's lease is gone");
    assert!(
        pttl <= Some(Duration::from_secs(20)),
        "{after}: the holder's lease was renewed, PTTL {pttl:?}"
    );
}

pub async fn acquire_with_the_same_owner_under_another_operation_is_a_conflict(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let first = acquired(&h.client, &req).await;
    let other_op = Attempt::from_parts(
        req.attempt().owner().clone(),
        OperationId::new("op-2").unwrap(),
    );
    let req2 = LeaseRequest::builder(req.purpose().clone(), *req.resource(), other_op)
        .build()
        .unwrap();
    let outcome = h.client.try_acquire(&req2).await.unwrap();
    let AcquireOutcome::OwnerOperationConflict { retry_after } = outcome else {
        panic!("expected conflict, got {outcome:?}")
    };
    assert!(retry_after > Duration::from_secs(20));
    drop(first);
}

/// By attempt (the script on every server): renew through the backend, release through
/// `release_attempt`, both as (owner X, op-2) while (X, op-1) holds the lease.
pub async fn renew_and_release_as_the_same_owner_under_another_operation_are_not_owner(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    age(&h, &lease).await;
    let other = same_owner(&lease, "op-2");
    let holding = Holding::of_attempt(other.clone());
    let ttl = Duration::from_secs(30);
    let backend = h.backend();
    let renewed = calls::renew(
        backend.as_ref(),
        lease.keys(),
        &holding,
        ttl,
        Duration::from_secs(2),
    )
    .await
    .expect("answered");
    assert_eq!(renewed, RenewReply::NotOwner, "renew as (X, op-2)");
    untouched(&h, &lease, "renew as (X, op-2)");
    let req2 = LeaseRequest::builder(req.purpose().clone(), *req.resource(), other)
        .build()
        .expect("valid request");
    let released = h.client.release_attempt(&req2).await;
    assert_eq!(released, ReleaseOutcome::NotOwner, "release as (X, op-2)");
    untouched(&h, &lease, "release as (X, op-2)");
    assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
}

/// By handle (on a server with its own compare-and-set commands, `SET … IFEQ` and
/// `DELIFEQ`, which compare the whole value): (X, op-2)'s lease was deleted and (X, op-1)
/// holds the resource now; op-2's handle renews and releases nothing.
pub async fn a_handle_of_the_same_owner_under_another_operation_is_not_owner(h: Harness) {
    stale_handle_renews_and_releases_nothing(h, "op-2", "op-1").await;
}

/// As above, where the stale handle's operation id is the start of the holder's: the owner
/// check compares the operation id whole, up to the space that ends it, not a prefix.
pub async fn a_handle_whose_operation_id_starts_the_holders_is_not_owner(h: Harness) {
    stale_handle_renews_and_releases_nothing(h, "op-1", "op-10").await;
}

/// (X, `stale_op`)'s lease was deleted and (X, `holder_op`) holds the resource now:
/// `stale_op`'s handle renews and releases nothing.
async fn stale_handle_renews_and_releases_nothing(h: Harness, stale_op: &str, holder_op: &str) {
    let base = request_for(&h.client, "r", Duration::from_secs(30));
    let as_op = |op: &str| {
        LeaseRequest::builder(
            base.purpose().clone(),
            *base.resource(),
            Attempt::from_parts(
                base.attempt().owner().clone(),
                OperationId::new(op).expect("valid operation id"),
            ),
        )
        .ttl(Duration::from_secs(30))
        .build()
        .expect("valid request")
    };
    let mut stale = acquired(&h.client, &as_op(stale_op)).await;
    h.delete(stale.keys());
    let lease = acquired(&h.client, &as_op(holder_op)).await;
    age(&h, &lease).await;
    let renewed = stale.renew().await;
    assert_eq!(
        renewed,
        RenewOutcome::Lost {
            reason: LostReason::NotOwner
        },
        "renew by (X, {stale_op})'s handle"
    );
    untouched(&h, &lease, "renew by the stale handle");
    let released = stale.release().await;
    assert_eq!(
        released,
        ReleaseOutcome::NotOwner,
        "release by (X, {stale_op})'s handle"
    );
    untouched(&h, &lease, "release by the stale handle");
}
