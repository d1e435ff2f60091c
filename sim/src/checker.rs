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
    /// A worker was told at or after its local validity's end.
    ToldLate {
        worker: WorkerId,
        at: Duration,
        stop_by: Duration,
    },
    /// A worker ran past its local validity's end without being told.
    Untold { worker: WorkerId, stop_by: Duration },
    /// A worker under `Kill` ran past its local validity's end.
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

/// The first violation in `events` (in the order recorded, times non-decreasing), if any.
pub fn check(events: &[Event], facts: &Facts) -> Result<(), Violation> {
    let mut workers: BTreeMap<WorkerId, Worker> = BTreeMap::new();
    let mut last_token: BTreeMap<(usize, u16), u64> = BTreeMap::new();
    let mut last_observed: BTreeMap<usize, u64> = BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        let at = event.at;
        // Every worker whose validity ended before now, still running untold, or running
        // under Kill, breaks a promise by now.
        past_validity(&workers, at, facts)?;
        match &event.what {
            What::Started {
                worker,
                client,
                resource,
                slot,
                token,
                stop_by,
            } => {
                // Per slot: the holders of one permit follow each other, and their tokens
                // must increase; two slots' holders run side by side, and a reply that
                // came late starts the older token's worker second.
                if let Some(&previous) = last_token.get(&(*resource, *slot))
                    && *token <= previous
                {
                    return Err(Violation::TokenNotIncreasing {
                        resource: *resource,
                        worker: *worker,
                        token: *token,
                        previous,
                    });
                }
                last_token.insert((*resource, *slot), *token);
                workers.insert(
                    *worker,
                    Worker {
                        client: *client,
                        resource: *resource,
                        slot: *slot,
                        started: at,
                        revoked: false,
                        stop_by: *stop_by,
                        told: None,
                        ended: None,
                    },
                );
                let valid: Vec<WorkerId> = workers
                    .iter()
                    .filter(|(_, w)| w.resource == *resource && w.ended.is_none() && !w.revoked)
                    .filter(|(_, w)| w.stop_by > at)
                    .map(|(id, _)| *id)
                    .collect();
                let permits = facts.permits.get(*resource).copied().unwrap_or(1);
                if valid.len() > permits {
                    return Err(Violation::TooMany {
                        resource: *resource,
                        at,
                        workers: valid,
                    });
                }
            }
            What::Validity { worker, stop_by } => {
                if let Some(w) = workers.get_mut(worker)
                    && w.told.is_none()
                {
                    w.stop_by = *stop_by;
                }
            }
            What::Told {
                worker,
                reason,
                stop_by,
            } => {
                let Some(w) = workers.get_mut(worker) else {
                    continue;
                };
                if w.told.is_some() {
                    continue;
                }
                w.told = Some(at);
                w.stop_by = *stop_by;
                if at >= *stop_by {
                    return Err(Violation::ToldLate {
                        worker: *worker,
                        at,
                        stop_by: *stop_by,
                    });
                }
                let w = w.clone();
                if !explained(events, i, &w, *reason, facts) {
                    return Err(Violation::WrongReason {
                        worker: *worker,
                        at,
                        reason: *reason,
                    });
                }
            }
            What::Ended { worker } => {
                if let Some(w) = workers.get_mut(worker) {
                    w.ended.get_or_insert(at);
                }
            }
            What::DrainEnded {
                client,
                held,
                keys_left,
            } => {
                if *held > 0 || keys_left.is_some_and(|k| k > 0) {
                    return Err(Violation::LeftAfterDrain {
                        client: *client,
                        held: *held,
                        keys_left: *keys_left,
                    });
                }
            }
            What::OutageOver => {
                let by = at + facts.renew_every;
                let leader = events[i..]
                    .iter()
                    .take_while(|e| e.at <= by)
                    .any(|e| matches!(e.what, What::Started { resource: 0, .. }))
                    || workers.values().any(|w| {
                        w.resource == 0 && w.ended.is_none() && w.told.is_none() && w.stop_by > by
                    });
                if !leader {
                    return Err(Violation::NoLeader { outage_over: at });
                }
            }
            What::Deleted { key } => {
                for w in workers.values_mut() {
                    if key.is_none_or(|k| k == (w.resource, w.slot)) {
                        w.revoked = true;
                    }
                }
            }
            What::Observed {
                client,
                token: Some(token),
            } => {
                let previous = last_observed.entry(*client).or_insert(*token);
                if token < previous {
                    return Err(Violation::ObservedGoingBack {
                        client: *client,
                        token: *token,
                        previous: *previous,
                    });
                }
                *previous = *token;
            }
            What::Observed { token: None, .. } => {}
            What::Fault { .. } | What::Healed { .. } => {}
            What::DrainBegan { .. } => {}
        }
    }
    // The history's end: whatever still runs is judged at the last instant recorded.
    let end = events.last().map_or(Duration::ZERO, |e| e.at);
    past_validity(&workers, end + Duration::from_nanos(1), facts)
}

/// Whether some worker's local validity ended before `now` while it still ran, untold, or
/// under `Kill`.
fn past_validity(
    workers: &BTreeMap<WorkerId, Worker>,
    now: Duration,
    facts: &Facts,
) -> Result<(), Violation> {
    for (id, w) in workers {
        let ran_past = w.ended.is_none_or(|end| end > w.stop_by);
        if !ran_past || w.stop_by >= now {
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

/// Whether the run explains why worker `w` was told `reason` at event `i`: a drain of its
/// client for `Shutdown`; for any other reason a fault on its client (or the store) that
/// lasted into the worker's life or its acquisition (at most a TTL before it: a replayed
/// grant), or a key deleted during it.
fn explained(events: &[Event], i: usize, w: &Worker, reason: CancelReason, facts: &Facts) -> bool {
    let before = &events[..=i];
    if reason == CancelReason::Shutdown {
        return before
            .iter()
            .any(|e| e.what == What::DrainBegan { client: w.client });
    }
    let reaches = |c: &Option<usize>| c.is_none_or(|c| c == w.client);
    before.iter().enumerate().any(|(j, e)| match &e.what {
        What::Deleted { .. } => e.at >= w.started,
        What::Fault { client, .. } if reaches(client) => {
            // The window lasts until healed (a reply in flight then, one timeout more).
            let healed = events[j..]
                .iter()
                .find(|h| h.what == What::Healed { client: *client })
                .map_or(Duration::MAX, |h| {
                    h.at.saturating_add(facts.command_timeout)
                });
            // A grant replayed after the fault carries what is left of its TTL, taken
            // during the fault: a short budget a TTL on.
            healed.saturating_add(facts.ttl) >= w.started
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests;
