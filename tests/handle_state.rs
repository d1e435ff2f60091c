//! docs/design.md §7, one test per arrow, on `MemoryBackend` under paused tokio time; then a
//! property test of random operation sequences.

use std::time::Duration;

use leasehold::*;
use tokio::time::{Instant, advance};

const TTL: Duration = Duration::from_secs(3);
const MS: Duration = Duration::from_millis(1);

fn setup() -> (LeaseClient, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (client, backend)
}

fn request(client: &LeaseClient, resource: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("test").unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt("op").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap()
}

async fn acquired(client: &LeaseClient, resource: &str) -> LeaseHandle {
    match client
        .try_acquire(&request(client, resource))
        .await
        .unwrap()
    {
        AcquireOutcome::Acquired(h) => h,
        other => panic!("expected acquired, got {other:?}"),
    }
}

/// A handle driven into UNKNOWN by a renewal whose replies are all lost.
async fn unknown(client: &LeaseClient, backend: &MemoryBackend) -> LeaseHandle {
    let mut h = acquired(client, "unknown").await;
    backend.set_fault(Some(MemoryFault::LoseReply));
    assert!(matches!(
        h.renew().await,
        RenewOutcome::Indeterminate { .. }
    ));
    backend.set_fault(None);
    assert_eq!(h.state(), LeaseState::Unknown);
    h
}

#[tokio::test(start_paused = true)]
async fn active_renewed_stays_active_with_budget_replaced_from_send_instant() {
    let (client, _) = setup();
    let mut h = acquired(&client, "r").await;
    advance(2 * TTL / 3).await;
    let sent = Instant::now();
    let RenewOutcome::Renewed { remaining } = h.renew().await else {
        panic!("not renewed")
    };
    assert_eq!(h.state(), LeaseState::Active);
    assert_eq!(remaining, TTL - 10 * MS);
    assert_eq!(h.valid_until(), Some(sent + TTL - 10 * MS));
    assert_eq!(h.observed_server_expiry(), sent + TTL);
}

#[tokio::test(start_paused = true)]
async fn active_whose_budget_reaches_zero_is_lost_and_stays_lost() {
    let (client, _) = setup();
    let mut h = acquired(&client, "r").await;
    advance(TTL - 10 * MS - MS).await;
    assert_eq!(h.state(), LeaseState::Active);
    assert_eq!(h.remaining_validity(), MS);
    advance(MS).await;
    assert_eq!(h.remaining_validity(), Duration::ZERO);
    assert_eq!(h.state(), LeaseState::Lost(LostReason::ValidityExpired));
    // The key is still in the store for another 10 ms (the drift budget): a renewal would
    // succeed at the server, but the handle must not come back.
    assert_eq!(
        h.renew().await,
        RenewOutcome::Refused {
            state: LeaseState::Lost(LostReason::ValidityExpired)
        }
    );
    assert_eq!(h.state(), LeaseState::Lost(LostReason::ValidityExpired));
}

#[tokio::test(start_paused = true)]
async fn renewal_confirmed_after_validity_ended_does_not_revive_the_handle() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    advance(TTL - 10 * MS - 5 * MS).await;
    // The reply takes 8 ms; the budget ends after 5.
    backend.set_fault(Some(MemoryFault::Slow(8 * MS)));
    let outcome = h.renew().await;
    assert_eq!(
        outcome,
        RenewOutcome::Lost {
            reason: LostReason::ValidityExpired
        }
    );
    assert_eq!(h.remaining_validity(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn active_renew_absent_is_lost() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    assert!(backend.delete(h.keys()));
    assert_eq!(
        h.renew().await,
        RenewOutcome::Lost {
            reason: LostReason::Absent
        }
    );
    assert_eq!(h.state(), LeaseState::Lost(LostReason::Absent));
}

#[tokio::test(start_paused = true)]
async fn active_renew_not_owner_is_lost() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.delete(h.keys());
    let _other = acquired(&client, "r").await;
    assert_eq!(
        h.renew().await,
        RenewOutcome::Lost {
            reason: LostReason::NotOwner
        }
    );
}

#[tokio::test(start_paused = true)]
async fn active_renew_indeterminate_after_bounded_retries_is_unknown() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    let before = backend.calls();
    backend.set_fault(Some(MemoryFault::LoseReply));
    let started = Instant::now();
    assert!(matches!(
        h.renew().await,
        RenewOutcome::Indeterminate { .. }
    ));
    assert_eq!(backend.calls() - before, 3, "three idempotent attempts");
    // Each bounded by the command timeout, all within local validity.
    assert!(started.elapsed() < TTL);
    assert_eq!(h.state(), LeaseState::Unknown);
    assert_eq!(h.remaining_validity(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn renew_retries_never_run_past_local_validity() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    advance(TTL - 10 * MS - 250 * MS).await; // 250 ms of validity left
    let valid_until = h.valid_until().unwrap();
    backend.set_fault(Some(MemoryFault::LoseRequest));
    let outcome = h.renew().await;
    assert!(Instant::now() <= valid_until + MS, "ran past validity");
    // Validity ran out while retrying: that is a loss, recorded.
    assert_eq!(
        outcome,
        RenewOutcome::Lost {
            reason: LostReason::ValidityExpired
        }
    );
}

#[tokio::test(start_paused = true)]
async fn renew_that_never_reached_the_backend_is_unavailable_and_stays_active() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.set_fault(Some(MemoryFault::Unavailable));
    assert!(matches!(h.renew().await, RenewOutcome::Unavailable { .. }));
    assert_eq!(h.state(), LeaseState::Active);
    backend.set_fault(None);
    assert!(matches!(h.renew().await, RenewOutcome::Renewed { .. }));
}

#[tokio::test(start_paused = true)]
async fn renew_within_a_bound_gives_up_at_the_bound() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.set_fault(Some(MemoryFault::LoseReply));
    let started = Instant::now();
    assert!(matches!(
        h.renew_within(50 * MS).await,
        RenewOutcome::Indeterminate { .. }
    ));
    assert!(started.elapsed() <= 50 * MS + MS);
}

#[tokio::test(start_paused = true)]
async fn renew_after_lost_released_and_unknown_is_refused_without_a_backend_call() {
    let (client, backend) = setup();
    let mut lost = acquired(&client, "lost").await;
    backend.delete(lost.keys());
    let _ = lost.renew().await;
    let mut released = acquired(&client, "released").await;
    assert_eq!(released.release().await, ReleaseOutcome::Released);
    let mut unknown = unknown(&client, &backend).await;

    let before = backend.calls();
    for (h, state) in [
        (&mut lost, LeaseState::Lost(LostReason::Absent)),
        (&mut released, LeaseState::Released),
        (&mut unknown, LeaseState::Unknown),
    ] {
        assert_eq!(h.renew().await, RenewOutcome::Refused { state });
        assert_eq!(h.state(), state);
    }
    assert_eq!(
        backend.calls(),
        before,
        "a refused renew must not reach the backend"
    );
}

#[tokio::test(start_paused = true)]
async fn release_from_active_is_released_and_frees_the_key() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    assert_eq!(h.release().await, ReleaseOutcome::Released);
    assert_eq!(h.state(), LeaseState::Released);
    assert_eq!(backend.held_leases(), 0);
    let calls = backend.calls();
    assert_eq!(h.release().await, ReleaseOutcome::Released);
    assert_eq!(
        backend.calls(),
        calls,
        "released handle releases without a call"
    );
}

#[tokio::test(start_paused = true)]
async fn release_from_unknown_is_allowed_and_releases() {
    let (client, backend) = setup();
    let mut h = unknown(&client, &backend).await;
    assert_eq!(h.release().await, ReleaseOutcome::Released);
    assert_eq!(h.state(), LeaseState::Released);
}

#[tokio::test(start_paused = true)]
async fn release_not_owner_is_lost_and_leaves_the_other_holder() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.delete(h.keys());
    let mut other = acquired(&client, "r").await;
    assert_eq!(h.release().await, ReleaseOutcome::NotOwner);
    assert_eq!(h.state(), LeaseState::Lost(LostReason::NotOwner));
    assert_eq!(other.state(), LeaseState::Active);
    assert!(matches!(other.renew().await, RenewOutcome::Renewed { .. }));
}

#[tokio::test(start_paused = true)]
async fn release_absent_is_already_absent_and_lost() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.delete(h.keys());
    assert_eq!(h.release().await, ReleaseOutcome::AlreadyAbsent);
    assert_eq!(h.state(), LeaseState::Lost(LostReason::Absent));
}

#[tokio::test(start_paused = true)]
async fn release_indeterminate_moves_active_to_unknown() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.set_fault(Some(MemoryFault::LoseRequest));
    assert!(matches!(
        h.release().await,
        ReleaseOutcome::Indeterminate { .. }
    ));
    assert_eq!(h.state(), LeaseState::Unknown);
    backend.set_fault(None);
    assert_eq!(h.release().await, ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn release_unavailable_leaves_the_state_unchanged() {
    let (client, backend) = setup();
    let mut h = acquired(&client, "r").await;
    backend.set_fault(Some(MemoryFault::Unavailable));
    assert!(matches!(
        h.release().await,
        ReleaseOutcome::Unavailable { .. }
    ));
    assert_eq!(h.state(), LeaseState::Active);
}

#[tokio::test(start_paused = true)]
async fn dropping_an_active_handle_releases_it_best_effort() {
    let (client, backend) = setup();
    let h = acquired(&client, "r").await;
    assert_eq!(backend.held_leases(), 1);
    drop(h);
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert_eq!(backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn replay_with_less_pttl_than_drift_is_born_lost() {
    let (client, _) = setup();
    let req = request(&client, "r");
    let AcquireOutcome::Acquired(first) = client.try_acquire(&req).await.unwrap() else {
        panic!()
    };
    advance(TTL - 5 * MS).await;
    let AcquireOutcome::Replayed(mut replay) = client.try_acquire(&req).await.unwrap() else {
        panic!("expected replay")
    };
    assert_eq!(replay.token(), first.token());
    assert_eq!(
        replay.state(),
        LeaseState::Lost(LostReason::ValidityExpired)
    );
    std::mem::forget(first); // keep the drop-time release out of this test
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Renew,
        Release,
        Advance(u64),
        Fault(Option<MemoryFault>),
        Delete,
        Steal,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Renew),
            1 => Just(Step::Release),
            3 => (0u64..2_000).prop_map(Step::Advance),
            2 => prop_oneof![
                Just(None),
                Just(Some(MemoryFault::Unavailable)),
                Just(Some(MemoryFault::LoseReply)),
                Just(Some(MemoryFault::LoseRequest)),
                (1u64..400).prop_map(|ms| Some(MemoryFault::Slow(Duration::from_millis(ms)))),
            ]
            .prop_map(Step::Fault),
            1 => Just(Step::Delete),
            1 => Just(Step::Steal),
        ]
    }

    fn terminal(s: LeaseState) -> bool {
        !matches!(s, LeaseState::Active)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random renew/release/expiry/fault sequences never leave a terminal state, never
        /// report validity outside ACTIVE, and `Renewed` only comes with ACTIVE.
        #[test]
        fn terminal_states_are_terminal(steps in proptest::collection::vec(step(), 1..40)) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async move {
                let (client, backend) = setup();
                let mut h = acquired(&client, "p").await;
                let mut seen_terminal: Option<LeaseState> = None;
                for step in steps {
                    let calls = backend.calls();
                    let before = h.state();
                    match step {
                        Step::Renew => {
                            let out = h.renew().await;
                            let after = h.state();
                            if matches!(out, RenewOutcome::Renewed { .. }) {
                                prop_assert_eq!(after, LeaseState::Active);
                                prop_assert!(h.remaining_validity() > Duration::ZERO
                                    || h.state() != LeaseState::Active);
                            }
                            if terminal(before) {
                                prop_assert_eq!(out, RenewOutcome::Refused { state: before });
                                prop_assert_eq!(backend.calls(), calls);
                            }
                        }
                        Step::Release => { let _ = h.release().await; }
                        Step::Advance(ms) => advance(Duration::from_millis(ms)).await,
                        Step::Fault(f) => backend.set_fault(f),
                        Step::Delete => { backend.delete(h.keys()); }
                        Step::Steal => {
                            backend.delete(h.keys());
                            backend.set_fault(None);
                            let other = client.try_acquire(&request(&client, "p")).await.unwrap();
                            std::mem::forget(other);
                        }
                    }
                    let now = h.state();
                    if let Some(t) = seen_terminal {
                        prop_assert!(terminal(now), "left terminal {:?} for {:?}", t, now);
                        // RELEASED is final. LOST keeps its reason and may end only in
                        // RELEASED: local validity ends (drift budget) before the server's
                        // TTL, so a release right after it can still find the key this
                        // attempt's and delete it (docs/design.md §7). UNKNOWN may only
                        // end by release.
                        match t {
                            LeaseState::Released => prop_assert_eq!(now, t),
                            LeaseState::Lost(_) => prop_assert!(
                                now == t || now == LeaseState::Released,
                                "LOST {:?} became {:?}", t, now
                            ),
                            _ => {}
                        }
                    }
                    if terminal(now) {
                        prop_assert_eq!(h.remaining_validity(), Duration::ZERO);
                        prop_assert_eq!(h.valid_until(), None);
                        seen_terminal = Some(now);
                    }
                }
                backend.set_fault(None);
                Ok(())
            })?;
        }
    }
}

/// `MemoryBackend` has no replicas: an acquisition that waits for them is acknowledged by
/// none, at once; one that does not ask reports so; a replay waits for nothing.
#[tokio::test(start_paused = true)]
async fn in_memory_no_replica_acknowledges_and_a_replay_waits_for_nothing() {
    let (client, _) = setup();
    let req = LeaseRequest::builder(
        Purpose::new("test").unwrap(),
        ResourceDigest::of("replicated"),
        client.new_attempt("op").unwrap(),
    )
    .wait_for_replicas(2, Duration::from_secs(1))
    .build()
    .unwrap();
    let started = Instant::now();
    let AcquireOutcome::Acquired(lease) = client.try_acquire(&req).await.unwrap() else {
        panic!("acquired")
    };
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(
        lease.replication(),
        &Replication::Acknowledged {
            acked: 0,
            wanted: 2
        }
    );
    let AcquireOutcome::Replayed(replay) = client.try_acquire(&req).await.unwrap() else {
        panic!("replayed")
    };
    assert_eq!(replay.replication(), &Replication::NotWaited);
    let plain = acquired(&client, "plain").await;
    assert_eq!(plain.replication(), &Replication::NotRequested);
}
