//! `LeaseClient::list` on every backend: every held lease with its token, label and time,
//! by purpose or all, cut at the limit, out of budget as such and not as `Unavailable`, from
//! a task of its own; ten thousand leases on a real redis-server and on a Cluster; and
//! leases among a million unrelated keys.

mod common;

use std::time::Duration;

use common::backends::{Backend, Fault, Harness, redis_settings};
use common::leases::acquired;
use common::{ProxyMode, RedisServer};
use leasehold::protocol::limits;
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
) -> (Vec<ListedLease>, ListCoverage) {
    let purpose = purpose.map(|p| Purpose::new(p).unwrap());
    match client.list(purpose.as_ref(), limit).await.unwrap() {
        ListOutcome::Listed { leases, coverage } => (leases, coverage),
        other => panic!("listing failed: {other:?}"),
    }
}

use ListCoverage::{Complete, OutOfBudget, StoppedAtLimit};

async fn every_held_lease_is_listed_with_its_token_label_and_time(h: Harness) {
    let (empty, coverage) = listed(&h.client, None, 100).await;
    assert!(empty.is_empty() && coverage == Complete, "{empty:?}");
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

    let (all, coverage) = listed(&h.client, None, 100).await;
    assert_eq!(coverage, Complete);
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
    let (cut, coverage) = listed(&h.client, None, 2).await;
    assert_eq!(cut.len(), 2);
    assert_eq!(coverage, StoppedAtLimit, "three held, limit two");

    for (_, _, _, mut lease) in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    assert!(listed(&h.client, None, 100).await.0.is_empty());
}

/// A listing runs in a task of its own (its future is `Send`); a budget out of bounds is
/// refused before any I/O; a store that does not answer is `Unavailable`.
async fn a_listing_runs_in_a_task_and_says_when_the_store_did_not_answer(h: Harness) {
    let lease = acquired(&h.client, &request(&h.client, "task", "r1", "host-1:1")).await;
    let client = h.client.clone();
    let spawned = tokio::spawn(async move { client.list(None, 100).await });
    let ListOutcome::Listed { leases, coverage } = spawned.await.unwrap().unwrap() else {
        panic!("the listing did not answer")
    };
    assert_eq!(coverage, Complete);
    assert_eq!(
        leases.iter().map(|l| l.token).collect::<Vec<_>>(),
        [lease.token()]
    );

    let before = h.commands().await;
    for budget in [Duration::ZERO, Duration::from_secs(3601), Duration::MAX] {
        let refused = h.client.list_within(None, 100, budget).await;
        assert!(
            matches!(
                refused,
                Err(LeaseError::InvalidDuration {
                    param: "list_budget",
                    ..
                })
            ),
            "{budget:?}: {refused:?}"
        );
    }
    assert_eq!(
        h.commands().await,
        before,
        "a refused budget reached the store"
    );

    h.fault(Fault::LoseReplies).await;
    let outcome = h.client.list(None, 100).await.unwrap();
    assert!(
        matches!(outcome, ListOutcome::Unavailable { .. }),
        "{outcome:?}"
    );
    h.fault(Fault::None).await;
}

contract_tests!(
    every_held_lease_is_listed_with_its_token_label_and_time,
    a_listing_runs_in_a_task_and_says_when_the_store_did_not_answer,
);

/// A store slower than the budget: the listing ends at the budget, as `OutOfBudget`, with
/// what it read (nothing here), and is not `Unavailable`.
#[tokio::test(start_paused = true)]
async fn out_of_budget_is_a_partial_listing_not_unavailable() {
    let h = Harness::memory();
    let Backend::Memory(memory) = &h.backend else {
        unreachable!()
    };
    let _lease = acquired(&h.client, &request(&h.client, "slow", "r1", "host-1:1")).await;
    memory.set_fault(Some(MemoryFault::Slow(Duration::from_millis(150))));
    let started = tokio::time::Instant::now();
    let budget = Duration::from_millis(100);
    let outcome = h.client.list_within(None, 100, budget).await.unwrap();
    assert_eq!(started.elapsed(), budget, "ended at the budget");
    assert_eq!(
        outcome,
        ListOutcome::Listed {
            leases: Vec::new(),
            coverage: OutOfBudget
        }
    );
    memory.set_fault(None);
    let (all, coverage) = listed(&h.client, None, 100).await;
    assert_eq!((all.len(), coverage), (1, Complete));
}

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
    let (all, coverage) = listed(&h.client, Some("fleet"), N).await;
    let took = started.elapsed();
    assert_eq!(all.len(), N);
    assert_eq!(coverage, Complete);
    let (cut, coverage) = listed(&h.client, Some("fleet"), N - 1).await;
    assert_eq!(cut.len(), N - 1);
    assert_eq!(coverage, StoppedAtLimit);
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

/// A Redis shared with a cache: leases among a million unrelated keys (`DEBUG POPULATE`),
/// listed from a task of its own on a 500 ms command timeout — far less than crossing the
/// keyspace takes, so only a timeout per `SCAN` step lets it through. With the default
/// budget every lease is listed, or, on a machine too slow to cross a million keys in it,
/// the leases read by then, marked `OutOfBudget`; with a budget far shorter than the scan,
/// the listing ends at it, as `OutOfBudget`, never `Unavailable`. Figures are printed for
/// the note.
#[tokio::test]
async fn leases_among_a_million_unrelated_keys_are_listed() {
    const KEYS: usize = 1_000_000;
    const LEASES: usize = 200;
    let server = RedisServer::start();
    // In steps of 100,000 (about 50 ms each), so that no one command outlasts the
    // harness's read timeout on a starved machine.
    for step in 0..KEYS / 100_000 {
        server.cmd(&["DEBUG", "POPULATE", "100000", &format!("cache{step}")]);
    }
    assert_eq!(server.query::<usize>(&["DBSIZE"]), KEYS);
    let settings = redis_settings().with_command_timeout(Duration::from_millis(500));
    let client = LeaseClient::redis(&server.url(), settings).unwrap();
    let mut handles = Vec::new();
    for i in 0..LEASES {
        let request = request(&client, "cache-neighbour", &format!("r{i}"), "host-1:1");
        handles.push(acquired(&client, &request).await);
    }
    let mut held: Vec<_> = handles.iter().map(LeaseHandle::token).collect();
    held.sort();
    let honest = |leases: &[ListedLease]| {
        let mut tokens: Vec<_> = leases.iter().map(|l| l.token).collect();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), leases.len(), "a lease listed twice");
        assert!(
            tokens.iter().all(|t| held.binary_search(t).is_ok()),
            "a lease never held"
        );
    };

    server.reset_stats();
    let lister = client.clone();
    let started = std::time::Instant::now();
    let spawned = tokio::spawn(async move { lister.list(None, 10_000).await });
    let outcome = spawned.await.unwrap().unwrap();
    let took = started.elapsed();
    let steps = server.calls_of("scan");
    let ListOutcome::Listed { leases, coverage } = outcome else {
        panic!("a million keys: {outcome:?}")
    };
    honest(&leases);
    match coverage {
        Complete => assert_eq!(leases.len(), LEASES),
        OutOfBudget => assert!(took >= limits::DEFAULT_LIST_BUDGET, "{took:?}"),
        StoppedAtLimit => panic!("{} leases, limit 10,000", leases.len()),
        _ => unreachable!(),
    }
    println!(
        "measured: {} of {LEASES} leases listed among {KEYS} keys in {took:?} ({steps} SCAN \
         steps, {coverage:?})",
        leases.len()
    );

    let budget = Duration::from_millis(50);
    let started = std::time::Instant::now();
    let outcome = client.list_within(None, 10_000, budget).await.unwrap();
    let took = started.elapsed();
    let ListOutcome::Listed { leases, coverage } = outcome else {
        panic!("a budget of {budget:?}: {outcome:?}")
    };
    honest(&leases);
    assert_eq!(coverage, OutOfBudget, "a million keys crossed in {took:?}");
    // It returns at the budget; the bound only leaves room for a starved scheduler.
    assert!(took < budget + Duration::from_secs(2), "{took:?}");
    println!(
        "measured: budget {budget:?}: {} leases read, returned after {took:?}",
        leases.len()
    );
}

/// A `SCAN` step whose reply never came is asked again, on a new connection, instead of
/// failing the listing: the first connection's replies are dropped until the client
/// replaced it.
#[tokio::test]
async fn a_step_that_did_not_answer_is_asked_again() {
    let h = Harness::redis();
    let Backend::Redis { proxy, .. } = &h.backend else {
        unreachable!()
    };
    let lease = acquired(&h.client, &request(&h.client, "again", "r1", "host-1:1")).await;
    let connected = proxy.accepted();
    proxy.set_mode(ProxyMode::DropReplies);
    let client = h.client.clone();
    let listing = tokio::spawn(async move { client.list(None, 100).await });
    while proxy.accepted() == connected && !listing.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.set_mode(ProxyMode::Pass);
    let outcome = listing.await.unwrap().unwrap();
    let ListOutcome::Listed { leases, coverage } = outcome else {
        panic!("the listing gave up: {outcome:?}")
    };
    assert_eq!(coverage, Complete);
    assert_eq!(
        leases.iter().map(|l| l.token).collect::<Vec<_>>(),
        [lease.token()]
    );
    assert!(
        proxy.accepted() > connected,
        "the step was asked again on a new connection"
    );
}
