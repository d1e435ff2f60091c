//! The runtime on a real redis-server (behind a controllable proxy), in real time: renewal
//! cadence, and the delay from each fault to the worker's cancellation, measured against
//! the TTL. Each fault prints its `FAULT` line (`common::fault`, `--nocapture`) for
//! `.ci/fault-report`.

mod common;

use std::time::Duration;

use common::fault::FaultLine;
use common::{Proxy, ProxyMode, RedisServer};
use leasehold::runtime::*;
use leasehold::*;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(600);

/// 100 ms per command and as safety margin: renewals every 200 ms, cancellation at the
/// latest 100 ms before local validity ends.
fn settings() -> LeaseSettings {
    LeaseSettings::default().with_command_timeout(Duration::from_millis(100))
}

struct Fixture {
    server: RedisServer,
    proxy: Proxy,
    runtime: LeaseRuntime,
}

fn fixture() -> Fixture {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let client = LeaseClient::redis(&proxy.url(), settings()).unwrap();
    Fixture {
        server,
        proxy,
        runtime: LeaseRuntime::new(client),
    }
}

fn request(rt: &LeaseRuntime, resource: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("rt").unwrap(),
        ResourceDigest::of(resource),
        rt.client().new_attempt("op").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap()
}

/// What one fault did to a running job.
struct Measured {
    /// From the fault to the moment the work saw its cancellation.
    delay: Duration,
    /// How long before the last confirmed local validity end that was.
    margin: Option<Duration>,
    report: LeaseReport,
}

impl Measured {
    /// The `FAULT` line of one injected fault: the cancellation's reason, whether it came
    /// before local validity ended and by how much, and how long after the fault.
    fn fault_line(&self, row: &str) -> FaultLine {
        let reason = self.report.cancelled.as_ref().map(|c| c.reason);
        FaultLine::new(row, 1)
            .with(
                "outcome",
                reason.map_or("not_cancelled", CancelReason::as_str),
            )
            .share(
                "cancelled_before_validity_end",
                usize::from(reason.is_some() && self.margin.is_some()),
                1,
            )
            .opt_ms("margin_ms", self.margin)
            .ms("took_ms", self.delay)
            .ms("ttl_ms", TTL)
    }
}

/// Runs a job that waits for its cancellation, lets a few renewals pass, applies `fault`,
/// and measures. No renewal is confirmed after these faults, so the validity end read just
/// before the fault is the last one.
async fn run_until_cancelled(f: &mut Fixture, fault: impl FnOnce(&mut Fixture)) -> Measured {
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    let (ctx_tx, ctx_rx) = tokio::sync::oneshot::channel();
    let rt = f.runtime.clone();
    let req = request(&rt, "r");
    let job = tokio::spawn(async move {
        rt.run_under_lease(&req, CancelPolicy::Kill, move |ctx| async move {
            let _ = ctx_tx.send(ctx.clone());
            ctx.cancelled().await;
            let _ = seen_tx.send(Instant::now());
        })
        .await
        .unwrap()
    });
    let ctx = ctx_rx.await.unwrap();
    // Three renewals, then half a renew period: the fault lands mid-period, not at a
    // renewal's edge, so the measured delays are typical rather than lucky.
    tokio::time::sleep(TTL + TTL / 6).await;
    assert!(!ctx.is_cancelled());
    let valid_until = ctx.status().valid_until.unwrap();
    let faulted = Instant::now();
    fault(f);
    let seen = seen_rx.await.unwrap();
    let RunOutcome::Ran { report, .. } = job.await.unwrap() else {
        panic!("not acquired")
    };
    Measured {
        delay: seen - faulted,
        margin: valid_until.checked_duration_since(seen),
        report,
    }
}

#[tokio::test]
async fn lease_held_ten_ttls_on_redis_stays_active_and_is_never_cancelled() {
    let f = fixture();
    let outcome = f
        .runtime
        .run_under_lease(
            &request(&f.runtime, "r"),
            CancelPolicy::Kill,
            |ctx| async move {
                tokio::time::sleep(TTL * 10).await;
                (ctx.is_cancelled(), ctx.status())
            },
        )
        .await
        .unwrap();
    let RunOutcome::Ran { output, report } = outcome else {
        panic!("not acquired")
    };
    let (cancelled, status) = output.unwrap();
    assert!(!cancelled);
    // Every 200 ms for 6 s: about 30 renewals.
    assert!(status.renewals >= 25, "{} renewals", status.renewals);
    eprintln!(
        "RESULT redis cadence: {} renewals in 10 TTLs of {TTL:?}",
        status.renewals
    );
    assert_eq!(report.end, JobEnd::Completed);
    assert_eq!(report.release, ReleaseOutcome::Released);
    let keys = lease_keys(&f.server);
    assert!(keys.is_empty(), "released, not left to expire: {keys:?}");
}

#[tokio::test]
async fn key_deleted_on_redis_cancels_the_worker_within_one_renew_period() {
    let mut f = fixture();
    let key = f
        .runtime
        .client()
        .keys(&Purpose::new("rt").unwrap(), &ResourceDigest::of("r"))
        .lease()
        .to_owned();
    let m = run_until_cancelled(&mut f, |f| {
        f.server.cmd(&["DEL", &key]);
    })
    .await;
    m.fault_line("lease-deleted/runtime").print();
    assert!(
        m.delay <= TTL / 3 + Duration::from_millis(150),
        "{:?}",
        m.delay
    );
    assert_eq!(
        m.report.cancelled.map(|c| c.reason),
        Some(CancelReason::Lost(LostReason::Absent))
    );
}

#[tokio::test]
async fn dropped_renew_replies_on_redis_cancel_before_validity_ends() {
    let mut f = fixture();
    let m = run_until_cancelled(&mut f, |f| f.proxy.set_mode(ProxyMode::DropReplies)).await;
    m.fault_line("renew-reply-lost/runtime").print();
    assert_eq!(
        m.report.cancelled.map(|c| c.reason),
        Some(CancelReason::Unknown)
    );
    assert!(m.margin.is_some(), "cancelled after local validity ended");
}

#[tokio::test]
async fn killed_redis_cancels_the_worker_before_ttl_minus_drift_after_the_last_renewal() {
    let mut f = fixture();
    let m = run_until_cancelled(&mut f, |f| f.server.kill()).await;
    m.fault_line("redis-killed/runtime").print();
    assert!(m.report.cancelled.is_some());
    assert!(m.margin.is_some(), "cancelled after local validity ended");
}

#[tokio::test]
async fn a_thousand_leases_on_redis_renew_for_three_ttls() {
    let server = RedisServer::start();
    let settings = LeaseSettings::default().with_command_timeout(Duration::from_millis(300));
    let client = LeaseClient::redis(&server.url(), settings).unwrap();
    let runtime = LeaseRuntime::new(client);
    let ttl = Duration::from_secs(2);
    let mut jobs = Vec::new();
    for i in 0..1_000 {
        let req = LeaseRequest::builder(
            Purpose::new("many").unwrap(),
            ResourceDigest::of(format!("r{i}")),
            runtime.client().new_attempt("op").unwrap(),
        )
        .ttl(ttl)
        .build()
        .unwrap();
        let rt = runtime.clone();
        jobs.push(tokio::spawn(async move {
            rt.run_under_lease(&req, CancelPolicy::Kill, move |ctx| async move {
                tokio::time::sleep(ttl * 3).await;
                (ctx.is_cancelled(), ctx.status().renewals)
            })
            .await
            .unwrap()
        }));
    }
    let mut renewals = 0;
    for job in jobs {
        let RunOutcome::Ran { output, report } = job.await.unwrap() else {
            panic!("not acquired")
        };
        let (cancelled, n) = output.unwrap();
        assert!(!cancelled, "a lease was cancelled: {report:?}");
        assert!(n >= 3, "only {n} renewals");
        assert_eq!(report.release, ReleaseOutcome::Released);
        renewals += n;
    }
    eprintln!("RESULT redis 1000 leases x 3 ttls: {renewals} renewals, no cancellation");
    let left = lease_keys(&server);
    assert!(left.is_empty());
    assert_eq!(runtime.held(), 0);
}

#[tokio::test]
async fn slow_redis_times_renewals_out_into_unknown_and_cancels_in_time() {
    let mut f = fixture();
    let url = f.server.url();
    let m = run_until_cancelled(&mut f, move |_| {
        // DEBUG SLEEP blocks the whole server (like a long fork or a slow disk); run it from
        // a thread so this test's runtime keeps going.
        std::thread::spawn(move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            let _: redis::RedisResult<()> =
                redis::cmd("DEBUG").arg("SLEEP").arg("1").query(&mut conn);
        });
    })
    .await;
    m.fault_line("slow-redis/runtime")
        .ms("debug_sleep_ms", Duration::from_secs(1))
        .print();
    assert_eq!(
        m.report.cancelled.map(|c| c.reason),
        Some(CancelReason::Unknown)
    );
    assert!(m.margin.is_some(), "cancelled after local validity ended");
}

/// The lease keys on `server` (not the groups' fence counters, which stay).
fn lease_keys(server: &RedisServer) -> Vec<String> {
    let keys: Vec<String> = server.query(&["KEYS", "*:lease:v2:*"]);
    keys.into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect()
}
