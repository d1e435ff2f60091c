//! Supervised job: two processes' worth of workers compete for one lease. The loser waits;
//! the winner's lease is deleted behind its back, its worker is cancelled (a typed
//! `LeaseCancelled` message) and stops; the waiter then takes over with a larger token.
//!
//! ```text
//! cargo run --example supervised_job                                          # in memory
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run --example supervised_job # Redis
//! ```

use std::time::Duration;

use leasehold::ractor::{Actor, ActorProcessingErr, ActorRef};
use leasehold::runtime::{CancelPolicy, LeaseCancelled, LeaseContext, LeaseRuntime, SpawnOutcome};
use leasehold::{
    LeaseClient, LeaseKeys, LeaseRequest, LeaseSettings, MemoryBackend, Purpose, ResourceDigest,
};

/// A job that writes one step every 200 ms, fenced, until it has done `steps`.
struct ReportJob;

enum JobMsg {
    Step,
    Cancelled(LeaseCancelled),
}

impl From<LeaseCancelled> for JobMsg {
    fn from(c: LeaseCancelled) -> Self {
        JobMsg::Cancelled(c)
    }
}

struct JobState {
    name: &'static str,
    ctx: LeaseContext,
    done: u32,
    steps: u32,
}

impl Actor for ReportJob {
    type Msg = JobMsg;
    type State = JobState;
    type Arguments = JobState;

    async fn pre_start(
        &self,
        myself: ActorRef<JobMsg>,
        state: JobState,
    ) -> Result<JobState, ActorProcessingErr> {
        println!(
            "[{}] started with fencing token {}",
            state.name,
            state.ctx.token()
        );
        myself.send_message(JobMsg::Step)?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<JobMsg>,
        msg: JobMsg,
        state: &mut JobState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            JobMsg::Step if state.ctx.is_cancelled() => {}
            JobMsg::Step => {
                state.done += 1;
                println!(
                    "[{}] step {} (fence {}, {:?} of validity left)",
                    state.name,
                    state.done,
                    state.ctx.token(),
                    state.ctx.remaining()
                );
                if state.done == state.steps {
                    myself.stop(None);
                } else {
                    myself.send_after(Duration::from_millis(200), || JobMsg::Step);
                }
            }
            JobMsg::Cancelled(c) => {
                println!(
                    "[{}] cancelled: {} (token {}, {:?} left) — stopping",
                    state.name, c.reason, c.token, c.remaining_validity
                );
                myself.stop(None);
            }
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One store, two "processes": on Redis, two clients; in memory, clones of one backend.
    let memory = MemoryBackend::new();
    let redis_url = std::env::var(leasehold::REDIS_URL_ENV).ok();
    let client = || match &redis_url {
        Some(url) => LeaseClient::redis(url, LeaseSettings::default()),
        None => LeaseClient::new(memory.clone(), LeaseSettings::default()),
    };
    let (a, b) = (LeaseRuntime::new(client()?), LeaseRuntime::new(client()?));
    let resource = ResourceDigest::of(b"nightly-report");
    let request = |rt: &LeaseRuntime, op: &str| {
        LeaseRequest::builder(
            Purpose::new("reports")?,
            resource,
            rt.client().new_attempt(op)?,
        )
        .ttl(Duration::from_secs(3))
        .wait_timeout(Duration::from_secs(10))
        .build()
    };

    let job = |name, steps| {
        move |ctx| JobState {
            name,
            ctx,
            done: 0,
            steps,
        }
    };
    let SpawnOutcome::Started(winner) = a
        .spawn_under_lease(
            &request(&a, "run-a")?,
            ReportJob,
            job("A", 100),
            CancelPolicy::Kill,
        )
        .await?
    else {
        return Err("A did not acquire".into());
    };
    let req_b = request(&b, "run-b")?;
    let waiter = tokio::spawn(async move {
        println!("[B] waiting for the lease…");
        b.spawn_under_lease(&req_b, ReportJob, job("B", 3), CancelPolicy::Kill)
            .await
    });

    tokio::time::sleep(Duration::from_millis(700)).await;
    let keys: LeaseKeys = a.client().keys(&Purpose::new("reports")?, &resource);
    println!("-- an operator deletes A's lease key behind its back --");
    match &redis_url {
        Some(url) => {
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let _: i64 = redis::cmd("DEL")
                .arg(keys.lease())
                .query_async(&mut conn)
                .await?;
        }
        None => {
            memory.delete(&keys);
        }
    }
    let report = winner.wait().await;
    println!(
        "[A] report: {} (release: {})",
        report.end.as_str(),
        report.release.as_str()
    );

    let SpawnOutcome::Started(next) = waiter.await?? else {
        return Err("B did not acquire".into());
    };
    assert!(
        next.token() > report.token,
        "the new holder's token is larger"
    );
    let report = next.wait().await;
    println!(
        "[B] report: {} (release: {})",
        report.end.as_str(),
        report.release.as_str()
    );
    Ok(())
}
