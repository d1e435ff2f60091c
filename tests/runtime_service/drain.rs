//! `LeaseRuntime::shutdown`: the drain of a service being redeployed. In memory under paused
//! time (every kind of job, workers that do not listen, an acquisition in flight, a
//! supervisor), and on a real redis-server (a thousand leases, taken over by another
//! runtime's waiters as the drain releases them).

use std::time::Duration;

use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::workers::{Deaf, UntilCancelled};
use leasehold::runtime::*;
use leasehold::*;
use ractor::Actor;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(5);

fn memory_runtime() -> LeaseRuntime {
    let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default()).unwrap();
    LeaseRuntime::new(client)
}

fn request(client: &LeaseClient, resource: &str, wait: Duration) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("drain").unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt("op").unwrap(),
    )
    .ttl(TTL)
    .wait_timeout(wait)
    .build()
    .unwrap()
}

const SHUT_DOWN: JobEnd = JobEnd::Cancelled {
    reason: CancelReason::Shutdown,
    killed: false,
};

async fn spawn<W>(
    rt: &LeaseRuntime,
    resource: &str,
    worker: W,
    policy: CancelPolicy,
) -> LeaseJob<W::Msg>
where
    W: Actor<Arguments = ()>,
    W::Msg: From<LeaseCancelled>,
{
    rt.spawn_under_lease(
        &request(rt.client(), resource, Duration::ZERO),
        worker,
        |_| (),
        policy,
    )
    .await
    .unwrap()
    .started()
    .unwrap()
}

async fn holder_of(client: &LeaseClient, resource: &str) -> Option<FencingToken> {
    let req = request(client, resource, Duration::ZERO);
    match client.inspect(&req).await {
        InspectOutcome::HeldByOther { token, .. } => Some(token),
        InspectOutcome::Absent => None,
        other => panic!("inspect: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_ends_every_kind_of_job_releases_every_lease_and_refuses_new_ones() {
    let rt = memory_runtime();
    let client = rt.client().clone();
    let job = spawn(&rt, "actor", UntilCancelled, CancelPolicy::Kill).await;
    let task_rt = rt.clone();
    let task = tokio::spawn(async move {
        let req = request(task_rt.client(), "task", Duration::ZERO);
        task_rt
            .run_under_lease(&req, CancelPolicy::Kill, |ctx| async move {
                ctx.cancelled().await;
            })
            .await
    });
    let (attached_worker, _) = Actor::spawn(None, Deaf, ()).await.unwrap();
    let handle = client
        .try_acquire(&request(&client, "attached", Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let attached = rt
        .attach(handle, attached_worker.clone(), None, CancelPolicy::Kill)
        .await
        .unwrap();
    let releaser = tokio::spawn(async move {
        attached.context().cancelled().await;
        attached.release().await
    });
    tokio::time::sleep(TTL).await; // Renewed meanwhile: every lease is well inside its life.
    assert_eq!(rt.held(), 3);

    let summary = rt.shutdown(GRACE).await;
    assert_eq!(
        (summary.leases, summary.ended, summary.stopped, summary.left),
        (3, 3, 0, 0),
        "{summary:?}"
    );
    assert!(summary.took < GRACE, "{summary:?}");
    let report = job.wait().await;
    assert_eq!(
        (report.end, report.release),
        (SHUT_DOWN, ReleaseOutcome::Released)
    );
    let RunOutcome::Ran { output, report } = task.await.unwrap().unwrap() else {
        panic!("the task's lease was acquired");
    };
    assert_eq!(output, Some(()), "the work ended on its own");
    assert_eq!(
        (report.end, report.release),
        (SHUT_DOWN, ReleaseOutcome::Released)
    );
    let report = releaser.await.unwrap();
    assert_eq!(
        (report.end, report.release),
        (SHUT_DOWN, ReleaseOutcome::Released)
    );
    assert_eq!(attached_worker.get_status(), ractor::ActorStatus::Running);
    for resource in ["actor", "task", "attached"] {
        assert_eq!(
            holder_of(&client, resource).await,
            None,
            "{resource} is still held"
        );
    }

    // Refused before any I/O, on every clone.
    assert!(rt.is_shutting_down() && rt.clone().is_shutting_down());
    let again = rt
        .spawn_under_lease(
            &request(&client, "late", Duration::ZERO),
            UntilCancelled,
            |_| (),
            CancelPolicy::Kill,
        )
        .await;
    assert!(
        matches!(again, Err(RuntimeError::ShuttingDown)),
        "{again:?}"
    );
    let again = rt
        .run_under_lease(
            &request(&client, "late", Duration::ZERO),
            CancelPolicy::Kill,
            |_| async {},
        )
        .await;
    assert!(
        matches!(again, Err(RuntimeError::ShuttingDown)),
        "{again:?}"
    );
    assert_eq!(holder_of(&client, "late").await, None);
    attached_worker.stop(None);
}

#[tokio::test(start_paused = true)]
async fn work_that_does_not_stop_is_stopped_at_the_deadline_under_kill_and_left_under_notify_only()
{
    let rt = memory_runtime();
    let client = rt.client().clone();
    let killed = spawn(&rt, "kill", Deaf, CancelPolicy::Kill).await;
    let notified = spawn(&rt, "notify", Deaf, CancelPolicy::NotifyOnly).await;
    let killed = tokio::spawn(async move {
        let report = killed.wait().await;
        (Instant::now(), report)
    });
    let began = Instant::now();
    let summary = rt.shutdown(GRACE).await;
    assert_eq!(
        (summary.leases, summary.ended, summary.stopped, summary.left),
        (2, 0, 1, 1),
        "{summary:?}"
    );
    assert_eq!(
        summary.took, GRACE,
        "it waits for the one left: {summary:?}"
    );
    let (ended_at, report) = killed.await.unwrap();
    assert_eq!(
        report.end,
        JobEnd::Cancelled {
            reason: CancelReason::Shutdown,
            killed: true
        }
    );
    assert_eq!(report.release, ReleaseOutcome::Released);
    // Stopped with room left for a release with its retries: three command timeouts and
    // two pauses (700 ms) before the grace is over.
    assert_eq!(ended_at - began, GRACE - Duration::from_millis(700));
    // NotifyOnly: the worker runs on, so its lease is not released under it.
    assert!(holder_of(&client, "notify").await.is_some());
    notified.worker().stop(None);
    let report = notified.wait().await;
    assert_eq!(report.end, SHUT_DOWN);
    assert_eq!(report.release, ReleaseOutcome::Released);
    assert_eq!(rt.held(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_waiting_when_the_drain_begins_gives_up_and_holds_nothing() {
    let rt = memory_runtime();
    let client = rt.client().clone();
    let mut holder = client
        .try_acquire(&request(&client, "busy", Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let waiting_rt = rt.clone();
    let waiter = tokio::spawn(async move {
        let req = request(waiting_rt.client(), "busy", Duration::from_secs(60));
        waiting_rt
            .run_under_lease(&req, CancelPolicy::Kill, |_| async {
                panic!("must not run")
            })
            .await
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rt.held(), 1, "the waiting acquisition counts");
    let began = Instant::now();
    let summary = rt.shutdown(GRACE).await;
    assert_eq!(
        (summary.leases, summary.ended, summary.left),
        (1, 1, 0),
        "{summary:?}"
    );
    let outcome = waiter.await.unwrap();
    assert!(
        matches!(outcome, Err(RuntimeError::ShuttingDown)),
        "{outcome:?}"
    );
    assert!(
        Instant::now() - began < Duration::from_secs(1),
        "gave up late"
    );
    assert_eq!(holder_of(&client, "busy").await, Some(holder.token()));
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
}

/// The release that gives up an acquisition in flight may itself go unanswered: the
/// acquisition may have taken the lease, which then stays held until its TTL ends. The
/// drain's summary counts it in `left` (a warning says so) instead of nowhere.
#[tokio::test(start_paused = true)]
async fn an_acquisition_given_up_whose_release_goes_unanswered_is_counted_left() {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    let rt = LeaseRuntime::new(client.clone());
    let mut holder = client
        .try_acquire(&request(&client, "busy", Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let waiting_rt = rt.clone();
    let waiter = tokio::spawn(async move {
        let req = request(waiting_rt.client(), "busy", Duration::from_secs(60));
        waiting_rt
            .run_under_lease(&req, CancelPolicy::Kill, |_| async {
                panic!("must not run")
            })
            .await
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    // From here nothing reaches the store: the give-up's release goes unanswered.
    backend.set_fault(Some(MemoryFault::LoseRequest));
    let summary = rt.shutdown(GRACE).await;
    assert_eq!(
        (summary.leases, summary.ended, summary.stopped, summary.left),
        (1, 0, 0, 1),
        "the unconfirmed give-up is left: {summary:?}"
    );
    let outcome = waiter.await.unwrap();
    assert!(
        matches!(outcome, Err(RuntimeError::ShuttingDown)),
        "{outcome:?}"
    );
    backend.set_fault(None);
    assert_eq!(holder.release().await, ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn a_supervisor_on_a_drained_runtime_ends_after_its_term() {
    let rt = memory_runtime();
    let request = request(rt.client(), "leader", Duration::ZERO);
    let supervisor = rt
        .supervise(
            request,
            |_| (UntilCancelled, ()),
            CancelPolicy::Kill,
            SupervisorConfig::default(),
        )
        .await
        .unwrap();
    let mut state = supervisor.watch();
    state
        .wait_for(|s| matches!(s, SupervisorState::Holding { .. }))
        .await
        .unwrap();
    let summary = rt.shutdown(GRACE).await;
    assert_eq!((summary.leases, summary.ended), (1, 1), "{summary:?}");
    state
        .wait_for(|s| *s == SupervisorState::Stopped)
        .await
        .unwrap();
    let summary = supervisor.join().await;
    assert_eq!(summary.terms, 1);
    assert_eq!(summary.last.map(|r| r.end), Some(SHUT_DOWN));
    assert_eq!(rt.held(), 0);
}

/// Waits until `waiters` are blocked and listen: their release channels are subscribed.
async fn listening(server: &RedisServer, waiters: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribed = server
            .query::<Vec<String>>(&["PUBSUB", "CHANNELS", "*:released"])
            .len();
        if subscribed == waiters {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after 10 s, {subscribed} of {waiters} waiters listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The redeploy: a thousand leases on a real redis-server, another client's waiters (on
/// the default settings: a 200 ms command timeout) blocked on each. Every waiter's
/// subscription is confirmed before the drain — they share one pub/sub connection — and
/// each takes its lease over within a second of the drain's start, not after the 30 s TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_leases_drained_on_redis_are_taken_over_by_the_successor_at_once() {
    const LEASES: usize = 1_000;
    let server = RedisServer::start();
    let old = LeaseRuntime::new(LeaseClient::redis(&server.url(), redis_settings()).unwrap());
    let new = LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap();
    let resource = |i: usize| format!("r{i}");
    let mut jobs = Vec::with_capacity(LEASES);
    for i in 0..LEASES {
        let job = spawn(&old, &resource(i), UntilCancelled, CancelPolicy::Kill).await;
        jobs.push(tokio::spawn(async move {
            let report = job.wait().await;
            (Instant::now(), report)
        }));
    }
    let waiters: Vec<_> = (0..LEASES)
        .map(|i| {
            let new = new.clone();
            let req = request(&new, &resource(i), Duration::from_secs(20));
            tokio::spawn(async move {
                let outcome = new.acquire(&req).await.unwrap();
                (Instant::now(), outcome)
            })
        })
        .collect();
    listening(&server, LEASES).await;
    let listening: String = server.query(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    assert_eq!(
        listening.lines().count(),
        1,
        "one pub/sub connection: {listening}"
    );

    let began = Instant::now();
    let summary = old.shutdown(Duration::from_secs(10)).await;
    assert_eq!(
        (summary.leases, summary.ended, summary.left),
        (LEASES, LEASES, 0),
        "{summary:?}"
    );
    let mut took = Vec::with_capacity(LEASES);
    let mut after_release = Vec::with_capacity(LEASES);
    for (job, waiter) in jobs.into_iter().zip(waiters) {
        let (released_at, report) = job.await.unwrap();
        assert_eq!(
            (report.end, report.release),
            (SHUT_DOWN, ReleaseOutcome::Released)
        );
        let (at, outcome) = waiter.await.unwrap();
        // Replayed: a try whose reply was late had landed, and the next one found it.
        assert!(
            matches!(
                outcome,
                AcquireOutcome::Acquired(_) | AcquireOutcome::Replayed(_)
            ),
            "{outcome:?}"
        );
        took.push(at - began);
        after_release.push(at.saturating_duration_since(released_at));
    }
    took.sort();
    after_release.sort();
    let (p50, p99, max) = (took[LEASES / 2], took[LEASES * 99 / 100], took[LEASES - 1]);
    println!(
        "measured: drain of {LEASES} leases took {:?}; takeover after the drain began: \
         p50 {p50:?}, p99 {p99:?}, max {max:?}; after the lease's release was reported: \
         p50 {:?}, p99 {:?}, max {:?} (TTL {TTL:?})",
        summary.took,
        after_release[LEASES / 2],
        after_release[LEASES * 99 / 100],
        after_release[LEASES - 1],
    );
    // Without the notices the successors would wait for the TTL (30 s).
    assert!(
        max < Duration::from_secs(1),
        "the last takeover took {max:?} after the drain began"
    );
}
