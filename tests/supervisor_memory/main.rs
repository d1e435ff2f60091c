//! The lease supervisor's memory over ten thousand terms, in memory and on a real
//! redis-server. A binary of its own, and one test running both in turn: the count is per
//! thread, but a global table another test grows (ractor's, the allocator's) would be
//! resized from whichever thread inserts next and show up as this test's growth.

#[path = "../common/mod.rs"]
mod common;

mod counting;

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::sync::watch;

use common::RedisServer;
use common::backends::redis_settings;
use common::workers::{FailsToStart, UntilCancelled};
use counting::live_on_this_thread;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

const WARM_UP: u64 = 500;
const TERMS: u64 = 10_000;
/// Live bytes the supervisor may gain over `TERMS - WARM_UP` terms: well under one byte a
/// term, so a report, a context or a task kept per term would show.
const FLAT: isize = 16 * 1024;

/// Leader election runs for months: the supervisor's memory must not grow with its terms.
#[test]
fn ten_thousand_terms_leave_the_supervisor_s_memory_flat() {
    let grown = in_memory();
    let on_redis = on_redis();
    let terms = TERMS - WARM_UP;
    println!("measured: live bytes grown over {terms} terms: memory {grown}, redis {on_redis}");
    assert!(
        grown < FLAT,
        "in memory: {grown} bytes more after {terms} terms"
    );
    assert!(
        on_redis < FLAT,
        "on redis: {on_redis} bytes more after {terms} terms"
    );
}

fn request(client: &LeaseClient) -> (LeaseRequest, LeaseKeys) {
    let (purpose, resource) = (Purpose::new("leader").unwrap(), ResourceDigest::of("x"));
    let keys = client.keys(&purpose, &resource);
    let request = LeaseRequest::builder(purpose, resource, client.new_attempt("c").unwrap())
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    (request, keys)
}

/// Each term lost (its key deleted behind its back) and re-acquired; paused time.
fn in_memory() -> isize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = MemoryBackend::new();
        let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
        let (request, keys) = request(&client);
        let rt = LeaseRuntime::new(client);
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
        let mut token = None;
        let mut baseline = 0;
        for term in 0..=TERMS {
            if term == WARM_UP {
                baseline = live_on_this_thread();
            }
            let held = state
                .wait_for(|s| s.token().is_some() && s.token() != token)
                .await
                .expect("the supervisor stopped instead of holding");
            token = held.token();
            drop(held);
            assert!(backend.delete(&keys), "term {term} held its key");
        }
        let grown = live_on_this_thread() - baseline;
        let summary = supervisor.shutdown().await;
        assert!(summary.terms > TERMS, "{summary:?}");
        grown
    })
}

/// Each term's worker fails at once, so a term is an acquisition and a release on Redis;
/// the shortest pacing keeps ten thousand of them to seconds. Real time (I/O).
fn on_redis() -> isize {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
        let (request, _) = request(&client);
        let rt = LeaseRuntime::new(client);
        let (started, mut terms) = watch::channel(0u64);
        let pacing =
            SupervisorConfig::backoff(SupervisorConfig::MIN_BACKOFF, SupervisorConfig::MIN_BACKOFF);
        let supervisor = rt
            .supervise(
                request,
                move |_| {
                    started.send_modify(|n| *n += 1);
                    (FailsToStart, ())
                },
                CancelPolicy::Kill,
                pacing,
            )
            .await
            .unwrap();
        terms.wait_for(|&n| n >= WARM_UP).await.unwrap();
        let baseline = live_on_this_thread();
        terms.wait_for(|&n| n >= TERMS).await.unwrap();
        let grown = live_on_this_thread() - baseline;
        let summary = supervisor.shutdown().await;
        assert!(summary.terms >= TERMS, "{summary:?}");
        assert!(
            matches!(summary.last.map(|r| r.end), Some(JobEnd::Failed { .. })),
            "every term's worker failed to start"
        );
        assert_eq!(rt.held(), 0);
        grown
    })
}
