//! Observed worker: leases with a Prometheus endpoint, through a fault.
//!
//! Three jobs run under leases; after a while one lease is deleted behind its holder's back
//! and the store stops answering another's renewals. The example then scrapes its own
//! endpoint and prints the lease series: outcome counters, the renew-margin histogram,
//! cancellations and their delay.
//!
//! ```text
//! cargo run -p leasehold-cli --example observed_worker   # in memory, serves 127.0.0.1:9464
//! OBSERVED_WORKER_METRICS_ADDR=127.0.0.1:9000 cargo run -p leasehold-cli --example observed_worker
//! LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379 cargo run -p leasehold-cli --example observed_worker
//! ```
//! (On Redis only the deletion fault is injected.)

use std::time::Duration;

use leasehold::runtime::{CancelPolicy, LeaseRuntime, RunOutcome};
use leasehold::{
    LeaseClient, LeaseRequest, LeaseSettings, MemoryBackend, MemoryFault, Purpose, ResourceDigest,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: std::net::SocketAddr = std::env::var("OBSERVED_WORKER_METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9464".into())
        .parse()?;
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;
    println!("metrics on http://{addr}/metrics");

    let memory = MemoryBackend::new();
    let redis_url = std::env::var(leasehold::REDIS_URL_ENV).ok();
    let settings = LeaseSettings::default();
    let client = match &redis_url {
        Some(url) => LeaseClient::redis(url, settings)?,
        None => LeaseClient::new(memory.clone(), settings)?,
    };
    let runtime = LeaseRuntime::new(client.clone());
    let mut jobs = Vec::new();
    for name in ["ingest", "compact", "report"] {
        let request = LeaseRequest::builder(
            Purpose::new("batch")?,
            ResourceDigest::of(name),
            client.new_attempt(name)?,
        )
        .ttl(Duration::from_secs(1))
        .build()?;
        let rt = runtime.clone();
        jobs.push(tokio::spawn(async move {
            rt.run_under_lease(&request, CancelPolicy::Kill, move |ctx| async move {
                tokio::select! {
                    () = ctx.cancelled() => println!("{name}: cancelled ({:?})", ctx.cancel_reason()),
                    () = tokio::time::sleep(Duration::from_secs(4)) => println!("{name}: done"),
                }
            })
            .await
        }));
    }

    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let keys = client.keys(&Purpose::new("batch")?, &ResourceDigest::of("ingest"));
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
            // The next renewal of `ingest` finds its lease gone (cancelled: lost).
            tokio::time::sleep(Duration::from_millis(500)).await;
            // Then renewals stop reaching the store for longer than the safety margin allows:
            // the other leases go unconfirmed and are cancelled before their validity ends.
            memory.set_fault(Some(MemoryFault::Unavailable));
            tokio::time::sleep(Duration::from_millis(900)).await;
            memory.set_fault(None);
        }
    }
    println!("-- fault injected; scraping during it --");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let scrape = scrape(addr).await?;
    for line in scrape.lines().filter(|l| {
        l.starts_with("leasehold_")
            && (l.contains("_total")
                || l.contains("renew_margin")
                || l.contains("cancel_delay")
                || l.contains("leases_held"))
    }) {
        println!("{line}");
    }
    for job in jobs {
        if let Ok(Ok(RunOutcome::Ran { report, .. })) = job.await {
            println!(
                "job ended {} (release {})",
                report.end.as_str(),
                report.release.as_str()
            );
        }
    }
    Ok(())
}

/// A plain HTTP/1.0 GET of `/metrics`: no client library needed for one request.
async fn scrape(addr: std::net::SocketAddr) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body)
}
