//! What one shared script call answers: each operation its own outcome, as if it had
//! been a call of its own — an error, an ACL refusal or another item's write on the same
//! lease included — and fencing tokens that still increase within one call.

use crate::common;
use crate::common::RedisServer;
use crate::common::backends::redis_settings;
use crate::common::leases::{acquired, warm_up};
use crate::{exists, request, script_calls};
use futures_util::future::join_all;
use leasehold::*;

/// A lease of `client` that was taken away: deleted, and with `thief` set also taken by it.
async fn taken_away(
    server: &RedisServer,
    client: &LeaseClient,
    resource: &str,
    thief: Option<&LeaseClient>,
) -> LeaseHandle {
    let lease = acquired(client, &request(client, resource, "op")).await;
    server.cmd(&["DEL", lease.keys().lease()]);
    if let Some(thief) = thief {
        std::mem::forget(acquired(thief, &request(thief, resource, "thief")).await);
    }
    lease
}

#[tokio::test]
async fn one_script_call_answers_every_operation_with_its_own_outcome() {
    every_operation_gets_its_own_outcome(false).await;
}

/// On a server that renews and releases by its own commands, the operations queued together
/// leave as one script call and one pipeline of those commands, sent at once; the releases
/// that found no lease of theirs are answered by one more script call (only the script
/// tells absent from another's). Elsewhere, as above.
#[tokio::test]
async fn native_and_script_items_of_one_call_each_get_their_own_outcome() {
    every_operation_gets_its_own_outcome(true).await;
}

async fn every_operation_gets_its_own_outcome(native_commands: bool) {
    let server = RedisServer::start();
    let config = RedisConfig::new(server.url()).native_commands(native_commands);
    let client = LeaseClient::new(RedisBackend::new(config).unwrap(), redis_settings()).unwrap();
    let info: String = server.query(&["INFO", "server"]);
    let native = native_commands && ServerCapabilities::from_info(&info).releases_natively();
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
    // Reads by `mine`'s attempt of its lease, of theirs, and of nobody's.
    let read = |digest| {
        LeaseRequest::builder(purpose.clone(), digest, mine.attempt().clone())
            .build()
            .unwrap()
    };
    let (read_theirs, read_nobody) = (
        read(ResourceDigest::of("theirs")),
        read(ResourceDigest::of("nobody")),
    );
    let (before, pipelines_before) = (script_calls(&server), server.calls_of("ping"));

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
                client.inspect(&mine),
                client.inspect(&read_theirs),
                client.inspect(&read_nobody),
            )
        },
    );

    let calls = script_calls(&server) - before;
    let pipelines = server.calls_of("ping") - pipelines_before;
    let expected = if native { (2, 1) } else { (1, 0) };
    assert_eq!(
        (calls, pipelines),
        expected,
        "18 operations queued together took {calls} script calls and {pipelines} pipelines"
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

/// An item whose key makes its own operation fail (here a key of the wrong type) gets that
/// error; the other items of the same call are answered as if it were not there.
#[tokio::test]
async fn one_items_error_is_its_own() {
    let server = RedisServer::start();
    let client = LeaseClient::redis(&server.url(), redis_settings()).unwrap();
    warm_up(&client).await;
    let broken = request(&client, "broken", "op");
    let broken_keys = client.keys(broken.purpose(), broken.resource());
    server.cmd(&["HSET", broken_keys.lease(), "not", "a lease"]);
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
    let counter: String = server.query(&["GET", client.keys(reqs[0].purpose(), &first).fence()]);
    assert_eq!(
        counter,
        tokens[15].get().to_string(),
        "the group's counter holds the last"
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
        ("A30000 -00000000000000a1", "one op ", "ACQUIRED 30000 t1"),
        ("A30000 -00000000000000a1", "two op ", "CONTENDED 30000"),
        ("A30000 -00000000000000a1", "one other ", "CONFLICT 30000"),
        ("A30000 -00000000000000a1", "one op ", "REPLAYED 30000 t1"),
        ("I", "two op ", "HELD_BY_OTHER 0 30000 t1"),
        ("N60000", "one op ", "RENEWED"),
        ("I", "one op ", "HELD_BY_ATTEMPT 0 60000 t1"),
        ("R", "two op ", "NOT_OWNER"),
        ("R", "one op ", "RELEASED"),
        ("N60000", "one op ", "ABSENT"),
        ("I", "two op ", "ABSENT 0"),
        ("A30000 -00000000000000a1", "two op ", "ACQUIRED 30000 t2"),
        ("I", "one op ", "HELD_BY_OTHER 0 30000 t2"),
    ];
    let call = |items: &[(&str, &str, &str)]| -> Vec<String> {
        let mut args = vec!["EVAL".to_owned(), script.clone(), String::new()];
        let mut argv = vec!["9".to_owned()];
        for (head, mine, _) in items {
            args.push(keys.lease().to_owned());
            if head.starts_with('A') {
                args.push(keys.fence().to_owned());
            }
            if head.starts_with('A') || head.starts_with('I') {
                args.push(leasehold::fuzzing::calls::line_key(&keys));
            }
            argv.extend([head.to_string(), mine.to_string()]);
        }
        args[2] = (args.len() - 3).to_string();
        args.extend(argv);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let replies = common::leases::batch_lines(server.cmd(&args));
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
        server.query::<String>(&["GET", keys.lease()]),
        format!("two op {t2}")
    );

    // The same items, one call each, from a clean key: the same outcomes in order.
    server.cmd(&["DEL", keys.lease()]);
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
        server.cmd(&["SET", keys.lease(), held, "PX", "30000"]);
        let items = [
            ("A30000 -00000000000000a1", "one op ", ""),
            ("A30000 -00000000000000a1", "one other ", ""),
        ];
        let replies = call(&items);
        assert!(
            replies.iter().all(|r| r.starts_with("CONTENDED ")),
            "{held}: {replies:?}"
        );
    }
    server.cmd(&["SET", keys.lease(), "one op2 5", "PX", "30000"]);
    let replies = call(&[
        ("A30000 -00000000000000a1", "one op ", ""),
        ("A30000 -00000000000000a1", "two op ", ""),
    ]);
    assert!(replies[0].starts_with("CONFLICT ") && replies[1].starts_with("CONTENDED "));
}
