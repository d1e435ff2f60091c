//! `LinePlaces` as a table: each row a sequence of steps and what each step answers.

use super::{LinePlaces, OwedLeave};
use crate::protocol::{Attempt, LeaseKeys, Namespace, OperationId, Purpose, ResourceDigest};

enum Step {
    /// A waiter joins line `n`; whether the keep-alive task must be started.
    Join(usize, bool),
    /// A waiter's registration in line `n` ends.
    Left(usize),
    /// A leave of a place in line `n` failed; whether the task must be started.
    Owe(usize, bool),
    /// A beat: the lines it keeps (by `n`, sorted) and the owed leaves it takes (their
    /// lines' `n`), or `None` (idle: the task stops).
    Beat(Option<(&'static [usize], &'static [usize])>),
    /// The beat's leaves failed again: owed still.
    StillOwed(&'static [usize]),
    /// The task could not be started.
    Stopped,
}
use Step::{Beat, Join, Left, Owe, StillOwed, Stopped};

const ROWS: &[(&str, &[Step])] = &[
    (
        "the first join starts the task, later ones find it running",
        &[Join(0, true), Join(0, false), Join(1, false)],
    ),
    (
        "a line is kept while any of its waiters is registered",
        &[
            Join(0, true),
            Join(0, false),
            Join(1, false),
            Left(0),
            Beat(Some((&[0, 1], &[]))),
            Left(0),
            Beat(Some((&[1], &[]))),
        ],
    ),
    (
        "an idle beat stops the task, and the next join starts it again",
        &[
            Join(0, true),
            Left(0),
            Beat(None),
            Join(0, true),
            Beat(Some((&[0], &[]))),
        ],
    ),
    (
        "an owed leave is taken by the next beat, and owed again if it fails again",
        &[
            Owe(2, true),
            Beat(Some((&[], &[2]))),
            StillOwed(&[2]),
            Beat(Some((&[], &[2]))),
            Beat(None),
        ],
    ),
    (
        "an owed leave keeps the task running after its lines went",
        &[
            Join(0, true),
            Owe(0, false),
            Left(0),
            Beat(Some((&[], &[0]))),
            Beat(None),
            Owe(1, true),
        ],
    ),
    (
        "a task that could not start is started by the next join",
        &[Join(0, true), Stopped, Join(0, true)],
    ),
];

fn keys(n: usize) -> LeaseKeys {
    let purpose = Purpose::new("p").expect("purpose");
    LeaseKeys::new(
        &Namespace::default(),
        &purpose,
        &ResourceDigest::of(format!("r{n}")),
    )
}

fn owed(places: &LinePlaces, n: usize) -> OwedLeave {
    let attempt = Attempt::new(OperationId::new("op").expect("op")).expect("attempt");
    let id = places.waiter_id(&attempt);
    (keys(n), attempt, id)
}

fn line_numbers(lines: impl IntoIterator<Item = String>) -> Vec<usize> {
    let mut found: Vec<usize> = lines
        .into_iter()
        .map(|line| {
            (0..4)
                .find(|&n| keys(n).line() == line)
                .expect("a known line")
        })
        .collect();
    found.sort_unstable();
    found
}

#[test]
fn line_places_as_a_table() {
    for (name, steps) in ROWS {
        let places = LinePlaces::new();
        for (i, step) in steps.iter().enumerate() {
            let at = format!("{name}: step {i}");
            match step {
                Join(n, start) => assert_eq!(places.join(&keys(*n)), *start, "{at}"),
                Left(n) => places.left(&keys(*n).line()),
                Owe(n, start) => assert_eq!(places.owe(owed(&places, *n)), *start, "{at}"),
                Stopped => places.stopped(),
                StillOwed(lines) => {
                    places.still_owed(lines.iter().map(|&n| owed(&places, n)));
                }
                Beat(expected) => {
                    let beat = places.beat().map(|beat| {
                        (
                            line_numbers(beat.lines.iter().map(LeaseKeys::line)),
                            line_numbers(beat.owed.iter().map(|(keys, _, _)| keys.line())),
                        )
                    });
                    let expected = expected.map(|(lines, owed)| (lines.to_vec(), owed.to_vec()));
                    assert_eq!(beat, expected, "{at}");
                }
            }
        }
    }
}

#[test]
fn waiter_ids_carry_the_session() {
    let places = LinePlaces::new();
    let attempt = Attempt::new(OperationId::new("op").expect("op")).expect("attempt");
    assert_eq!(places.waiter_id(&attempt).session(), places.id().as_str());
    let other = LinePlaces::new();
    assert_ne!(other.waiter_id(&attempt), places.waiter_id(&attempt));
}
