//! A run's schedule, drawn from its seed: the faults and deletions, and when. The jobs the
//! clients run are drawn from the seed too, apart (`job_seed`), so that a schedule
//! shortened by dropping steps keeps its jobs.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt as _, SeedableRng as _};

/// Every lease's TTL: renewals every `TTL / 3`, a safety margin of one command timeout.
pub const TTL: Duration = Duration::from_secs(3);
/// When the faults stop: then they are cleared, the leases settle, every runtime drains.
pub const HORIZON: Duration = Duration::from_secs(20);
/// How many clients (each a `LeaseRuntime` on its own connection to the one store).
pub const CLIENTS: usize = 3;
/// One seed in this many pauses a client (those whose remainder is [`PAUSE_SEED`]): such a
/// run needs a runtime per client, driven in lock-step (`crate::lockstep`), some ten times
/// slower than the others.
pub const PAUSE_EVERY: u64 = 10;
/// The remainder, modulo [`PAUSE_EVERY`], of the seeds that pause a client.
pub const PAUSE_SEED: u64 = 7;
/// Resource 0: one permit, a supervisor on every client. Resource 1: two permits, a loop
/// of `run_under_lease` jobs on every client.
pub const PERMITS: [usize; 2] = [1, 2];

/// A fault a connection (or the store) shows for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Unavailable,
    LoseReply,
    LoseRequest,
    Slow(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `fault` on `client`'s connection, or the whole store's (`None`).
    Fault { client: Option<usize>, fault: Fault },
    /// The fault on `client` (or the store) is cleared; `outage_over` when it was a store
    /// outage longer than the TTL after which a supervised resource must have a leader
    /// within one renewal period (nothing else scheduled then, a client not drained).
    Heal {
        client: Option<usize>,
        outage_over: bool,
    },
    /// A lease key deleted behind its holder (resource 1: slot `slot`).
    Delete { resource: usize, slot: u16 },
    /// The store restarts empty: every lease gone (the fencing counters kept, as the
    /// scripts' TIME floor keeps tokens increasing on Redis).
    Restart,
    /// `client`'s runtime drains (`LeaseRuntime::shutdown`), and its jobs end.
    Drain { client: usize },
    /// `client`'s process stops: none of its tasks runs, none of its timers fires.
    Pause { client: usize },
    /// `client`'s process runs again, its clock reading now: every timer due meanwhile
    /// fires at once.
    Resume { client: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub action: Action,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>7.3}s {:?}", self.at.as_secs_f64(), self.action)
    }
}

/// One run: its seed, the clients' cancel policies, its steps in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    /// Per client: `CancelPolicy::Kill` (else `NotifyOnly`).
    pub kill: Vec<bool>,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The schedule of `seed`.
    pub fn from_seed(seed: u64) -> Schedule {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let kill = (0..CLIENTS).map(|_| rng.random_bool(0.75)).collect();
        let mut steps = Vec::new();
        let faults = rng.random_range(0..=6);
        let ms = |rng: &mut Xoshiro256PlusPlus, range: std::ops::Range<u64>| {
            Duration::from_millis(rng.random_range(range))
        };
        for _ in 0..faults {
            let at = ms(&mut rng, 500..HORIZON.as_millis() as u64 - 1_000);
            let action = match rng.random_range(0..20) {
                0..=11 => {
                    let client = (!rng.random_bool(0.3)).then(|| rng.random_range(0..CLIENTS));
                    let fault = match rng.random_range(0..4) {
                        0 => Fault::Unavailable,
                        1 => Fault::LoseReply,
                        2 => Fault::LoseRequest,
                        _ => Fault::Slow(ms(&mut rng, 20..400)),
                    };
                    // Short blips, and windows longer than the TTL (a lease expires under
                    // its holder; a store outage the supervisors must recover from).
                    let lasts = if rng.random_bool(0.5) {
                        ms(&mut rng, 50..1_000)
                    } else {
                        ms(&mut rng, 1_000..5_000)
                    };
                    steps.push(Step {
                        at: at + lasts,
                        action: Action::Heal {
                            client,
                            outage_over: false,
                        },
                    });
                    Action::Fault { client, fault }
                }
                12..=15 => {
                    let resource = rng.random_range(0..PERMITS.len());
                    let slot = rng.random_range(0..PERMITS[resource] as u16);
                    Action::Delete { resource, slot }
                }
                16..=17 => Action::Restart,
                _ => Action::Drain {
                    client: rng.random_range(0..CLIENTS),
                },
            };
            steps.push(Step { at, action });
        }
        if seed % PAUSE_EVERY == PAUSE_SEED {
            steps.extend(pauses(seed));
        }
        Schedule::with_steps(seed, kill, steps)
    }

    /// Whether a client pauses: then each client needs a clock of its own.
    pub fn pauses(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.action, Action::Pause { .. }))
    }

    /// When each client is paused: `(client, paused at, resumed at)`, a resume at the
    /// horizon if none is scheduled.
    pub fn pause_windows(&self) -> Vec<(usize, Duration, Duration)> {
        let mut windows = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let Action::Pause { client } = step.action else {
                continue;
            };
            let resumed = self.steps[i..]
                .iter()
                .find(|s| s.action == Action::Resume { client })
                .map_or(HORIZON, |s| s.at);
            windows.push((client, step.at, resumed));
        }
        windows
    }

    /// A schedule of these steps (sorted by time, stably; the outages marked again).
    pub fn with_steps(seed: u64, kill: Vec<bool>, mut steps: Vec<Step>) -> Schedule {
        steps.sort_by_key(|s| s.at);
        mark_outages(&mut steps);
        Schedule { seed, kill, steps }
    }

    /// The seed the clients' jobs are drawn from.
    pub fn job_seed(&self, client: usize) -> u64 {
        self.seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(client as u64 + 1))
    }

    /// How many faults, deletions, restarts, drains and pauses it has (heals and resumes
    /// not counted).
    pub fn faults(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| !matches!(s.action, Action::Heal { .. } | Action::Resume { .. }))
            .count()
    }
}

/// A pause seed's pauses, drawn apart from its other steps (which stay those of the seed
/// without them): one or two clients, each stopped once, for less than a TTL (a renewal or
/// two late, its lease still valid at the resume) or for one to two and a half (its local
/// validity ends while it is stopped, and another client may take its lease), resumed
/// before the horizon.
fn pauses(seed: u64) -> Vec<Step> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5041_5553_4544_u64);
    let first = rng.random_range(0..CLIENTS);
    let clients = if rng.random_bool(0.3) {
        vec![first, (first + rng.random_range(1..CLIENTS)) % CLIENTS]
    } else {
        vec![first]
    };
    let mut steps = Vec::new();
    for client in clients {
        let ttl = TTL.as_millis() as u64;
        let lasts = if rng.random_bool(0.3) {
            rng.random_range(200..ttl)
        } else {
            rng.random_range(ttl..ttl * 5 / 2)
        };
        let latest = HORIZON.as_millis() as u64 - 500 - lasts;
        let at = rng.random_range(500..latest);
        steps.push(Step {
            at: Duration::from_millis(at),
            action: Action::Pause { client },
        });
        steps.push(Step {
            at: Duration::from_millis(at + lasts),
            action: Action::Resume { client },
        });
    }
    steps
}

/// Marks each heal that ends a store outage longer than the TTL, with nothing else
/// scheduled from the outage's start to one renewal period after its end, while some
/// client is not drained: there a supervised resource must have a leader in that period.
fn mark_outages(steps: &mut [Step]) {
    let renew = TTL / 3;
    for i in 0..steps.len() {
        let Action::Heal { client: None, .. } = steps[i].action else {
            continue;
        };
        let healed = steps[i].at;
        // The outage it ends: Redis down (refusing), its requests lost, or its replies
        // lost (an acquisition that landed unanswered: the supervisor's unsettled
        // attempt, which it must replay rather than wait out); not merely slow.
        let began = steps[..i]
            .iter()
            .rev()
            .find(|s| matches!(s.action, Action::Fault { client: None, .. }))
            .filter(|s| {
                matches!(
                    s.action,
                    Action::Fault {
                        fault: Fault::Unavailable | Fault::LoseRequest | Fault::LoseReply,
                        ..
                    }
                )
            })
            .map(|s| s.at);
        let Some(began) = began else { continue };
        // No fault of a connection, nor a pause, still on when it began.
        let (mut on, mut paused) = (BTreeSet::new(), BTreeSet::new());
        for s in steps[..i].iter().filter(|s| s.at < began) {
            match s.action {
                Action::Fault { client, .. } => {
                    on.insert(client);
                }
                Action::Heal { client, .. } => {
                    on.remove(&client);
                }
                Action::Pause { client } => {
                    paused.insert(client);
                }
                Action::Resume { client } => {
                    paused.remove(&client);
                }
                _ => {}
            }
        }
        let quiet = steps.iter().enumerate().all(|(j, s)| {
            j == i
                || s.at < began
                || s.at > healed + renew
                || (matches!(s.action, Action::Fault { client: None, .. }) && s.at == began)
        });
        let drained: BTreeSet<usize> = steps[..i]
            .iter()
            .filter_map(|s| match s.action {
                Action::Drain { client } => Some(client),
                _ => None,
            })
            .collect();
        let outage_over = healed - began > TTL
            && quiet
            && on.is_empty()
            && paused.is_empty()
            && drained.len() < CLIENTS;
        steps[i].action = Action::Heal {
            client: None,
            outage_over,
        };
    }
}
