//! The wait policy as a table: each row feeds a fresh policy (a 1 s wait from t0) the
//! outcomes of successive tries, each at a time, and checks every step. Jitter draws its
//! maximum, so pauses are exact.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::backend::{FailureDetail, FailureKind};
use crate::protocol::OperationId;

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy)]
enum Try {
    Conflict,
    Contended(u64),
    Indeterminate,
    Unavailable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Done, with an outcome of this `as_str()`.
    Done(&'static str),
    Subscribe,
    /// Retry at t0 + ms, for this reason.
    Retry(u64, &'static str),
}

struct Row {
    name: &'static str,
    tries: &'static [(Try, u64, Expect)],
}

use Expect::{Done, Retry, Subscribe};

#[rustfmt::skip]
const ROWS: &[Row] = &[
    Row { name: "a conflict ends the wait at once", tries: &[(Try::Conflict, 0, Done("owner_operation_conflict"))] },
    Row { name: "first contention subscribes, then sleeps retry_after + jitter", tries: &[
        (Try::Contended(100), 0, Subscribe),
        (Try::Contended(100), 5, Retry(115, "contended")),
        (Try::Contended(100), 115, Retry(225, "contended")),
    ] },
    Row { name: "no sleep past the deadline", tries: &[
        (Try::Contended(5000), 0, Subscribe),
        (Try::Contended(5000), 5, Retry(1000, "contended")),
    ] },
    Row { name: "at the deadline the last outcome is returned", tries: &[
        (Try::Contended(100), 0, Subscribe),
        (Try::Contended(100), 1000, Done("contended")),
    ] },
    Row { name: "unavailable backs off, doubling", tries: &[
        (Try::Unavailable, 0, Retry(10, "unavailable")),
        (Try::Unavailable, 10, Retry(30, "unavailable")),
        (Try::Unavailable, 30, Retry(70, "unavailable")),
    ] },
    Row { name: "indeterminate replays after a short pause", tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
    ] },
    Row { name: "after a try that may have landed, a failed end is indeterminate", tries: &[
        (Try::Indeterminate, 0, Retry(10, "indeterminate")),
        (Try::Unavailable, 1000, Done("indeterminate")),
    ] },
    Row { name: "only unavailable tries: the end is unavailable", tries: &[
        (Try::Unavailable, 0, Retry(10, "unavailable")),
        (Try::Unavailable, 1000, Done("unavailable")),
    ] },
    Row { name: "a zero wait is one try", tries: &[
        (Try::Contended(100), 1000, Done("contended")),
    ] },
];

fn outcome(t: Try, attempt: &Attempt) -> AcquireOutcome {
    let detail = || FailureDetail::new(FailureKind::Timeout, "test");
    match t {
        Try::Conflict => AcquireOutcome::OwnerOperationConflict {
            retry_after: MS * 100,
        },
        Try::Contended(ms) => AcquireOutcome::Contended {
            retry_after: MS * u32::try_from(ms).unwrap_or(u32::MAX),
        },
        Try::Indeterminate => AcquireOutcome::Indeterminate {
            attempt: attempt.clone(),
            detail: detail(),
        },
        Try::Unavailable => AcquireOutcome::Unavailable { detail: detail() },
    }
}

#[test]
fn every_row_of_the_wait_policy_table() {
    let attempt = Attempt::new(OperationId::new("wait-test").expect("id")).expect("attempt");
    let t0 = Instant::now();
    let at = |ms: u64| t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX);
    for row in ROWS {
        let mut policy = WaitPolicy::new(t0, Duration::from_secs(1));
        let mut jitter = |max: Duration| max;
        for &(t, ms, expect) in row.tries {
            let step = policy.next(outcome(t, &attempt), at(ms), &mut jitter);
            let got = match &step {
                Step::Done(outcome) => Done(outcome.as_str()),
                Step::Subscribe => Subscribe,
                Step::Retry { wake_at, why } => {
                    let ms = wake_at.duration_since(t0).as_millis();
                    Retry(u64::try_from(ms).unwrap_or(u64::MAX), why)
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
    let mut policy = WaitPolicy::new(t0, Duration::ZERO);
    let mut jitter = |max: Duration| max;
    let _ = policy.next(outcome(Try::Indeterminate, &attempt), t0 - MS, &mut jitter);
    match policy.next(outcome(Try::Unavailable, &attempt), t0, &mut jitter) {
        Step::Done(AcquireOutcome::Indeterminate { attempt: a, .. }) => assert_eq!(a, attempt),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_backoff_after_unavailable_stops_growing_at_its_maximum() {
    let t0 = Instant::now();
    let mut policy = WaitPolicy::new(t0, Duration::from_secs(3600));
    let mut jitter = |max: Duration| max;
    let mut last = Duration::ZERO;
    for _ in 0..20 {
        let unavailable = AcquireOutcome::Unavailable {
            detail: FailureDetail::new(FailureKind::Connect, "test"),
        };
        if let Step::Retry { wake_at, .. } = policy.next(unavailable, t0, &mut jitter) {
            last = wake_at - t0;
        }
    }
    assert_eq!(last, BACKOFF_MAX);
}
