//! The model's state: real time, the primary and what its replica lacks, the clients, and
//! the ghost record the properties read (what was granted, and each property's breach as
//! the step that made it).

use crate::client::{Client, Handle, Request};
use crate::config::Config;
use crate::server::{Data, Time, Token};

/// The primary Redis node (or the replica promoted in its place).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub data: Data,
    /// How far the node's clock is behind the real time (a promoted replica's may be).
    pub behind: Time,
    /// The data as it stood before each of the last writes, newest first: what a replica
    /// that missed them holds.
    pub before: Vec<Data>,
}

impl Server {
    /// The node's clock at real time `now`.
    pub fn clock(&self, now: Time) -> Time {
        now.saturating_sub(self.behind)
    }

    /// Records that a write changed the data from `before`, for a replica that may miss
    /// it (keeping the last `keep`).
    pub fn record_write(&mut self, before: Data, keep: u8) {
        if keep == 0 {
            return;
        }
        self.before.insert(0, before);
        self.before.truncate(usize::from(keep));
    }
}

/// Breaches, one bit per property; set by the step that broke it.
pub mod breach {
    /// (a) a belief gained from a reply is backed by the client's own key.
    pub const BACKED: u8 = 1;
    /// (b) a grant's token is not above every earlier grant's.
    pub const TOKENS: u8 = 2;
    /// (c) an attempt got a second grant while its first still held.
    pub const ATTEMPT: u8 = 4;
    /// (d) a handle sent from a terminal state.
    pub const HANDLE: u8 = 8;
    /// (e) a slot in its lock-delay was granted.
    pub const DELAY: u8 = 16;
    /// (g) a free slot was granted past as many live waiters as there were free slots.
    pub const FCFS: u8 = 32;
    /// (g) a waiter joined the line ahead of one that was already in it.
    pub const ORDER: u8 = 64;
}

/// What the properties need beyond the system's own state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// The largest token ever granted.
    pub max_token: Token,
    /// Grants so far, per client (for the `sometimes` properties).
    pub granted: Vec<bool>,
    /// A fault lost acknowledged writes (a flush, or a failover that lost writes).
    pub data_lost: bool,
    /// Breached properties (`breach` bits).
    pub breaches: u8,
    /// A slot was granted to an attempt that was waiting in the line.
    pub served_from_line: bool,
    /// A pruning walk removed another attempt's dead entry.
    pub pruned: bool,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, in ticks.
    pub now: Time,
    pub server: Server,
    pub clients: Vec<Client>,
    /// Faults still allowed.
    pub faults_left: u8,
    /// Waiters that may still die (`Config::deaths`).
    pub deaths_left: u8,
    pub ghost: Ghost,
}

impl State {
    pub fn initial(config: &Config) -> State {
        State {
            now: 1,
            server: Server {
                data: Data::empty(config),
                behind: 0,
                before: Vec::new(),
            },
            clients: vec![Client::new(); usize::from(config.clients)],
            faults_left: config.faults,
            deaths_left: config.deaths,
            ghost: Ghost {
                granted: vec![false; usize::from(config.clients)],
                ..Ghost::default()
            },
        }
    }

    /// The primary's clock now.
    pub fn server_now(&self) -> Time {
        self.server.clock(self.now)
    }

    /// Drops the alive keys no step can read any more: a key is read only for its
    /// attempt's entry, so one whose attempt has no entry and can send no W (its client
    /// moved on to another attempt or out of idle, and no W of it is on its way late) is
    /// dead weight. The code's key lives on until its PX, unread: forgetting it here only
    /// merges states that no action or property tells apart. (Snapshots a replica holds
    /// keep theirs; a failover may bring one back, as unread.)
    pub fn forget_unread_alive_keys(&mut self) {
        let data = &mut self.server.data;
        if data.alive.is_empty() {
            return;
        }
        let (line, clients) = (&data.line, &self.clients);
        data.alive.retain(|key| {
            let attempt = key.attempt;
            let client = &clients[usize::from(attempt.client)];
            let waits = client.op == attempt.op && client.handle == Handle::Idle;
            let late = matches!(client.late, Some((op, Request::Wait { .. })) if op == attempt.op);
            waits || late || line.iter().any(|e| e.attempt == attempt)
        });
    }

    /// Clients that believe they hold the lease with validity left.
    pub fn believers(&self, drift: Time) -> usize {
        let now = self.now;
        self.clients
            .iter()
            .filter(|c| c.believes(now, drift))
            .count()
    }
}
