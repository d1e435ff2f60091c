//! The certainty rule under batching: an operation in a call whose reply is lost is
//! `Indeterminate` and ran; one that never left (waiting for room among the calls in flight
//! or for a connection, or dropped by its caller) is `Unavailable` or gone, and did not run.

use std::time::Duration;

use crate::common::backends::redis_settings;
use crate::common::leases::acquired;
use crate::common::{Proxy, ProxyMode, RedisServer};
use crate::{
    calls, exists, replies_dropped, request, script_calls, spawn_acquire, until_script_calls,
};
use futures_util::future::join_all;
use leasehold::*;

/// The certainty rule for a shared call: when its reply is lost, every operation in it is
/// `Indeterminate` — and each of them ran.
#[tokio::test]
async fn a_shared_call_whose_reply_is_lost_leaves_each_operation_indeterminate_and_each_ran() {
    let (server, proxy, client, before) = replies_dropped(500).await;
    let reqs: Vec<_> = (0..8)
        .map(|i| request(&client, &format!("shared-{i}"), "op"))
        .collect();

    // Queued in one go (this runtime runs one task at a time): they leave together.
    let outcomes = join_all(reqs.iter().map(|r| client.try_acquire(r))).await;

    assert_eq!(script_calls(&server) - before, 1, "one call for all eight");
    proxy.set_mode(ProxyMode::Pass);
    for (outcome, req) in outcomes.into_iter().zip(&reqs) {
        let outcome = outcome.unwrap();
        let AcquireOutcome::Indeterminate { attempt, .. } = outcome else {
            panic!("expected indeterminate, got {outcome:?}")
        };
        assert_eq!(&attempt, req.attempt());
        let keys = client.keys(req.purpose(), req.resource());
        assert!(
            exists(&server, &keys),
            "sent, so it ran (only the reply was lost)"
        );
    }
}

/// The certainty rule for what never left: operations that wait for room among the calls in
/// flight while every call in flight has lost its reply are `Unavailable` at their deadline
/// — and none of them ran. The ones in flight are `Indeterminate`, and ran.
#[tokio::test]
async fn operations_still_waiting_when_replies_are_lost_are_unavailable_and_did_not_run() {
    let (server, proxy, client, base) = replies_dropped(1000).await;
    // As many calls in flight as may be, each run by the server and its reply never coming:
    // the first carries one operation (nothing was in flight), each next one as many
    // operations as make a busy backend start another call.
    let mut requests = Vec::new();
    let mut tasks = Vec::new();
    for call in 0..leasehold::fuzzing::CALLS_IN_FLIGHT {
        let batch = if call == 0 {
            1
        } else {
            leasehold::fuzzing::OPERATIONS_FOR_ANOTHER_CALL
        };
        for i in 0..batch {
            let req = request(&client, &format!("sent-{call}-{i}"), "op");
            tasks.push(spawn_acquire(&client, &req));
            requests.push(req);
        }
        until_script_calls(&server, base + call as u64 + 1).await;
    }
    let sent = requests.len();
    for i in 0..leasehold::fuzzing::OPERATIONS_FOR_ANOTHER_CALL {
        let req = request(&client, &format!("waiting-{i}"), "op");
        tasks.push(spawn_acquire(&client, &req));
        requests.push(req);
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    proxy.set_mode(ProxyMode::Pass);

    for (n, (outcome, req)) in outcomes.iter().zip(&requests).enumerate() {
        let ran = exists(&server, &client.keys(req.purpose(), req.resource()));
        match outcome {
            AcquireOutcome::Indeterminate { .. } if n < sent => {
                assert!(ran, "item {n}: sent, so it ran");
            }
            AcquireOutcome::Unavailable { .. } if n >= sent => {
                assert!(!ran, "item {n}: Unavailable, yet its lease exists");
            }
            other => panic!("item {n}: {other:?}"),
        }
    }
}

/// Operations that waited in the queue while the connection was being made — and never
/// came — say so: `Unavailable` for want of a connection, not for calls in flight, and
/// nothing ran.
#[tokio::test]
async fn operations_waiting_for_a_connection_that_never_comes_say_so() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    // The connection's set-up is never answered.
    proxy.set_mode(ProxyMode::DropRequests);
    let settings = redis_settings().with_command_timeout(Duration::from_millis(300));
    let client = LeaseClient::redis(&proxy.url(), settings).unwrap();
    let reqs: Vec<_> = (0..2)
        .map(|i| request(&client, &format!("unconnected-{i}"), "op"))
        .collect();

    // Queued in one go: they wait together for the one connection attempt.
    let outcomes = join_all(reqs.iter().map(|r| client.try_acquire(r))).await;

    proxy.set_mode(ProxyMode::Pass);
    for (outcome, req) in outcomes.into_iter().zip(&reqs) {
        let outcome = outcome.unwrap();
        let AcquireOutcome::Unavailable { detail } = &outcome else {
            panic!("expected unavailable, got {outcome:?}")
        };
        assert_eq!(detail.kind, FailureKind::Connect, "{detail}");
        assert!(!exists(
            &server,
            &client.keys(req.purpose(), req.resource())
        ));
    }
}

/// Cancel safety: a caller that goes away while its operation waits in the queue takes it
/// out; it is never sent.
#[tokio::test]
async fn an_operation_dropped_while_it_waits_is_never_sent() {
    let (server, proxy, client, base) = replies_dropped(1500).await;
    // A call in flight whose reply never comes: the backend is busy for 1.5 s, and a lone
    // operation waits for that call's end.
    let busy = vec![spawn_acquire(&client, &request(&client, "busy", "op"))];
    until_script_calls(&server, base + 1).await;
    let dropped = request(&client, "dropped", "op");
    let gave_up = tokio::time::timeout(Duration::from_millis(50), client.try_acquire(&dropped));
    assert!(gave_up.await.is_err(), "it waited behind the busy call");
    for task in busy {
        let outcome = task.await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Indeterminate { .. }));
    }
    proxy.set_mode(ProxyMode::Pass);
    // The queue is empty again: a new call goes out alone, and nothing else ran.
    let before = calls(&server);
    let mut after = acquired(&client, &request(&client, "after", "op")).await;
    let _ = after.release().await;
    assert_eq!(calls(&server) - before, 2);
    let keys = client.keys(dropped.purpose(), dropped.resource());
    assert!(!exists(&server, &keys), "the dropped operation ran");
}
