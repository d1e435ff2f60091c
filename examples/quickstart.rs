//! Quickstart: acquire a lease, renew it, use its fencing token, release it.
//!
//! Runs on the in-memory backend with no setup:
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! and against a real Redis when `LEASEHOLD_REDIS_URL` is set:
//!
//! ```text
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart
//! ```

use std::time::Duration;

use leasehold::{
    AcquireOutcome, LeaseClient, LeaseError, LeaseRequest, Purpose, ReleaseOutcome, RenewOutcome,
    ResourceDigest,
};

#[tokio::main]
async fn main() -> Result<(), LeaseError> {
    let client = LeaseClient::from_env_or_memory()?;
    let backend = if std::env::var(leasehold::REDIS_URL_ENV).is_ok() {
        "redis"
    } else {
        "memory"
    };
    println!("backend: {backend}");

    // The raw id is hashed here; only the digest reaches the backend.
    let resource = ResourceDigest::of(b"tenant-42/nightly-report");
    let request = LeaseRequest::builder(
        Purpose::new("reports")?,
        resource,
        client.new_attempt("nightly-2026-12-02")?,
    )
    .ttl(Duration::from_secs(10))
    .wait_timeout(Duration::from_secs(2))
    .build()?;

    // A second "process" competing for the same resource.
    let rival = LeaseRequest::builder(
        Purpose::new("reports")?,
        resource,
        client.new_attempt("nightly-2026-12-02")?,
    )
    .build()?;

    let mut lease = match client.acquire(&request).await? {
        AcquireOutcome::Acquired(lease) | AcquireOutcome::Replayed(lease) => lease,
        other => {
            println!("not acquired: {}", other.as_str());
            return Ok(());
        }
    };
    println!(
        "acquired {resource:?} with fencing token {}, valid for {:?}",
        lease.token(),
        lease.remaining_validity()
    );

    match client.try_acquire(&rival).await? {
        AcquireOutcome::Contended { retry_after } => {
            println!("rival: contended, holder's lease ends in {retry_after:?}")
        }
        other => println!("rival: unexpected {}", other.as_str()),
    }

    for step in 1..=3 {
        // The protected work carries the token to where its effect lands.
        println!("step {step}: writing with fence {}", lease.token());
        tokio::time::sleep(Duration::from_millis(200)).await;
        match lease.renew().await {
            RenewOutcome::Renewed { remaining } => println!("renewed, {remaining:?} left"),
            other => {
                println!("stopping: renew said {}", other.as_str());
                return Ok(());
            }
        }
    }

    match lease.release().await {
        ReleaseOutcome::Released => println!("released"),
        other => println!("release: {}", other.as_str()),
    }
    Ok(())
}
