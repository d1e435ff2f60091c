//! One lease's line of waiters as [`MemoryBackend`](super::MemoryBackend) keeps it:
//! `lua/line.lua`'s rules, on tokio's clock. A line session's keep-alive is the store's
//! (`Store::kept`), as it is a key of its own on Redis.

use tokio::time::Instant;

use crate::protocol::limits::deadline_after;
use crate::protocol::{LINE_KEEP, LeaseKeys};

/// How long a line outlives its creation, or the last keep-alive that extended it: longer
/// than any wait (`LINE_PX`).
const LINE_LIFE: std::time::Duration = std::time::Duration::from_secs(3660);

/// Hex digits of a waiter id that name its line session (`protocol::WaiterId`).
const SESSION_HEX_DIGITS: usize = 16;

/// A waiter id's line session: whose keep-alive keeps it.
pub(super) fn session_of(id: &str) -> &str {
    id.get(..SESSION_HEX_DIGITS).unwrap_or(id)
}

/// The in-process channel of the waiter `id`'s turn: its session's channel, narrowed to
/// it (on Redis, the message names the waiter: `lua/line.lua` `tell_turn`).
pub(super) fn turn_channel(keys: &LeaseKeys, id: &str) -> String {
    [keys.turn_channel(session_of(id)).as_str(), " ", id].concat()
}

/// One waiter's place.
#[derive(Debug)]
struct Waiter {
    id: String,
    joined: Instant,
}

impl Waiter {
    /// Alive for [`LINE_KEEP`] after it joined, and while its session keeps it alive
    /// (`kept`, asked with its id).
    fn alive(&self, now: Instant, kept: &impl Fn(&str) -> bool) -> bool {
        now < deadline_after(self.joined, LINE_KEEP) || kept(&self.id)
    }
}

/// Whether a waiter may take one of a lease's free slots (`lua/line.lua` `entitled`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entitled {
    /// It may not: live waiters are ahead of it.
    No,
    /// It may; it was in the line (`next`: the waiter to tell its turn once it left).
    InLine { next: Option<String> },
    /// It may and was not in the line.
    Outside,
}

/// A lease's line: waiters in the order they joined.
#[derive(Debug)]
pub(super) struct Line {
    waiters: Vec<Waiter>,
    /// When the line goes, unless a join comes first.
    expires_at: Instant,
}

impl Line {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            waiters: Vec::new(),
            expires_at: deadline_after(now, LINE_LIFE),
        }
    }

    /// A line session's keep-alive extends the line's life (`lua/line.lua` `keep`).
    pub(super) fn extend(&mut self, now: Instant) {
        self.expires_at = deadline_after(now, LINE_LIFE);
    }

    /// Whether the line is gone: empty, or past its expiry.
    pub(super) fn is_gone(&self, now: Instant) -> bool {
        self.waiters.is_empty() || self.expires_at <= now
    }

    /// Whether `id` may take one of `free` (≥ 1) free slots of a lease of `permits`: it is
    /// among the first `free` live waiters, or not in the line and fewer than `free` live
    /// waiters are. Dead waiters met before `id` or the `free`-th live one are removed.
    ///
    /// `kept` says whether a waiter's session keeps it alive now.
    pub(super) fn entitled(
        &mut self,
        id: &str,
        free: usize,
        permits: usize,
        now: Instant,
        kept: &impl Fn(&str) -> bool,
    ) -> Entitled {
        let mut live = 0;
        let mut at = 0;
        while at < self.waiters.len() {
            let waiter = &self.waiters[at];
            if waiter.id == id {
                if live >= free {
                    return Entitled::No;
                }
                // Once `id` left, the waiter now at rank `permits` moves to `permits - 1`.
                let next = self.waiters.get(permits).map(|w| w.id.clone());
                return Entitled::InLine { next };
            }
            if live >= free {
                return Entitled::No;
            }
            if waiter.alive(now, kept) {
                live += 1;
                at += 1;
            } else {
                self.waiters.remove(at);
            }
        }
        if live < free {
            Entitled::Outside
        } else {
            Entitled::No
        }
    }

    /// `id` joins the line, or finds itself in it; its rank.
    pub(super) fn wait(&mut self, id: &str, now: Instant) -> u32 {
        let rank = match self.waiters.iter().position(|w| w.id == id) {
            Some(rank) => rank,
            None => {
                self.waiters.push(Waiter {
                    id: id.to_owned(),
                    joined: now,
                });
                self.waiters.len() - 1
            }
        };
        u32::try_from(rank).unwrap_or(u32::MAX)
    }

    /// `id` leaves the line (it took a slot, or its wait ended). When it was among the
    /// first `permits`, the waiter that moves up to rank `permits − 1` by it, to tell its
    /// turn (`lua/line.lua` `leave`; a grant tells it itself: `permits` 0).
    pub(super) fn leave(&mut self, id: &str, permits: usize) -> Option<String> {
        let rank = self.waiters.iter().position(|w| w.id == id)?;
        self.waiters.remove(rank);
        if rank >= permits {
            return None;
        }
        let next = self.waiters.get(permits.checked_sub(1)?)?;
        Some(next.id.clone())
    }
}

// What `inspect` reads of a line (`lua/inspect.lua`'s ZCARD), apart from the line's rules.
impl Line {
    /// Its entries, live or not yet dropped; none once it is gone.
    pub(super) fn entries(&self, now: Instant) -> usize {
        if self.is_gone(now) {
            0
        } else {
            self.waiters.len()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One row: the line, its dead, who asks, free slots, permits → the answer, the line
    /// after.
    type Row = (
        &'static [&'static str],
        &'static [&'static str],
        &'static str,
        usize,
        usize,
        Entitled,
        &'static [&'static str],
    );

    /// Rows: who may take `free` free slots of a lease of `permits`, with the line as it
    /// stands (ids joined 10 ms apart, `dead` ones silent for longer than `LINE_KEEP`).
    #[tokio::test(start_paused = true)]
    async fn a_free_slot_goes_to_the_first_live_waiters_and_a_try_does_not_jump_them() {
        let cases: &[Row] = &[
            // line, dead, asking, free, permits → entitled, line after
            (&[], &[], "a", 1, 1, Entitled::Outside, &[]),
            (
                &["a"],
                &[],
                "a",
                1,
                1,
                Entitled::InLine { next: None },
                &["a"],
            ),
            (
                &["a", "b"],
                &[],
                "a",
                1,
                1,
                Entitled::InLine {
                    next: Some("b".into()),
                },
                &["a", "b"],
            ),
            (&["a", "b"], &[], "b", 1, 1, Entitled::No, &["a", "b"]),
            (&["a", "b"], &[], "c", 1, 1, Entitled::No, &["a", "b"]),
            (
                &["a", "b"],
                &["a"],
                "b",
                1,
                1,
                Entitled::InLine { next: None },
                &["b"],
            ),
            (&["a", "b"], &["a"], "c", 1, 1, Entitled::No, &["b"]),
            (&["a", "b"], &["a", "b"], "c", 1, 1, Entitled::Outside, &[]),
            (
                &["a", "b", "c"],
                &["a", "b"],
                "c",
                1,
                1,
                Entitled::InLine { next: None },
                &["c"],
            ),
            // A counted lease of two: the first two live waiters may, a third may not.
            (
                &["a", "b", "c"],
                &[],
                "b",
                2,
                2,
                Entitled::InLine {
                    next: Some("c".into()),
                },
                &["a", "b", "c"],
            ),
            (
                &["a", "b", "c"],
                &[],
                "b",
                1,
                2,
                Entitled::No,
                &["a", "b", "c"],
            ),
            (
                &["a", "b", "c"],
                &[],
                "c",
                2,
                2,
                Entitled::No,
                &["a", "b", "c"],
            ),
            (&["a"], &[], "z", 2, 2, Entitled::Outside, &["a"]),
            (&["a", "b"], &["a"], "z", 2, 2, Entitled::Outside, &["b"]),
        ];
        for (line, dead, asking, free, permits, entitled, after) in cases {
            let start = Instant::now();
            let mut l = Line::new(start);
            for id in *line {
                l.wait(id, Instant::now());
                tokio::time::advance(Duration::from_millis(10)).await;
            }
            tokio::time::advance(LINE_KEEP).await;
            let kept = |id: &str| !dead.contains(&id);
            let got = l.entitled(asking, *free, *permits, Instant::now(), &kept);
            let left: Vec<&str> = l.waiters.iter().map(|w| w.id.as_str()).collect();
            assert_eq!(
                (&got, left.as_slice()),
                (entitled, *after),
                "{line:?} dead {dead:?} asking {asking}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_is_kept_by_its_sessions_keep_alive_and_lost_without_it() {
        let mut l = Line::new(Instant::now());
        assert_eq!(l.wait("a", Instant::now()), 0);
        assert_eq!(l.wait("b", Instant::now()), 1);
        assert_eq!(l.wait("a", Instant::now()), 0, "a replay keeps its place");
        let nobody = |_: &str| false;
        tokio::time::advance(LINE_KEEP - Duration::from_millis(1)).await;
        assert_eq!(
            l.entitled("c", 1, 1, Instant::now(), &nobody),
            Entitled::No,
            "alive for LINE_KEEP after its join"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        // `a`'s session keeps it alive; `b` joined LINE_KEEP ago and nothing keeps it.
        let only_a = |id: &str| id == "a";
        assert_eq!(l.entitled("c", 1, 1, Instant::now(), &only_a), Entitled::No);
        // `b` moves up and is told its turn, dead or not: the next look finds out.
        assert_eq!(l.leave("a", 1), Some("b".to_owned()));
        assert_eq!(
            l.entitled("c", 1, 1, Instant::now(), &only_a),
            Entitled::Outside
        );
        assert!(l.is_gone(Instant::now()));
    }

    #[test]
    fn a_waiter_ids_session_is_its_first_sixteen_hex_digits() {
        assert_eq!(
            session_of("0123456789abcdef0011223344556677"),
            "0123456789abcdef"
        );
        assert_eq!(session_of("a"), "a");
    }
}
