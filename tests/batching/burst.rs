//! Admission under a burst: operations beyond what the calls in flight carry wait in the
//! backend's bounded queue instead of failing. The command timeout bounds each round trip,
//! from the instant before its call is written — except a renewal's, a deadline from its
//! submission — and a full queue refuses acquisitions and reads at once, locally, as
//! `QueueFull`: nothing sent, nothing held.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use leasehold::protocol::limits::MAX_QUEUE_LIMIT;
use leasehold::*;

use crate::common::backends::redis_settings;
use crate::common::leases::{acquired, warm_up};
use crate::common::{Proxy, ProxyMode, RedisServer};
use crate::monitor::Monitor;
use crate::{exists, request};

const BURST: usize = 10_000;

/// Script items per call (`batch::MAX_ITEMS`).
const ITEMS_PER_CALL: usize = 32;

/// Outcomes of a burst, by kind.
#[derive(Debug, Default)]
struct Tally {
    acquired: usize,
    unavailable: usize,
    indeterminate: usize,
    other: Vec<&'static str>,
}

/// `BURST` acquisitions of fresh resources, each in a task of its own, as a service's
/// request handlers would run them; `done` counts those answered.
fn spawn_burst(
    client: &LeaseClient,
    name: &str,
    done: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<AcquireOutcome>> {
    (0..BURST)
        .map(|i| {
            let req = request(client, &format!("{name}-{i}"), "op");
            let (client, done) = (client.clone(), Arc::clone(done));
            tokio::spawn(async move {
                let outcome = client.try_acquire(&req).await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
                outcome
            })
        })
        .collect()
}

async fn tally(tasks: Vec<tokio::task::JoinHandle<AcquireOutcome>>) -> (Tally, Vec<LeaseHandle>) {
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
            other => tally.other.push(other.as_str()),
        }
    }
    (tally, leases)
}

/// 10,000 concurrent `try_acquire` of distinct resources from one client on default
/// settings (command timeout 200 ms) against a healthy server: every one acquired — none
/// `Unavailable`, none `Indeterminate` — three times over, though the last of them waits
/// in the queue longer than the command timeout. Renewals of leases already held, sent
/// while thousands of the acquisitions wait, go ahead of every one of them still queued —
/// in the order the server runs them, no acquisition but those sharing the renewals' first
/// and last calls runs between the first renewal and the last — and honour validity as ever:
/// each is `Renewed`, and its local validity ends a drift budget before the server's key
/// expires. Then all 10,000 are released at once, through the same queue.
///
/// On a current-thread runtime, so that the renewals enter the queue in one poll of
/// `join_all` and the bound speaks of the queue's order alone: on a multi-thread runtime
/// of a loaded machine, flushers on the other thread took three batches of acquisitions
/// while the test's thread, descheduled, had queued only part of the renewals.
#[tokio::test(flavor = "current_thread")]
async fn ten_thousand_acquisitions_at_once_are_all_acquired_and_renewals_go_ahead_of_them() {
    const HELD: usize = 100;
    let server = RedisServer::start();
    let settings = LeaseSettings::default();
    let drift = settings.drift_budget;
    let client = LeaseClient::redis(&server.url(), settings).unwrap();
    warm_up(&client).await;
    let mut held = Vec::new();
    for i in 0..HELD {
        held.push(acquired(&client, &request(&client, &format!("held-{i}"), "op")).await);
    }
    for round in 0..3 {
        let started = Instant::now();
        let done = Arc::new(AtomicUsize::new(0));
        let tasks = spawn_burst(&client, &format!("burst-{round}"), &done);
        // Renew once the burst is under way: thousands of acquisitions wait in the queue.
        let deadline = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::SeqCst) < 1_000 {
            assert!(Instant::now() < deadline, "the burst never got going");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let monitor = Monitor::start(&server);
        let renewed = join_all(held.iter_mut().map(LeaseHandle::renew)).await;
        let ran = monitor.finish(&server);
        let ahead = acquisitions_among_renewals(&ran, &held);
        let (tally, mut leases) = tally(tasks).await;
        let took = started.elapsed();
        println!(
            "BURST round={round} {tally:?} took_ms={} acquisitions_among_renewals={ahead}",
            took.as_millis()
        );
        assert_eq!(
            tally.acquired, BURST,
            "round {round}: {tally:?} in {took:?}"
        );
        assert!(
            ahead <= 2 * ITEMS_PER_CALL,
            "the server ran {ahead} acquisitions between the first renewal and the last (at \
             most {} share their calls): renewals waited behind queued acquisitions",
            2 * ITEMS_PER_CALL
        );
        for (outcome, lease) in renewed.iter().zip(&mut held) {
            assert!(
                matches!(outcome, RenewOutcome::Renewed { .. }),
                "{outcome:?}"
            );
            within_the_servers_ttl(&server, lease, drift);
        }

        let released = join_all(leases.iter_mut().map(LeaseHandle::release)).await;
        let kept = released
            .iter()
            .filter(|r| **r != ReleaseOutcome::Released)
            .count();
        assert_eq!(kept, 0, "round {round}: releases that did not release");
        assert!(leases.iter().all(|l| !exists(&server, l.keys())));
    }
}

/// The acquisitions the server ran from its first renewal of `held` to its last, by the
/// commands it ran (MONITOR's `lines`): in each script call the items that renew none of
/// `held` (an acquisition names two keys, its lease and its fence; a renewal one); a
/// renewal by the server's own command (`SET … IFEQ`) is a command of its own. Renewals
/// that go ahead of every acquisition still queued share at most their first call (taken
/// while they were being queued) and their last with acquisitions.
fn acquisitions_among_renewals(lines: &[String], held: &[LeaseHandle]) -> usize {
    let held: HashSet<&str> = held.iter().map(|l| l.keys().lease()).collect();
    let mut ran = Vec::new();
    for line in lines {
        // `<time> [<db> <client>] "<command>" "<arg>" …`: the quoted parts.
        let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        match args.first().map(|c| c.to_ascii_uppercase()).as_deref() {
            Some("EVALSHA") => {
                let count: usize = args[2].parse().expect("EVALSHA's key count");
                let keys = &args[3..3 + count];
                let renewals = keys.iter().filter(|k| held.contains(*k)).count();
                ran.push((renewals, (count - renewals) / 2));
            }
            Some("SET") if held.contains(args[1]) => ran.push((1, 0)),
            _ => {}
        }
    }
    let renewals: usize = ran.iter().map(|r| r.0).sum();
    assert_eq!(renewals, held.len(), "every renewal ran once");
    let first = ran.iter().position(|r| r.0 > 0).expect("a renewal ran");
    let last = ran.iter().rposition(|r| r.0 > 0).expect("a renewal ran");
    ran[first..=last].iter().map(|r| r.1).sum()
}

/// `lease`'s local validity ends at least `drift` before its key on `server` expires.
fn within_the_servers_ttl(server: &RedisServer, lease: &mut LeaseHandle, drift: Duration) {
    let valid_until = lease.valid_until().expect("renewed, so active");
    let pttl: u64 = server.query(&["PTTL", lease.keys().lease()]);
    let read_at = tokio::time::Instant::now();
    // The key expires before `read_at + pttl + 1 ms` (PTTL is read before `read_at`,
    // rounded down); local validity must end a drift budget before the key does.
    let server_expiry = read_at + Duration::from_millis(pttl + 1);
    assert!(
        valid_until + drift <= server_expiry,
        "local validity outlasts the server's key: {:?} past it",
        (valid_until + drift) - server_expiry
    );
}

/// A full queue refuses an acquisition or a read at once, typed `QueueFull` — not
/// `Unavailable` (the server) nor `Indeterminate` — with nothing sent and nothing held.
/// Renewals and releases are admitted all the same; a request that waits tries again, and
/// the refused request acquires once the queue has drained.
#[tokio::test]
async fn a_full_queue_refuses_acquisitions_and_reads_at_once_and_sends_nothing() {
    const LIMIT: usize = 16;
    let server = RedisServer::start();
    let backend = RedisBackend::new(RedisConfig::new(server.url()).queue_limit(LIMIT)).unwrap();
    let client = LeaseClient::new(backend, redis_settings()).unwrap();
    warm_up(&client).await;
    let mut held = acquired(&client, &request(&client, "held", "op")).await;
    let mut released = acquired(&client, &request(&client, "released", "op")).await;
    let reqs: Vec<_> = (0..LIMIT + 4)
        .map(|i| request(&client, &format!("full-{i}"), "op"))
        .collect();
    // Reads by a stranger's attempt: another request on the same leases.
    let strangers: Vec<_> = reqs[..2]
        .iter()
        .map(|r| {
            let attempt = client.new_attempt("op").unwrap();
            LeaseRequest::builder(r.purpose().clone(), *r.resource(), attempt)
                .build()
                .unwrap()
        })
        .collect();
    // A request that waits: its first try is refused too, and the wait loop tries again.
    let waiting = client
        .request("batch", "waits")
        .unwrap()
        .wait_timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // All polled in one go on this current-thread runtime: every one queued (or refused)
    // before any call is sent.
    let (acquires, reads, renewal, release, waited) = tokio::join!(
        join_all(reqs.iter().map(|r| client.try_acquire(r))),
        join_all(strangers.iter().map(|r| client.inspect(r))),
        held.renew(),
        released.release(),
        client.acquire(&waiting),
    );

    let (admitted, refused) = reqs.split_at(LIMIT);
    for (outcome, req) in acquires.into_iter().zip(&reqs) {
        let outcome = outcome.unwrap();
        let keys = client.keys(req.purpose(), req.resource());
        if admitted.contains(req) {
            assert!(
                matches!(outcome, AcquireOutcome::Acquired(_)),
                "{outcome:?}"
            );
            continue;
        }
        let AcquireOutcome::QueueFull { detail } = &outcome else {
            panic!("a full queue refuses: {outcome:?}")
        };
        assert_eq!(detail.kind, FailureKind::QueueFull, "{detail}");
        assert!(!exists(&server, &keys), "refused, yet its lease exists");
    }
    for read in reads {
        let InspectOutcome::QueueFull { detail } = read else {
            panic!("a full queue refuses reads too")
        };
        assert_eq!(detail.kind, FailureKind::QueueFull);
    }
    assert!(
        matches!(renewal, RenewOutcome::Renewed { .. }),
        "{renewal:?}"
    );
    assert_eq!(release, ReleaseOutcome::Released);
    assert!(!exists(&server, released.keys()));
    let waited = waited.unwrap();
    assert!(
        matches!(waited, AcquireOutcome::Acquired(_)),
        "the wait loop backs off and tries again: {waited:?}"
    );

    // The queue has drained: the refused request, sent again, acquires.
    let again = client.try_acquire(&refused[0]).await.unwrap();
    assert!(matches!(again, AcquireOutcome::Acquired(_)), "{again:?}");
}

/// The queue limit is checked before any I/O.
#[test]
fn a_queue_limit_out_of_bounds_is_refused_before_any_io() {
    for limit in [0, MAX_QUEUE_LIMIT + 1] {
        let config = RedisConfig::new("redis://127.0.0.1:1").queue_limit(limit);
        let err = RedisBackend::new(config).unwrap_err();
        assert_eq!(
            err,
            LeaseError::InvalidQueueLimit {
                value: limit,
                max: MAX_QUEUE_LIMIT
            }
        );
        assert_eq!(
            err.to_string(),
            format!("queue_limit {limit} is invalid: must be 1 ..= {MAX_QUEUE_LIMIT}")
        );
    }
}

/// Time in the queue is not the server's: with every round trip taking 1 s (a proxy
/// delays each direction by 500 ms) and a 1.5 s command timeout, acquisitions that wait a
/// whole round trip for the calls ahead of them are still sent and acquired, about 2 s
/// after they were submitted. A renewal's timeout is a deadline from its submission: one
/// bounded by 0.5 s, waiting behind those calls, is never sent — `Unavailable`, its lease
/// unchanged on the server.
#[tokio::test]
async fn time_in_the_queue_is_not_charged_to_the_command_timeout_but_a_renewals_is() {
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let settings = redis_settings().with_command_timeout(TIMEOUT);
    let client = LeaseClient::redis(&proxy.url(), settings).unwrap();
    warm_up(&client).await;
    let mut held = acquired(&client, &request(&client, "held", "op")).await;
    let held_at = Instant::now();
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(500)));

    // Four calls of 32 in flight; the rest wait a round trip for the next calls.
    let reqs: Vec<_> = (0..200)
        .map(|i| request(&client, &format!("slow-{i}"), "op"))
        .collect();
    let started = Instant::now();
    let burst = {
        let (client, reqs) = (client.clone(), reqs.clone());
        tokio::spawn(async move { join_all(reqs.iter().map(|r| client.try_acquire(r))).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let renewal = held.renew_within(Duration::from_millis(500)).await;
    let outcomes = burst.await.unwrap();
    let took = started.elapsed();

    for outcome in outcomes {
        let outcome = outcome.unwrap();
        assert!(
            matches!(outcome, AcquireOutcome::Acquired(_)),
            "{outcome:?}"
        );
    }
    assert!(
        took > TIMEOUT,
        "the last acquisitions waited longer than the command timeout ({took:?})"
    );
    assert!(
        matches!(renewal, RenewOutcome::Unavailable { .. }),
        "a renewal that waited out its deadline in the queue was never sent: {renewal:?}"
    );
    proxy.set_mode(ProxyMode::Pass);
    // Not renewed: the key expires when its acquisition set it to, 30 s after it ran
    // (before `held_at`); a renewal would have set it later by the second it waited.
    let since = (Instant::now() - held_at).as_millis() as u64;
    let pttl: u64 = server.query(&["PTTL", held.keys().lease()]);
    assert!(
        pttl <= 30_000 - since + 1,
        "the key was renewed: {pttl} ms left, {since} ms after the acquisition's reply"
    );
}

/// A process behind its renewals still renews: a renewal waits in the queue until its
/// caller's deadline (here local validity's end), not one command timeout. With every round
/// trip taking 200 ms and 1,000 renewals due at once (the script path: 4 calls of 32 in
/// flight, so the last ones wait about 1.6 s to be sent), each is sent once and confirmed —
/// though most waited longer than the 500 ms command timeout. Given up at the command
/// timeout, each would be asked again behind everything queued meanwhile, and fail.
#[tokio::test]
async fn renewals_that_wait_in_the_queue_past_the_command_timeout_are_sent_once_and_confirmed() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    const LEASES: usize = 1000;
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let settings = redis_settings().with_command_timeout(TIMEOUT);
    // The script path on every server, so the queue is as long on Valkey as on Redis.
    let backend = RedisBackend::new(RedisConfig::new(proxy.url()).native_commands(false)).unwrap();
    let client = LeaseClient::new(backend, settings).unwrap();
    warm_up(&client).await;
    let reqs: Vec<_> = (0..LEASES)
        .map(|i| request(&client, &format!("renewed-{i}"), "op"))
        .collect();
    let mut held = Vec::with_capacity(LEASES);
    for outcome in join_all(reqs.iter().map(|r| client.try_acquire(r))).await {
        match outcome.unwrap() {
            AcquireOutcome::Acquired(lease) => held.push(lease),
            other => panic!("{other:?}"),
        }
    }
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(100)));
    let calls_before: u64 = crate::script_calls(&server);

    let started = Instant::now();
    let renewals = join_all(held.iter_mut().map(|lease| lease.renew())).await;
    let took = started.elapsed();
    let calls = crate::script_calls(&server) - calls_before;

    let unconfirmed: Vec<_> = renewals
        .iter()
        .filter(|r| !matches!(r, RenewOutcome::Renewed { .. }))
        .collect();
    assert!(
        unconfirmed.is_empty(),
        "{} of {LEASES} renewals not confirmed, e.g. {:?}",
        unconfirmed.len(),
        unconfirmed.first()
    );
    assert!(
        took > 2 * TIMEOUT,
        "the last renewals waited in the queue longer than the command timeout ({took:?})"
    );
    // Each renewal was sent once: 32 to a call, none asked again.
    assert!(
        calls <= (LEASES as u64).div_ceil(32) + 8,
        "{calls} script calls for {LEASES} renewals: renewals were sent again"
    );
    proxy.set_mode(ProxyMode::Pass);
}
