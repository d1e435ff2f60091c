//! What `run --wait` says while it waits: who holds the lease and when that holding ends,
//! and how many wait in its line, when the wait starts and each time the holder changes
//! ([`LeaseClient::observe`], which reads the line too, at least every second) — one line
//! rewritten in place on a terminal (its countdown ticking each second, its count changing
//! as the observer reads it), a plain line per change of holder otherwise, a JSON object
//! per change under `--log-format json`. The number is the line's entries: this run's own
//! among them once it joined (the first line, said before it joins, counts those ahead).
//! Once it joined, its own place comes first — "3rd in line, 12 waiting",
//! `"place_in_line"` — as its wait last learnt it ([`LeaseClient::watch_place`]).
//!
//! A counted lease is described once, when the wait starts (the observer follows plain
//! leases); the terminal's countdown still ticks.

use std::io::IsTerminal as _;
use std::time::Duration;

use leasehold::{
    AcquireOutcome, FencingToken, HolderLabel, LeaseClient, LeaseRequest, ResourceHolder,
};
use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::diagnose::Server;
use crate::holders::{self, Holder};
use crate::say;

/// How often the observer reads without a notice (a key deleted from outside).
const POLL: Duration = Duration::from_secs(1);
/// How often a terminal's line is redrawn, for its countdown.
const TICK: Duration = Duration::from_secs(1);

/// What the wait last learnt of the holder.
enum Seen {
    /// A read (or the observer's) of every slot, at `at`.
    Slots {
        slots: Vec<Option<Holder>>,
        at: Instant,
    },
    /// No read succeeded: what the refusal said.
    Refusal(String),
    /// Nothing known of a holder yet (the first try found Redis unavailable, and the read
    /// failed too): nothing is said until the observer reads one.
    Nothing,
}

/// The waiting run's view of the holder, while it waits.
pub(crate) struct Waiting {
    changes: Option<watch::Receiver<ResourceHolder>>,
    /// The observer's count of the line's entries.
    line: Option<watch::Receiver<Option<u64>>>,
    /// The line's entries as last read; `None` while not known.
    waiting: Option<u64>,
    /// This run's place in the line as its wait learns it (`LeaseClient::watch_place`).
    place: Option<watch::Receiver<Option<u32>>>,
    /// The entries ahead of this run, as last learnt; `None` while not in the line.
    ahead: Option<u32>,
    /// Kept so the observer runs while the wait does.
    _observer: Option<leasehold::LeaseObserver>,
    seen: Seen,
    /// The holding last shown (token and label), so only a change is said.
    shown: Option<(FencingToken, Option<HolderLabel>)>,
    /// This run's own label: an observer may read this run's holding before the wait hears
    /// of its acquisition.
    own: Option<HolderLabel>,
    until: Instant,
    ticks: Option<Interval>,
}

impl Waiting {
    /// Reads who holds `request`'s lease and says so; `refusal` is the first try's outcome,
    /// said instead if the read fails and it was a holder's refusal. The wait ends at
    /// `until`.
    pub(crate) async fn start(
        client: &LeaseClient,
        server: &Server,
        request: &LeaseRequest,
        refusal: &AcquireOutcome,
        until: Instant,
    ) -> Waiting {
        let read = holders::read_line(client, server, request).await;
        let waiting = read.as_ref().ok().and_then(|(_, waiting)| *waiting);
        let seen = match read.map(|(slots, _)| slots) {
            Ok(slots) if slots.iter().any(Option::is_some) => Seen::Slots {
                slots,
                at: Instant::now(),
            },
            _ => refusal_text(refusal).map_or(Seen::Nothing, Seen::Refusal),
        };
        // The observer follows a plain lease; one that cannot start leaves the first line.
        let observer = (request.permits() == 1)
            .then(|| client.observe(request, POLL).ok())
            .flatten();
        let terminal = std::io::stderr().is_terminal() && !say::is_json();
        let ticks = terminal.then(|| {
            let mut ticks = tokio::time::interval_at(Instant::now() + TICK, TICK);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
            ticks
        });
        let waiting = Waiting {
            changes: observer.as_ref().map(leasehold::LeaseObserver::watch),
            line: observer
                .as_ref()
                .map(leasehold::LeaseObserver::watch_waiting),
            waiting,
            place: None,
            ahead: None,
            _observer: observer,
            shown: first_holding(&seen),
            seen,
            own: request.holder().cloned(),
            until,
            ticks,
        };
        waiting.show();
        waiting
    }

    /// Follows this run's place in the line, as `place` reports it.
    pub(crate) fn follow_place(&mut self, place: watch::Receiver<Option<u32>>) {
        self.place = Some(place);
    }

    /// Waits for a change of holder (or a terminal's tick) and shows it.
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet shown is shown by the next call.
    pub(crate) async fn next(&mut self) {
        let change = async {
            match &mut self.changes {
                Some(changes) => changes.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        let line = async {
            match &mut self.line {
                Some(line) => line.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        let place = async {
            match &mut self.place {
                Some(place) => place.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        let tick = async {
            match &mut self.ticks {
                Some(ticks) => {
                    ticks.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            alive = change => {
                if alive {
                    self.observed();
                } else {
                    self.changes = None;
                }
            }
            alive = line => self.counted(alive),
            alive = place => self.placed(alive),
            () = tick => self.show(),
        }
    }

    /// Ends the view: a terminal's line is erased, so what follows starts clean.
    pub(crate) fn finish(&self) {
        if self.ticks.is_some() {
            say::clear_status();
        }
    }

    /// The observer read the line (`alive`: it still runs): a terminal shows a new count at
    /// once; lines and JSON carry it with the next change of holder, so that waiters coming
    /// and going (this run's own joining among them) do not fill a log. A read that could
    /// not count the line keeps the last count.
    fn counted(&mut self, alive: bool) {
        let waiting = latest(&mut self.line, alive);
        if waiting.is_some() && waiting != self.waiting {
            self.waiting = waiting;
            self.changed();
        }
    }

    /// The wait learnt its place (`alive`: it still reports), shown as the count is. Out of
    /// the line (served, or the wait ended), the last place stays until the view ends.
    fn placed(&mut self, alive: bool) {
        let ahead = latest(&mut self.place, alive);
        if ahead.is_some() && ahead != self.ahead {
            self.ahead = ahead;
            self.changed();
        }
    }

    /// What the line shows changed: a terminal shows it at once.
    fn changed(&self) {
        if self.ticks.is_some() {
            self.show();
        }
    }

    fn observed(&mut self) {
        let Some(changes) = &mut self.changes else {
            return;
        };
        let holder = changes.borrow_and_update().clone();
        // Free and unknown say nothing new: the wait's next try tells.
        let ResourceHolder::Held {
            token,
            holder,
            expires_at,
        } = holder
        else {
            return;
        };
        let now = Instant::now();
        let same = self
            .shown
            .as_ref()
            .is_some_and(|(t, h)| *t == token && *h == holder);
        if same || (holder.is_some() && holder == self.own) {
            return;
        }
        self.shown = Some((token, holder.clone()));
        self.seen = Seen::Slots {
            slots: vec![Some(Holder {
                remaining: expires_at.saturating_duration_since(now),
                token,
                holder,
                delayed: false,
            })],
            at: now,
        };
        self.show();
    }

    /// Says what was last seen, the times counted down to now.
    fn show(&self) {
        let now = Instant::now();
        let (who, fields) = match &self.seen {
            Seen::Slots { slots, at } => {
                let elapsed = now.saturating_duration_since(*at);
                let aged: Vec<Option<Holder>> = slots
                    .iter()
                    .map(|slot| {
                        slot.clone().map(|mut h| {
                            h.remaining = h.remaining.saturating_sub(elapsed);
                            h
                        })
                    })
                    .collect();
                let who = holders::describe(&aged)
                    .unwrap_or_else(|| "free, about to be taken".to_owned());
                (who, holders::fields(&aged))
            }
            Seen::Refusal(text) => (text.clone(), serde_json::json!({})),
            Seen::Nothing => return,
        };
        let left = self.until.saturating_duration_since(now);
        let mut message = format!(
            "waiting for the lease ({} of --wait left): {who}",
            holders::about(left)
        );
        if let Some(ahead) = self.ahead {
            message.push_str("; ");
            message.push_str(&in_line(ahead));
        }
        if let Some(count) = holders::waiting(self.waiting) {
            message.push_str(if self.ahead.is_some() { ", " } else { "; " });
            message.push_str(&count);
        }
        if self.ticks.is_some() {
            say::status(message);
        } else {
            let mut fields = fields;
            if let serde_json::Value::Object(map) = &mut fields {
                map.insert(
                    "wait_left_ms".to_owned(),
                    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).into(),
                );
                map.insert("waiting".to_owned(), self.waiting.into());
                map.insert(
                    "place_in_line".to_owned(),
                    self.ahead.map(|ahead| u64::from(ahead) + 1).into(),
                );
            }
            say::event(say::Level::Info, message, fields);
        }
    }
}

/// The value `receiver` last received, marked seen; `None`, and the receiver dropped, once
/// its sender is gone (`alive` false).
fn latest<T: Copy>(receiver: &mut Option<watch::Receiver<Option<T>>>, alive: bool) -> Option<T> {
    let Some(current) = receiver.as_mut().filter(|_| alive) else {
        *receiver = None;
        return None;
    };
    *current.borrow_and_update()
}

/// A place in line as a person reads it, from the entries ahead: `1st in line`,
/// `3rd in line`, `12th in line`.
fn in_line(ahead: u32) -> String {
    let n = u64::from(ahead) + 1;
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix} in line")
}

/// The holding a read showed first (the slot that ends first), for telling changes.
fn first_holding(seen: &Seen) -> Option<(FencingToken, Option<HolderLabel>)> {
    match seen {
        Seen::Slots { slots, .. } => slots
            .iter()
            .flatten()
            .min_by_key(|h| h.remaining)
            .map(|h| (h.token, h.holder.clone())),
        Seen::Refusal(_) | Seen::Nothing => None,
    }
}

/// A holder's refusal in words, when nobody could be read: what the try itself learnt.
/// `None` for a refusal that was not a holder's (Redis unavailable).
pub(crate) fn refusal_text(refusal: &AcquireOutcome) -> Option<String> {
    Some(match refusal {
        AcquireOutcome::LockDelayed { retry_after } => format!(
            "in its lock-delay for {} more (its last holder ended without a release)",
            holders::about(*retry_after)
        ),
        AcquireOutcome::Contended { retry_after }
        | AcquireOutcome::OwnerOperationConflict { retry_after } => format!(
            "held by someone else, which ends in {} unless renewed",
            holders::about(*retry_after)
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::in_line;

    #[test]
    fn a_place_reads_as_an_ordinal() {
        let said: Vec<String> = [0, 1, 2, 3, 10, 11, 12, 20, 21, 100, 110, 111]
            .into_iter()
            .map(in_line)
            .collect();
        assert_eq!(
            said,
            [
                "1st in line",
                "2nd in line",
                "3rd in line",
                "4th in line",
                "11th in line",
                "12th in line",
                "13th in line",
                "21st in line",
                "22nd in line",
                "101st in line",
                "111th in line",
                "112th in line"
            ]
        );
    }
}
