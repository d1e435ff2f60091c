//! Counted leases (`permits(n)`) on every backend: at most n holders at once, each a lease
//! in its own slot with everything a lease has, tokens increasing across all slots, a
//! freed slot taken by the next contender. (The plain lease: `backend_contract/`.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::backends::{Fault, Harness};
use common::leases::acquired;
use leasehold::*;
use tokio::time::Instant;

/// A 30 s request for a lease of `permits` on "pool", by a fresh attempt of `client`.
fn request(client: &LeaseClient, permits: u32, op: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("contract").unwrap(),
        ResourceDigest::of("pool"),
        client.new_attempt(op).unwrap(),
    )
    .ttl(Duration::from_secs(30))
    .permits(permits)
    .build()
    .unwrap()
}

/// `permits` holders, each by its own attempt.
async fn fill(h: &Harness, permits: u32) -> Vec<LeaseHandle> {
    let mut held = Vec::new();
    for i in 0..permits {
        held.push(acquired(&h.client, &request(&h.client, permits, &format!("h{i}"))).await);
    }
    held
}

async fn n_holders_take_n_slots_with_increasing_tokens_and_the_next_is_contended(h: Harness) {
    let mut held = fill(&h, 3).await;
    let slots: Vec<_> = held.iter().map(|l| l.keys().slot()).collect();
    assert_eq!(slots, [Some(0), Some(1), Some(2)]);
    assert!(held.windows(2).all(|w| w[0].token() < w[1].token()));
    for lease in &mut held {
        assert_eq!(lease.state(), LeaseState::Active);
        let pttl = h.pttl(lease.keys()).expect("each slot is a lease key");
        assert!(pttl > Duration::from_secs(20));
    }
    // The earliest slot's time is what a contender is told to wait. Redis shortens slot 1's
    // TTL alone; memory's paused clock ages every slot alike, so all three are earliest.
    if h.is_redis() {
        h.shorten_server_ttl(held[1].keys(), Duration::from_secs(10));
    } else {
        h.advance_clock(Duration::from_secs(10)).await;
    }
    let outcome = h
        .client
        .try_acquire(&request(&h.client, 3, "late"))
        .await
        .unwrap();
    let AcquireOutcome::Contended { retry_after } = outcome else {
        panic!("a fourth holder of three permits: {outcome:?}")
    };
    assert!(
        retry_after <= Duration::from_secs(20) && retry_after > Duration::from_secs(15),
        "{retry_after:?}"
    );
}

async fn the_same_attempt_replays_its_own_slot_and_token(h: Harness) {
    let _first = acquired(&h.client, &request(&h.client, 2, "first")).await;
    let req = request(&h.client, 2, "second");
    let second = acquired(&h.client, &req).await;
    // 5 s pass for the slot on the server: Redis shortens its TTL alone, memory advances
    // its paused clock. The replay's validity comes from the server's PTTL either way.
    if h.is_redis() {
        h.shorten_server_ttl(second.keys(), Duration::from_secs(5));
    } else {
        h.advance_clock(Duration::from_secs(5)).await;
    }
    let outcome = h.client.try_acquire(&req).await.unwrap();
    let AcquireOutcome::Replayed(mut replay) = outcome else {
        panic!("expected a replay: {outcome:?}")
    };
    assert_eq!(replay.keys(), second.keys());
    assert_eq!(replay.token(), second.token());
    assert!(replay.remaining_validity() <= Duration::from_secs(25));
    std::mem::forget(second);
}

async fn the_same_owner_under_another_operation_is_a_conflict_even_with_a_slot_free(h: Harness) {
    let req = request(&h.client, 3, "op-1");
    let _lease = acquired(&h.client, &req).await;
    let other_op = LeaseRequest::builder(
        req.purpose().clone(),
        *req.resource(),
        Attempt::from_parts(
            req.attempt().owner().clone(),
            OperationId::new("op-2").unwrap(),
        ),
    )
    .permits(3)
    .build()
    .unwrap();
    let outcome = h.client.try_acquire(&other_op).await.unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::OwnerOperationConflict { .. }),
        "{outcome:?}"
    );
}

async fn renew_release_and_expiry_touch_only_the_holders_slot(h: Harness) {
    let mut held = fill(&h, 3).await;
    // Redis shortens slots 0 and 2 by 10 s each, slot 1 untouched; memory has one clock
    // for every slot and every handle, moved on 10 s for each of the two: 20 s for all.
    if h.is_redis() {
        h.shorten_server_ttl(held[0].keys(), Duration::from_secs(10));
        h.shorten_server_ttl(held[2].keys(), Duration::from_secs(10));
    } else {
        h.advance_clock(Duration::from_secs(10)).await;
        h.advance_clock(Duration::from_secs(10)).await;
    }
    assert!(matches!(
        held[0].renew().await,
        RenewOutcome::Renewed { .. }
    ));
    assert!(h.pttl(held[0].keys()).unwrap() > Duration::from_secs(25));
    assert!(h.pttl(held[2].keys()).unwrap() <= Duration::from_secs(20));
    assert_eq!(held[1].release().await, ReleaseOutcome::Released);
    assert!(!h.held(held[1].keys()));
    assert!(h.held(held[0].keys()) && h.held(held[2].keys()));
    // The freed slot goes to the next contender, with a larger token than any before.
    let last = held.iter().map(LeaseHandle::token).max().unwrap();
    let next = acquired(&h.client, &request(&h.client, 3, "next")).await;
    assert_eq!(next.keys().slot(), Some(1));
    assert!(next.token() > last);
    // An expired slot is free again; on Redis, where one key's TTL can run out alone, the
    // others are not disturbed (memory's paused clock, moved on an hour, expires them all).
    if h.is_redis() {
        h.run_out_server_ttl(held[2].keys()).await;
    } else {
        h.advance_clock(Duration::from_secs(3600)).await;
    }
    let after = acquired(&h.client, &request(&h.client, 3, "after")).await;
    assert!(after.token() > next.token());
    let renewed = held[2].renew().await;
    assert!(
        !matches!(renewed, RenewOutcome::Renewed { .. }),
        "{renewed:?}"
    );
    if h.is_redis() {
        assert!(matches!(renewed, RenewOutcome::Lost { .. }), "{renewed:?}");
        assert_eq!(after.keys().slot(), Some(2));
        assert!(matches!(
            held[0].renew().await,
            RenewOutcome::Renewed { .. }
        ));
    }
    std::mem::forget(next);
    std::mem::forget(after);
}

async fn inspect_reads_a_counted_lease_whole_and_slot_by_slot(h: Harness) {
    let mut held = fill(&h, 2).await;
    let req = request(&h.client, 4, "mine");
    let mine = acquired(&h.client, &req).await;
    let slots = h.client.inspect_slots(&req).await;
    assert_eq!(slots.len(), 4);
    assert!(
        matches!(&slots[0], InspectOutcome::HeldByAttempt { token, .. } if *token == mine.token()),
        "{slots:?}"
    );
    assert!(slots[1..].iter().all(|s| *s == InspectOutcome::Absent));
    // Whole, for its attempt: the slot it holds; for anyone else: a slot is free.
    assert!(matches!(
        h.client.inspect(&req).await,
        InspectOutcome::HeldByAttempt { token, .. } if token == mine.token()
    ));
    let stranger = req.with_new_attempt().unwrap();
    assert_eq!(h.client.inspect(&stranger).await, InspectOutcome::Absent);
    // The two-permit holders are another lease: counts never mix.
    let two = request(&h.client, 2, "look");
    let tokens: Vec<_> = h
        .client
        .inspect_slots(&two)
        .await
        .iter()
        .map(|s| match s {
            InspectOutcome::HeldByOther { token, .. } => *token,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(tokens, [held[0].token(), held[1].token()]);
    // Every slot taken: the whole reads as the slot that frees first (slot 0 was renewed
    // since slot 1 was taken).
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(matches!(
        held[0].renew().await,
        RenewOutcome::Renewed { .. }
    ));
    let InspectOutcome::HeldByOther {
        token, remaining, ..
    } = h.client.inspect(&two).await
    else {
        panic!("every slot of two is held")
    };
    assert_eq!(token, held[1].token());
    assert!(remaining < Duration::from_secs(30), "{remaining:?}");
    assert_eq!(
        h.client.inspect(&request(&h.client, 1, "plain")).await,
        InspectOutcome::Absent,
        "the plain lease on the same resource is a third one"
    );
}

/// The way to settle an acquisition whose reply was lost works on a counted lease: inspect
/// finds the attempt's slot, and `release_attempt` frees that slot (and no other).
async fn an_indeterminate_counted_acquisition_is_settled_by_inspect_and_release_attempt(
    h: Harness,
) {
    let settings = h
        .client
        .settings()
        .clone()
        .with_command_timeout(Duration::from_millis(150));
    let client = h.client_with(settings);
    // Connected, and the script loaded on every node (see backend_contract/main.rs).
    for i in 0..32 {
        let warm = LeaseRequest::builder(
            Purpose::new("contract").unwrap(),
            ResourceDigest::of(format!("warm-{i}")),
            client.new_attempt("warm").unwrap(),
        )
        .build()
        .unwrap();
        let _ = acquired(&client, &warm).await.release().await;
    }
    let other = acquired(&h.client, &request(&h.client, 3, "other")).await;
    let req = request(&client, 3, "lost-reply");
    h.fault(Fault::LoseReplies).await;
    let outcome = client.try_acquire(&req).await.unwrap();
    h.fault(Fault::None).await;
    assert!(
        matches!(outcome, AcquireOutcome::Indeterminate { .. }),
        "{outcome:?}"
    );
    let slot = req_keys(&h, &req).for_slot(1);
    assert!(h.held(&slot), "the script ran and took slot 1");
    let inspected = client.inspect(&req).await;
    let InspectOutcome::HeldByAttempt { token, .. } = inspected else {
        panic!("inspect must find the attempt's slot, got {inspected:?}")
    };
    assert!(token > other.token());
    assert_eq!(client.release_attempt(&req).await, ReleaseOutcome::Released);
    assert!(!h.held(&slot));
    assert!(h.held(other.keys()), "another holder's slot is untouched");
    assert_eq!(client.inspect(&req).await, InspectOutcome::Absent);
    // Nothing of the attempt's left: a second release finds no slot of its own.
    assert_eq!(
        client.release_attempt(&req).await,
        ReleaseOutcome::AlreadyAbsent
    );
    std::mem::forget(other);
}

/// The keys `req` acquires: its lease's, counted.
fn req_keys(h: &Harness, req: &LeaseRequest) -> LeaseKeys {
    h.client
        .keys(req.purpose(), req.resource())
        .counted(req.permits())
}

async fn a_waiter_wakes_on_a_freed_slot(h: Harness) {
    let mut held = fill(&h, 2).await;
    let waiter = h.other_client();
    let req = LeaseRequest::builder(
        Purpose::new("contract").unwrap(),
        ResourceDigest::of("pool"),
        waiter.new_attempt("waiter").unwrap(),
    )
    .permits(2)
    .wait_timeout(Duration::from_secs(5))
    .build()
    .unwrap();
    let task = tokio::spawn(async move { waiter.acquire(&req).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert_eq!(held[1].release().await, ReleaseOutcome::Released);
    let outcome = task.await.unwrap();
    let woke = released_at.elapsed();
    let AcquireOutcome::Acquired(lease) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(lease.keys().slot(), Some(1));
    println!(
        "measured: {} waiter acquired the freed slot {woke:?} after its release",
        h.name()
    );
    // The holders had ~30 s left: only the release notice explains an acquisition this soon.
    assert!(
        woke < Duration::from_secs(2),
        "woke {woke:?} after the release"
    );
    std::mem::forget(lease);
}

async fn twenty_contenders_on_four_permits_never_hold_more_than_four_at_once(h: Harness) {
    const PERMITS: usize = 4;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let client = h.other_client();
        let (holding, most, tokens) = (holding.clone(), most.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let req = LeaseRequest::builder(
                Purpose::new("contract").unwrap(),
                ResourceDigest::of("hot-pool"),
                client.new_attempt(&format!("worker-{i}")).unwrap(),
            )
            .ttl(Duration::from_secs(20))
            .permits(PERMITS as u32)
            .wait_timeout(Duration::from_secs(60))
            .build()
            .unwrap();
            let outcome = client.acquire(&req).await.unwrap();
            let AcquireOutcome::Acquired(mut lease) = outcome else {
                panic!("worker {i}: {outcome:?}")
            };
            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokens.lock().unwrap().push(lease.token());
            tokio::time::sleep(Duration::from_millis(20)).await;
            holding.fetch_sub(1, Ordering::SeqCst);
            assert_eq!(lease.release().await, ReleaseOutcome::Released);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} holders at once");
    let mut tokens = tokens.lock().unwrap().clone();
    let issued = tokens.len();
    tokens.sort();
    tokens.dedup();
    assert_eq!((issued, tokens.len()), (20, 20), "a token was issued twice");
}

async fn list_names_each_held_slot_of_its_lease(h: Harness) {
    let held = fill(&h, 2).await;
    let plain = acquired(
        &h.client,
        &common::leases::request(&h.client, "contract", "pool", "p"),
    )
    .await;
    let ListOutcome::Listed { leases, coverage } = h
        .client
        .list(Some(&Purpose::new("contract").unwrap()), 100)
        .await
        .unwrap()
    else {
        panic!("the listing did not answer")
    };
    assert_eq!(coverage, ListCoverage::Complete);
    let seen: Vec<_> = leases.iter().map(|l| (l.slot, l.token)).collect();
    let slot = |slot| Some(ListedSlot { slot, permits: 2 });
    assert_eq!(
        seen,
        [
            (None, plain.token()),
            (slot(0), held[0].token()),
            (slot(1), held[1].token())
        ]
    );
}

/// A target that fences each slot on its own: a write lands only with a token above the
/// slot's last.
#[derive(Default)]
struct SlotFencedTarget(std::collections::HashMap<u16, FencingToken>);

impl SlotFencedTarget {
    fn write(&mut self, lease: &LeaseHandle) -> bool {
        let slot = lease.keys().slot().expect("a counted lease's slot");
        let last = self.0.entry(slot).or_insert(FencingToken::new(0));
        let lands = lease.token() > *last;
        if lands {
            *last = lease.token();
        }
        lands
    }
}

async fn a_stale_slot_holders_write_is_refused_where_each_slot_is_fenced(h: Harness) {
    let held = fill(&h, 2).await;
    let mut target = SlotFencedTarget::default();
    assert!(target.write(&held[0]) && target.write(&held[1]));
    // Slot 0 is taken away behind its holder's back (it still believes it holds it), and
    // the next holder gets that slot with a larger token.
    h.delete(held[0].keys());
    let next = acquired(&h.client, &request(&h.client, 2, "next")).await;
    assert_eq!(next.keys().slot(), Some(0));
    assert!(target.write(&next));
    assert!(!target.write(&held[0]), "the stale holder of slot 0 wrote");
    // Slot 1 is untouched: its holder's token is still the one its writes carry.
    assert_eq!(target.0.get(&1), Some(&held[1].token()));
    std::mem::forget(next);
}

contract_tests!(
    a_stale_slot_holders_write_is_refused_where_each_slot_is_fenced,
    list_names_each_held_slot_of_its_lease,
    n_holders_take_n_slots_with_increasing_tokens_and_the_next_is_contended,
    the_same_attempt_replays_its_own_slot_and_token,
    the_same_owner_under_another_operation_is_a_conflict_even_with_a_slot_free,
    renew_release_and_expiry_touch_only_the_holders_slot,
    inspect_reads_a_counted_lease_whole_and_slot_by_slot,
    an_indeterminate_counted_acquisition_is_settled_by_inspect_and_release_attempt,
    a_waiter_wakes_on_a_freed_slot,
    twenty_contenders_on_four_permits_never_hold_more_than_four_at_once,
);
