//! The entry points that answer once (`run_under_lease`, `spawn_under_lease`) settle an
//! acquisition of unknown end by replaying its attempt, never by dropping it: a lost reply
//! that took the lease gives the work that lease once Redis answers again, and an attempt
//! left unanswered for a whole TTL is given up by a release. `MemoryBackend`, paused time.

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep};

use crate::common::workers::UntilCancelled;

const TTL: Duration = Duration::from_secs(30);

fn runtime() -> (LeaseRuntime, MemoryBackend) {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    (LeaseRuntime::new(client), backend)
}

/// A try: no wait for a holder.
fn try_request(client: &LeaseClient) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("report").unwrap(),
        ResourceDigest::of("nightly"),
        client.new_attempt("run").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap()
}

/// The bound on a settled answer after Redis answers again: the try under way (its reply
/// still lost: a command timeout), the pause after it, one more try.
fn answer_bound(client: &LeaseClient) -> Duration {
    client.settings().command_timeout * 2 + Duration::from_millis(100)
}

#[tokio::test(start_paused = true)]
async fn run_under_lease_replays_a_lost_acquisition_and_runs_the_work_under_the_lease_it_took() {
    let (rt, backend) = runtime();
    let request = try_request(rt.client());
    backend.set_fault(Some(MemoryFault::LoseReply));
    let running = tokio::spawn({
        let rt = rt.clone();
        let request = request.clone();
        async move {
            rt.run_under_lease(
                &request,
                CancelPolicy::Kill,
                |ctx| async move { ctx.token() },
            )
            .await
        }
    });
    sleep(Duration::from_secs(5)).await;
    assert_eq!(
        backend.held_leases(),
        1,
        "the lost acquisition took the lease"
    );
    assert!(
        !running.is_finished(),
        "the attempt was dropped unsettled while it held the lease"
    );
    backend.set_fault(None);
    let resumed = Instant::now();
    let outcome = running.await.unwrap().unwrap();
    let took = resumed.elapsed();
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("the replay did not find the lease its attempt took: {outcome:?}");
    };
    assert_eq!(
        output,
        Some(report.token),
        "the work ran under the replayed lease"
    );
    assert!(
        took <= answer_bound(rt.client()),
        "ran {took:?} after Redis answered again"
    );
    assert_eq!(backend.held_leases(), 0, "released when the work ended");
    println!(
        "measured: a lost acquisition replayed → the work ran {took:?} after the fault cleared"
    );
}

#[tokio::test(start_paused = true)]
async fn spawn_under_lease_replays_a_lost_acquisition_and_starts_the_worker_under_it() {
    let (rt, backend) = runtime();
    let request = try_request(rt.client());
    backend.set_fault(Some(MemoryFault::LoseReply));
    let spawning = tokio::spawn({
        let rt = rt.clone();
        let request = request.clone();
        async move {
            rt.spawn_under_lease(&request, UntilCancelled, |_ctx| (), CancelPolicy::Kill)
                .await
        }
    });
    sleep(Duration::from_secs(5)).await;
    assert!(!spawning.is_finished(), "the attempt was dropped unsettled");
    backend.set_fault(None);
    let SpawnOutcome::Started(job) = spawning.await.unwrap().unwrap() else {
        panic!("the replay did not find the lease its attempt took");
    };
    assert_eq!(backend.held_leases(), 1, "one lease: the replayed one");
    let summary = rt.shutdown(Duration::from_secs(5)).await;
    assert_eq!(summary.left, 0);
    drop(job);
    assert_eq!(backend.held_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_settled_attempt_that_did_not_take_the_lease_answers_as_it_found_it() {
    let (rt, backend) = runtime();
    let holder = try_request(rt.client());
    let held = rt.client().try_acquire(&holder).await.unwrap();
    assert!(matches!(held, AcquireOutcome::Acquired(_)), "{held:?}");
    // Requests are lost on the way: nothing this attempt sends runs until Redis answers.
    backend.set_fault(Some(MemoryFault::LoseRequest));
    let request = try_request(rt.client());
    let running = tokio::spawn({
        let rt = rt.clone();
        async move {
            rt.run_under_lease(&request, CancelPolicy::Kill, |_ctx| async {})
                .await
        }
    });
    sleep(Duration::from_secs(2)).await;
    backend.set_fault(None);
    match running.await.unwrap().unwrap() {
        RunOutcome::NotAcquired(AcquireOutcome::Contended { .. }) => {}
        other => panic!("expected the holder's lease to be named: {other:?}"),
    }
    assert_eq!(backend.held_leases(), 1, "the holder's lease, untouched");
}

#[tokio::test(start_paused = true)]
async fn an_attempt_unanswered_for_a_ttl_past_its_wait_is_given_up_by_a_release() {
    let (rt, backend) = runtime();
    let wait = Duration::from_secs(10);
    let request = LeaseRequest::builder(
        Purpose::new("report").unwrap(),
        ResourceDigest::of("nightly"),
        rt.client().new_attempt("run").unwrap(),
    )
    .ttl(TTL)
    .wait_timeout(wait)
    .build()
    .unwrap();
    // Every call runs and its reply is lost — the replays too: once the first one's grant
    // expired (a TTL in), the next replay takes the lease again.
    backend.set_fault(Some(MemoryFault::LoseReply));
    let started = Instant::now();
    let outcome = rt
        .run_under_lease(&request, CancelPolicy::Kill, |_ctx| async {})
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        matches!(
            outcome,
            RunOutcome::NotAcquired(AcquireOutcome::Indeterminate { .. })
        ),
        "{outcome:?}"
    );
    let bound = wait + TTL + answer_bound(rt.client()) + Duration::from_secs(1);
    assert!(
        took >= wait + TTL && took <= bound,
        "gave up after {took:?}: settling lasts the TTL (at most {bound:?})"
    );
    backend.set_fault(None);
    assert_eq!(
        backend.held_leases(),
        0,
        "the give-up's release ran: no lease left held by a replay"
    );
}

/// On a real redis-server that stops answering for less than a TTL: the try ends
/// `Indeterminate` and Redis runs it when it resumes, taking the lease unanswered. The
/// replay finds it, and the work runs within a command timeout of the resume — instead of
/// the lease sitting a TTL with nobody working under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_paused_then_resumed_run_under_lease_runs_under_the_lease_its_attempt_took() {
    const TTL: Duration = Duration::from_secs(3);
    const PAUSE: Duration = Duration::from_secs(2);
    let server = crate::common::RedisServer::start();
    let client = LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let request = LeaseRequest::builder(
        Purpose::new("report").unwrap(),
        ResourceDigest::of("paused"),
        client.new_attempt("run").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap();
    // Connected first: a paused server accepts connections but answers nothing, so the
    // acquisition is sent on a live connection and waits there.
    assert_eq!(client.inspect(&request).await, InspectOutcome::Absent);
    server.pause();
    let running = tokio::spawn({
        let rt = rt.clone();
        let request = request.clone();
        async move {
            rt.run_under_lease(
                &request,
                CancelPolicy::Kill,
                |ctx| async move { ctx.token() },
            )
            .await
        }
    });
    sleep(PAUSE).await;
    assert!(!running.is_finished(), "the attempt was dropped unsettled");
    server.resume();
    let resumed = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("no answer within 10 s of the resume")
        .unwrap()
        .unwrap();
    let took = resumed.elapsed();
    println!(
        "measured: Redis paused {PAUSE:?} under a try → the work ran {took:?} after the resume (TTL {TTL:?})"
    );
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("the replay did not find the lease its attempt took: {outcome:?}");
    };
    assert_eq!(output, Some(report.token));
    assert!(took <= TTL / 3, "the work ran {took:?} after the resume");
    assert_eq!(
        client.inspect(&request).await,
        InspectOutcome::Absent,
        "released"
    );
}
