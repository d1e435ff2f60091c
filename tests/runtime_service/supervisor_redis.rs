//! `LeaseSupervisor` as an actor of the application's tree on a real redis-server: a linked
//! supervisor failing or stopped by the application lets go of its lease at once, a follower
//! on default settings takes over when the leader stops, and a killed lease actor reports
//! the release that happened. (The same edges on `MemoryBackend` and paused time:
//! `supervisor`.)

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use ractor::{Actor, ActorStatus};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use crate::app::AppSupervisor;
use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::workers::{Deaf, TellsCancelled, UntilCancelled};
use crate::supervisor::{assert_ended_by_a_stop, next_term, redis_request};

/// On a real redis-server: `make` panicking fails the linked supervisor to the application,
/// and the lease taken for that term is released (the handle's drop), not left for its TTL —
/// another client waiting for it gets it at once.
#[tokio::test]
async fn on_redis_a_linked_supervisor_whose_make_panics_fails_to_the_application_and_lets_go() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let (tx, mut events) = mpsc::unbounded_channel();
    let (app, _) = Actor::spawn(None, AppSupervisor { filter: true }, tx)
        .await
        .unwrap();
    let supervisor = rt
        .supervise_linked(
            redis_request(&client, Duration::ZERO),
            |_| -> (UntilCancelled, ()) { panic!("the application's make failed") },
            CancelPolicy::Kill,
            SupervisorConfig::default(),
            app.get_cell(),
        )
        .await
        .unwrap();
    let (lease_end, event) = events.recv().await.unwrap();
    assert!(!lease_end, "{event}");
    assert!(event.contains("the application's make failed"), "{event}");
    assert_eq!(supervisor.join().await.terms, 0);
    let asked = std::time::Instant::now();
    let next = client
        .acquire(&redis_request(&client, Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        matches!(next, AcquireOutcome::Acquired(_)),
        "the lease was left held: {next:?}"
    );
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    println!("measured: the panicked term's lease taken by the next client after {waited:?}");
    app.stop(None);
}

/// Leader election on the defaults (settings and request: a 30 s TTL, no wait timeout): a
/// follower's supervisor listens for the leader's release notice while it waits, so when
/// the leader stops gracefully the follower holds the lease within milliseconds — not when
/// the TTL the leader's last renewal set would have run out. Five handovers, each side
/// leading in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_follower_on_defaults_takes_over_at_once_when_the_leader_stops() {
    const HANDOVERS: usize = 5;
    let server = RedisServer::start();
    let runtimes = [(); 2].map(|()| {
        LeaseRuntime::new(LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap())
    });
    let elect = |rt: &LeaseRuntime| {
        let request = rt
            .client()
            .request("leader", "scheduler")
            .unwrap()
            .build()
            .unwrap();
        let rt = rt.clone();
        async move {
            rt.supervise(
                request,
                |_| (UntilCancelled, ()),
                CancelPolicy::Kill,
                SupervisorConfig::default(),
            )
            .await
            .unwrap()
        }
    };
    let mut leader = elect(&runtimes[0]).await;
    next_term(&mut leader.watch(), None).await;
    let mut took = Vec::with_capacity(HANDOVERS);
    for round in 1..=HANDOVERS {
        let follower = elect(&runtimes[round % 2]).await;
        // The follower waits, listening: the lease's release channel is subscribed.
        let deadline = Instant::now() + Duration::from_secs(10);
        while server
            .query::<Vec<String>>(&["PUBSUB", "CHANNELS", "*:released"])
            .len()
            != 1
        {
            assert!(
                Instant::now() < deadline,
                "round {round}: the follower never listened"
            );
            sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*follower.watch().borrow(), SupervisorState::Acquiring);
        let stopped = Instant::now();
        let summary = leader.shutdown().await;
        assert_eq!(
            summary.last.map(|r| r.release),
            Some(ReleaseOutcome::Released)
        );
        next_term(&mut follower.watch(), None).await;
        took.push(stopped.elapsed());
        leader = follower;
    }
    let _ = leader.shutdown().await;
    println!(
        "measured: a follower on defaults took over after the leader's graceful stop in {took:?}"
    );
    for (round, took) in took.iter().enumerate() {
        // Without the notice it would wait for the leader's TTL (30 s).
        assert!(
            *took <= Duration::from_millis(500),
            "handover {}: {took:?}",
            round + 1
        );
    }
}

/// On a real redis-server: the application stopping ends the linked supervisor's term as a
/// stop does — the worker is sent `LeaseCancelled` with `Shutdown`, the release lands, the
/// summary counts the term — and the lease is free for the next client at once.
#[tokio::test]
async fn on_redis_stopping_the_application_tells_the_terms_worker_and_counts_the_term() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let (tx, _events) = mpsc::unbounded_channel();
    let (app, _) = Actor::spawn(None, AppSupervisor { filter: true }, tx)
        .await
        .unwrap();
    let (told_tx, mut told) = mpsc::unbounded_channel();
    let supervisor = rt
        .supervise_linked(
            redis_request(&client, Duration::ZERO),
            move |_| (TellsCancelled, told_tx.clone()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
            app.get_cell(),
        )
        .await
        .unwrap();
    let term = next_term(&mut supervisor.watch(), None).await;
    let stopped = std::time::Instant::now();
    app.stop(None);
    let summary = supervisor.join().await;
    println!(
        "measured: the application's stop ended the term, told and released, in {:?}",
        stopped.elapsed()
    );
    assert_ended_by_a_stop(&summary, &term, &mut told);
    let next = redis_request(&client, Duration::ZERO);
    assert_eq!(client.inspect(&next).await, InspectOutcome::Absent);
    assert_eq!(rt.held(), 0);
}

/// On a real redis-server: a lease actor killed from outside still releases its lease once
/// its worker stopped, and its report says so — not "indeterminate" while the release
/// landed.
#[tokio::test]
async fn on_redis_a_killed_lease_actors_report_carries_the_release_that_happened() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let req = redis_request(&client, Duration::ZERO);
    let SpawnOutcome::Started(job) = rt
        .spawn_under_lease(&req, Deaf, |_| (), CancelPolicy::Kill)
        .await
        .unwrap()
    else {
        panic!("the lease is free")
    };
    let worker = job.worker().clone();
    let killed = std::time::Instant::now();
    job.lease_actor().kill();
    let report = job.wait().await;
    println!(
        "measured: a killed lease actor reported its release {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(report.end, JobEnd::Aborted);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(worker.get_status(), ActorStatus::Stopped);
    assert_eq!(client.inspect(&req).await, InspectOutcome::Absent);
    assert_eq!(rt.held(), 0, "its place in the runtime was given back");
}

/// On a real redis-server that stops answering, a supervisor's acquisition ends
/// `Indeterminate` — and Redis runs it when it resumes: the lease is taken, unanswered.
/// The supervisor replays that attempt and leads within one renewal period of the
/// resume; a fresh attempt would find the lease held by nobody and wait out its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_paused_then_resumed_the_supervisor_leads_within_one_renew_period() {
    const TTL: Duration = Duration::from_secs(3);
    const PAUSE: Duration = Duration::from_secs(2);
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let request = LeaseRequest::builder(
        Purpose::new("leader").unwrap(),
        ResourceDigest::of("paused"),
        client.new_attempt("candidate").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap();
    // Connected first: a paused server accepts connections but answers nothing, so the
    // acquisition is sent on a live connection and waits there.
    assert_eq!(client.inspect(&request).await, InspectOutcome::Absent);
    server.pause();
    // Backoff bounded well inside a renewal period (TTL / 3), as the defaults (5 s) are
    // inside the default TTL's (10 s).
    let config = SupervisorConfig::backoff(Duration::from_millis(50), Duration::from_millis(300));
    let sup = rt
        .supervise(
            request,
            |_| (UntilCancelled, ()),
            CancelPolicy::Kill,
            config,
        )
        .await
        .unwrap();
    sleep(PAUSE).await;
    server.resume();
    let resumed = Instant::now();
    let mut watch = sup.watch();
    let held = tokio::time::timeout(Duration::from_secs(10), next_term(&mut watch, None))
        .await
        .expect("no term within 10 s of the resume");
    let took = resumed.elapsed();
    println!(
        "measured: Redis paused {PAUSE:?} under an acquisition → the term started {took:?} after the resume (TTL {TTL:?})"
    );
    assert!(
        took <= TTL / 3,
        "the term started {took:?} after the resume"
    );
    drop(held);
    let summary = sup.shutdown().await;
    assert_eq!(summary.terms, 1);
}
