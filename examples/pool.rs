//! A counted lease: six exports across the fleet, at most two at a time. Each export runs
//! under a slot of a two-permit lease with its own fencing token; the rest wait, and a
//! finished export's release wakes the next at once.
//!
//! ```text
//! cargo run --example pool                                          # in memory
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run --example pool # Redis
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::runtime::{CancelPolicy, LeaseRuntime, RunOutcome};
use leasehold::{LeaseClient, LeaseSettings, MemoryBackend};

const PERMITS: u32 = 2;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = match std::env::var(leasehold::REDIS_URL_ENV) {
        Ok(url) => LeaseClient::redis(&url, LeaseSettings::default())?,
        Err(_) => LeaseClient::new(MemoryBackend::new(), LeaseSettings::default())?,
    };
    let runtime = LeaseRuntime::new(client.clone());
    let running = Arc::new(AtomicUsize::new(0));
    let mut exports = Vec::new();
    for export in 0..6 {
        let request = client
            .request("exports", "nightly")?
            .permits(PERMITS)
            .ttl(Duration::from_secs(10))
            .wait_timeout(Duration::from_secs(30))
            .build()?;
        let running = running.clone();
        // The future borrows neither the runtime nor the request: spawned as it is, each
        // export runs in a task of its own.
        exports.push(tokio::spawn(runtime.run_under_lease(
            &request,
            CancelPolicy::Kill,
            move |ctx| async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                println!(
                    "export {export}: running with fencing token {} ({now} of {PERMITS} slots taken)",
                    ctx.token()
                );
                assert!(now <= PERMITS as usize, "more exports than permits");
                tokio::time::sleep(Duration::from_millis(200)).await;
                running.fetch_sub(1, Ordering::SeqCst);
            },
        )));
    }
    for export in exports {
        match export.await?? {
            RunOutcome::Ran { .. } => {}
            RunOutcome::NotAcquired(outcome) => println!("an export gave up: {}", outcome.as_str()),
        }
    }
    println!("six exports, never more than {PERMITS} at once");
    Ok(())
}
