//! The queue as a table: each row feeds a fresh batcher a sequence of operations — items
//! pushed (named by their order), calls taken at an instant, withdrawals, a lone send, a
//! failed connection, a flusher asking whether to go on — and checks every answer.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::super::deadline::Bound;
use super::super::item::Item;
use super::super::{ANOTHER_CALL, ItemResult, MAX_IN_FLIGHT, MAX_ITEMS};
use super::Batcher;
use crate::backend::redis::ServerCapabilities;
use crate::backend::{FailureDetail, FailureKind, SendFailure};
use crate::protocol::{FencingToken, Holding, LeaseKeys, LeaseRequest, Namespace};
use crate::protocol::{Purpose, ResourceDigest};
use crate::{Attempt, OperationId, OwnerToken};

const MS: Duration = Duration::from_millis(1);
/// A generous round trip: no acquisition or read expires in a row.
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Acquire,
    Read,
    /// A renewal whose deadline is this many ms after t0.
    Renew(u64),
    Release,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Push an item of this kind; it is named by its order among the pushes.
    Push(Kind),
    /// Push this many acquisitions.
    PushMany(usize),
    /// Take a call at t0 + ms.
    Take(u64),
    Withdraw(usize),
    TakeAlone(usize),
    /// A flusher asks whether anything waits.
    Keep,
    /// A connection attempt failed for the items pushed before this one.
    Fail(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Queued; `true`: the caller is now a flusher.
    Queued(bool),
    /// Refused: the queue is full.
    Full,
    /// The call took these items, in this order; these were answered `NotSent` instead
    /// (their deadline had passed).
    Took(&'static [usize], &'static [usize]),
    /// The call took the first this-many items pushed, in order.
    TookFirst(usize, usize),
    Yes,
    No,
    /// These items were answered with the failure.
    Failed(&'static [usize]),
    /// Not checked (pushes whose flusher starts the row does not test).
    Any,
}

struct Row {
    name: &'static str,
    limit: usize,
    ops: &'static [(Op, Expect)],
}

use Expect::{Any, Failed, Full, No, Queued, Took, TookFirst, Yes};
use Kind::{Acquire, Read, Release, Renew};
use Op::{Fail, Keep, Push, PushMany, Take, TakeAlone, Withdraw};

#[rustfmt::skip]
const ROWS: &[Row] = &[
    Row { name: "an idle batcher's first item starts a flusher; the next ride with its call", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (Push(Acquire), Queued(false)),
        (Take(0), Took(&[0, 1], &[])),
    ] },
    Row { name: "renewals and releases go ahead of acquisitions and reads queued before them", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (Push(Read), Queued(false)),
        (Push(Renew(1_000)), Queued(false)),
        (Push(Release), Queued(false)),
        (Push(Acquire), Queued(false)),
        (Take(0), Took(&[2, 3, 0, 1, 4], &[])),
    ] },
    Row { name: "a busy batcher adds a call only for enough items, up to its calls in flight", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (PushMany(ANOTHER_CALL - 2), Queued(false)),
        (Push(Acquire), Queued(true)),
        (Push(Acquire), Queued(true)),
        (Push(Acquire), Queued(true)),
        (Push(Acquire), Queued(false)),
    ] },
    Row { name: "a full queue refuses acquisitions and reads, never renewals or releases", limit: 2, ops: &[
        (Push(Acquire), Queued(true)),
        (Push(Read), Queued(false)),
        (Push(Acquire), Full),
        (Push(Read), Full),
        (Push(Renew(1_000)), Queued(false)),
        (Push(Release), Queued(false)),
        (Take(0), Took(&[4, 5, 0, 1], &[])),
        (Push(Acquire), Queued(false)),
    ] },
    Row { name: "a renewal whose deadline passed in the queue is answered, never sent", limit: 100, ops: &[
        (Push(Renew(5)), Queued(true)),
        (Push(Renew(50)), Queued(false)),
        (Push(Acquire), Queued(false)),
        (Take(10), Took(&[1, 2], &[0])),
    ] },
    Row { name: "a withdrawn item is never taken; a taken one cannot be withdrawn", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (Push(Acquire), Queued(false)),
        (Withdraw(0), Yes),
        (Take(0), Took(&[1], &[])),
        (Withdraw(1), No),
    ] },
    Row { name: "only the one item waiting is sent alone", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (TakeAlone(0), Yes),
        (Push(Acquire), Queued(false)),
        (Push(Acquire), Queued(false)),
        (TakeAlone(1), No),
        (Take(0), Took(&[1, 2], &[])),
    ] },
    Row { name: "a failed connection answers the items that waited for it, not later ones", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (Push(Renew(1_000)), Queued(false)),
        (Push(Acquire), Queued(false)),
        (Fail(2), Failed(&[0, 1])),
        (Take(0), Took(&[2], &[])),
    ] },
    Row { name: "a call carries at most its script items; the rest wait for the next", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (PushMany(MAX_ITEMS + 7), Any),
        (Take(0), TookFirst(0, MAX_ITEMS)),
        (Take(0), TookFirst(MAX_ITEMS, 8)),
        (Take(0), Took(&[], &[])),
    ] },
    Row { name: "a flusher with nothing left gives its place back; the next push starts one", limit: 100, ops: &[
        (Push(Acquire), Queued(true)),
        (Take(0), Took(&[0], &[])),
        (Push(Acquire), Queued(false)),
        (Keep, Yes),
        (Take(0), Took(&[1], &[])),
        (Keep, No),
        (Push(Acquire), Queued(true)),
    ] },
];

/// An item of `kind` on resource `r{n}`, so that a taken item names its push.
fn item(kind: Kind, n: usize) -> Item {
    let owner = OwnerToken::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").expect("owner");
    let attempt = Attempt::from_parts(owner, OperationId::new("op").expect("op"));
    let request = LeaseRequest::builder(
        Purpose::new("p").expect("purpose"),
        ResourceDigest::of(format!("r{n}")),
        attempt.clone(),
    )
    .build()
    .expect("request");
    let keys = LeaseKeys::new(&Namespace::default(), request.purpose(), request.resource());
    let holding = Holding::acquired(&request, FencingToken::new(1));
    match kind {
        Acquire => Item::acquire(
            &keys,
            &request,
            crate::protocol::LinePlace::Waits,
            &crate::protocol::WaiterId::of(&crate::protocol::LineSession::new(), request.attempt()),
        ),
        Read => Item::inspect(&keys, &attempt),
        Renew(_) => Item::renew(&keys, &holding, Duration::from_secs(30)),
        Release => Item::release(&keys, &holding),
    }
}

fn bound(kind: Kind, t0: Instant) -> Bound {
    match kind {
        Renew(ms) => Bound::By {
            by: t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX),
            timeout: TIMEOUT,
        },
        _ => Bound::RoundTrip(TIMEOUT),
    }
}

/// What the table checks of one row.
struct Run {
    batcher: Batcher,
    t0: Instant,
    /// Per push (refused ones too): its id (if queued), its resource's lease key, its reply.
    pushed: Vec<(Option<u64>, String, oneshot::Receiver<ItemResult>)>,
}

impl Run {
    fn push(&mut self, kind: Kind) -> Expect {
        let n = self.pushed.len();
        let item = item(kind, n);
        let key = item.route().to_owned();
        let (tx, rx) = oneshot::channel();
        let queued = self.batcher.push(item, bound(kind, self.t0), tx);
        self.pushed.push((queued.map(|(id, _)| id), key, rx));
        queued.map_or(Full, |(_, start)| Queued(start))
    }

    /// The push that queued `id`'s item with this lease key.
    fn named(&self, key: &str) -> usize {
        self.pushed
            .iter()
            .position(|(_, k, _)| k == key)
            .expect("a pushed item")
    }

    fn id(&self, n: usize) -> u64 {
        self.pushed[n].0.expect("queued")
    }

    /// The pushes answered so far with a failure, each once.
    fn answered(&mut self, failure: impl Fn(&SendFailure) -> bool) -> Vec<usize> {
        let mut answered = Vec::new();
        for (n, (_, _, rx)) in self.pushed.iter_mut().enumerate() {
            if let Ok(Err(got)) = rx.try_recv() {
                assert!(failure(&got), "push {n} answered {got}");
                answered.push(n);
            }
        }
        answered
    }

    fn take(&mut self, ms: u64) -> (Vec<usize>, Vec<usize>) {
        let now = self.t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX);
        let taken = self.batcher.take(now, ServerCapabilities::SCRIPTS_ONLY);
        assert_eq!(taken.items.len(), taken.replies.len());
        let took: Vec<usize> = taken.items.iter().map(|i| self.named(i.route())).collect();
        let expired = self
            .answered(|f| matches!(f, SendFailure::NotSent(d) if d.kind == FailureKind::Timeout));
        (took, expired)
    }
}

#[test]
fn every_row_of_the_queue_table() {
    for row in ROWS {
        let mut run = Run {
            batcher: Batcher::new(row.limit),
            t0: Instant::now(),
            pushed: Vec::new(),
        };
        for &(op, expect) in row.ops {
            let got = match op {
                Push(kind) => run.push(kind),
                PushMany(count) => {
                    for _ in 0..count {
                        let got = run.push(Acquire);
                        if expect != Any {
                            assert_eq!(got, expect, "{}: {op:?}", row.name);
                        }
                    }
                    continue;
                }
                Take(ms) => {
                    let (took, expired) = run.take(ms);
                    match expect {
                        TookFirst(from, count) => {
                            let first: Vec<usize> = (from..from + count).collect();
                            assert_eq!((took, expired), (first, vec![]), "{}: {op:?}", row.name);
                            continue;
                        }
                        Took(want, want_expired) => {
                            assert_eq!(
                                (took.as_slice(), expired.as_slice()),
                                (want, want_expired),
                                "{}: {op:?}",
                                row.name
                            );
                            continue;
                        }
                        _ => panic!("{}: a take expects what it took", row.name),
                    }
                }
                Withdraw(n) => yes(run.batcher.withdraw(run.id(n))),
                TakeAlone(n) => yes(run.batcher.take_alone(run.id(n)).is_some()),
                Keep => yes(run.batcher.keep_flushing()),
                Fail(before) => {
                    let failure =
                        SendFailure::NotSent(FailureDetail::new(FailureKind::Connect, "refused"));
                    run.batcher.fail(run.id(before), &failure);
                    let failed = run.answered(
                        |f| matches!(f, SendFailure::NotSent(d) if d.kind == FailureKind::Connect),
                    );
                    assert_eq!(Failed(leak(failed)), expect, "{}: {op:?}", row.name);
                    continue;
                }
            };
            assert_eq!(got, expect, "{}: {op:?}", row.name);
        }
    }
}

/// The busy-batcher row starts exactly [`MAX_IN_FLIGHT`] flushers.
const _: () = assert!(MAX_IN_FLIGHT == 4);

fn yes(answer: bool) -> Expect {
    if answer { Yes } else { No }
}

/// A row's expected lists are static; so is what a test compares with them.
fn leak(v: Vec<usize>) -> &'static [usize] {
    Box::leak(v.into_boxed_slice())
}

/// A renewal taken just before its caller's deadline answers its caller by then, but its
/// call — and with it the connection, which a call that misses its deadline gives up — is
/// judged by a whole round trip: a process behind its renewals does not lose its
/// connection for them.
#[test]
fn a_renewal_taken_near_its_deadline_leaves_its_call_a_whole_round_trip() {
    const ROUND_TRIP: Duration = Duration::from_millis(200);
    let batcher = Batcher::new(100);
    let t0 = Instant::now();
    let (tx, _rx) = oneshot::channel();
    let bound = Bound::By {
        by: t0 + 10 * MS,
        timeout: ROUND_TRIP,
    };
    batcher.push(item(Renew(10), 0), bound, tx);
    let sent = t0 + 5 * MS;
    let taken = batcher.take(sent, ServerCapabilities::SCRIPTS_ONLY);
    assert_eq!(taken.items.len(), 1);
    assert_eq!(
        taken.replies[0].by.at,
        t0 + 10 * MS,
        "the caller's deadline"
    );
    assert_eq!(taken.deadlines.first.at, sent + ROUND_TRIP, "the call's");
    assert_eq!(taken.deadlines.last.at, sent + ROUND_TRIP);
}
