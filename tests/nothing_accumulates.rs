//! What a service leaves behind on a real redis-server over time: clients that waited and
//! were dropped, redeploys, and a frozen Redis must not leave pub/sub connections open. The
//! server's connections (`INFO clients`), this process's open descriptors (`/proc/self/fd`)
//! and its live tokio tasks come back to where they started.
//!
//! The tests here count process-wide resources, so they run one at a time, each on a
//! tokio runtime of its own made once the previous test's is gone.

mod common;

use std::time::Duration;

use common::RedisServer;
use common::backends::redis_settings;
use common::leases::acquired;
use common::workers::UntilCancelled;
use leasehold::runtime::*;
use leasehold::*;
use tokio::time::{Instant, sleep};

/// The tests count the whole process's descriptors — a tokio runtime's own included — and
/// tasks: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `test` on a two-worker tokio runtime made and dropped while no other test runs.
fn alone(test: impl Future<Output = ()>) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(test);
}

/// How long a count may take to come back (closing is asynchronous on both sides).
const SETTLE: Duration = Duration::from_secs(10);

/// What the process and the server hold at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footprint {
    /// Connections the server has open (`connected_clients`), the harness's own included.
    connections: usize,
    /// Descriptors this process has open.
    descriptors: usize,
    /// Tasks alive on this test's tokio runtime.
    tasks: usize,
}

fn footprint(server: &RedisServer) -> Footprint {
    let info: String = server.query(&["INFO", "clients"]);
    let connections = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients names connected_clients");
    let descriptors = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count();
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    Footprint {
        connections,
        descriptors,
        tasks,
    }
}

/// Polls the footprint every 20 ms until `ok` holds, for at most [`SETTLE`]; returns it.
async fn settled(server: &RedisServer, what: &str, ok: impl Fn(&Footprint) -> bool) -> Footprint {
    let deadline = Instant::now() + SETTLE;
    loop {
        let now = footprint(server);
        if ok(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {now:?} after {SETTLE:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

fn request(client: &LeaseClient, resource: &str, wait: Duration) -> LeaseRequest {
    client
        .request("accumulate", resource)
        .unwrap()
        .wait_timeout(wait)
        .build()
        .unwrap()
}

fn subscribed_channels(server: &RedisServer) -> usize {
    server.query::<Vec<String>>(&["PUBSUB", "CHANNELS"]).len()
}

/// Twenty clients, each holding a lease the next one waits for; every waiter listens on its
/// client's pub/sub connection, then gets its lease when the holder releases it. Then every
/// client is dropped: their connections, descriptors and tasks go with them.
#[test]
fn clients_that_waited_and_were_dropped_leave_no_connection_descriptor_or_task() {
    alone(clients_that_waited_and_were_dropped());
}

async fn clients_that_waited_and_were_dropped() {
    const CLIENTS: usize = 20;
    let server = RedisServer::start();
    let before = footprint(&server);

    let clients: Vec<LeaseClient> = (0..CLIENTS)
        .map(|_| LeaseClient::redis(&server.url(), redis_settings()).unwrap())
        .collect();
    let resource = |i: usize| format!("r{}", i % CLIENTS);
    let mut held = Vec::with_capacity(CLIENTS);
    for (i, client) in clients.iter().enumerate() {
        held.push(acquired(client, &request(client, &resource(i), Duration::ZERO)).await);
    }
    let waiting: Vec<_> = (clients.iter().enumerate())
        .map(|(i, client)| {
            let (client, req) = (client.clone(), request(client, &resource(i + 1), SETTLE));
            tokio::spawn(async move { client.acquire(&req).await.unwrap() })
        })
        .collect();
    let deadline = Instant::now() + SETTLE;
    while subscribed_channels(&server) < CLIENTS {
        assert!(Instant::now() < deadline, "the waiters never all listened");
        sleep(Duration::from_millis(10)).await;
    }
    let during = footprint(&server);
    for mut lease in held {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    for task in waiting {
        let mut lease = task.await.unwrap().into_handle().expect("acquired");
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    drop(clients);

    let after = settled(&server, "after every client was dropped", |now| {
        *now == before
    })
    .await;
    println!(
        "measured: {CLIENTS} clients that held and waited: before {before:?}, while waiting \
         {during:?}, after they were dropped {after:?}"
    );
}

/// Leases the redeployed service holds, each waited for by its successor.
const JOBS: usize = 20;
/// Resources the standing client observes: the leader and some jobs.
const OBSERVED: usize = 4;
/// Redeploys, and which of them happen while Redis was frozen.
const REDEPLOYS: usize = 6;
const FREEZE: Duration = Duration::from_millis(1500);

/// One deployment of the service: its own client (default settings), a leader-election
/// supervisor and a job under each of the [`JOBS`] leases.
struct Deployment {
    runtime: LeaseRuntime,
    leader: LeaseSupervisor,
    jobs: Vec<tokio::task::JoinHandle<SpawnOutcome<LeaseCancelled>>>,
}

impl Deployment {
    /// Starts, waiting for whatever the previous deployment still holds.
    async fn start(server: &RedisServer) -> Deployment {
        let client = LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap();
        let runtime = LeaseRuntime::new(client);
        let leader = runtime
            .supervise(
                request(runtime.client(), "leader", Duration::ZERO),
                |_| (UntilCancelled, ()),
                CancelPolicy::Kill,
                SupervisorConfig::default(),
            )
            .await
            .unwrap();
        let jobs = (0..JOBS)
            .map(|i| {
                let runtime = runtime.clone();
                let req = request(runtime.client(), &format!("job{i}"), SETTLE);
                tokio::spawn(async move {
                    let job = runtime
                        .spawn_under_lease(&req, UntilCancelled, |_| (), CancelPolicy::Kill)
                        .await;
                    job.unwrap()
                })
            })
            .collect();
        Deployment {
            runtime,
            leader,
            jobs,
        }
    }

    /// Waits until every job and the leader hold their leases.
    async fn holding(&mut self) {
        for job in std::mem::take(&mut self.jobs) {
            let outcome = job.await.unwrap();
            assert!(matches!(outcome, SpawnOutcome::Started(_)), "{outcome:?}");
        }
        let mut state = self.leader.watch();
        tokio::time::timeout(SETTLE, state.wait_for(|s| s.token().is_some()))
            .await
            .expect("the leader never took over")
            .unwrap();
    }

    /// The redeploy's drain; everything of this deployment is dropped.
    async fn stop(self) {
        let summary = self.runtime.shutdown(Duration::from_secs(5)).await;
        assert_eq!(summary.left, 0, "{summary:?}");
        let _ = self.leader.join().await;
    }
}

/// A service redeployed six times — each deployment waiting on its predecessor's leases
/// and leadership, which it takes over on the drain — while another client observes, and
/// twice with Redis frozen (SIGSTOP) for 1.5 s meanwhile. After every redeploy the
/// connections and descriptors are back to one deployment's worth; once everything is
/// dropped, to where they started, tasks included.
#[test]
fn redeploys_and_a_frozen_redis_keep_connections_descriptors_and_tasks_flat() {
    alone(redeploys_and_a_frozen_redis());
}

async fn redeploys_and_a_frozen_redis() {
    let server = RedisServer::start();
    let before = footprint(&server);
    let watcher = LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap();
    let purpose = Purpose::new("accumulate").unwrap();
    let observers: Vec<LeaseObserver> = std::iter::once("leader".to_owned())
        .chain((0..OBSERVED - 1).map(|i| format!("job{i}")))
        .map(|r| {
            let request = watcher
                .request(purpose.as_str(), r)
                .unwrap()
                .build()
                .unwrap();
            (watcher.observe(&request, Duration::from_secs(1))).unwrap()
        })
        .collect();

    let mut current = Deployment::start(&server).await;
    current.holding().await;
    let mut steady = Vec::with_capacity(REDEPLOYS);
    for redeploy in 1..=REDEPLOYS {
        let mut next = Deployment::start(&server).await;
        // Everyone listens: each job's and the leader's release channel, and the observed
        // resources' acquisition channels.
        let deadline = Instant::now() + SETTLE;
        while subscribed_channels(&server) < JOBS + 1 + OBSERVED {
            assert!(
                Instant::now() < deadline,
                "redeploy {redeploy}: never all listened"
            );
            sleep(Duration::from_millis(10)).await;
        }
        if redeploy % 3 == 2 {
            server.pause();
            sleep(FREEZE).await;
            server.resume();
        }
        current.stop().await;
        next.holding().await;
        current = next;
        // One deployment and the watcher, each a connection and at most one pub/sub
        // connection, and the harness's connection.
        let bound = |now: &Footprint| {
            now.connections <= before.connections + 4 && now.descriptors <= before.descriptors + 4
        };
        steady.push(settled(&server, &format!("after redeploy {redeploy}"), bound).await);
    }
    // Each redeploy's tasks are the next one's: the ended leases' leave none behind.
    let (first, last) = (steady[0].tasks, steady[REDEPLOYS - 1].tasks);
    assert!(last <= first + JOBS, "tasks grew from {first} to {last}");
    current.stop().await;
    drop((observers, watcher));
    let after = settled(&server, "after everything was dropped", |now| {
        *now == before
    })
    .await;
    println!(
        "measured: {REDEPLOYS} redeploys ({JOBS} jobs and a leader each; Redis frozen \
         twice for {FREEZE:?}): before {before:?}; after each redeploy \
         {:?}; after everything was dropped {after:?}",
        steady
            .iter()
            .map(|f| (f.connections, f.descriptors, f.tasks))
            .collect::<Vec<_>>()
    );
}
