//! docs/design.md §8 on `MemoryBackend` under paused tokio time: renewal cadence, cancellation on
//! LOST / UNKNOWN / unconfirmable renewal, the Kill and NotifyOnly policies, and the
//! supervision grid — worker {exits, errs, panics, ignores cancel} × lease {held, lost,
//! unknown, validity ends}, each asserting the release and exactly one `LeaseCancelled`.
//!
//! The scripted worker is in `worker`; the tests are grouped by what ends or limits a job:
//! the lease (`cancellation`), the worker or its lease actor (`job_end`), the runtime's
//! admission (`admission`), every combination of the two (`grid`), and the renewal in flight
//! beside its actor (`renewal`).

mod admission;
mod cancellation;
mod grid;
mod job_end;
mod renewal;
mod worker;

use std::time::Duration;

use leasehold::runtime::*;
use leasehold::*;
use tokio::sync::mpsc;

use worker::{Event, OnCancel, Worker, WorkerArgs, WorkerMsg};

const TTL: Duration = Duration::from_secs(3);
const MS: Duration = Duration::from_millis(1);

struct Setup {
    backend: MemoryBackend,
    runtime: LeaseRuntime,
}

fn setup() -> Setup {
    let backend = MemoryBackend::new();
    let client = LeaseClient::new(backend.clone(), LeaseSettings::default()).unwrap();
    Setup {
        backend,
        runtime: LeaseRuntime::new(client),
    }
}

fn request(s: &Setup, resource: &str) -> LeaseRequest {
    LeaseRequest::builder(
        Purpose::new("job").unwrap(),
        ResourceDigest::of(resource),
        s.runtime.client().new_attempt("run").unwrap(),
    )
    .ttl(TTL)
    .build()
    .unwrap()
}

async fn start(
    s: &Setup,
    on_cancel: OnCancel,
    policy: CancelPolicy,
) -> (LeaseJob<WorkerMsg>, mpsc::UnboundedReceiver<Event>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let job = s
        .runtime
        .spawn_under_lease(
            &request(s, "r"),
            Worker,
            move |_ctx| WorkerArgs {
                on_cancel,
                events: tx,
            },
            policy,
        )
        .await
        .unwrap()
        .started()
        .expect("acquired");
    assert!(matches!(rx.recv().await, Some(Event::Started)));
    (job, rx)
}

/// Lets the actors run until nothing is left to do at this instant.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn cancellations(rx: &mut mpsc::UnboundedReceiver<Event>) -> Vec<LeaseCancelled> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let Event::Cancelled(c, _) = e {
            out.push(c);
        }
    }
    out
}

/// A renewal fault that makes every reply vanish (UNKNOWN after the retries).
fn lose_replies(s: &Setup) {
    s.backend.set_fault(Some(MemoryFault::LoseReply));
}
