//! Drain on SIGTERM: a service holds leases for its partitions; when it is told to stop (a
//! redeploy sends SIGTERM), `LeaseRuntime::shutdown` cancels every job, waits for them,
//! and releases every lease — so the successor, already waiting on each partition, takes
//! over at once instead of after the TTL.
//!
//! ```text
//! cargo run --example drain_on_sigterm                                          # in memory
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run --example drain_on_sigterm # Redis
//! ```
//!
//! Send it SIGTERM or press Ctrl-C; without either it drains by itself after two seconds,
//! so that the example ends.

use std::time::{Duration, Instant};

use leasehold::runtime::{CancelPolicy, LeaseContext, LeaseRuntime, RunOutcome};
use leasehold::{AcquireOutcome, LeaseClient, LeaseRequest, Purpose, ResourceDigest};
use tokio::signal::unix::{SignalKind, signal};

const PARTITIONS: usize = 4;
const TTL: Duration = Duration::from_secs(30);
/// How long the work may take to stop before it is stopped, releases included: what the
/// platform gives the process between SIGTERM and SIGKILL, less a margin.
const GRACE: Duration = Duration::from_secs(5);

fn request(client: &LeaseClient, partition: usize, wait: Duration) -> LeaseRequest {
    let built = LeaseRequest::builder(
        Purpose::new("partition").expect("a valid purpose"),
        ResourceDigest::of(format!("orders-{partition}")),
        client.new_attempt("consume").expect("a valid operation id"),
    )
    .ttl(TTL)
    .wait_timeout(wait)
    .build();
    built.expect("a valid request")
}

/// The work on one partition: consume until the lease is cancelled (here, by the drain).
async fn consume(partition: usize, ctx: LeaseContext) -> u64 {
    let mut batches = 0;
    loop {
        tokio::select! {
            () = ctx.cancelled() => {
                println!("[old] partition {partition}: {}; committing and stopping",
                    ctx.cancel_reason().map_or("ended".into(), |r| r.to_string()));
                return batches;
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => batches += 1,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = LeaseClient::from_env_or_memory()?;
    let service = LeaseRuntime::new(client.clone());
    let mut jobs = Vec::new();
    for partition in 0..PARTITIONS {
        let service = service.clone();
        let req = request(&client, partition, Duration::ZERO);
        jobs.push(tokio::spawn(async move {
            service
                .run_under_lease(&req, CancelPolicy::Kill, move |ctx| consume(partition, ctx))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("[old] holding {} partitions", service.held());

    // The successor (here in the same process, on a client of its own): it waits on every
    // partition, woken by the release notices.
    let successor = client.clone();
    let waiters: Vec<_> = (0..PARTITIONS)
        .map(|partition| {
            let successor = successor.clone();
            let req = request(&successor, partition, TTL);
            tokio::spawn(async move { (partition, successor.acquire(&req).await, Instant::now()) })
        })
        .collect();

    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => println!("[old] SIGTERM"),
        _ = tokio::signal::ctrl_c() => println!("[old] Ctrl-C"),
        () = tokio::time::sleep(Duration::from_secs(2)) => println!("[old] time to go"),
    }
    let drain_began = Instant::now();
    let summary = service.shutdown(GRACE).await;
    println!(
        "[old] drained {} leases in {:?}: {} ended by their work, {} stopped, {} left",
        summary.leases, summary.took, summary.ended, summary.stopped, summary.left
    );
    for (partition, job) in jobs.into_iter().enumerate() {
        match job.await? {
            Ok(RunOutcome::Ran { output, report }) => println!(
                "[old] partition {partition}: {} batches, ended {}, release {}",
                output.unwrap_or_default(),
                report.end.as_str(),
                report.release.as_str()
            ),
            other => println!("[old] partition {partition}: {other:?}"),
        }
    }
    for waiter in waiters {
        let (partition, outcome, at) = waiter.await?;
        match outcome? {
            AcquireOutcome::Acquired(mut lease) => {
                println!(
                    "[new] partition {partition}: took over {:?} after the drain began, token {}",
                    at - drain_began,
                    lease.token()
                );
                let _ = lease.release().await;
            }
            other => println!("[new] partition {partition}: {}", other.as_str()),
        }
    }
    Ok(())
}
