//! `Owed` as a table: a call sent at t0 owes replies with their deadlines (at, give-up);
//! each row asks when the next is due and which are answered late at an instant, the
//! process caught up with its tasks or behind.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::deadline::Deadline;
use super::queue::Reply;
use super::{ItemResult, Owed};
use crate::backend::{FailureKind, SendFailure};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy)]
enum Op {
    /// When the next deadline is due, as (at, give-up) in ms; `None` once all are answered.
    Due(Option<(u64, u64)>),
    /// The due time came at this ms, the process caught up (`true`) or behind; these
    /// replies were answered late, now.
    Late(u64, bool, &'static [usize]),
}

struct Row {
    name: &'static str,
    /// Each owed reply's deadline: (at, give-up) in ms after the send.
    owed: &'static [(u64, u64)],
    ops: &'static [Op],
}

use Op::{Due, Late};

#[rustfmt::skip]
const ROWS: &[Row] = &[
    Row { name: "the earliest deadline is due first, and its give-up the earliest of all", owed: &[(200, 1200), (100, 1300), (300, 400)], ops: &[
        Due(Some((100, 400))),
    ] },
    Row { name: "caught up, a reply past its deadline is answered at once", owed: &[(100, 1100), (200, 1200)], ops: &[
        Late(100, true, &[0]),
        Due(Some((200, 1200))),
        Late(250, true, &[1]),
        Due(None),
    ] },
    Row { name: "behind, a reply is waited for until its give-up", owed: &[(100, 1100)], ops: &[
        Late(100, false, &[]),
        Due(Some((100, 1100))),
        Late(1100, false, &[0]),
        Due(None),
    ] },
    Row { name: "an instant answers every reply late by then, and no other", owed: &[(100, 200), (100, 1100), (300, 400)], ops: &[
        Late(250, false, &[0]),
        Late(250, true, &[1]),
        Late(250, true, &[]),
        Due(Some((300, 400))),
    ] },
];

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX)
}

fn ms(t0: Instant, instant: Instant) -> u64 {
    u64::try_from(instant.duration_since(t0).as_millis()).unwrap_or(u64::MAX)
}

#[test]
fn every_row_of_the_owed_table() {
    for row in ROWS {
        let t0 = Instant::now();
        let mut receivers: Vec<oneshot::Receiver<ItemResult>> = Vec::new();
        let replies = row
            .owed
            .iter()
            .map(|&(by, give_up)| {
                let (tx, rx) = oneshot::channel();
                receivers.push(rx);
                Reply {
                    to: Some(tx),
                    by: Deadline {
                        at: at(t0, by),
                        give_up: at(t0, give_up),
                    },
                }
            })
            .collect();
        let mut owed = Owed { sent: t0, replies };
        for &op in row.ops {
            match op {
                Due(want) => {
                    let got = owed
                        .poll_timeout()
                        .map(|d| (ms(t0, d.at), ms(t0, d.give_up)));
                    assert_eq!(got, want, "{}: {op:?}", row.name);
                }
                Late(now, caught_up, want) => {
                    owed.handle_timeout(at(t0, now), caught_up);
                    let mut answered = Vec::new();
                    for (n, rx) in receivers.iter_mut().enumerate() {
                        let Ok(result) = rx.try_recv() else {
                            continue;
                        };
                        // Written, so it may have run: MaybeSent, naming its own time.
                        match result {
                            Err(SendFailure::MaybeSent(d)) => {
                                assert_eq!(d.kind, FailureKind::Timeout, "{}", row.name);
                                let within = Duration::from_millis(row.owed[n].0);
                                assert!(
                                    d.message.contains(&format!("{within:?}")),
                                    "{}: {}",
                                    row.name,
                                    d.message
                                );
                            }
                            other => panic!("{}: reply {n} answered {other:?}", row.name),
                        }
                        answered.push(n);
                    }
                    assert_eq!(answered, want, "{}: {op:?}", row.name);
                }
            }
        }
    }
}
