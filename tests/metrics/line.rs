//! The line's length as observers read it: `leasehold_line_length`, per purpose, summed
//! over the observers of this process and taken back out when one ends.

use std::time::Duration;

use leasehold::fuzzing::calls;
use leasehold::telemetry::names;
use leasehold::*;

use super::recorder::Recorded;
use super::{P, request, setup};

/// Joins the line of `resource`'s lease with a waiting try of a fresh attempt, which then
/// says nothing more.
async fn join(client: &LeaseClient, backend: &MemoryBackend, resource: &str, op: &str) {
    let req = LeaseRequest::builder(
        Purpose::new(P).unwrap(),
        ResourceDigest::of(resource),
        client.new_attempt(op).unwrap(),
    )
    .build()
    .unwrap();
    let keys = client.keys(req.purpose(), req.resource());
    let reply = calls::acquire_waiting(backend, &keys, &req, Duration::from_secs(1)).await;
    assert!(reply.is_ok(), "{reply:?}");
}

#[tokio::test(start_paused = true)]
async fn the_line_length_gauge_sums_what_observers_read_and_forgets_an_ended_one() {
    let m = Recorded::default();
    let _guard = metrics::set_default_local_recorder(&m);
    let (client, backend) = setup();
    let gauge = || m.gauge(names::LINE_LENGTH, &[("purpose", P)]);
    let poll = Duration::from_millis(100);
    let mut held = Vec::new();
    for (resource, waiters) in [("a", 2), ("b", 1)] {
        held.push(
            client
                .try_acquire(&request(&client, resource))
                .await
                .unwrap(),
        );
        for i in 0..waiters {
            join(&client, &backend, resource, &format!("{resource}-{i}")).await;
        }
    }
    let a = client.observe(&request(&client, "a"), poll).unwrap();
    tokio::time::sleep(poll).await;
    assert_eq!(a.waiting(), Some(2));
    assert_eq!(gauge(), Some(2.0));
    let b = client.observe(&request(&client, "b"), poll).unwrap();
    tokio::time::sleep(poll).await;
    assert_eq!(b.waiting(), Some(1));
    assert_eq!(
        gauge(),
        Some(3.0),
        "two observed lines of one purpose add up"
    );
    join(&client, &backend, "b", "b-late").await;
    tokio::time::sleep(2 * poll).await;
    assert_eq!(gauge(), Some(4.0), "a join shows at the next read");
    drop(a);
    tokio::time::sleep(poll).await;
    assert_eq!(gauge(), Some(2.0), "an observer that ended is taken out");
    drop(b);
    tokio::time::sleep(poll).await;
    assert_eq!(gauge(), Some(0.0));
}
