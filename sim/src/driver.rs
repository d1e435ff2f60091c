//! Runs one schedule: the clients' runtimes over one in-memory store, the schedule's steps
//! at their instants. Without a pause every client runs on one current-thread tokio
//! runtime with the clock paused; a schedule that pauses a client gives each a runtime of
//! its own, driven in lock-step ([`crate::lockstep`]).

use std::future::Future;
use std::time::Duration;

use leasehold::__simulation::{self, Bugs};
use leasehold::ractor::{Actor as _, ActorRef};
use leasehold::runtime::{
    CancelPolicy, LeaseRuntime, RunOutcome, RuntimeError, SpawnOutcome, SupervisorConfig,
};
use leasehold::{
    AcquireOutcome, LeaseClient, LeaseKeys, LeaseRequest, LeaseSettings, MemoryBackend,
    MemoryFault, Purpose, ResourceDigest, ResourceHolder,
};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt as _, SeedableRng as _};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::{Event, What};
use crate::schedule::{Action, CLIENTS, Fault, HORIZON, PERMITS, Schedule, TTL};
use crate::workers::{self, Holder, HolderMsg, Job, JobArgs, Shared, Term, TermArgs};

/// How often an observer reads the supervised resource besides the release notices.
const OBSERVE_POLL: Duration = Duration::from_millis(500);

/// A drain's grace, mid-run and at the end.
const GRACE: Duration = Duration::from_secs(2);

/// The history of `schedule` run with `bugs` on.
pub fn run(schedule: &Schedule, bugs: Bugs) -> Vec<Event> {
    if schedule.pauses() {
        return crate::lockstep::run(schedule, bugs);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    __simulation::set_bugs(bugs);
    __simulation::seed_jitter(Some(schedule.seed));
    let events = runtime.block_on(simulate(schedule.clone(), Places::Together));
    __simulation::set_bugs(Bugs::default());
    __simulation::seed_jitter(None);
    __simulation::set_grid_origin(None);
    events
}

/// Where each client's tasks run.
#[derive(Debug, Clone)]
pub(crate) enum Places {
    /// All on the runtime that runs the schedule.
    Together,
    /// Each client on a runtime of its own (by client).
    Apart(Vec<Handle>),
}

impl Places {
    /// Runs `work` as a task of client `c`.
    fn spawn<F>(&self, c: usize, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Places::Together => tokio::spawn(work),
            Places::Apart(handles) => handles[c].spawn(work),
        }
    }

    /// Runs `work` on client `c`'s runtime and waits for it: here when the clients run
    /// together, so that their histories are those of runs before pauses were simulated.
    async fn on<F>(&self, c: usize, work: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Places::Together => work.await,
            Places::Apart(handles) => handles[c]
                .spawn(work)
                .await
                .expect("a client's start does not panic"),
        }
    }
}

fn purpose(resource: usize) -> Purpose {
    Purpose::new(["leader", "pool"][resource]).expect("a valid purpose")
}

fn digest(resource: usize) -> ResourceDigest {
    ResourceDigest::of(["service", "workers"][resource])
}

fn request(client: &LeaseClient, resource: usize, op: &str) -> LeaseRequest {
    LeaseRequest::builder(
        purpose(resource),
        digest(resource),
        client.new_attempt(op).expect("an attempt"),
    )
    .ttl(TTL)
    .permits(PERMITS[resource] as u32)
    .wait_timeout(Duration::from_secs(1))
    .build()
    .expect("a valid request")
}

/// The key of `resource`'s lease, or of one of its slots.
fn key(client: &LeaseClient, resource: usize, slot: u16) -> LeaseKeys {
    let keys = client.keys(&purpose(resource), &digest(resource));
    match PERMITS[resource] {
        1 => keys,
        permits => keys.counted(permits as u16).for_slot(slot),
    }
}

struct Client {
    runtime: LeaseRuntime,
    connection: MemoryBackend,
    drained: bool,
}

/// Client `c`: its supervisor, its loop of jobs and its observer started, on its runtime.
async fn start_client(
    schedule: Schedule,
    shared: Shared,
    store: MemoryBackend,
    c: usize,
) -> Client {
    let connection = store.connection();
    let settings = LeaseSettings::default();
    let client = LeaseClient::new(connection.clone(), settings).expect("a client");
    let runtime = LeaseRuntime::new(client.clone());
    let policy = policy(schedule.kill[c]);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(schedule.job_seed(c));
    let reaction = Duration::from_millis(rng.random_range(0..400));
    let term_shared = shared.clone();
    runtime
        .supervise(
            request(&client, 0, &format!("leader-{c}")),
            move |ctx| {
                let args = TermArgs {
                    shared: term_shared.clone(),
                    ctx,
                    client: c,
                    reaction,
                };
                (Term, args)
            },
            policy,
            SupervisorConfig::backoff(Duration::from_millis(50), Duration::from_millis(500)),
        )
        .await
        .expect("a supervisor");
    tokio::spawn(jobs(runtime.clone(), shared.clone(), c, policy, rng));
    tokio::spawn(observe(client.clone(), shared, c));
    Client {
        runtime,
        connection,
        drained: false,
    }
}

/// The run: the clients started, the schedule's steps taken at their instants, then the
/// end; its history.
pub(crate) async fn simulate(schedule: Schedule, places: Places) -> Vec<Event> {
    let shared = Shared::default();
    shared.recorder.start();
    let start = Instant::now();
    if let Places::Together = places {
        __simulation::set_grid_origin(Some(start));
    }
    let store = MemoryBackend::new();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let started = start_client(schedule.clone(), shared.clone(), store.clone(), c);
        clients.push(places.on(c, started).await);
    }
    for step in &schedule.steps {
        tokio::time::sleep_until(start + step.at).await;
        take_step(&step.action, &store, &mut clients, &shared, &places);
    }
    finish(start, &store, &clients, &shared, &places).await
}

/// One step of the schedule, now.
fn take_step(
    action: &Action,
    store: &MemoryBackend,
    clients: &mut [Client],
    shared: &Shared,
    places: &Places,
) {
    let rec = &shared.recorder;
    match action {
        Action::Fault { client, fault } => {
            let injected = Some(memory_fault(*fault));
            match client {
                Some(c) => clients[*c].connection.set_connection_fault(injected),
                None => store.set_fault(injected),
            }
            rec.record(What::Fault {
                client: *client,
                fault: format!("{fault:?}"),
            });
        }
        Action::Heal {
            client,
            outage_over,
        } => {
            match client {
                Some(c) => clients[*c].connection.set_connection_fault(None),
                None => store.set_fault(None),
            }
            rec.record(What::Healed { client: *client });
            if *outage_over {
                rec.record(What::OutageOver);
            }
        }
        Action::Delete { resource, slot } => {
            let keys = key(clients[0].runtime.client(), *resource, *slot);
            store.delete(&keys);
            rec.record(What::Deleted {
                key: Some((*resource, *slot)),
            });
        }
        Action::Restart => {
            for (resource, &permits) in PERMITS.iter().enumerate() {
                for slot in 0..permits as u16 {
                    store.delete(&key(clients[0].runtime.client(), resource, slot));
                }
            }
            rec.record(What::Deleted { key: None });
        }
        Action::Drain { client } => {
            let c = &mut clients[*client];
            if !c.drained {
                c.drained = true;
                rec.record(What::DrainBegan { client: *client });
                let (runtime, rec, client) = (c.runtime.clone(), rec.clone(), *client);
                places.spawn(client, async move {
                    runtime.shutdown(GRACE).await;
                    let held = runtime.held();
                    rec.record(What::DrainEnded {
                        client,
                        held,
                        keys_left: None,
                    });
                });
            }
        }
        // The driver of the clients' runtimes stops and resumes the client's (the
        // schedule says when); here it is recorded.
        Action::Pause { client } => rec.record(What::Paused { client: *client }),
        Action::Resume { client } => rec.record(What::Resumed { client: *client }),
    }
}

/// The end: every fault cleared, the leases settled, every runtime drained; then nothing
/// may be held and no key left.
async fn finish(
    start: Instant,
    store: &MemoryBackend,
    clients: &[Client],
    shared: &Shared,
    places: &Places,
) -> Vec<Event> {
    tokio::time::sleep_until(start + HORIZON).await;
    store.set_fault(None);
    for c in clients {
        c.connection.set_connection_fault(None);
    }
    shared.recorder.record(What::Healed { client: None });
    tokio::time::sleep(TTL * 2).await;
    let mut drains = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        if !c.drained {
            shared.recorder.record(What::DrainBegan { client: i });
        }
        let runtime = c.runtime.clone();
        drains.push(places.spawn(i, async move {
            runtime.shutdown(GRACE).await;
        }));
    }
    for drain in drains {
        let _ = drain.await;
    }
    let keys_left = store.held_leases();
    for (i, c) in clients.iter().enumerate() {
        shared.recorder.record(What::DrainEnded {
            client: i,
            held: c.runtime.held(),
            keys_left: Some(keys_left),
        });
    }
    shared.recorder.events()
}

fn policy(kill: bool) -> CancelPolicy {
    if kill {
        CancelPolicy::Kill
    } else {
        CancelPolicy::NotifyOnly
    }
}

fn memory_fault(fault: Fault) -> MemoryFault {
    match fault {
        Fault::Unavailable => MemoryFault::Unavailable,
        Fault::LoseReply => MemoryFault::LoseReply,
        Fault::LoseRequest => MemoryFault::LoseRequest,
        Fault::Slow(d) => MemoryFault::Slow(d),
    }
}

/// Client `c`'s observer of the supervised resource: each holder it reports, recorded.
async fn observe(client: LeaseClient, shared: Shared, c: usize) {
    let request = request(&client, 0, &format!("observer-{c}"));
    let Ok(mut observer) = client.observe(&request, OBSERVE_POLL) else {
        return;
    };
    loop {
        let token = match observer.changed().await {
            ResourceHolder::Held { token, .. } => Some(token.get()),
            ResourceHolder::Free => None,
            _ => continue,
        };
        shared.recorder.record(What::Observed { client: c, token });
    }
}

/// Client `c`'s loop of jobs on resource 1, until its runtime drains.
async fn jobs(
    runtime: LeaseRuntime,
    shared: Shared,
    c: usize,
    policy: CancelPolicy,
    mut rng: Xoshiro256PlusPlus,
) {
    // The client's long-running worker, to which one job in three is attached.
    let mut holder = None;
    jobs_on(&runtime, &shared, c, policy, &mut rng, &mut holder).await;
    if let Some(holder) = holder {
        holder.stop(None);
    }
}

/// The client's holder: the one alive, or a new one if it was killed (a lease it did not
/// release in time, under `CancelPolicy::Kill`) or never started.
async fn alive_holder(
    holder: &mut Option<ActorRef<HolderMsg>>,
    shared: &Shared,
    c: usize,
) -> Option<ActorRef<HolderMsg>> {
    use leasehold::ractor::ActorStatus;
    let dead = holder
        .as_ref()
        .is_none_or(|h| matches!(h.get_status(), ActorStatus::Stopping | ActorStatus::Stopped));
    if dead {
        *holder = Holder::spawn(None, Holder, (shared.clone(), c))
            .await
            .ok()
            .map(|(actor, _)| actor);
    }
    holder.clone()
}

async fn jobs_on(
    runtime: &LeaseRuntime,
    shared: &Shared,
    c: usize,
    policy: CancelPolicy,
    rng: &mut Xoshiro256PlusPlus,
    holder: &mut Option<ActorRef<HolderMsg>>,
) {
    for n in 0.. {
        let work = Duration::from_millis(rng.random_range(100..6_000));
        let reaction = Duration::from_millis(rng.random_range(0..400));
        let pause = Duration::from_millis(rng.random_range(0..500));
        let request = request(runtime.client(), 1, &format!("job-{c}-{n}"));
        let shared = shared.clone();
        // One job in three a worker actor of its own (`spawn_under_lease`), waited for; one
        // in three a lease taken here and attached to the client's long-running holder.
        if n % 3 == 2 {
            let Some(holder) = alive_holder(holder, &shared, c).await else {
                return;
            };
            if !attached(runtime, &holder, &request, policy, work, reaction).await {
                return;
            }
        } else if n % 3 == 1 {
            let args = move |ctx| JobArgs {
                shared,
                ctx,
                client: c,
                work,
                reaction,
            };
            match runtime.spawn_under_lease(&request, Job, args, policy).await {
                Ok(SpawnOutcome::Started(job)) => {
                    job.wait().await;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        } else {
            let outcome = runtime
                .run_under_lease(&request, policy, move |ctx| {
                    workers::job(shared, ctx, c, work, reaction)
                })
                .await;
            match outcome {
                Ok(RunOutcome::Ran { .. } | RunOutcome::NotAcquired(_)) => {}
                Err(RuntimeError::ShuttingDown) | Err(_) => return,
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// One lease taken here (`acquire`) and attached to the client's holder, which works under
/// it and releases it; waited for until it ends. False once the runtime drains.
async fn attached(
    runtime: &LeaseRuntime,
    holder: &ActorRef<HolderMsg>,
    request: &LeaseRequest,
    policy: CancelPolicy,
    work: Duration,
    reaction: Duration,
) -> bool {
    let handle = match runtime.client().acquire(request).await {
        Ok(AcquireOutcome::Acquired(handle) | AcquireOutcome::Replayed(handle)) => handle,
        Ok(AcquireOutcome::Indeterminate { .. }) => {
            // It may have taken the lease: given up by its attempt, as the runtime does.
            let _ = runtime.client().release_attempt(request).await;
            return true;
        }
        Ok(_) => return true,
        Err(_) => return false,
    };
    match runtime.attach(handle, holder.clone(), None, policy).await {
        Ok(lease) => {
            let _ = holder.send_message(HolderMsg::Work {
                ctx: lease.context().clone(),
                lease: lease.lease_actor().clone(),
                work,
                reaction,
            });
            lease.wait().await;
            true
        }
        Err(RuntimeError::ShuttingDown) => false,
        Err(_) => true,
    }
}
