//! The wait policy as a table: each row feeds a fresh policy (a 1 s wait from t0) the
//! outcomes of successive tries, each at a time, and checks every step. Jitter draws its
//! maximum, so pauses are exact.

use std::time::Duration;

use tokio::time::Instant;

use super::{BACKOFF_MAX, Listen, Patience, Place, RESUBSCRIBE_MAX, Step, WaitPolicy};
use crate::backend::{FailureDetail, FailureKind};
use crate::lease::acquire::AcquireOutcome;
use crate::protocol::{Attempt, OperationId};
use crate::telemetry::Label as _;

const MS: Duration = Duration::from_millis(1);

/// A try's outcome, or what the loop's subscription did.
#[derive(Debug, Clone, Copy)]
enum Try {
    Conflict,
    Contended(u64),
    /// Contended, next in line after the first.
    Next(u64),
    /// Contended, further back in line.
    Behind(u64),
    /// Contended, far back in line.
    Far(u64),
    LockDelayed(u64),
    Indeterminate,
    Unavailable,
    /// Subscribing succeeded.
    Subscribed,
    /// Subscribing failed.
    SubscribeFailed,
    /// The subscription ended.
    Lost,
    /// Its turn came, while it slept behind others.
    Turned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Done, with an outcome of this `as_str()`.
    Done(&'static str),
    Subscribe,
    /// Retry at t0 + ms, for this reason, woken early by a release or its turn.
    Retry(u64, &'static str),
    /// Retry at t0 + ms, contended, woken early only by its turn.
    Turn(u64),
    /// After a subscription event: the next attempt to subscribe is at t0 + ms (`None`:
    /// there is a subscription).
    Resubscribe(Option<u64>),
    /// After its turn: first in line, it looks at t0 + ms unless a release wakes it.
    Look(u64),
}

struct Row {
    name: &'static str,
    /// `None`: a 1 s wait, whatever the outcomes.
    patience: Option<Patience>,
    tries: &'static [(Try, u64, Expect)],
}

const fn wait(wait: Duration) -> Patience {
    Patience {
        wait,
        contended: wait,
        settling: Duration::ZERO,
    }
}

const SECOND: Patience = wait(Duration::from_secs(1));

/// A supervisor's: no wait but while contended, and then up to 10 s.
const WHILE_CONTENDED: Option<Patience> = Some(Patience {
    wait: Duration::ZERO,
    contended: Duration::from_secs(10),
    settling: Duration::ZERO,
});

/// The runtime's entry points': a try (no wait), settled for up to 3 s (the TTL).
const SETTLING: Option<Patience> = Some(Patience {
    wait: Duration::ZERO,
    contended: Duration::ZERO,
    settling: Duration::from_secs(3),
});

use Expect::{Done, Look, Resubscribe, Retry, Subscribe, Turn};

#[rustfmt::skip]
const ROWS: &[Row] = &[
    Row { name: "a conflict ends the wait at once", patience: None, tries: &[(Try::Conflict, 0, Done("owner_operation_conflict"))] },
    Row { name: "first contention subscribes, then sleeps retry_after + jitter", patience: None, tries: &[
        (Try::Contended(100), 0, Subscribe),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Contended(100), 5, Retry(115, "contended")),
        (Try::Contended(100), 115, Retry(225, "contended")),
    ] },
    Row { name: "no sleep past the deadline", patience: None, tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Contended(600), 500, Retry(1000, "contended")),
    ] },
    Row { name: "subscribed, a waiter looks again within 750 ms whatever the holder's TTL", patience: WHILE_CONTENDED, tries: &[
        (Try::Contended(30000), 0, Subscribe),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Contended(30000), 2, Retry(752, "contended")),
        (Try::Contended(30000), 752, Retry(1502, "contended")),
        (Try::LockDelayed(30000), 1502, Retry(2252, "lock_delayed")),
    ] },
    Row { name: "far back in line, a waiter subscribes without a try, sleeps through releases and looks again within 950 ms", patience: WHILE_CONTENDED, tries: &[
        (Try::Behind(30000), 0, Turn(950)),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Behind(10), 950, Turn(1900)),
        (Try::Contended(30000), 1900, Retry(2650, "contended")),
        (Try::Behind(30000), 2650, Turn(3600)),
    ] },
    Row { name: "next in line, a waiter tries once subscribed, then sleeps through releases", patience: WHILE_CONTENDED, tries: &[
        (Try::Next(30000), 0, Subscribe),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Next(30000), 2, Turn(952)),
    ] },
    Row { name: "told its turn, a waiter does not try but looks within 750 ms, as the first does", patience: WHILE_CONTENDED, tries: &[
        (Try::Behind(30000), 0, Turn(950)),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Turned, 400, Look(1150)),
        (Try::Contended(30000), 1150, Retry(1900, "contended")),
    ] },
    Row { name: "far back in line, a waiter subscribes without a try and looks again within 5 s", patience: WHILE_CONTENDED, tries: &[
        (Try::Far(30000), 0, Turn(5000)),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Far(30000), 4000, Turn(9000)),
        (Try::Behind(30000), 8000, Turn(8950)),
    ] },
    Row { name: "a turn near the deadline looks no later than it", patience: None, tries: &[
        (Try::Behind(30000), 0, Turn(950)),
        (Try::Turned, 600, Look(1000)),
    ] },
    Row { name: "behind others, an unknown end is replayed as soon as ever", patience: SETTLING, tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
    ] },
    Row { name: "without a subscription a contended sleep ends at the next attempt at one", patience: None, tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::SubscribeFailed, 1, Resubscribe(Some(51))),
        (Try::Contended(5000), 2, Retry(51, "contended")),
        (Try::SubscribeFailed, 51, Resubscribe(Some(151))),
        (Try::Contended(5000), 52, Retry(151, "contended")),
        (Try::Subscribed, 151, Resubscribe(None)),
        (Try::Contended(5000), 152, Retry(902, "contended")),
    ] },
    Row { name: "a subscription that ends is made again soon; a confirmed one starts the pauses over", patience: None, tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Lost, 10, Resubscribe(Some(60))),
        (Try::SubscribeFailed, 60, Resubscribe(Some(160))),
        (Try::Subscribed, 160, Resubscribe(None)),
        (Try::Lost, 200, Resubscribe(Some(250))),
    ] },
    Row { name: "a retry_after shorter than the next attempt to subscribe is kept", patience: None, tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::SubscribeFailed, 1, Resubscribe(Some(51))),
        (Try::Contended(20), 2, Retry(24, "contended")),
    ] },
    Row { name: "at the deadline the last outcome is returned", patience: None, tries: &[
        (Try::Contended(100), 0, Subscribe),
        (Try::Contended(100), 1000, Done("contended")),
    ] },
    Row { name: "unavailable backs off, doubling", patience: None, tries: &[
        (Try::Unavailable, 0, Retry(10, "unavailable")),
        (Try::Unavailable, 10, Retry(30, "unavailable")),
        (Try::Unavailable, 30, Retry(70, "unavailable")),
    ] },
    Row { name: "indeterminate replays after a short pause", patience: None, tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
    ] },
    Row { name: "after a try that may have landed, a failed end is indeterminate", patience: None, tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
        (Try::Unavailable, 1000, Done("indeterminate")),
    ] },
    Row { name: "only unavailable tries: the end is unavailable", patience: None, tries: &[
        (Try::Unavailable, 0, Retry(10, "unavailable")),
        (Try::Unavailable, 1000, Done("unavailable")),
    ] },
    Row { name: "a zero wait is one try", patience: None, tries: &[
        (Try::Contended(100), 1000, Done("contended")),
    ] },
    Row { name: "a supervisor waits while contended, listening", patience: WHILE_CONTENDED, tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::Subscribed, 1, Resubscribe(None)),
        (Try::Contended(500), 2, Retry(552, "contended")),
        (Try::Contended(500), 9800, Retry(10000, "contended")),
        (Try::Contended(500), 10000, Done("contended")),
    ] },
    Row { name: "an unknown end is replayed past the wait until an answer settles it", patience: SETTLING, tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
        (Try::Unavailable, 10, Retry(20, "unavailable")),
        (Try::Unavailable, 20, Retry(40, "unavailable")),
        (Try::Indeterminate, 40, Retry(50, "indeterminate")),
        (Try::Contended(100), 50, Done("contended")),
    ] },
    Row { name: "settling ends a TTL past the wait, unknown", patience: SETTLING, tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
        (Try::Unavailable, 2900, Retry(2910, "unavailable")),
        (Try::Unavailable, 3000, Done("indeterminate")),
    ] },
    Row { name: "settling replays only what may have landed: unavailable alone ends with the wait", patience: SETTLING, tries: &[
        (Try::Unavailable, 0, Done("unavailable")),
    ] },
    Row { name: "without settling an unknown end ends with the wait", patience: None, tries: &[
        (Try::Indeterminate, 1000, Done("indeterminate")),
    ] },
    Row { name: "a supervisor's wait ends on anything but contention", patience: WHILE_CONTENDED, tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::Unavailable, 2, Done("unavailable")),
    ] },
];

fn outcome(t: Try, attempt: &Attempt) -> AcquireOutcome {
    let detail = || FailureDetail::new(FailureKind::Timeout, "test");
    match t {
        Try::Conflict => AcquireOutcome::OwnerOperationConflict {
            retry_after: MS * 100,
        },
        Try::Contended(ms) | Try::Next(ms) | Try::Behind(ms) | Try::Far(ms) => {
            AcquireOutcome::Contended {
                retry_after: MS * u32::try_from(ms).unwrap_or(u32::MAX),
            }
        }
        Try::LockDelayed(ms) => AcquireOutcome::LockDelayed {
            retry_after: MS * u32::try_from(ms).unwrap_or(u32::MAX),
        },
        Try::Indeterminate => AcquireOutcome::Indeterminate {
            attempt: attempt.clone(),
            detail: detail(),
        },
        Try::Unavailable => AcquireOutcome::Unavailable { detail: detail() },
        Try::Subscribed | Try::SubscribeFailed | Try::Lost | Try::Turned => {
            unreachable!("{t:?} is not a try")
        }
    }
}

/// Applies a subscription event to `policy` and says when it will next subscribe; `None`
/// for a try.
fn subscription_event(
    policy: &mut WaitPolicy,
    t: Try,
    now: Instant,
    t0: Instant,
) -> Option<Expect> {
    match t {
        Try::Subscribed => policy.handle_subscribed(true, now),
        Try::SubscribeFailed => policy.handle_subscribed(false, now),
        Try::Lost => {
            policy.handle_subscription_lost(now);
        }
        _ => return None,
    }
    assert!(!policy.poll_subscribe(now), "{t:?} at {now:?}");
    let at = policy.resubscribe_at.map(|at| {
        let ms = at.duration_since(t0).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX)
    });
    Some(Resubscribe(at))
}

#[test]
fn every_row_of_the_wait_policy_table() {
    let attempt = Attempt::new(OperationId::new("wait-test").expect("id")).expect("attempt");
    let t0 = Instant::now();
    let at = |ms: u64| t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX);
    for row in ROWS {
        let mut policy = WaitPolicy::new(t0, row.patience.unwrap_or(SECOND));
        let mut jitter = |max: Duration| max;
        for &(t, ms, expect) in row.tries {
            if let Try::Turned = t {
                let look = policy.handle_turn(at(ms), &mut jitter);
                let got = Look(u64::try_from(look.duration_since(t0).as_millis()).unwrap_or(0));
                assert_eq!(got, expect, "{}: {t:?} at {ms}", row.name);
                continue;
            }
            if let Some(got) = subscription_event(&mut policy, t, at(ms), t0) {
                assert_eq!(got, expect, "{}: {t:?} at {ms}", row.name);
                continue;
            }
            let place = match t {
                Try::Next(_) => Place::Next,
                Try::Behind(_) => Place::Behind,
                Try::Far(_) => Place::Far,
                _ => Place::Front,
            };
            let step = policy.handle_outcome(outcome(t, &attempt), place, at(ms), &mut jitter);
            let got = match &step {
                Step::Done(outcome) => Done(outcome.as_str()),
                Step::Subscribe => Subscribe,
                Step::Retry {
                    wake_at,
                    why,
                    listen,
                } => {
                    let ms =
                        u64::try_from(wake_at.duration_since(t0).as_millis()).unwrap_or(u64::MAX);
                    match listen {
                        Listen::Releases => Retry(ms, why.label()),
                        Listen::Turn => Turn(ms),
                    }
                }
            };
            assert_eq!(got, expect, "{}: {t:?} at {ms}", row.name);
        }
    }
}

#[test]
fn the_settled_indeterminate_outcome_names_the_attempt_that_may_hold_the_lease() {
    let attempt = Attempt::new(OperationId::new("wait-test").expect("id")).expect("attempt");
    let t0 = Instant::now();
    let mut policy = WaitPolicy::new(t0, wait(Duration::ZERO));
    let mut jitter = |max: Duration| max;
    let _ = policy.handle_outcome(
        outcome(Try::Indeterminate, &attempt),
        Place::Front,
        t0 - MS,
        &mut jitter,
    );
    match policy.handle_outcome(
        outcome(Try::Unavailable, &attempt),
        Place::Front,
        t0,
        &mut jitter,
    ) {
        Step::Done(AcquireOutcome::Indeterminate { attempt: a, .. }) => assert_eq!(a, attempt),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_backoff_after_unavailable_stops_growing_at_its_maximum() {
    let t0 = Instant::now();
    let mut policy = WaitPolicy::new(t0, wait(Duration::from_secs(3600)));
    let mut jitter = |max: Duration| max;
    let mut last = Duration::ZERO;
    for _ in 0..20 {
        let unavailable = AcquireOutcome::Unavailable {
            detail: FailureDetail::new(FailureKind::Connect, "test"),
        };
        if let Step::Retry { wake_at, .. } =
            policy.handle_outcome(unavailable, Place::Front, t0, &mut jitter)
        {
            last = wake_at - t0;
        }
    }
    assert_eq!(last, BACKOFF_MAX);
}

#[test]
fn the_pause_before_subscribing_again_stops_growing_at_its_maximum() {
    let t0 = Instant::now();
    let mut policy = WaitPolicy::new(t0, wait(Duration::from_secs(3600)));
    let mut last = Duration::ZERO;
    for _ in 0..20 {
        last = policy.handle_subscription_lost(t0) - t0;
    }
    assert_eq!(last, RESUBSCRIBE_MAX);
}

/// Invariant 6: a grant handled after its local validity ended is not handed out. It is
/// replayed as an uncertain attempt (within the settling deadline), ends the wait
/// `Indeterminate` past it, and its handle is LOST — dropping it releases nothing, so a
/// replay still finds the lease. A grant with validity left is handed out as ever.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_grant_whose_validity_ended_before_its_reply_was_handled_is_replayed_not_handed_out() {
    use crate::{LeaseClient, LeaseSettings, MemoryBackend};

    let client = LeaseClient::new(MemoryBackend::new(), LeaseSettings::default()).expect("client");
    let request = client
        .request("wait-test", "spent")
        .expect("builder")
        .ttl(Duration::from_secs(3))
        .build()
        .expect("request");
    let mut grant = client.try_acquire(&request).await.expect("outcome");
    let valid_until = match &mut grant {
        AcquireOutcome::Acquired(lease) => lease.valid_until(),
        _ => None,
    }
    .expect("acquired");
    let mut jitter = |max: Duration| max;

    let t0 = Instant::now();
    let mut policy = WaitPolicy::new(t0, SETTLING.unwrap_or(SECOND));
    match policy.handle_outcome(grant, Place::Front, valid_until, &mut jitter) {
        Step::Retry { wake_at, why, .. } => {
            assert_eq!(
                (wake_at - valid_until, why),
                (10 * MS, super::Retried::Indeterminate)
            );
        }
        other => panic!("a spent grant was not replayed: {other:?}"),
    }
    // Its drop released nothing: the same attempt is replayed, under the same token.
    tokio::task::yield_now().await;
    let replay = client.try_acquire(&request).await.expect("outcome");
    assert_eq!(replay.as_str(), "replayed", "{replay:?}");

    let mut policy = WaitPolicy::new(t0, wait(Duration::ZERO));
    match policy.handle_outcome(
        replay,
        Place::Front,
        t0 + Duration::from_secs(30),
        &mut jitter,
    ) {
        Step::Done(AcquireOutcome::Indeterminate { attempt, .. }) => {
            assert_eq!(&attempt, request.attempt());
        }
        other => panic!("past the deadline a spent grant is indeterminate: {other:?}"),
    }

    let mut policy = WaitPolicy::new(t0, wait(Duration::ZERO));
    let fresh = client.try_acquire(&request).await.expect("outcome");
    match policy.handle_outcome(fresh, Place::Front, Instant::now(), &mut jitter) {
        Step::Done(AcquireOutcome::Replayed(_)) => {}
        other => panic!("a grant with validity left is handed out: {other:?}"),
    }
}
