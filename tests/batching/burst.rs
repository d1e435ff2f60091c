//! Admission under a burst: operations beyond what the connection answers within the
//! command timeout wait in the backend's bounded queue instead of failing — the command
//! timeout bounds each round trip, from the instant before its call is written — and a
//! full queue is refused at once, locally, as `QueueFull`.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use leasehold::*;

use crate::common::RedisServer;
use crate::common::leases::warm_up;
use crate::{exists, request};

/// Outcomes of a burst, by kind.
#[derive(Debug, Default)]
struct Tally {
    acquired: usize,
    unavailable: usize,
    indeterminate: usize,
    other: Vec<String>,
}

/// 10,000 concurrent `try_acquire` of distinct resources from one client on default
/// settings (command timeout 200 ms) against a healthy server: every one acquired, three
/// times over. The last of them waits in the queue far longer than the command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_ten_thousand_acquisitions_on_a_healthy_server_acquires_every_one() {
    const BURST: usize = 10_000;
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), LeaseSettings::default()).unwrap();
    warm_up(&client).await;
    for round in 0..3 {
        let requests: Vec<_> = (0..BURST)
            .map(|i| request(&client, &format!("burst-{round}-{i}"), "op"))
            .collect();
        let started = Instant::now();
        let tasks: Vec<_> = requests
            .iter()
            .map(|req| {
                let (client, req) = (client.clone(), req.clone());
                tokio::spawn(async move { client.try_acquire(&req).await.unwrap() })
            })
            .collect();
        let mut tally = Tally::default();
        let mut leases = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                AcquireOutcome::Acquired(lease) => {
                    tally.acquired += 1;
                    leases.push(lease);
                }
                AcquireOutcome::Unavailable { .. } => tally.unavailable += 1,
                AcquireOutcome::Indeterminate { .. } => tally.indeterminate += 1,
                other => tally.other.push(other.as_str().to_owned()),
            }
        }
        let took = started.elapsed();
        println!("BURST round={round} {tally:?} took_ms={}", took.as_millis());
        assert_eq!(
            tally.acquired, BURST,
            "round {round}: {tally:?} in {took:?}"
        );
        // Released together: a burst of releases goes through the queue too.
        let released = join_all(leases.iter_mut().map(LeaseHandle::release)).await;
        let not_released = released
            .iter()
            .filter(|r| **r != ReleaseOutcome::Released)
            .count();
        assert_eq!(not_released, 0, "round {round}");
        assert!(!exists(
            &server,
            &client.keys(requests[0].purpose(), requests[0].resource())
        ));
    }
}
