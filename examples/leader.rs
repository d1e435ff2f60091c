//! Leader election: three candidates run a `LeaseSupervisor` each over one lease. One
//! leads; when it steps down, another takes over (woken by the release notice) with a
//! larger fencing token. An observer that holds nothing — a follower, a dashboard — sees
//! each new leader by the label it acquired with.
//!
//! ```text
//! cargo run --example leader                                          # in memory
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run --example leader # Redis
//! ```

use std::time::Duration;

use leasehold::ractor::{Actor, ActorProcessingErr, ActorRef};
use leasehold::runtime::{
    CancelPolicy, LeaseCancelled, LeaseRuntime, LeaseSupervisor, SupervisorConfig, SupervisorState,
};
use leasehold::{
    HolderLabel, LeaseClient, LeaseRequest, LeaseSettings, MemoryBackend, Purpose, ResourceDigest,
    ResourceHolder,
};

/// The leader's job: runs until its lease ends.
struct Lead;

impl Actor for Lead {
    type Msg = LeaseCancelled;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LeaseCancelled>,
        _: LeaseCancelled,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        myself.stop(None); // the term is over
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let memory = MemoryBackend::new();
    let redis_url = std::env::var(leasehold::REDIS_URL_ENV).ok();
    let connect = || match &redis_url {
        Some(url) => LeaseClient::redis(url, LeaseSettings::default()),
        None => LeaseClient::new(memory.clone(), LeaseSettings::default()),
    };
    let (purpose, resource) = (
        Purpose::new("leader")?,
        ResourceDigest::of(b"billing-scheduler"),
    );
    let observing = connect()?;
    let watching =
        LeaseRequest::builder(purpose.clone(), resource, observing.new_attempt("observe")?)
            .build()?;
    let mut observer = observing.observe(&watching, Duration::from_secs(1))?;
    tokio::spawn(async move {
        loop {
            if let ResourceHolder::Held {
                holder: Some(holder),
                token,
                ..
            } = observer.changed().await
            {
                println!("observer: the leader is {holder} (fencing token {token})");
            }
        }
    });
    let mut candidates: Vec<(&str, LeaseSupervisor)> = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let client = connect()?;
        let runtime = LeaseRuntime::new(client);
        let request = LeaseRequest::builder(
            purpose.clone(),
            resource,
            runtime.client().new_attempt(name)?,
        )
        .holder(HolderLabel::new(name)?)
        .ttl(Duration::from_secs(2))
        .wait_timeout(Duration::from_secs(30))
        .build()?;
        let supervisor = runtime
            .supervise(
                request,
                |_ctx| (Lead, ()),
                CancelPolicy::Kill,
                SupervisorConfig::default(),
            )
            .await?;
        let mut watch = supervisor.watch();
        tokio::spawn(async move {
            while watch.changed().await.is_ok() {
                if let Some(token) = watch.borrow().token() {
                    println!("{name} leads (fencing token {token})");
                }
            }
        });
        candidates.push((name, supervisor));
    }

    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let leader = candidates
            .iter()
            .position(|(_, s)| matches!(*s.watch().borrow(), SupervisorState::Holding { .. }));
        if let Some(i) = leader {
            let (name, supervisor) = candidates.remove(i);
            println!("{name} steps down");
            let summary = supervisor.shutdown().await;
            if let Some(last) = &summary.last {
                println!("{name}'s term ended: release {}", last.release.as_str());
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (_, supervisor) in candidates {
        let _ = supervisor.shutdown().await;
    }
    Ok(())
}
