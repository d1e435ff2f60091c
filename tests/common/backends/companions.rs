//! Background traffic for the `redis_batched` harness: without it a test's operations
//! would each leave alone, and the contract suite would never see them share a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{LeaseClient, LeaseRequest, Purpose, ResourceDigest};

/// Script calls a Redis backend has in flight at once, at most, as `RedisBackend`'s docs
/// say. Written here, not read from the library, so the harness builds without its
/// `fuzzing` feature (the CLI's tests share it); `tests/batching` holds it to the
/// backend's own bound.
pub const CALLS_IN_FLIGHT: usize = 4;

/// Tasks that inspect absent leases in a loop on one client, so every operation on that
/// client's backend finds calls in flight and waits to share the next script call.
pub struct Companions {
    paused: Arc<AtomicBool>,
    /// Set for good by `stop`: `resume` no longer resumes.
    stopped: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    /// Inspections answered, for tests that check the companions ran.
    pub answered: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Companions {
    /// More companions than the backend has calls in flight, so one always waits.
    pub fn start(client: &LeaseClient) -> Self {
        let paused = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let purpose = Purpose::new("companion").expect("valid purpose");
        let tasks = (0..CALLS_IN_FLIGHT + 2)
            .map(|i| {
                let (client, purpose) = (client.clone(), purpose.clone());
                let (paused, in_flight) = (paused.clone(), in_flight.clone());
                let answered = answered.clone();
                tokio::spawn(async move {
                    let attempt = client.new_attempt("companion").expect("valid operation id");
                    for n in 0u64.. {
                        // Counted before the check, so `pause` sees either the flag
                        // honoured or the call in flight (both are SeqCst).
                        in_flight.fetch_add(1, Ordering::SeqCst);
                        if paused.load(Ordering::SeqCst) {
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            continue;
                        }
                        let resource = ResourceDigest::of(format!("companion-{i}-{n}"));
                        let read =
                            LeaseRequest::builder(purpose.clone(), resource, attempt.clone())
                                .build()
                                .expect("a valid request");
                        let _ = client.inspect(&read).await;
                        answered.fetch_add(1, Ordering::SeqCst);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Self {
            paused,
            stopped: Arc::new(AtomicBool::new(false)),
            in_flight,
            answered,
            tasks,
        }
    }

    /// Pauses the companions and waits until every call they made has been answered:
    /// what they sent has run by then.
    pub async fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Lets paused companions go on, unless they were stopped.
    pub fn resume(&self) {
        if !self.stopped.load(Ordering::SeqCst) {
            self.paused.store(false, Ordering::SeqCst);
        }
    }

    /// Pauses the companions for the rest of the test.
    pub async fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.pause().await;
    }
}

impl Drop for Companions {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
