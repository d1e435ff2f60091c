//! The lease supervisor's memory over ten thousand terms. A binary of its own: the count is
//! per thread, but a global table another test grows (ractor's, the allocator's) would be
//! resized from whichever thread inserts next and show up as this test's growth.

#[path = "../common/mod.rs"]
mod common;

mod counting;

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;

use common::workers::UntilCancelled;
use counting::live_on_this_thread;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// Leader election runs for months: the supervisor's memory must not grow with its terms.
/// Ten thousand terms, each lost (its key deleted behind its back) and re-acquired, on one
/// thread whose live bytes are counted.
#[test]
fn ten_thousand_terms_leave_the_supervisor_s_memory_flat() {
    const WARM_UP: u64 = 500;
    const TERMS: u64 = 10_000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = MemoryBackend::new();
        let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
        let (purpose, resource) = (Purpose::new("leader").unwrap(), ResourceDigest::of("x"));
        let keys = client.keys(&purpose, &resource);
        let request = LeaseRequest::builder(purpose, resource, client.new_attempt("c").unwrap())
            .ttl(Duration::from_secs(3))
            .build()
            .unwrap();
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
        assert!(
            grown < 16 * 1024,
            "{grown} bytes more after {} more terms",
            TERMS - WARM_UP
        );
    });
}
