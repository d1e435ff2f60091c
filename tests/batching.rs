//! Concurrent operations on one `RedisBackend` travel together, as one script call per round
//! trip. What a batch must not change: each operation's own outcome, its certainty
//! (`Unavailable` only for what never ran), and its fencing. Each test asserts what the API
//! reported and what Redis holds afterwards. (The whole contract suite also runs with every
//! operation batched: `backend_contract::redis_batched`.)

mod common;

use std::time::{Duration, Instant};

use common::backends::{Backend, Harness, redis_settings};
use common::leases::{acquired, warm_up};
use common::{Proxy, ProxyMode, RedisServer};
use futures_util::future::join_all;
use leasehold::*;

fn request(client: &LeaseClient, resource: &str, op: &str) -> LeaseRequest {
    common::leases::request(client, "batch", resource, op)
}

fn exists(server: &RedisServer, keys: &LeaseKeys) -> bool {
    server.query::<i64>(&["EXISTS", &keys.lease]) == 1
}

/// Script calls the server ran (`EVALSHA`).
fn script_calls(server: &RedisServer) -> u64 {
    server.calls_of("evalsha")
}

/// Waits until the server has run `calls` script calls in all.
async fn until_script_calls(server: &RedisServer, calls: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while script_calls(server) < calls {
        assert!(
            Instant::now() < deadline,
            "the server never ran call {calls}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A lease of `client` that was taken away: deleted, and with `thief` set also taken by it.
async fn taken_away(
    server: &RedisServer,
    client: &LeaseClient,
    resource: &str,
    thief: Option<&LeaseClient>,
) -> LeaseHandle {
    let lease = acquired(client, &request(client, resource, "op")).await;
    server.cmd(&["DEL", &lease.keys().lease]);
    if let Some(thief) = thief {
        std::mem::forget(acquired(thief, &request(thief, resource, "thief")).await);
    }
    lease
}

#[tokio::test]
async fn one_script_call_answers_every_operation_with_its_own_outcome() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let other = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let mine = request(&client, "mine", "op");
    let mut held = acquired(&client, &mine).await;
    let held_token = held.token();
    std::mem::forget(acquired(&other, &request(&other, "theirs", "op")).await);
    let mut to_release = acquired(&client, &request(&client, "to-release", "op")).await;
    let mut gone = taken_away(&server, &client, "gone", None).await;
    let mut gone_too = taken_away(&server, &client, "gone-too", None).await;
    let mut stolen = taken_away(&server, &client, "stolen", Some(&other)).await;
    let mut stolen_too = taken_away(&server, &client, "stolen-too", Some(&other)).await;
    let same_owner_other_op = LeaseRequest::builder(
        mine.purpose().clone(),
        *mine.resource(),
        Attempt::from_parts(
            mine.attempt().owner().clone(),
            OperationId::new("other-op").unwrap(),
        ),
    )
    .build()
    .unwrap();
    let fresh: Vec<_> = (0..3)
        .map(|i| request(&client, &format!("fresh-{i}"), "op"))
        .collect();
    let purpose = Purpose::new("batch").unwrap();
    let theirs = request(&client, "theirs", "op");
    let (their_digest, nobody) = (ResourceDigest::of("theirs"), ResourceDigest::of("nobody"));
    let before = script_calls(&server);

    // All polled in one go on this (current-thread) runtime: queued before a flusher runs.
    let (acquires, (replay, conflict, contended), renews, releases, inspects) = tokio::join!(
        join_all(fresh.iter().map(|r| client.try_acquire(r))),
        async {
            tokio::join!(
                client.try_acquire(&mine),
                client.try_acquire(&same_owner_other_op),
                client.try_acquire(&theirs),
            )
        },
        async { tokio::join!(held.renew(), gone.renew(), stolen.renew()) },
        async {
            tokio::join!(
                to_release.release(),
                gone_too.release(),
                stolen_too.release()
            )
        },
        async {
            tokio::join!(
                client.inspect(&purpose, mine.resource(), mine.attempt()),
                client.inspect(&purpose, &their_digest, mine.attempt()),
                client.inspect(&purpose, &nobody, mine.attempt()),
            )
        },
    );

    let calls = script_calls(&server) - before;
    assert_eq!(
        calls, 1,
        "18 operations queued together took {calls} script calls"
    );
    for (outcome, req) in acquires.into_iter().zip(&fresh) {
        let AcquireOutcome::Acquired(lease) = outcome.unwrap() else {
            panic!("a fresh lease must be acquired")
        };
        assert!(exists(&server, lease.keys()));
        // Tokens increase per group of resources (see the last test), not across groups.
        assert!(lease.token() > FencingToken::new(0));
        assert_eq!(lease.attempt(), req.attempt());
        std::mem::forget(lease);
    }
    let AcquireOutcome::Replayed(replayed) = replay.unwrap() else {
        panic!("the holder's own attempt replays")
    };
    assert_eq!(replayed.token(), held_token);
    std::mem::forget(replayed);
    assert!(matches!(
        conflict.unwrap(),
        AcquireOutcome::OwnerOperationConflict { .. }
    ));
    assert!(matches!(
        contended.unwrap(),
        AcquireOutcome::Contended { .. }
    ));
    assert!(
        matches!(renews.0, RenewOutcome::Renewed { .. }),
        "{:?}",
        renews.0
    );
    assert_eq!(
        renews.1,
        RenewOutcome::Lost {
            reason: LostReason::Absent
        }
    );
    assert_eq!(
        renews.2,
        RenewOutcome::Lost {
            reason: LostReason::NotOwner
        }
    );
    assert_eq!(releases.0, ReleaseOutcome::Released);
    assert!(!exists(&server, to_release.keys()));
    assert_eq!(releases.1, ReleaseOutcome::AlreadyAbsent);
    assert_eq!(releases.2, ReleaseOutcome::NotOwner);
    assert!(
        exists(&server, stolen_too.keys()),
        "the thief's lease stays"
    );
    assert!(
        matches!(inspects.0, InspectOutcome::HeldByAttempt { token, .. } if token == held_token)
    );
    assert!(matches!(inspects.1, InspectOutcome::HeldByOther { .. }));
    assert_eq!(inspects.2, InspectOutcome::Absent);
    std::mem::forget(held);
}

/// A warmed-up client through a proxy that, from now on, drops every reply: each script
/// call runs and its caller never hears back. Returns the script calls run so far.
async fn replies_dropped(timeout_ms: u64) -> (RedisServer, Proxy, LeaseClient, u64) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let settings = redis_settings().with_command_timeout(Duration::from_millis(timeout_ms));
    let client = LeaseClient::redis(&proxy.url(), settings).unwrap();
    warm_up(&client).await;
    let base = script_calls(&server);
    proxy.set_mode(ProxyMode::DropReplies);
    (server, proxy, client, base)
}

fn spawn_acquire(
    client: &LeaseClient,
    req: &LeaseRequest,
) -> tokio::task::JoinHandle<AcquireOutcome> {
    let (client, req) = (client.clone(), req.clone());
    tokio::spawn(async move { client.try_acquire(&req).await.unwrap() })
}

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

/// The certainty rule for what never left: operations that wait for a call slot while
/// every call in flight has lost its reply are `Unavailable` at their deadline — and none
/// of them ran. The ones in flight are `Indeterminate`, and ran.
#[tokio::test]
async fn operations_still_waiting_when_replies_are_lost_are_unavailable_and_did_not_run() {
    let (server, proxy, client, base) = replies_dropped(1000).await;
    // Every slot taken by a call the server ran and whose reply never comes: the first by
    // one operation (nothing was in flight), each next one by as many operations as make
    // a busy backend start another call.
    let mut requests = Vec::new();
    let mut tasks = Vec::new();
    for slot in 0..RedisBackend::CALLS_IN_FLIGHT {
        let batch = if slot == 0 {
            1
        } else {
            RedisBackend::OPERATIONS_FOR_ANOTHER_CALL
        };
        for i in 0..batch {
            let req = request(&client, &format!("sent-{slot}-{i}"), "op");
            tasks.push(spawn_acquire(&client, &req));
            requests.push(req);
        }
        until_script_calls(&server, base + slot as u64 + 1).await;
    }
    let sent = requests.len();
    for i in 0..RedisBackend::OPERATIONS_FOR_ANOTHER_CALL {
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

/// While a call is in flight, a few more operations wait for its end rather than start a
/// call of their own — so each call carries enough to be worth its fixed cost — and as
/// many as `OPERATIONS_FOR_ANOTHER_CALL` leave at once in another call.
#[tokio::test]
async fn a_busy_backend_starts_another_call_only_for_enough_operations() {
    let (server, _proxy, client, base) = replies_dropped(3000).await;
    let mut tasks = vec![spawn_acquire(&client, &request(&client, "first", "op"))];
    until_script_calls(&server, base + 1).await;

    let few = RedisBackend::OPERATIONS_FOR_ANOTHER_CALL - 1;
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
/// call is in flight hands the call slot on: operations queued behind it leave at once, not
/// at their deadline.
#[tokio::test]
async fn a_lone_callers_slot_passes_to_those_queued_behind_it_when_it_goes_away() {
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

/// An item whose key makes its own operation fail (here a key of the wrong type) gets that
/// error; the other items of the same call are answered as if it were not there.
#[tokio::test]
async fn one_items_error_is_its_own() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    warm_up(&client).await;
    let broken = request(&client, "broken", "op");
    let broken_keys = client.keys(broken.purpose(), broken.resource());
    server.cmd(&["HSET", &broken_keys.lease, "not", "a lease"]);
    let fine: Vec<_> = (0..4)
        .map(|i| request(&client, &format!("fine-{i}"), "op"))
        .collect();
    let before = script_calls(&server);

    let (broken_outcome, fine_outcomes) = tokio::join!(
        client.try_acquire(&broken),
        join_all(fine.iter().map(|r| client.try_acquire(r)))
    );

    assert_eq!(script_calls(&server) - before, 1, "one call for all five");
    let AcquireOutcome::Indeterminate { detail, .. } = broken_outcome.unwrap() else {
        panic!("a server error after the call started is indeterminate")
    };
    assert_eq!(detail.kind, FailureKind::ServerError, "{detail}");
    assert!(detail.message.contains("WRONGTYPE"), "{detail}");
    for outcome in fine_outcomes {
        let AcquireOutcome::Acquired(lease) = outcome.unwrap() else {
            panic!("the other items are unaffected")
        };
        assert!(exists(&server, lease.keys()));
        std::mem::forget(lease);
    }
}

/// An ACL that forbids one namespace's keys refuses a whole script call (`NOPERM`, before
/// running it). The call is sent again item by item: the permitted namespace's operations
/// succeed, the forbidden one's are `Unavailable`, and nothing of it was written.
#[tokio::test]
async fn an_acl_refusal_of_one_namespace_does_not_refuse_the_others_in_the_same_call() {
    let server = RedisServer::start();
    let url = server.namespace_user_url();
    let backend = RedisBackend::new(RedisConfig::new(url)).unwrap();
    let allowed = LeaseClient::new(backend.clone(), redis_settings()).unwrap();
    let forbidden_settings = redis_settings().with_namespace(Namespace::new("other").unwrap());
    let forbidden = LeaseClient::new(backend, forbidden_settings).unwrap();
    warm_up(&allowed).await;
    let ok_reqs: Vec<_> = (0..3)
        .map(|i| request(&allowed, &format!("ok-{i}"), "op"))
        .collect();
    let no_req = request(&forbidden, "no", "op");

    let (ok, no) = tokio::join!(
        join_all(ok_reqs.iter().map(|r| allowed.try_acquire(r))),
        forbidden.try_acquire(&no_req)
    );

    for outcome in ok {
        let AcquireOutcome::Acquired(lease) = outcome.unwrap() else {
            panic!("the permitted namespace is unaffected")
        };
        std::mem::forget(lease);
    }
    let AcquireOutcome::Unavailable { detail } = no.unwrap() else {
        panic!("the forbidden namespace is refused before running")
    };
    assert_eq!(detail.kind, FailureKind::ServerRefused, "{detail}");
    assert!(!exists(
        &server,
        &forbidden.keys(no_req.purpose(), no_req.resource())
    ));
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
    let before = script_calls(&server);
    let mut after = acquired(&client, &request(&client, "after", "op")).await;
    let _ = after.release().await;
    assert_eq!(script_calls(&server) - before, 2);
    let keys = client.keys(dropped.purpose(), dropped.resource());
    assert!(!exists(&server, &keys), "the dropped operation ran");
}

/// Fencing inside one call: acquisitions of one group (one fence counter) in the same
/// script call get distinct, increasing tokens, also when the server clock did not move
/// between them.
#[tokio::test]
async fn acquisitions_in_one_call_get_increasing_tokens_from_one_counter() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    warm_up(&client).await;
    // Sixteen resources of one group: the group is the digest's first four hex digits.
    let same: Vec<ResourceDigest> = (0..16)
        .map(|i| ResourceDigest::parse(&format!("sha256:abcd{i:060x}")).unwrap())
        .collect();
    let first = same[0];
    let reqs: Vec<_> = same
        .iter()
        .map(|d| {
            LeaseRequest::builder(
                Purpose::new("batch").unwrap(),
                *d,
                client.new_attempt("op").unwrap(),
            )
            .build()
            .unwrap()
        })
        .collect();
    let before = script_calls(&server);

    let outcomes = join_all(reqs.iter().map(|r| client.try_acquire(r))).await;

    assert_eq!(
        script_calls(&server) - before,
        1,
        "one call for all sixteen"
    );
    let tokens: Vec<FencingToken> = outcomes
        .into_iter()
        .map(|o| match o.unwrap() {
            AcquireOutcome::Acquired(lease) => {
                let token = lease.token();
                std::mem::forget(lease);
                token
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "in call order, strictly increasing: {tokens:?}"
    );
    let counter: String = server.query(&["GET", &client.keys(reqs[0].purpose(), &first).fence]);
    assert_eq!(
        counter,
        tokens[15].get().to_string(),
        "the group's counter holds the last"
    );
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
    assert!(
        ours >= 40,
        "40 operations, {ours} script calls carrying them"
    );
    assert!(
        shared * 4 >= ours * 3,
        "only {shared} of the {ours} calls carrying this test's operations carried a companion's"
    );
}

/// The items of one script call on one lease see each other's writes — the script reads a
/// key once per call and records what its own items write — exactly as if each had been a
/// call of its own: the same outcomes, and the same numbers but for the time between calls.
#[tokio::test]
async fn items_of_one_call_on_one_lease_see_each_others_writes() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    let req = request(&client, "seen", "op");
    let keys = client.keys(req.purpose(), req.resource());
    let script = common::leases::batch_script();
    // (head, mine, the reply expected with t1/t2 for the first and the second token).
    let items: [(&str, &str, &str); 13] = [
        ("A30000", "one op ", "ACQUIRED 30000 t1"),
        ("A30000", "two op ", "CONTENDED 30000"),
        ("A30000", "one other ", "CONFLICT 30000"),
        ("A30000", "one op ", "REPLAYED 30000 t1"),
        ("I", "two op ", "HELD_BY_OTHER 30000 t1"),
        ("N60000", "one op ", "RENEWED"),
        ("I", "one op ", "HELD_BY_ATTEMPT 60000 t1"),
        ("R", "two op ", "NOT_OWNER"),
        ("R", "one op ", "RELEASED"),
        ("N60000", "one op ", "ABSENT"),
        ("I", "two op ", "ABSENT"),
        ("A30000", "two op ", "ACQUIRED 30000 t2"),
        ("I", "one op ", "HELD_BY_OTHER 30000 t2"),
    ];
    let call = |items: &[(&str, &str, &str)]| -> Vec<String> {
        let mut args = vec!["EVAL".to_owned(), script.clone(), String::new()];
        let mut argv = vec!["9".to_owned()];
        for (head, mine, _) in items {
            args.push(keys.lease.clone());
            if head.starts_with('A') {
                args.push(keys.fence.clone());
            }
            argv.extend([head.to_string(), mine.to_string()]);
        }
        args[2] = (args.len() - 3).to_string();
        args.extend(argv);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let replies: Vec<String> = server.query(&args);
        assert_eq!(replies[0], "9", "the call id comes back first");
        replies[1..].to_vec()
    };

    let together = call(&items);
    let t1 = together[0].rsplit(' ').next().unwrap().to_owned();
    let t2 = together[11].rsplit(' ').next().unwrap().to_owned();
    let expected: Vec<String> = items
        .iter()
        .map(|(_, _, e)| e.replace("t1", &t1).replace("t2", &t2))
        .collect();
    assert_eq!(together, expected);
    assert_eq!(
        t2.parse::<u64>().unwrap(),
        t1.parse::<u64>().unwrap() + 1,
        "one TIME per call: the second acquisition of the group gets last + 1"
    );
    assert_eq!(
        server.query::<String>(&["GET", &keys.lease]),
        format!("two op {t2}")
    );

    // The same items, one call each, from a clean key: the same outcomes in order.
    server.cmd(&["DEL", &keys.lease]);
    let apart: Vec<String> = items
        .iter()
        .flat_map(|i| call(std::slice::from_ref(i)))
        .collect();
    let words = |r: &String| r.split(' ').next().unwrap().to_owned();
    assert_eq!(
        apart.iter().map(words).collect::<Vec<_>>(),
        together.iter().map(words).collect::<Vec<_>>()
    );

    // A holder is the same owner only by its whole owner token: not a value without
    // spaces, not an owner token that is a prefix of ours.
    for held in ["foreign", "on op 5", "one-more op 5"] {
        server.cmd(&["SET", &keys.lease, held, "PX", "30000"]);
        let items = [("A30000", "one op ", ""), ("A30000", "one other ", "")];
        let replies = call(&items);
        assert!(
            replies.iter().all(|r| r.starts_with("CONTENDED ")),
            "{held}: {replies:?}"
        );
    }
    server.cmd(&["SET", &keys.lease, "one op2 5", "PX", "30000"]);
    let replies = call(&[("A30000", "one op ", ""), ("A30000", "two op ", "")]);
    assert!(replies[0].starts_with("CONFLICT ") && replies[1].starts_with("CONTENDED "));
}
