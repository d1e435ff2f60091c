//! One contract suite, every backend: every row of docs/design.md §4 and the outcomes of §5
//! that each must produce — `memory::*` on `MemoryBackend` under paused time, the others
//! (`redis`, `redis_batched`, `sentinel`, `cluster`) on real redis-servers behind proxies.
//!
//! Time passes for a lease as each backend allows, and each test says which: on Redis the
//! key's TTL alone shrinks (`shorten_server_ttl`, `run_out_server_ttl`); on memory the paused
//! clock moves (`advance_clock`), every handle's local validity with it.

#[path = "../common/mod.rs"]
mod common;
mod line;
mod same_owner;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::backends::{Fault, Harness};
use common::fault::FaultLine;
use common::leases::acquired;
use leasehold::*;
use line::*;
use same_owner::*;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

fn request_for(client: &LeaseClient, resource: &str, ttl: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("contract").unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt("op-1").unwrap(),
    )
    .ttl(ttl)
    .build()
    .unwrap()
}

async fn acquire_when_absent_is_acquired_with_the_full_ttl(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let sent = Instant::now();
    let mut lease = acquired(&h.client, &req).await;
    assert!(lease.token().get() > 0);
    assert_eq!(lease.state(), LeaseState::Active);
    assert!(lease.remaining_validity() <= Duration::from_secs(30) - 10 * MS);
    assert!(lease.observed_server_expiry() >= sent + Duration::from_secs(30));
    let pttl = h.pttl(lease.keys()).expect("held");
    assert!(pttl > Duration::from_secs(20) && pttl <= Duration::from_secs(30));
}

async fn acquire_again_with_the_same_attempt_replays_the_token_without_resetting_the_ttl(
    h: Harness,
) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let first = acquired(&h.client, &req).await;
    // 10 s pass on the server (memory: for the first handle's validity too).
    if h.is_redis() {
        h.shorten_server_ttl(first.keys(), Duration::from_secs(10));
    } else {
        h.advance_clock(Duration::from_secs(10)).await;
    }
    let AcquireOutcome::Replayed(mut replay) = h.client.try_acquire(&req).await.unwrap() else {
        panic!("expected replay")
    };
    assert_eq!(replay.token(), first.token());
    assert!(replay.remaining_validity() <= Duration::from_secs(20));
    let pttl = h.pttl(first.keys()).unwrap();
    assert!(
        pttl <= Duration::from_secs(20),
        "replay must not reset the TTL: {pttl:?}"
    );
    std::mem::forget(first);
}

/// Regression: a replay used to be trusted for a fresh full TTL.
async fn replay_after_29s_of_a_30s_lease_trusts_only_the_servers_pttl(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let first = acquired(&h.client, &req).await;
    // 29 s pass on the server (memory: for the first handle too); the replay reads its PTTL.
    if h.is_redis() {
        h.shorten_server_ttl(first.keys(), Duration::from_secs(29));
    } else {
        h.advance_clock(Duration::from_secs(29)).await;
    }
    let sent = Instant::now();
    let AcquireOutcome::Replayed(mut replay) = h.client.try_acquire(&req).await.unwrap() else {
        panic!("expected replay")
    };
    // The handle's send instant lies between `sent` and `replied`.
    let replied = Instant::now();
    let server_left = h.pttl(replay.keys()).unwrap();
    assert!(server_left <= Duration::from_secs(1));
    let remaining = replay.remaining_validity();
    assert!(
        remaining <= Duration::from_secs(1) - 10 * MS,
        "{remaining:?}"
    );
    assert!(remaining > Duration::ZERO);
    // observed_server_expiry is sent instant + the PTTL the server reported.
    let expiry = replay.observed_server_expiry();
    assert!(expiry <= replied + Duration::from_secs(1));
    assert!(expiry >= sent + server_left);
    std::mem::forget(first);
}

async fn acquire_held_by_another_is_contended_with_the_holders_pttl(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let _holder = acquired(&h.client, &req).await;
    let other = h.other_client();
    let outcome = other
        .try_acquire(&request_for(&other, "r", Duration::from_secs(5)))
        .await
        .unwrap();
    let AcquireOutcome::Contended { retry_after } = outcome else {
        panic!("expected contended, got {outcome:?}")
    };
    assert!(retry_after > Duration::from_secs(20) && retry_after <= Duration::from_secs(30));
}

async fn renew_held_is_renewed_and_resets_the_server_ttl(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    // 20 s pass on the server (memory: the handle renews with 10 s of validity left).
    if h.is_redis() {
        h.shorten_server_ttl(lease.keys(), Duration::from_secs(20));
    } else {
        h.advance_clock(Duration::from_secs(20)).await;
    }
    let outcome = lease.renew().await;
    assert!(
        matches!(outcome, RenewOutcome::Renewed { .. }),
        "{outcome:?}"
    );
    assert!(h.pttl(lease.keys()).unwrap() > Duration::from_secs(15));
    assert_eq!(lease.state(), LeaseState::Active);
}

async fn renew_after_the_key_was_deleted_is_lost_absent(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    h.delete(lease.keys());
    assert_eq!(
        lease.renew().await,
        RenewOutcome::Lost {
            reason: LostReason::Absent
        }
    );
}

async fn renew_after_someone_else_took_it_is_lost_not_owner(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    h.delete(lease.keys());
    let other = h.other_client();
    let _theirs = acquired(&other, &request_for(&other, "r", Duration::from_secs(30))).await;
    assert_eq!(
        lease.renew().await,
        RenewOutcome::Lost {
            reason: LostReason::NotOwner
        }
    );
    assert!(
        h.held(lease.keys()),
        "the other holder's lease is untouched"
    );
}

async fn release_held_is_released_and_the_key_is_gone(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    assert_eq!(lease.release().await, ReleaseOutcome::Released);
    assert!(!h.held(lease.keys()));
    assert_eq!(lease.state(), LeaseState::Released);
}

async fn release_after_someone_else_took_it_is_not_owner_and_leaves_theirs(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    h.delete(lease.keys());
    let other = h.other_client();
    let mut theirs = acquired(&other, &request_for(&other, "r", Duration::from_secs(30))).await;
    assert_eq!(lease.release().await, ReleaseOutcome::NotOwner);
    assert!(h.held(lease.keys()));
    assert!(matches!(theirs.renew().await, RenewOutcome::Renewed { .. }));
}

async fn release_when_absent_is_already_absent(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let mut lease = acquired(&h.client, &req).await;
    // The lease runs out on the server (memory: the handle's validity too).
    if h.is_redis() {
        h.run_out_server_ttl(lease.keys()).await;
    } else {
        h.advance_clock(Duration::from_secs(3600)).await;
    }
    assert_eq!(lease.release().await, ReleaseOutcome::AlreadyAbsent);
}

async fn inspect_tells_attempt_other_and_absent_apart(h: Harness) {
    let req = request_for(&h.client, "r", Duration::from_secs(30));
    let stranger = req.with_new_attempt().unwrap();
    assert_eq!(h.client.inspect(&req).await, InspectOutcome::Absent);
    let mut lease = acquired(&h.client, &req).await;
    let InspectOutcome::HeldByAttempt {
        remaining,
        token,
        holder: None,
    } = h.client.inspect(&req).await
    else {
        panic!("expected held by attempt, no holder label")
    };
    assert_eq!(token, lease.token());
    assert!(remaining > Duration::from_secs(20));
    let InspectOutcome::HeldByOther { token, .. } = h.client.inspect(&stranger).await else {
        panic!("expected held by other")
    };
    assert_eq!(token, lease.token());
    let _ = lease.release().await;
}

async fn fencing_tokens_increase_across_release_expiry_and_a_deleted_counter(h: Harness) {
    let mut tokens = Vec::new();
    // release + reacquire
    for _ in 0..3 {
        let mut lease = acquired(
            &h.client,
            &request_for(&h.client, "r", Duration::from_secs(30)),
        )
        .await;
        tokens.push(lease.token());
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    // expiry + reacquire
    let lease = acquired(
        &h.client,
        &request_for(&h.client, "r", Duration::from_secs(30)),
    )
    .await;
    tokens.push(lease.token());
    // The lease runs out on the server (memory: an hour passes for everything).
    if h.is_redis() {
        h.run_out_server_ttl(lease.keys()).await;
    } else {
        h.advance_clock(Duration::from_secs(3600)).await;
    }
    drop(lease);
    // counter deleted (evicted) + reacquire
    let mut lease = acquired(
        &h.client,
        &request_for(&h.client, "r", Duration::from_secs(30)),
    )
    .await;
    tokens.push(lease.token());
    let _ = lease.release().await;
    h.delete_fence(lease.keys());
    if h.is_redis() {
        // Only Redis can lose its counter (eviction); server time keeps its tokens rising.
        let lease = acquired(
            &h.client,
            &request_for(&h.client, "r", Duration::from_secs(30)),
        )
        .await;
        tokens.push(lease.token());
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase: {tokens:?}"
    );
}

/// Regression: bad input must cost no Redis command.
async fn ttl_not_above_the_drift_budget_is_rejected_before_any_command(h: Harness) {
    let settings = h
        .client
        .settings()
        .clone()
        .with_drift_budget(Duration::from_millis(200));
    let client = h.client_with(settings);
    let req = request_for(&client, "r", Duration::from_millis(200));
    let before = h.commands().await;
    for result in [client.try_acquire(&req).await, client.acquire(&req).await] {
        let err = result.unwrap_err();
        assert!(matches!(
            err,
            LeaseError::InvalidDuration {
                param: "ttl",
                problem: DurationProblem::NotGreaterThan { .. }
            }
        ));
        assert_eq!(
            err.to_string(),
            "ttl 200ms must be greater than drift_budget (200ms)"
        );
    }
    assert_eq!(h.commands().await, before, "no command may reach the store");
}

/// Regression: a LOST, RELEASED or UNKNOWN handle used to renew and report `Renewed`.
async fn renew_after_lost_released_or_unknown_is_refused_with_zero_commands(h: Harness) {
    let ttl = Duration::from_secs(30);
    let mut lost = acquired(&h.client, &request_for(&h.client, "lost", ttl)).await;
    h.delete(lost.keys());
    let _ = lost.renew().await;
    let mut released = acquired(&h.client, &request_for(&h.client, "released", ttl)).await;
    let _ = released.release().await;
    let settings = h
        .client
        .settings()
        .clone()
        .with_command_timeout(Duration::from_millis(100));
    let fast = h.client_with(settings);
    let mut unknown = acquired(&fast, &request_for(&fast, "unknown", ttl)).await;
    h.fault(Fault::LoseReplies).await;
    let outcome = unknown.renew().await;
    assert!(
        matches!(outcome, RenewOutcome::Indeterminate { .. }),
        "{outcome:?}"
    );
    h.fault(Fault::None).await;

    let before = h.commands().await;
    for (lease, state) in [
        (&mut lost, LeaseState::Lost(LostReason::Absent)),
        (&mut released, LeaseState::Released),
        (&mut unknown, LeaseState::Unknown),
    ] {
        assert_eq!(lease.renew().await, RenewOutcome::Refused { state });
        assert_eq!(
            lease.state(),
            state,
            "Renewed never coexists with a non-ACTIVE state"
        );
    }
    assert_eq!(h.commands().await, before);
    std::mem::forget(unknown);
}

/// Regression: "not sent" and "sent, reply lost" used to be one answer.
async fn reply_lost_after_the_script_ran_is_indeterminate_and_the_attempt_finds_it(h: Harness) {
    let settings = h
        .client
        .settings()
        .clone()
        .with_command_timeout(Duration::from_millis(150));
    let client = h.client_with(settings);
    let req = request_for(&client, "r", Duration::from_secs(30));
    // Connect and load the script first: with the handshake's replies dropped the
    // connection fails (rightly `Unavailable`), and with NOSCRIPT's reply dropped the script
    // never runs. Under Cluster every primary must have it: 32 resources reach all three.
    for i in 0..32 {
        let warm = request_for(&client, &format!("warm-{i}"), Duration::from_secs(30));
        let mut warm = acquired(&client, &warm).await;
        let _ = warm.release().await;
    }
    h.fault(Fault::LoseReplies).await;
    let started = Instant::now();
    let outcome = client.try_acquire(&req).await.unwrap();
    let took = started.elapsed();
    let AcquireOutcome::Indeterminate { attempt, .. } = outcome else {
        panic!("expected indeterminate, got {outcome:?}")
    };
    assert_eq!(&attempt, req.attempt());
    h.fault(Fault::None).await;
    let keys = client.keys(req.purpose(), req.resource());
    let held = h.held(&keys);
    assert!(held, "the script ran");
    let inspected = h.client.inspect(&req).await;
    let InspectOutcome::HeldByAttempt { token, .. } = inspected else {
        panic!("inspect must find the attempt, got {inspected:?}")
    };
    let AcquireOutcome::Replayed(lease) = h.client.try_acquire(&req).await.unwrap() else {
        panic!("retry with the same attempt must replay")
    };
    FaultLine::new(&format!("acquire-reply-lost/{}", h.name()), 1)
        .with("outcome", "indeterminate")
        .ms("took_ms", took)
        .with("held_after", held)
        .with("replay_same_token", lease.token() == token)
        .print();
    assert_eq!(lease.token(), token);
}

/// Regression: the wait timeout used to be accepted and ignored.
async fn acquire_wakes_on_the_release_notice_instead_of_sleeping_out_retry_after(h: Harness) {
    let mut holder = acquired(
        &h.client,
        &request_for(&h.client, "r", Duration::from_secs(30)),
    )
    .await;
    let started = Instant::now();
    common::backends::assert_waiter_wakes_on_release(&mut holder, h.other_client()).await;
    assert!(started.elapsed() < Duration::from_secs(3));
}

async fn acquire_returns_contended_at_the_wait_timeout_when_nobody_releases(h: Harness) {
    let _holder = acquired(
        &h.client,
        &request_for(&h.client, "r", Duration::from_secs(30)),
    )
    .await;
    let waiter = h.other_client();
    let req = LeaseRequest::builder(
        Purpose::new("contract").unwrap(),
        ResourceDigest::of("r"),
        waiter.new_attempt("waiter").unwrap(),
    )
    .wait_timeout(Duration::from_secs(2))
    .build()
    .unwrap();
    let started = Instant::now();
    let outcome = waiter.acquire(&req).await.unwrap();
    let waited = started.elapsed();
    assert!(
        matches!(outcome, AcquireOutcome::Contended { .. }),
        "{outcome:?}"
    );
    assert!(
        waited >= Duration::from_secs(2),
        "gave up early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(4), "overslept: {waited:?}");
}

async fn sixty_four_contenders_hold_one_at_a_time_with_increasing_tokens(h: Harness) {
    let holders = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..64 {
        let client = h.other_client();
        let (holders, tokens) = (holders.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let req = LeaseRequest::builder(
                Purpose::new("contract").unwrap(),
                ResourceDigest::of("hot"),
                client.new_attempt(&format!("worker-{i}")).unwrap(),
            )
            .ttl(Duration::from_secs(20))
            .wait_timeout(Duration::from_secs(60))
            .build()
            .unwrap();
            let outcome = client.acquire(&req).await.unwrap();
            let AcquireOutcome::Acquired(mut lease) = outcome else {
                panic!("worker {i}: {outcome:?}")
            };
            assert_eq!(
                holders.fetch_add(1, Ordering::SeqCst),
                0,
                "two holders at once"
            );
            tokens.lock().unwrap().push(lease.token());
            tokio::time::sleep(Duration::from_millis(2)).await;
            holders.fetch_sub(1, Ordering::SeqCst);
            assert_eq!(lease.release().await, ReleaseOutcome::Released);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 64);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "every handoff gets a larger token"
    );
}

contract_tests!(
    acquire_when_absent_is_acquired_with_the_full_ttl,
    acquire_again_with_the_same_attempt_replays_the_token_without_resetting_the_ttl,
    replay_after_29s_of_a_30s_lease_trusts_only_the_servers_pttl,
    acquire_with_the_same_owner_under_another_operation_is_a_conflict,
    renew_and_release_as_the_same_owner_under_another_operation_are_not_owner,
    a_handle_of_the_same_owner_under_another_operation_is_not_owner,
    a_handle_whose_operation_id_starts_the_holders_is_not_owner,
    acquire_held_by_another_is_contended_with_the_holders_pttl,
    renew_held_is_renewed_and_resets_the_server_ttl,
    renew_after_the_key_was_deleted_is_lost_absent,
    renew_after_someone_else_took_it_is_lost_not_owner,
    release_held_is_released_and_the_key_is_gone,
    release_after_someone_else_took_it_is_not_owner_and_leaves_theirs,
    release_when_absent_is_already_absent,
    inspect_tells_attempt_other_and_absent_apart,
    fencing_tokens_increase_across_release_expiry_and_a_deleted_counter,
    ttl_not_above_the_drift_budget_is_rejected_before_any_command,
    renew_after_lost_released_or_unknown_is_refused_with_zero_commands,
    reply_lost_after_the_script_ran_is_indeterminate_and_the_attempt_finds_it,
    acquire_wakes_on_the_release_notice_instead_of_sleeping_out_retry_after,
    acquire_returns_contended_at_the_wait_timeout_when_nobody_releases,
    sixty_four_contenders_hold_one_at_a_time_with_increasing_tokens,
    waiters_are_served_in_the_order_they_came,
    a_watched_waiter_sees_its_place_move_up_the_line,
    a_try_without_a_wait_does_not_jump_a_line_of_live_waiters,
    a_release_wakes_the_first_waiter_only,
    a_silent_head_leaves_the_line_within_its_keep_alive_and_one_look,
    twenty_silent_waiters_leave_the_line_together,
    a_waiter_kept_alive_by_its_client_keeps_its_place_past_the_keep_alive,
    a_replayed_waiting_try_keeps_its_place,
    a_waiter_whose_wait_ran_out_leaves_the_line,
    inspect_counts_the_entries_in_the_line,
);
