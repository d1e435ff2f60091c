//! The holder label on every backend: stored with the lease by its acquisition, reported by
//! `inspect` to the holder and to everyone else, kept through replays and renewals, gone
//! with the lease. (The rest of the contract: `backend_contract/`.)

mod common;

use std::time::Duration;

use common::backends::Harness;
use common::leases::acquired;
use leasehold::*;

fn request(client: &LeaseClient, holder: Option<&str>) -> LeaseRequest {
    let mut builder = LeaseRequest::builder(
        Purpose::new("contract").unwrap(),
        ResourceDigest::of("labelled"),
        client.new_attempt("op-1").unwrap(),
    )
    .ttl(Duration::from_secs(30));
    if let Some(holder) = holder {
        builder = builder.holder(HolderLabel::new(holder).unwrap());
    }
    builder.build().unwrap()
}

/// What `inspect` says of `req`'s lease, for its attempt: (held by it, token, holder).
async fn seen(h: &Harness, req: &LeaseRequest) -> Option<(bool, FencingToken, Option<String>)> {
    let label = |holder: Option<HolderLabel>| holder.map(|l| l.as_str().to_owned());
    match h.client.inspect(req).await {
        InspectOutcome::HeldByAttempt { token, holder, .. } => Some((true, token, label(holder))),
        InspectOutcome::HeldByOther { token, holder, .. } => Some((false, token, label(holder))),
        InspectOutcome::Absent => None,
        other => panic!("inspect failed: {other:?}"),
    }
}

async fn the_holder_label_is_reported_to_the_holder_and_to_everyone_else(h: Harness) {
    let req = request(&h.client, Some("web-7.eu:4242"));
    let stranger = req.with_new_attempt().unwrap();
    let mut lease = acquired(&h.client, &req).await;
    let token = lease.token();
    let label = Some("web-7.eu:4242".to_owned());
    assert_eq!(seen(&h, &req).await, Some((true, token, label.clone())));
    assert_eq!(
        seen(&h, &stranger).await,
        Some((false, token, label.clone()))
    );
    // A replay finds the same token behind the label; a renewal keeps the label.
    let AcquireOutcome::Replayed(replay) = h.client.try_acquire(&req).await.unwrap() else {
        panic!("expected a replay")
    };
    assert_eq!(replay.token(), token);
    std::mem::forget(replay);
    assert!(matches!(lease.renew().await, RenewOutcome::Renewed { .. }));
    assert_eq!(seen(&h, &stranger).await, Some((false, token, label)));
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    assert_eq!(seen(&h, &stranger).await, None);
}

async fn a_lease_taken_without_a_label_reports_none_and_the_next_holder_s_label_is_its_own(
    h: Harness,
) {
    let plain = request(&h.client, None);
    let mut lease = acquired(&h.client, &plain).await;
    let first = lease.token();
    assert_eq!(
        seen(&h, &plain.with_new_attempt().unwrap()).await,
        Some((false, first, None))
    );
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    let labelled = request(&h.client, Some("worker-2"));
    let mut next = acquired(&h.client, &labelled).await;
    assert!(next.token() > first);
    assert_eq!(
        seen(&h, &labelled.with_new_attempt().unwrap()).await,
        Some((false, next.token(), Some("worker-2".to_owned())))
    );
    assert_eq!(next.release().await, ReleaseOutcome::Released);
}

contract_tests!(
    the_holder_label_is_reported_to_the_holder_and_to_everyone_else,
    a_lease_taken_without_a_label_reports_none_and_the_next_holder_s_label_is_its_own,
);
