//! The runtime on a counted lease, unchanged: n jobs hold n slots at once and are renewed
//! past their TTL, the next is not acquired, and losing one slot cancels its job only;
//! three supervisors on two permits make two leaders, and the third takes over a freed slot.
//! `MemoryBackend` under paused tokio time (the slots themselves, on every backend:
//! `counted.rs`). On a real redis-server behind a stalling proxy: an acquisition a drain or
//! a supervisor's shutdown gives up in flight leaves no slot held.

mod common;

use std::time::Duration;

use common::backends::redis_settings;
use common::leases::acquired;
use common::workers::UntilCancelled;
use common::{Proxy, ProxyMode, RedisServer};
use leasehold::runtime::*;
use leasehold::*;
use tokio::sync::oneshot;
use tokio::time::sleep;

const TTL: Duration = Duration::from_secs(3);

fn request(rt: &LeaseRuntime, op: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("pool").unwrap(),
        ResourceDigest::of("workers"),
        rt.client().new_attempt(op).unwrap(),
    )
    .ttl(TTL)
    .permits(2)
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn two_permits_run_two_jobs_at_once_and_a_lost_slot_cancels_only_its_job() {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let rt = LeaseRuntime::new(client);
    let mut jobs = Vec::new();
    let mut tokens = Vec::new();
    for op in ["a", "b"] {
        let (token_tx, token_rx) = oneshot::channel();
        let (rt, req) = (rt.clone(), request(&rt, op));
        jobs.push(tokio::spawn(async move {
            rt.run_under_lease(&req, CancelPolicy::Kill, move |ctx| async move {
                let _ = token_tx.send((ctx.token(), ctx.slot()));
                // Outlives several TTLs: the slot is renewed like any lease.
                tokio::select! {
                    () = sleep(TTL * 4) => "done",
                    () = ctx.cancelled() => "cancelled",
                }
            })
            .await
            .unwrap()
        }));
        tokens.push(token_rx.await.expect("the job started"));
    }
    assert!(tokens[0].0 < tokens[1].0);
    // Each job knows its slot: where its effects land, (slot, token) fences.
    assert_eq!((tokens[0].1, tokens[1].1), (Some(0), Some(1)));
    assert_eq!(backend.held_leases(), 2);
    let third = rt
        .run_under_lease(&request(&rt, "c"), CancelPolicy::Kill, |_| async {})
        .await
        .unwrap();
    assert!(
        matches!(
            third,
            RunOutcome::NotAcquired(AcquireOutcome::Contended { .. })
        ),
        "a third job on two permits ran"
    );

    // Slot 1 is taken away behind its holder's back: only job "b" is stopped.
    sleep(TTL).await;
    let keys = rt
        .client()
        .keys(
            &Purpose::new("pool").unwrap(),
            &ResourceDigest::of("workers"),
        )
        .counted(2);
    assert!(backend.delete(&keys.for_slot(1)));
    let b = jobs.pop().unwrap().await.unwrap();
    let a = jobs.pop().unwrap().await.unwrap();
    let RunOutcome::Ran { output, report } = b else {
        panic!("b did not run")
    };
    assert_eq!(output, Some("cancelled"));
    assert!(
        matches!(
            report.end,
            JobEnd::Cancelled {
                reason: CancelReason::Lost(LostReason::Absent),
                ..
            }
        ),
        "{:?}",
        report.end
    );
    let RunOutcome::Ran { output, report } = a else {
        panic!("a did not run")
    };
    assert_eq!((output, report.end), (Some("done"), JobEnd::Completed));
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn three_supervisors_on_two_permits_make_two_leaders_and_the_third_takes_over() {
    let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default()).unwrap();
    let rt = LeaseRuntime::new(client);
    let mut supervisors = Vec::new();
    for op in ["a", "b", "c"] {
        let supervisor = rt
            .supervise(
                request(&rt, op),
                |_| (UntilCancelled, ()),
                CancelPolicy::Kill,
                SupervisorConfig::default(),
            )
            .await
            .unwrap();
        supervisors.push(supervisor);
    }
    // Several TTLs: the two leaders renew, the follower keeps being refused.
    sleep(TTL * 3).await;
    let tokens: Vec<Option<FencingToken>> = supervisors
        .iter()
        .map(|s| s.watch().borrow().token())
        .collect();
    assert_eq!(tokens.iter().flatten().count(), 2, "{tokens:?}");
    let newest = tokens.iter().flatten().max().copied().unwrap();
    let follower = supervisors.remove(tokens.iter().position(Option::is_none).unwrap());
    // One leader steps down (both left are leaders): its release frees its slot.
    supervisors.remove(0).shutdown().await;
    let mut state = follower.watch();
    let took_over = tokio::time::timeout(TTL * 2, state.wait_for(|s| s.token().is_some()))
        .await
        .expect("the follower took the freed slot within two TTLs")
        .unwrap()
        .token()
        .unwrap();
    assert!(took_over > newest);
    follower.shutdown().await;
    for s in supervisors {
        s.shutdown().await;
    }
}

/// How long the proxy holds each chunk, each way, while an acquisition is given up: a round
/// trip well within the command timeout ([`COMMAND_TIMEOUT`]), so nothing times out — Redis
/// is only slow — and long enough that the give-up surely comes while the reply is on its
/// way.
const STALL: Duration = Duration::from_secs(1);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// A redis-server behind a proxy, and a client through it that has already connected and
/// loaded its script (by taking slot 0 of the pool, which stays held by someone else).
struct Stalled {
    server: RedisServer,
    proxy: Proxy,
    client: LeaseClient,
    other: LeaseHandle,
}

impl Stalled {
    async fn start() -> Self {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.addr());
        let client = LeaseClient::redis(
            &proxy.url(),
            redis_settings().with_command_timeout(COMMAND_TIMEOUT),
        )
        .unwrap();
        let other = acquired(&client, &redis_request(&client, "other")).await;
        assert_eq!(other.keys().slot(), Some(0));
        Self {
            server,
            proxy,
            client,
            other,
        }
    }

    /// The pool's slots held on the server, by number.
    fn held(&self) -> Vec<u16> {
        let pool = redis_request(&self.client, "look");
        let keys = self.client.keys(pool.purpose(), pool.resource());
        let exists = |slot| {
            let key = keys.clone().counted(3).for_slot(slot).lease().to_owned();
            self.server.query::<i64>(&["EXISTS", &key]) == 1
        };
        (0..3).filter(|&slot| exists(slot)).collect()
    }

    /// Waits until an acquisition sent through the stalled proxy ran on the server (slot 1
    /// is held): its reply is then still on its way back, for about [`STALL`].
    async fn until_landed(&self) {
        let deadline = tokio::time::Instant::now() + STALL * 10;
        while self.held() != [0, 1] {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the acquisition never reached the server"
            );
            sleep(Duration::from_millis(2)).await;
        }
    }
}

/// A request for one of 3 permits on the pool, by a fresh attempt of `client`, whose TTL
/// leaves renewals room after the command timeout.
fn redis_request(client: &LeaseClient, op: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("pool").unwrap(),
        ResourceDigest::of("workers"),
        client.new_attempt(op).unwrap(),
    )
    .ttl(Duration::from_secs(60))
    .permits(3)
    .build()
    .unwrap()
}

/// A drain that begins while a counted acquisition's reply is stalled gives the acquisition
/// up, and frees the slot it took — whichever slot that was — not the plain lease's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_counted_acquisition_a_drain_gives_up_in_flight_leaves_no_slot_held() {
    let s = Stalled::start().await;
    let rt = LeaseRuntime::new(s.client.clone());
    s.proxy.set_mode(ProxyMode::Delay(STALL));
    let job = tokio::spawn({
        let (rt, req) = (rt.clone(), redis_request(&s.client, "given-up"));
        async move {
            rt.run_under_lease(&req, CancelPolicy::Kill, |_| async {})
                .await
        }
    });
    s.until_landed().await;
    let summary = rt.shutdown(Duration::from_secs(30)).await;
    assert_eq!(summary.left, 0, "{summary:?}");
    println!(
        "measured: the drain gave up a stalled counted acquisition and released it in {:?} \
         (a round trip through the proxy: {:?})",
        summary.took,
        STALL * 2
    );
    let given_up = job.await.unwrap();
    assert!(
        matches!(given_up, Err(RuntimeError::ShuttingDown)),
        "{given_up:?}"
    );
    assert_eq!(s.held(), [0], "only the other holder's slot is held");
    std::mem::forget(s.other);
}

/// A supervisor shut down while its counted acquisition's reply is stalled gives the
/// acquisition up (no term starts) and frees the slot it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_counted_acquisition_a_supervisor_gives_up_in_flight_leaves_no_slot_held() {
    let s = Stalled::start().await;
    let rt = LeaseRuntime::new(s.client.clone());
    s.proxy.set_mode(ProxyMode::Delay(STALL));
    let supervisor = rt
        .supervise(
            redis_request(&s.client, "candidate"),
            |_| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    s.until_landed().await;
    let asked = std::time::Instant::now();
    let summary = supervisor.shutdown().await;
    println!(
        "measured: the supervisor gave up a stalled counted acquisition and released it in \
         {:?} (a round trip through the proxy: {:?})",
        asked.elapsed(),
        STALL * 2
    );
    assert_eq!(
        summary.terms, 0,
        "given up before a term began: {summary:?}"
    );
    assert_eq!(s.held(), [0], "only the other holder's slot is held");
    std::mem::forget(s.other);
}
