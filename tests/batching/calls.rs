//! When operations leave together: a busy backend starts another call only for enough of
//! them, a caller that goes away hands its place among the calls in flight on, and with
//! companions running each operation shares its call (what
//! `backend_contract::redis_batched` rests on).

use std::time::{Duration, Instant};

use crate::common;
use crate::common::backends::{Backend, Harness};
use crate::common::leases::acquired;
use crate::{replies_dropped, request, script_calls, spawn_acquire, until_script_calls};
use leasehold::*;

/// The companions of the `redis_batched` harness outnumber the calls a backend has in
/// flight: the harness's own count of them is the backend's.
#[test]
fn the_harness_counts_the_calls_in_flight_as_the_backend_does() {
    assert_eq!(
        common::backends::companions::CALLS_IN_FLIGHT,
        leasehold::fuzzing::CALLS_IN_FLIGHT
    );
}

/// While a call is in flight, a few more operations wait for its end rather than start a
/// call of their own — so each call carries enough to be worth its fixed cost — and as
/// many as `OPERATIONS_FOR_ANOTHER_CALL` leave at once in another call.
#[tokio::test]
async fn a_busy_backend_starts_another_call_only_for_enough_operations() {
    let (server, _proxy, client, base) = replies_dropped(3000).await;
    let mut tasks = vec![spawn_acquire(&client, &request(&client, "first", "op"))];
    until_script_calls(&server, base + 1).await;

    let few = leasehold::fuzzing::OPERATIONS_FOR_ANOTHER_CALL - 1;
    for i in 0..few {
        tasks.push(spawn_acquire(
            &client,
            &request(&client, &format!("few-{i}"), "op"),
        ));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        script_calls(&server),
        base + 1,
        "a few wait for the call in flight"
    );
    let started = Instant::now();
    tasks.push(spawn_acquire(&client, &request(&client, "enough", "op")));
    until_script_calls(&server, base + 2).await;
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "enough operations leave before the call in flight gives up on its reply"
    );
    for task in tasks {
        let outcome = task.await.unwrap();
        assert!(
            matches!(outcome, AcquireOutcome::Indeterminate { .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(
        script_calls(&server),
        base + 2,
        "two calls carried them all"
    );
}

/// A lone operation leaves from its caller's own task. A caller that goes away while its
/// call is in flight hands its place among the calls in flight on: operations queued behind
/// it leave at once, not at their deadline.
#[tokio::test]
async fn a_lone_callers_place_passes_to_those_queued_behind_it_when_it_goes_away() {
    let (server, _proxy, client, base) = replies_dropped(3000).await;
    let lone = spawn_acquire(&client, &request(&client, "lone", "op"));
    until_script_calls(&server, base + 1).await;
    let behind: Vec<_> = (0..2)
        .map(|i| spawn_acquire(&client, &request(&client, &format!("behind-{i}"), "op")))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        script_calls(&server),
        base + 1,
        "they wait for the call in flight"
    );

    let started = Instant::now();
    lone.abort();
    until_script_calls(&server, base + 2).await;

    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "the queued operations left once the lone caller went away"
    );
    for task in behind {
        let outcome = task.await.unwrap();
        assert!(
            matches!(outcome, AcquireOutcome::Indeterminate { .. }),
            "sent, reply dropped: {outcome:?}"
        );
    }
    assert_eq!(script_calls(&server), base + 2, "one call carried both");
}

/// What the contract suite's `redis_batched` arm rests on: with its companions running, the
/// test's own operations travel in script calls together with theirs. Read off the server's
/// slow log (every command logged): the calls that carry one of this test's keys also carry
/// a companion's.
#[tokio::test]
async fn with_companions_running_each_operation_shares_its_script_call() {
    let h = Harness::redis_batched();
    let Backend::Batched {
        server, companions, ..
    } = &h.backend
    else {
        unreachable!("redis_batched builds a Batched backend")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while companions
        .answered
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the companions never got an answer"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.cmd(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    server.cmd(&["SLOWLOG", "RESET"]);
    for i in 0..20 {
        let req = common::leases::request(&h.client, "probe", &format!("probe-{i}"), "op");
        let mut lease = acquired(&h.client, &req).await;
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
    server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);

    let redis::Value::Array(entries) = server.cmd(&["SLOWLOG", "GET", "100000"]) else {
        panic!("SLOWLOG GET answers an array")
    };
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        _ => String::new(),
    };
    let (mut ours, mut shared) = (0, 0);
    for entry in &entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let Some(redis::Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let args: Vec<String> = args.iter().map(text).collect();
        if args.first().map(String::as_str) != Some("EVALSHA") {
            continue;
        }
        if args.iter().any(|a| a.contains(":probe:")) {
            ours += 1;
            if args.iter().any(|a| a.contains(":companion:")) {
                shared += 1;
            }
        }
    }
    // 20 acquisitions and 20 releases; on a server that releases by its own commands only
    // the acquisitions take the script.
    assert!(
        ours >= 20,
        "40 operations, {ours} script calls carrying them"
    );
    assert!(
        shared * 4 >= ours * 3,
        "only {shared} of the {ours} calls carrying this test's operations carried a companion's"
    );
}

/// Renewals due together leave together: on a server that renews by its own command, in
/// pipelines of up to 256 (a grid instant's renewals in a few writes); elsewhere in script
/// calls of up to 32.
#[tokio::test]
async fn renewals_due_together_leave_in_as_few_calls_as_their_path_allows() {
    const LEASES: usize = 300;
    let server = common::RedisServer::start();
    let info: String = server.query(&["INFO", "server"]);
    let native = ServerCapabilities::from_info(&info).renews_natively();
    let client = LeaseClient::redis(&server.url(), common::backends::redis_settings()).unwrap();
    let mut leases = Vec::new();
    for i in 0..LEASES {
        leases.push(acquired(&client, &request(&client, &format!("due-{i}"), "op")).await);
    }
    server.reset_stats();
    let renewed = futures_util::future::join_all(leases.iter_mut().map(|l| l.renew())).await;
    assert!(
        renewed
            .iter()
            .all(|r| matches!(r, RenewOutcome::Renewed { .. })),
        "{renewed:?}"
    );
    let (pipelines, sets, scripts) = (
        server.calls_of("ping"),
        server.calls_of("set"),
        script_calls(&server),
    );
    if native {
        assert_eq!((sets, scripts), (LEASES as u64, 0));
        assert!(pipelines <= 3, "{LEASES} renewals in {pipelines} pipelines");
    } else {
        assert_eq!((pipelines, sets), (0, 0));
        assert!(
            (10..=20).contains(&scripts),
            "{LEASES} renewals in {scripts} script calls of up to 32"
        );
    }
    for mut lease in leases {
        assert_eq!(lease.release().await, ReleaseOutcome::Released);
    }
}
