//! `LeaseClient::list` on every backend: every held lease with its token, label and time,
//! by purpose or all, cut at the limit; and ten thousand leases on a real redis-server and
//! on a Cluster.

mod common;

use std::time::Duration;

use common::backends::Harness;
use common::leases::acquired;
use leasehold::*;

fn request(client: &LeaseClient, purpose: &str, resource: &str, holder: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new(purpose).unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt("op-1").unwrap(),
    )
    .ttl(Duration::from_secs(30))
    .holder(HolderLabel::new(holder).unwrap())
    .build()
    .unwrap()
}

async fn listed(
    client: &LeaseClient,
    purpose: Option<&str>,
    limit: usize,
) -> (Vec<ListedLease>, bool) {
    let purpose = purpose.map(|p| Purpose::new(p).unwrap());
    match client.list(purpose.as_ref(), limit).await.unwrap() {
        ListOutcome::Listed { leases, truncated } => (leases, truncated),
        other => panic!("listing failed: {other:?}"),
    }
}

async fn every_held_lease_is_listed_with_its_token_label_and_time(h: Harness) {
    let (empty, truncated) = listed(&h.client, None, 100).await;
    assert!(empty.is_empty() && !truncated, "{empty:?}");
    let mut held = Vec::new();
    for (purpose, resource, holder) in [
        ("alpha", "r1", "host-1:11"),
        ("alpha", "r2", "host-2:22"),
        ("beta", "r1", "host-3:33"),
    ] {
        let lease = acquired(&h.client, &request(&h.client, purpose, resource, holder)).await;
        held.push((purpose, ResourceDigest::of(resource), holder, lease));
    }
    // Released: not listed. Its fence counter stays and is never taken for a lease.
    let mut gone = acquired(&h.client, &request(&h.client, "alpha", "r3", "host-4:44")).await;
    assert_eq!(gone.release().await, ReleaseOutcome::Released);

    let (all, truncated) = listed(&h.client, None, 100).await;
    assert!(!truncated);
    let mut expected: Vec<_> = held
        .iter()
        .map(|(p, r, l, lease)| (p.to_string(), *r, lease.token(), Some(l.to_string())))
        .collect();
    expected.sort();
    let got: Vec<_> = all
        .iter()
        .map(|l| {
            (
                l.purpose.to_string(),
                l.resource,
                l.token,
                l.holder.as_ref().map(|h| h.to_string()),
            )
        })
        .collect();
    assert_eq!(got, expected);
    assert!(
        all.iter().all(
            |l| l.remaining > Duration::from_secs(20) && l.remaining <= Duration::from_secs(30)
        ),
        "{all:?}"
    );

    let (alpha, _) = listed(&h.client, Some("alpha"), 100).await;
    assert_eq!(alpha.len(), 2);
    assert!(alpha.iter().all(|l| l.purpose.as_str() == "alpha"));
    let (cut, truncated) = listed(&h.client, None, 2).await;
    assert_eq!(cut.len(), 2);
    assert!(truncated, "three held, limit two");

    for (_, _, _, mut lease) in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    assert!(listed(&h.client, None, 100).await.0.is_empty());
}

contract_tests!(every_held_lease_is_listed_with_its_token_label_and_time);

/// Ten thousand held leases, listed whole; the figure is printed for the note.
async fn ten_thousand(h: Harness) {
    const N: usize = 10_000;
    let client = h.client.clone();
    let acquisitions = (0..N).map(|i| {
        let client = client.clone();
        async move {
            let request = request(&client, "fleet", &format!("r{i}"), "host-1:1");
            let lease = acquired(&client, &request).await;
            std::mem::forget(lease);
        }
    });
    futures_util::stream::iter(acquisitions)
        .buffer_unordered(256)
        .collect::<Vec<()>>()
        .await;
    let started = std::time::Instant::now();
    let (all, truncated) = listed(&h.client, Some("fleet"), N).await;
    let took = started.elapsed();
    assert_eq!(all.len(), N);
    assert!(!truncated);
    let (cut, truncated) = listed(&h.client, Some("fleet"), N - 1).await;
    assert_eq!(cut.len(), N - 1);
    assert!(truncated);
    println!("measured: {} listed {N} leases in {took:?}", h.name());
}

use futures_util::StreamExt as _;

#[tokio::test]
async fn ten_thousand_leases_are_listed_on_redis() {
    ten_thousand(Harness::redis_batched()).await;
}

#[tokio::test]
async fn ten_thousand_leases_are_listed_on_a_cluster() {
    ten_thousand(Harness::cluster()).await;
}
