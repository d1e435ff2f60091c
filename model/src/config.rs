//! What a run of the model explores: the bounds of its space, the faults it may inject,
//! and the deliberate breakages (`Bugs`) that show each property can fail.
//!
//! Time is counted in ticks. A tick stands for the server's `TIME` resolution as far as
//! fencing is concerned and for a step of the clock as far as expiry is concerned: the model
//! keeps both small so that the space stays exhaustively checkable.

/// The bounds and faults of one run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Clients contending for the resource (2 or 3).
    pub clients: u8,
    /// Attempts (operation ids) each client may start, one after another.
    pub attempts: u8,
    /// Permits of the lease: 1 is a plain lease (acquire.lua `acquire`), more is a counted
    /// lease of that many slots (`acquire_slot`).
    pub permits: u8,
    /// The lease's ttl in ticks.
    pub ttl: u8,
    /// The drift budget in ticks: a client's validity ends `ttl − drift` after its send.
    pub drift: u8,
    /// Lock-delay in ticks, 0 for none: the key outlives an unreleased lease by this much.
    pub delay: u8,
    /// The clock stops here; every state is explored up to it.
    pub max_time: u8,
    /// Requests a client may give up on while they are still on their way (executed later,
    /// their reply read by nobody): a retry then races its own earlier send.
    pub late_requests: bool,
    /// Faults (eviction, flush, failover) one run may inject in total.
    pub faults: u8,
    /// The fence counter may be evicted (an `allkeys-*` maxmemory policy).
    pub evict: bool,
    /// `FLUSHALL`, or a restart from an empty data set.
    pub flush: bool,
    /// Writes a failover may lose: the promoted replica lacks up to this many (≤ 2).
    pub lost_writes: u8,
    /// Ticks the promoted replica's clock may be behind the old primary's (lags add up
    /// over failovers).
    pub replica_behind: u8,
    /// Ticks the promoted replica's clock may be ahead of the old primary's (never ahead
    /// of the real time). A jump forward ends leases early in real time: (a) does not
    /// survive it, which a test shows; leasehold's drift budget must cover it.
    pub replica_ahead: u8,
    /// The clock assumption the TIME floor rests on: after a fault, either the fence
    /// counter still holds the largest token issued, or the node's clock is past it — a
    /// fault that loses the counter (or its last increments) or sets the clock back never
    /// leaves both short. Off, the checker shows what goes wrong without it.
    pub time_past_counter: bool,
    /// Renewals and releases take the server's own commands (`SET … IFEQ … GET PX`,
    /// `DELIFEQ`), falling back to the script as the client does.
    pub native: bool,
    /// Clients that wait in the resource's line (W, then W or K, or die): the first
    /// `waiters` clients; the others try (A). Each client keeps its way for every attempt:
    /// a choice per attempt multiplies the space by the clients' combinations (eight for
    /// three), out of the CI's time. 0: every acquisition is a try and the line stays
    /// empty — the scripts before the line, and what the conformance replay runs.
    pub waiters: u8,
    /// KEEP: a line entry is alive while its alive key lives or for this many ticks after
    /// it joined; a keep-alive sets the alive key to expire this many ticks on.
    pub keep: u8,
    /// Waiters that may die in one run: stop sending for their attempt and move to a next
    /// one (`NextAttempt`, beyond `attempts`), their entry left in the line.
    pub deaths: u8,
    /// The wait loop looks (sends W) only at the head of the line: elsewhere it sends K
    /// alone. Its rank is taken as the server has it, the most a waiter can know. Off, a
    /// waiter may send W at any step; on, a dead head keeps a free slot from the waiters
    /// behind it, which a test shows (K never prunes).
    pub head_looks_only: bool,
    /// Deliberate breakages of the scripts or the client.
    pub bugs: Bugs,
}

/// One flag per breakage; each breaks one property, which a test shows the checker finds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bugs {
    /// Tokens are `last + 1` alone: no floor at the server's `TIME`.
    pub no_time_floor: bool,
    /// A renewal extends whatever key it finds.
    pub renew_without_owner_check: bool,
    /// A release deletes whatever key it finds.
    pub release_without_owner_check: bool,
    /// Renew and release compare the owner token alone, not the operation id.
    pub owner_only: bool,
    /// The counted-slot scan takes one slot past the last when all are held.
    pub slot_scan_extra: bool,
    /// A replay of the attempt that holds the lease issues a new token.
    pub replay_new_token: bool,
    /// A lease in its lock-delay is taken as absent.
    pub ignore_lock_delay: bool,
    /// A RENEWED that comes after the handle left ACTIVE makes it ACTIVE again.
    pub revive_handle: bool,
    /// A free slot goes to whoever asks for it: the line is not consulted.
    pub line_ignored: bool,
    /// Entries that are no longer alive are never pruned from the line.
    pub no_prune: bool,
    /// A try (A) takes a free slot despite live waiters ahead of it.
    pub try_jumps: bool,
    /// A join is scored by the server's `TIME` alone, not `max(tail's score + 1, TIME)`.
    pub join_at_time: bool,
}

impl Config {
    /// A plain lease, two clients, lost and late replies, no data loss: the base of every
    /// other configuration.
    pub fn plain() -> Config {
        Config {
            clients: 2,
            attempts: 2,
            permits: 1,
            ttl: 3,
            drift: 1,
            delay: 0,
            max_time: 4,
            late_requests: true,
            faults: 0,
            evict: false,
            flush: false,
            lost_writes: 0,
            replica_behind: 0,
            replica_ahead: 0,
            time_past_counter: true,
            native: false,
            waiters: 0,
            keep: 2,
            deaths: 0,
            head_looks_only: false,
            bugs: Bugs::default(),
        }
    }

    /// The plain lease under one fault: eviction of the counter, a flush, or a failover
    /// that loses up to two writes to a replica whose clock is up to a tick behind.
    pub fn faults() -> Config {
        Config {
            faults: 1,
            evict: true,
            flush: true,
            lost_writes: 2,
            replica_behind: 1,
            late_requests: false,
            ..Config::plain()
        }
    }

    /// A counted lease of two slots and three clients.
    pub fn counted() -> Config {
        Config {
            clients: 3,
            attempts: 1,
            permits: 2,
            max_time: 4,
            late_requests: false,
            ..Config::plain()
        }
    }

    /// A counted lease of two slots with a lock-delay of one tick, two clients: the scan's
    /// DELAYED branch and a free slot beside a delayed one.
    pub fn counted_lock_delay() -> Config {
        Config {
            clients: 2,
            attempts: 2,
            permits: 2,
            delay: 1,
            max_time: 5,
            late_requests: false,
            ..Config::plain()
        }
    }

    /// A plain lease with a lock-delay of two ticks.
    pub fn lock_delay() -> Config {
        Config {
            delay: 2,
            max_time: 7,
            late_requests: false,
            ..Config::plain()
        }
    }

    /// The line of waiters on a plain lease: two clients that wait (W, K) and one that
    /// tries (A), lost replies, and one waiter that dies in the line. Three ticks of clock:
    /// an entry that joined at the first and was never kept alive is dead at the third,
    /// where a release can free the slot it would block (four ticks cost four times more).
    pub fn line() -> Config {
        Config {
            clients: 3,
            attempts: 1,
            waiters: 2,
            max_time: 3,
            deaths: 1,
            late_requests: false,
            ..Config::plain()
        }
    }

    /// The line of a counted lease of two slots: two waiters and a trier, one death.
    pub fn counted_line() -> Config {
        Config {
            permits: 2,
            ..Config::line()
        }
    }

    /// The line under one fault (an eviction, a flush that empties it, a failover that
    /// loses up to two of its writes, to a replica whose clock is a tick behind): one waiter
    /// that dies once and one trier. Scoring joins by `TIME` alone would put a newcomer
    /// ahead of the line there
    /// (`join_at_time_puts_a_newcomer_ahead_after_a_failover_to_a_clock_behind`).
    pub fn line_faults() -> Config {
        Config {
            attempts: 1,
            max_time: 3,
            replica_behind: 1,
            waiters: 1,
            deaths: 1,
            ..Config::faults()
        }
    }

    /// The same configuration with `LEASEHOLD_MODEL_DEPTH` more ticks of clock (0 when
    /// unset), and one more fault where faults are injected (two in a row: an eviction
    /// then a failover, say): the deeper run of README.md.
    pub fn deepened(self) -> Config {
        let extra = std::env::var("LEASEHOLD_MODEL_DEPTH")
            .ok()
            .and_then(|v| v.parse::<u8>().ok())
            .unwrap_or(0)
            .min(8);
        let more_faults = u8::from(extra > 0 && self.faults > 0);
        Config {
            max_time: self.max_time + extra,
            faults: self.faults + more_faults,
            ..self
        }
    }

    /// The same configuration with `bugs`.
    pub fn with_bugs(self, bugs: Bugs) -> Config {
        Config { bugs, ..self }
    }

    /// Whether any client waits: the line is in play.
    pub fn waiting(&self) -> bool {
        self.waiters > 0
    }

    /// Slots the server has room for: one more when the broken scan may overrun.
    pub(crate) fn slot_room(&self) -> usize {
        usize::from(self.permits) + usize::from(self.bugs.slot_scan_extra)
    }
}
