//! The properties, checked over a recorded history alone (pure: a table of events in, the
//! first violation out).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use leasehold::runtime::CancelReason;

use crate::history::{Event, What, WorkerId};

/// What the checker needs to know of the run besides its history.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Permits of each resource, by index.
    pub permits: Vec<usize>,
    /// Whether each client's workers are stopped at their local validity's end
    /// (`CancelPolicy::Kill`); others may run past it, told.
    pub kill: Vec<bool>,
    /// Every lease's TTL.
    pub ttl: Duration,
    /// A command's timeout: a reply that was in flight when a fault was healed may still
    /// carry it.
    pub command_timeout: Duration,
    /// The renewal period: after a store outage longer than the TTL, a supervised
    /// resource (index 0) has a leader within it.
    pub renew_every: Duration,
}

/// A property the history breaks, at the first event that shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// More workers of `resource` within their local validity at `at` than it has permits
    /// (a worker whose key was deleted under it not counted: nothing keeps another from
    /// taking the lease then but its fencing token).
    TooMany {
        resource: usize,
        at: Duration,
        workers: Vec<WorkerId>,
    },
    /// A worker was told at or after its local validity's end (one whose client was paused
    /// then: after the resume).
    ToldLate {
        worker: WorkerId,
        at: Duration,
        stop_by: Duration,
    },
    /// A worker ran past its local validity's end without being told (one whose client
    /// was paused then: past the resume).
    Untold { worker: WorkerId, stop_by: Duration },
    /// A worker under `Kill` ran past its local validity's end (one whose client was
    /// paused then: past the resume).
    NotStopped {
        worker: WorkerId,
        stop_by: Duration,
        ended: Option<Duration>,
    },
    /// A worker was told a reason nothing in the run explains.
    WrongReason {
        worker: WorkerId,
        at: Duration,
        reason: CancelReason,
    },
    /// A worker saw a token not above the one before it on the same resource's slot.
    TokenNotIncreasing {
        resource: usize,
        worker: WorkerId,
        token: u64,
        previous: u64,
    },
    /// A drain returned with a lease still held, or a key left in the store.
    LeftAfterDrain {
        client: usize,
        held: usize,
        keys_left: Option<usize>,
    },
    /// An observer reported a holder of the supervised resource under a token below one it
    /// had reported before: it went back in time.
    ObservedGoingBack {
        client: usize,
        token: u64,
        previous: u64,
    },
    /// No leader within one renewal period of a store outage's end.
    NoLeader { outage_over: Duration },
    /// A worker's validity was moved at or after its end (`stop_by`): once past its local
    /// validity — its client paused, say — it is not valid again.
    Revived {
        worker: WorkerId,
        at: Duration,
        stop_by: Duration,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

#[derive(Debug, Clone)]
struct Worker {
    client: usize,
    resource: usize,
    slot: u16,
    started: Duration,
    /// Its key was deleted while it held it.
    revoked: bool,
    stop_by: Duration,
    told: Option<Duration>,
    ended: Option<Duration>,
}

/// What the checker knows at an event of the history.
#[derive(Debug, Default)]
struct State {
    workers: BTreeMap<WorkerId, Worker>,
    last_token: BTreeMap<(usize, u16), u64>,
    last_observed: BTreeMap<usize, u64>,
    /// Each client's pauses: when it stopped, and when it resumed (if it did yet).
    pauses: BTreeMap<usize, Vec<(Duration, Option<Duration>)>>,
    /// When each client's drain began.
    drains: BTreeMap<usize, Duration>,
}

/// The first violation in `events` (in the order recorded, times non-decreasing), if any.
pub fn check(events: &[Event], facts: &Facts) -> Result<(), Violation> {
    let mut state = State::default();
    for (i, event) in events.iter().enumerate() {
        // Every worker whose validity ended before now, still running untold, or running
        // under Kill, breaks a promise by now.
        state.past_validity(event.at, facts)?;
        state.event(events, i, facts)?;
    }
    // The history's end: whatever still runs is judged at the last instant recorded.
    let end = events.last().map_or(Duration::ZERO, |e| e.at);
    state.past_validity(end + Duration::from_nanos(1), facts)
}

impl State {
    /// Takes event `i` into account: the first property it breaks, if any.
    fn event(&mut self, events: &[Event], i: usize, facts: &Facts) -> Result<(), Violation> {
        let at = events[i].at;
        match &events[i].what {
            What::Started {
                worker,
                client,
                resource,
                slot,
                token,
                stop_by,
            } => {
                let w = Worker {
                    client: *client,
                    resource: *resource,
                    slot: *slot,
                    started: at,
                    revoked: false,
                    stop_by: *stop_by,
                    told: None,
                    ended: None,
                };
                self.started(*worker, w, *token, facts)
            }
            What::Validity { worker, stop_by } => self.validity(*worker, at, *stop_by),
            What::Told {
                worker,
                reason,
                stop_by,
            } => self.told(events, i, *worker, *reason, *stop_by, facts),
            What::Ended { worker } => {
                if let Some(w) = self.workers.get_mut(worker) {
                    w.ended.get_or_insert(at);
                }
                Ok(())
            }
            What::DrainEnded {
                client,
                held,
                keys_left,
            } => self.drained(*client, at, *held, *keys_left),
            What::OutageOver => self.leader_after(events, i, facts),
            What::Deleted { key } => {
                for w in self.workers.values_mut() {
                    if key.is_none_or(|k| k == (w.resource, w.slot)) {
                        w.revoked = true;
                    }
                }
                Ok(())
            }
            What::Observed {
                client,
                token: Some(token),
            } => self.observed(*client, *token),
            What::Paused { client } => {
                self.pauses.entry(*client).or_default().push((at, None));
                Ok(())
            }
            What::Resumed { client } => {
                if let Some(pause) = self.pauses.get_mut(client).and_then(|p| p.last_mut()) {
                    pause.1.get_or_insert(at);
                }
                Ok(())
            }
            What::Observed { token: None, .. } | What::Fault { .. } | What::Healed { .. } => Ok(()),
            What::DrainBegan { client } => {
                self.drains.insert(*client, at);
                Ok(())
            }
        }
    }

    /// A drain returned: nothing held, no key left — but for a drain whose client was
    /// paused while it ran: its grace may have run out meanwhile, and it returns at the
    /// resume with what is still held (`ShutdownSummary::left`), released soon after.
    fn drained(
        &self,
        client: usize,
        at: Duration,
        held: usize,
        keys_left: Option<usize>,
    ) -> Result<(), Violation> {
        let began = self.drains.get(&client).copied().unwrap_or(at);
        let paused = self.pauses.get(&client).is_some_and(|pauses| {
            pauses
                .iter()
                .any(|&(from, to)| from <= at && to.is_none_or(|to| to >= began))
        });
        if keys_left.is_some_and(|k| k > 0) || (held > 0 && !paused) {
            return Err(Violation::LeftAfterDrain {
                client,
                held,
                keys_left,
            });
        }
        Ok(())
    }

    /// A worker began: its token above its slot's last, and no more workers of its
    /// resource within their validity than it has permits.
    fn started(
        &mut self,
        id: WorkerId,
        w: Worker,
        token: u64,
        facts: &Facts,
    ) -> Result<(), Violation> {
        let (resource, slot, at) = (w.resource, w.slot, w.started);
        // Per slot: the holders of one permit follow each other, and their tokens must
        // increase; two slots' holders run side by side, and a reply that came late starts
        // the older token's worker second.
        if let Some(&previous) = self.last_token.get(&(resource, slot))
            && token <= previous
        {
            return Err(Violation::TokenNotIncreasing {
                resource,
                worker: id,
                token,
                previous,
            });
        }
        self.last_token.insert((resource, slot), token);
        self.workers.insert(id, w);
        // A worker past its local validity does not count, a paused one neither: nothing
        // but its fencing token keeps it from a lease taken by another then.
        let valid: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| w.resource == resource && w.ended.is_none() && !w.revoked)
            .filter(|(_, w)| w.stop_by > at)
            .map(|(id, _)| *id)
            .collect();
        let permits = facts.permits.get(resource).copied().unwrap_or(1);
        if valid.len() > permits {
            return Err(Violation::TooMany {
                resource,
                at,
                workers: valid,
            });
        }
        Ok(())
    }

    /// A renewal moved a worker's validity: never once it has ended (a worker past its
    /// local validity — after a pause, say — is not valid again, whatever a late reply
    /// says).
    fn validity(&mut self, id: WorkerId, at: Duration, stop_by: Duration) -> Result<(), Violation> {
        let Some(w) = self.workers.get_mut(&id) else {
            return Ok(());
        };
        if w.told.is_some() {
            return Ok(());
        }
        if at >= w.stop_by && stop_by > w.stop_by {
            return Err(Violation::Revived {
                worker: id,
                at,
                stop_by: w.stop_by,
            });
        }
        w.stop_by = stop_by;
        Ok(())
    }

    /// A worker was told: in time, and for a reason the run explains.
    fn told(
        &mut self,
        events: &[Event],
        i: usize,
        id: WorkerId,
        reason: CancelReason,
        stop_by: Duration,
        facts: &Facts,
    ) -> Result<(), Violation> {
        let at = events[i].at;
        let Some(w) = self.workers.get(&id) else {
            return Ok(());
        };
        if w.told.is_some() {
            return Ok(());
        }
        let mut w = w.clone();
        w.told = Some(at);
        w.stop_by = stop_by;
        // A worker whose client was paused at its validity's end is told at the resume.
        let due = self.resumed_past(&w).unwrap_or(stop_by);
        let late = if due > stop_by {
            at > due
        } else {
            at >= stop_by
        };
        self.workers.insert(id, w.clone());
        if late {
            return Err(Violation::ToldLate {
                worker: id,
                at,
                stop_by,
            });
        }
        if !explained(events, i, &w, reason, facts) {
            return Err(Violation::WrongReason {
                worker: id,
                at,
                reason,
            });
        }
        Ok(())
    }

    /// A store outage ended: a leader of the supervised resource within a renewal period.
    fn leader_after(&self, events: &[Event], i: usize, facts: &Facts) -> Result<(), Violation> {
        let at = events[i].at;
        let by = at + facts.renew_every;
        let leader = events[i..]
            .iter()
            .take_while(|e| e.at <= by)
            .any(|e| matches!(e.what, What::Started { resource: 0, .. }))
            || self.workers.values().any(|w| {
                w.resource == 0 && w.ended.is_none() && w.told.is_none() && w.stop_by > by
            });
        match leader {
            true => Ok(()),
            false => Err(Violation::NoLeader { outage_over: at }),
        }
    }

    /// An observer read a holder: never under a token below one it read before.
    fn observed(&mut self, client: usize, token: u64) -> Result<(), Violation> {
        let previous = self.last_observed.entry(client).or_insert(token);
        if token < *previous {
            return Err(Violation::ObservedGoingBack {
                client,
                token,
                previous: *previous,
            });
        }
        *previous = token;
        Ok(())
    }

    /// When worker `w`'s client resumed, if it was paused when `w`'s validity ended (it
    /// could not be told in time: none of its timers fired) — the end of the run if it
    /// has not resumed yet.
    fn resumed_past(&self, w: &Worker) -> Option<Duration> {
        self.pauses.get(&w.client)?.iter().find_map(|&(from, to)| {
            let to = to.unwrap_or(Duration::MAX);
            (from < w.stop_by && w.stop_by <= to).then_some(to)
        })
    }

    /// Whether some worker's local validity ended before `now` while it still ran, untold,
    /// or under `Kill` — for a worker whose client was paused then, its resume stands for
    /// its validity's end: told or stopped by then.
    fn past_validity(&self, now: Duration, facts: &Facts) -> Result<(), Violation> {
        for (id, w) in &self.workers {
            let due = self.resumed_past(w).unwrap_or(w.stop_by);
            let ran_past = w.ended.is_none_or(|end| end > due);
            if !ran_past || due >= now {
                continue;
            }
            if w.told.is_none() {
                return Err(Violation::Untold {
                    worker: *id,
                    stop_by: w.stop_by,
                });
            }
            if facts.kill.get(w.client).copied().unwrap_or(true) {
                return Err(Violation::NotStopped {
                    worker: *id,
                    stop_by: w.stop_by,
                    ended: w.ended,
                });
            }
        }
        Ok(())
    }
}

/// Whether the run explains why worker `w` was told `reason` at event `i`: a drain of its
/// client for `Shutdown`; for any other reason a fault on its client (or the store), or a
/// pause of its client, that lasted into the worker's life or its acquisition (at most a
/// TTL before it: a replayed grant), or a key deleted during it.
fn explained(events: &[Event], i: usize, w: &Worker, reason: CancelReason, facts: &Facts) -> bool {
    let before = &events[..=i];
    if reason == CancelReason::Shutdown {
        return before
            .iter()
            .any(|e| e.what == What::DrainBegan { client: w.client });
    }
    let reaches = |c: &Option<usize>| c.is_none_or(|c| c == w.client);
    // The window lasts until its end (a reply in flight then, one timeout more); a grant
    // replayed after it carries what is left of its TTL, taken during it: a short budget a
    // TTL on.
    let lasts_into = |j: usize, end: &What| {
        let over = events[j..]
            .iter()
            .find(|e| &e.what == end)
            .map_or(Duration::MAX, |e| {
                e.at.saturating_add(facts.command_timeout)
            });
        over.saturating_add(facts.ttl) >= w.started
    };
    before.iter().enumerate().any(|(j, e)| match &e.what {
        What::Deleted { .. } => e.at >= w.started,
        What::Fault { client, .. } if reaches(client) => {
            lasts_into(j, &What::Healed { client: *client })
        }
        What::Paused { client } if *client == w.client => {
            lasts_into(j, &What::Resumed { client: *client })
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests;
