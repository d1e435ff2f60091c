//! `RedisBackend`: the scripts of `lua/` on a standalone Redis, on the primary that Redis
//! Sentinel names, or on the Redis Cluster primary serving the lease's slot.
//!
//! The topologies share everything but one step: how a connection to the node that takes
//! writes is obtained (`Topology`). The script calls, the error classification and the
//! release notices are one code path. Standalone and Sentinel share one connection slot;
//! Cluster keeps one connection per primary, chosen by the slot of the lease's hash tag
//! (`cluster` says how the slot map is kept and when it is fetched again).
//!
//! # Behaviour, and the time bound of every await
//!
//! * Construction parses every URL and opens nothing: a bad URL (or an empty sentinel list)
//!   is an error before any I/O, and a Redis that is down shows up as `NotSent` on the first
//!   call, not at start-up.
//! * One multiplexed connection is shared by every call. It is made on first use and made
//!   again after it is dropped (see the next bullets). *Obtaining* it is bounded as a whole
//!   by `min(connect_timeout, the call's timeout)`; any failure to obtain it is `NotSent`:
//!   nothing was written.
//!   * Standalone: connect (TCP, TLS, `AUTH`, `SELECT`) to the configured URL.
//!   * Sentinel: (1) ask every sentinel at once `SENTINEL get-master-addr-by-name`; the lookup
//!     ends when every sentinel has answered or failed, when a majority of the configured
//!     sentinels named the same address, or — once one has named a primary — at half the
//!     bound, so sentinels that are down or silent cost at most that;
//!     (2) connect to the address most sentinels named (then the others), with the data
//!     nodes' credentials, database and TLS from `sentinel_node_url_template`; (3) keep that
//!     very connection only if `ROLE` on it answers `master` (a user whose ACL forbids
//!     `ROLE`, `NOPERM`, is taken at the sentinels' word).
//! * The shared connection is dropped, so the next call obtains a new one — under Sentinel,
//!   asks the sentinels again — when a call breaks it (I/O error), when a call times out
//!   (the socket may be silent) or its reply cannot be trusted, when the node answers
//!   `READONLY` or `MASTERDOWN` (it is not, or no longer, the primary: after a failover the
//!   old primary is demoted), and, under Sentinel, when a sentinel announces
//!   `+switch-master` to another address.
//! * Sentinel watcher: from the first successful connection on, one pub/sub connection per
//!   sentinel listens for `+switch-master`. It runs in the background and is on no call's
//!   path; each (re)subscription is bounded by `connect_timeout`, retried after 100 ms
//!   doubling to 5 s, and followed by one lookup so a switch announced while it was not
//!   listening is not missed. It stops when the last clone of the backend is dropped.
//! * Every operation is one item of a script call (`lua/batch.lua`). Under standalone and
//!   Sentinel, concurrent operations share calls: at most four calls are in flight, and what
//!   arrives meanwhile goes out together in the next one (`batch` says how, and what it
//!   promises). An operation that finds a call slot free is sent at once, with those
//!   arriving at the same moment. Under Cluster each operation is a call of its own, to the
//!   owner of its slot.
//! * Each operation is bounded by its `timeout` (`tokio::time::timeout`, from the call's
//!   start: waiting for a call slot, obtaining the connection and the `NOSCRIPT` reload
//!   included). One that times out before its call was written is `NotSent`; after, it is
//!   `MaybeSent`. A script call whose reply has not come by the earliest deadline of its
//!   operations makes the next call start on a new connection. Every reply echoes its
//!   call's id: a reply read for another call (a stream that lost bytes) is `MaybeSent`
//!   for every operation of the call, never decoded as theirs.
//! * Server errors Redis raises before running (`LOADING`, `BUSY`, `OOM`…) are `NotSent`, and
//!   so is `READONLY`: a read-only replica runs none of a script's writes, whatever their
//!   order. Other errors and unreadable replies are `MaybeSent` (see `classify`).
//! * An acquisition that waits for replicas (`LeaseRequestBuilder::wait_for_replicas`) runs
//!   alone on a twin backend with connections of its own — the script, then `WAIT` on the
//!   same connection — since `WAIT` blocks its connection until the replicas answer.
//! * Release notices use one pub/sub connection per subscription, to the node of the shared
//!   connection (under Sentinel: the current primary, where the release script publishes).
//!   Obtaining the shared connection and subscribing are bounded together by the
//!   subscription's timeout. The subscription ends — the caller falls back to polling — when
//!   its connection breaks or the primary moves to another node; it is closed when dropped.
//!
//! # What Sentinel does not promise
//!
//! During a failover two nodes can claim to be primary: after `SENTINEL FAILOVER`, the old
//! primary keeps accepting writes until the sentinels demote it (about ten seconds with
//! Redis 7.0), and a partitioned primary keeps accepting them until it rejoins. A call
//! already in flight when `+switch-master` is announced, or one made while this process
//! cannot hear the sentinels, may land on the old primary and its effect may be lost with
//! it. Fencing tokens are what protects the resource then (docs/design.md §4);
//! `min-replicas-to-write` on the server narrows the window.

mod batch;
mod classify;
mod cluster;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod parse;
mod scripts;
mod sentinel;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo as _, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    BackendFuture, FailureDetail, FailureKind, LeaseBackend, ReleaseNotices, ReplicatedReply,
    SendFailure,
};
use crate::error::LeaseError;
use crate::protocol::limits::{CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT};
use crate::protocol::{
    AcquireReply, Attempt, InspectReply, LeaseKeys, ReleaseReply, RenewReply, ReplicaWait,
};

/// Where and how to reach Redis: one standalone node ([`new`](Self::new)), the primary
/// that Redis Sentinel names ([`sentinel`](Self::sentinel)), or a Redis Cluster
/// ([`cluster`](Self::cluster)).
#[derive(Clone)]
pub struct RedisConfig {
    target: Target,
    node_url_template: Option<String>,
    connect_timeout: Duration,
}

#[derive(Clone)]
enum Target {
    Standalone {
        url: String,
    },
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
    Cluster {
        seeds: Vec<String>,
    },
}

impl RedisConfig {
    /// A standalone node: `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS, with
    /// the `tls` feature), or `unix:///path/to/socket`. Connect timeout defaults to 1 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            target: Target::Standalone { url: url.into() },
            node_url_template: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The primary that the sentinels at `sentinel_urls` monitor as `master_name`, found
    /// again after every failover (the module docs of [`RedisBackend`] say when, and how
    /// long each step may take).
    ///
    /// Each sentinel URL is `redis://[user:password@]host:port` — the sentinel's own
    /// credentials, if it has any — or `rediss://…`; it names no database, since sentinels
    /// have none. The data nodes are reached at the address the sentinels report, logged in
    /// as [`sentinel_node_url_template`](Self::sentinel_node_url_template) says (by default
    /// plain `redis://`, no credentials, database 0). The connect timeout (default 1 s)
    /// bounds finding the primary and connecting to it, together.
    ///
    /// Nothing is checked here: [`RedisBackend::new`] validates everything before any I/O.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::LeaseError> {
    /// use std::time::Duration;
    /// use leasehold::{LeaseClient, LeaseSettings, RedisBackend, RedisConfig};
    ///
    /// let sentinels = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    ///     .map(|host| format!("redis://{host}:26379"))
    ///     .to_vec();
    /// let config = RedisConfig::sentinel(sentinels, "leases")
    ///     // Credentials and database of the data nodes; host and port are placeholders,
    ///     // the sentinels name the primary.
    ///     .sentinel_node_url_template("redis://lease-user:secret@primary/2")
    ///     .connect_timeout(Duration::from_millis(500));
    /// let client = LeaseClient::new(RedisBackend::new(config)?, LeaseSettings::default())?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn sentinel(sentinel_urls: Vec<String>, master_name: impl Into<String>) -> Self {
        Self {
            target: Target::Sentinel {
                sentinels: sentinel_urls,
                master_name: master_name.into(),
            },
            node_url_template: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The primaries of a Redis Cluster, found through `seed_urls` (any nodes of the
    /// cluster; all are asked at once for the slot map, the first answer wins). Each
    /// lease's script runs on the primary serving the slot of its hash tag, through one
    /// connection per primary.
    ///
    /// Each seed URL is `redis://[user:password@]host:port` or `rediss://…`; it names no
    /// database (a cluster has only database 0). The first seed's login and TLS settings
    /// are used for every node, at the address the slot map names. The connect timeout
    /// bounds fetching the slot map and connecting to one primary, together.
    ///
    /// A `MOVED` or `ASK` reply is followed once within the call, on the node it names
    /// (after `MOVED` the slot map is fetched again for later calls; after `ASK` — a slot
    /// in migration — with `ASKING`). A redirection refuses before anything runs, so
    /// nothing runs twice; a second one in the same call is `NotSent`, for the caller to
    /// retry.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::LeaseError> {
    /// use leasehold::{RedisBackend, RedisConfig};
    /// let seeds = vec!["redis://10.0.0.1:7000".to_owned(), "redis://10.0.0.2:7000".to_owned()];
    /// let backend = RedisBackend::new(RedisConfig::cluster(seeds))?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn cluster(seed_urls: Vec<String>) -> Self {
        Self {
            target: Target::Cluster { seeds: seed_urls },
            node_url_template: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Sentinel only: how to log in to the data nodes the sentinels name. A `redis://` or
    /// `rediss://` URL whose scheme (TLS or not, `#insecure`), user, password, database and
    /// `protocol` apply to every primary; its host and port are ignored and replaced by the
    /// address the sentinels report. With TLS the certificate is checked against that
    /// address (an IP, unless the sentinels announce hostnames).
    ///
    /// [`RedisBackend::new`] rejects it on a standalone configuration.
    pub fn sentinel_node_url_template(mut self, url: impl Into<String>) -> Self {
        self.node_url_template = Some(url.into());
        self
    }

    /// Bound on obtaining one connection (1 ms ..= 60 s). Under Sentinel it covers asking
    /// the sentinels, connecting to the primary and checking its `ROLE`.
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every URL may carry a password: none is shown.
        let mut d = f.debug_struct("RedisConfig");
        match &self.target {
            Target::Standalone { .. } => d.field("url", &"<redacted>"),
            Target::Sentinel {
                sentinels,
                master_name,
            } => d
                .field("sentinels", &vec!["<redacted>"; sentinels.len()])
                .field("master_name", master_name),
            Target::Cluster { seeds } => d.field("seeds", &vec!["<redacted>"; seeds.len()]),
        };
        if self.node_url_template.is_some() {
            d.field("sentinel_node_url_template", &"<redacted>");
        }
        d.field("connect_timeout", &self.connect_timeout).finish()
    }
}

/// Leases in Redis 6.2 or later: a standalone node, the primary Redis Sentinel names, or the
/// primaries of a Redis Cluster.
///
/// Cloning is cheap and shares the connection (under Cluster, the connections).
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::LeaseError> {
/// use leasehold::{RedisBackend, RedisConfig};
/// let backend = RedisBackend::new(RedisConfig::new("redis://127.0.0.1:6379"))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    topology: Topology,
    connect_timeout: Duration,
    shared: Arc<Shared>,
    /// Serialises reconnects so a burst of calls after a break opens one connection.
    connecting: tokio::sync::Mutex<()>,
    /// Callers obtaining a connection now (waiting for the gate or connecting): why an
    /// operation that waited in the batcher's queue was not sent.
    obtaining: AtomicUsize,
    /// Calls waiting to be sent together (standalone and Sentinel).
    batcher: batch::Batcher,
    /// Ids of script calls, echoed in their replies.
    calls: AtomicU64,
    /// A twin on the same configuration with connections of its own, for acquisitions that
    /// wait for replicas: `WAIT` blocks its connection, so it must not be the one every
    /// other operation shares. `None` in the twin itself.
    replicated: Option<RedisBackend>,
}

/// How a connection to the node that takes writes is obtained: the one thing the
/// topologies do differently.
enum Topology {
    Standalone(Client),
    Sentinel(sentinel::Sentinels),
    /// One connection per primary, kept by `cluster::Cluster` rather than the shared slot.
    Cluster(cluster::Cluster),
}

impl Topology {
    /// A connection to the primary, obtained by `bound`. Every failure is `NotSent`: no
    /// script was sent.
    async fn connect(&self, bound: Instant) -> Result<Connected, SendFailure> {
        match self {
            Self::Standalone(client) => {
                let connection = tokio::time::timeout_at(
                    bound,
                    client.get_multiplexed_async_connection_with_config(&connection_config(bound)),
                )
                .await
                .map_err(|_| not_sent("connect timed out"))?
                .map_err(|e| classify::connect_failure(&e))?;
                Ok(Connected::new(connection, client.clone()))
            }
            Self::Sentinel(sentinels) => sentinels.connect(bound).await,
            // `RedisBackend::connection` asks the cluster for the slot's node instead.
            Self::Cluster(_) => Err(not_sent("a cluster has no single primary")),
        }
    }
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the clients: their connection info holds the URL's password.
        match self {
            Self::Standalone(_) => f.write_str("Standalone"),
            Self::Sentinel(sentinels) => fmt::Debug::fmt(sentinels, f),
            Self::Cluster(cluster) => fmt::Debug::fmt(cluster, f),
        }
    }
}

/// The shared connection and the node it leads to. Cloned by every call: two cheap
/// handles.
#[derive(Clone)]
struct Connected {
    connection: MultiplexedConnection,
    node: Arc<Node>,
}

struct Node {
    /// A client for the node, for pub/sub.
    client: Client,
    /// `host:port` of the node, as the sentinels spell it in `+switch-master`.
    endpoint: String,
}

impl Connected {
    fn new(connection: MultiplexedConnection, client: Client) -> Self {
        let endpoint = client.get_connection_info().addr().to_string();
        Self {
            connection,
            node: Arc::new(Node { client, endpoint }),
        }
    }

    fn endpoint(&self) -> &str {
        &self.node.endpoint
    }
}

/// What the calls share with the background tasks (sentinel watcher, subscriptions).
struct Shared {
    slot: Mutex<Slot>,
    /// The latest primary endpoint, connected to or announced; mirrors `Slot::primary` for
    /// subscriptions, which end when it moves.
    primary: watch::Sender<Option<String>>,
}

#[derive(Default)]
struct Slot {
    generation: u64,
    current: Option<Connected>,
    /// The latest primary endpoint, connected to or announced by a sentinel.
    primary: Option<String>,
    /// How many times a sentinel announced a primary other than `primary`.
    moves: u64,
}

impl Shared {
    fn new() -> Self {
        Self {
            slot: Mutex::new(Slot::default()),
            primary: watch::Sender::new(None),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        // The slot holds plain values replaced whole; a poisoned lock still holds valid ones.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current(&self) -> Option<(u64, Connected)> {
        let slot = self.slot();
        slot.current.clone().map(|c| (slot.generation, c))
    }

    fn moves(&self) -> u64 {
        self.slot().moves
    }

    /// Makes `connected` the shared connection — unless a sentinel announced another
    /// primary after `moves_before` was read, while it was being made.
    fn install(&self, connected: &Connected, moves_before: u64) -> Result<u64, SendFailure> {
        let mut slot = self.slot();
        if slot.moves != moves_before && slot.primary.as_deref() != Some(connected.endpoint()) {
            return Err(not_sent(
                "a sentinel announced another primary while connecting",
            ));
        }
        slot.generation += 1;
        slot.current = Some(connected.clone());
        slot.primary = Some(connected.endpoint().to_owned());
        let generation = slot.generation;
        drop(slot);
        self.publish(connected.endpoint());
        Ok(generation)
    }

    /// Forgets connection `generation` if it is still the current one.
    fn discard(&self, generation: u64) {
        let mut slot = self.slot();
        if slot.generation == generation {
            slot.current = None;
        }
    }

    /// A sentinel names `endpoint` as the primary: a connection to any other node is
    /// forgotten, so the next call finds the primary again.
    fn primary_moved(&self, endpoint: &str) {
        let mut slot = self.slot();
        if slot.primary.as_deref() == Some(endpoint) {
            return;
        }
        slot.primary = Some(endpoint.to_owned());
        slot.moves += 1;
        if slot
            .current
            .as_ref()
            .is_some_and(|c| c.endpoint() != endpoint)
        {
            slot.current = None;
        }
        drop(slot);
        self.publish(endpoint);
    }

    fn publish(&self, endpoint: &str) {
        self.primary.send_if_modified(|primary| {
            if primary.as_deref() == Some(endpoint) {
                return false;
            }
            *primary = Some(endpoint.to_owned());
            true
        });
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("topology", &self.inner.topology)
            .field("connect_timeout", &self.inner.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Script calls one backend has in flight at once, at most (standalone and Sentinel).
    /// Operations that arrive while this many are in flight wait, and leave together in the
    /// next call; an operation that waits past its timeout is `NotSent`.
    pub const CALLS_IN_FLIGHT: usize = batch::MAX_IN_FLIGHT;

    /// Operations waiting that make a backend with a call in flight start another one
    /// (while fewer than [`CALLS_IN_FLIGHT`](Self::CALLS_IN_FLIGHT) are). Fewer wait for
    /// the next call of one in flight — one round trip at most. An operation that finds no
    /// call in flight leaves at once.
    pub const OPERATIONS_FOR_ANOTHER_CALL: usize = batch::ANOTHER_CALL;

    /// Validates the configuration; connects on first use.
    ///
    /// # Errors
    /// [`LeaseError::InvalidRedisUrl`] (the URL itself is never echoed) for an unparsable
    /// URL or an unsupported scheme (such as `rediss://` without the `tls` feature); for a
    /// sentinel configuration also an empty sentinel list, a sentinel URL naming a
    /// database, a master name that is empty, longer than 128 bytes or holds whitespace,
    /// and a node URL template that is not `redis://` or `rediss://` — or that is set on a
    /// standalone configuration. [`LeaseError::InvalidDuration`] for the connect timeout.
    pub fn new(config: RedisConfig) -> Result<Self, LeaseError> {
        let replicated = Self::build(config.clone(), None)?;
        Self::build(config, Some(replicated))
    }

    /// A backend on `config`; `replicated` is the twin that runs acquisitions which wait for
    /// replicas (`None`: this is that twin).
    fn build(config: RedisConfig, replicated: Option<RedisBackend>) -> Result<Self, LeaseError> {
        let connect_timeout = CONNECT_TIMEOUT.check(config.connect_timeout)?;
        let topology = match config.target {
            Target::Standalone { url } => {
                if config.node_url_template.is_some() {
                    return Err(invalid_url(
                        "sentinel_node_url_template applies only to a sentinel configuration",
                    ));
                }
                Topology::Standalone(open_client(&url).map_err(invalid_url)?)
            }
            Target::Sentinel {
                sentinels,
                master_name,
            } => Topology::Sentinel(sentinel::Sentinels::new(
                &sentinels,
                master_name,
                config.node_url_template.as_deref(),
                connect_timeout,
            )?),
            Target::Cluster { seeds } => {
                if config.node_url_template.is_some() {
                    return Err(invalid_url(
                        "sentinel_node_url_template applies only to a sentinel configuration",
                    ));
                }
                Topology::Cluster(cluster::Cluster::new(&seeds)?)
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                topology,
                connect_timeout,
                shared: Arc::new(Shared::new()),
                connecting: tokio::sync::Mutex::new(()),
                obtaining: AtomicUsize::new(0),
                batcher: batch::Batcher::default(),
                calls: AtomicU64::new(0),
                replicated,
            }),
        })
    }

    /// The connection for a script on `key` — the shared connection, or under Cluster the
    /// one to the owner of `key`'s slot — obtained if there is none. Every failure here is
    /// `NotSent`.
    async fn connection(
        &self,
        deadline: Instant,
        key: &str,
    ) -> Result<(u64, Connected), SendFailure> {
        if let Topology::Cluster(cluster) = &self.inner.topology {
            return self
                .gated(
                    deadline,
                    || cluster.current(key),
                    |bound| cluster.connect(key, bound),
                )
                .await;
        }
        let shared = &self.inner.shared;
        self.gated(
            deadline,
            || shared.current(),
            |bound| async move {
                let moves_before = shared.moves();
                let connected = self.inner.topology.connect(bound).await?;
                let generation = shared.install(&connected, moves_before)?;
                if let Topology::Sentinel(sentinels) = &self.inner.topology {
                    sentinels.watch(shared);
                }
                Ok((generation, connected))
            },
        )
        .await
    }

    /// The connection `current` names; otherwise one made by `connect` under the backend's
    /// connect gate (one connection attempt at a time), bounded by the connect timeout and
    /// `deadline`. Every failure is `NotSent`.
    async fn gated<Connect>(
        &self,
        deadline: Instant,
        current: impl Fn() -> Option<(u64, Connected)>,
        connect: impl FnOnce(Instant) -> Connect,
    ) -> Result<(u64, Connected), SendFailure>
    where
        Connect: Future<Output = Result<(u64, Connected), SendFailure>>,
    {
        if let Some(current) = current() {
            return Ok(current);
        }
        let _obtaining = Obtaining::new(&self.inner.obtaining);
        let _gate = tokio::time::timeout_at(deadline, self.inner.connecting.lock())
            .await
            .map_err(|_| not_sent("timed out waiting for a connection"))?;
        if let Some(current) = current() {
            return Ok(current);
        }
        connect(deadline.min(Instant::now() + self.inner.connect_timeout)).await
    }

    /// Forgets connection `generation` (to `connected`'s node) if it is still current.
    fn discard(&self, generation: u64, connected: &Connected) {
        match &self.inner.topology {
            Topology::Cluster(cluster) => cluster.discard(connected.endpoint(), generation),
            _ => self.inner.shared.discard(generation),
        }
    }

    /// Runs `item`'s operation, bounded by `timeout` from now: under Cluster alone, on the
    /// owner of its slot (leases of different slots cannot share a script call); otherwise
    /// in the next batch (`batch`).
    async fn call(&self, item: batch::Item, timeout: Duration) -> batch::ItemResult {
        let deadline = Instant::now() + timeout;
        if matches!(self.inner.topology, Topology::Cluster(_)) {
            return self.alone(&item, deadline).await;
        }
        batch::submit(self, item, deadline, timeout).await
    }

    /// Runs `item` in a script call of its own, from the caller's task, by `deadline`.
    async fn alone(&self, item: &batch::Item, deadline: Instant) -> batch::ItemResult {
        let (generation, connected) = self.connection(deadline, item.route()).await?;
        if deadline <= Instant::now() {
            // Connected just at the deadline: sending now would only time out, and cost
            // the connection.
            return Err(not_sent("not sent before the call's deadline"));
        }
        self.send_one(generation, &connected, item, deadline).await
    }

    /// Whether a caller is obtaining a connection now.
    fn obtaining(&self) -> bool {
        self.inner.obtaining.load(Ordering::Relaxed) > 0
    }

    /// `send` of one item.
    async fn send_one(
        &self,
        generation: u64,
        connected: &Connected,
        item: &batch::Item,
        deadline: Instant,
    ) -> batch::ItemResult {
        let items = std::slice::from_ref(item);
        let deadlines = batch::Deadlines::one(deadline);
        let sent = self.send(generation, connected, items, deadlines).await;
        sent.into_iter().next().unwrap_or_else(|| {
            Err(SendFailure::MaybeSent(FailureDetail::new(
                FailureKind::MalformedReply,
                "no result for the call",
            )))
        })
    }

    /// Sends `items` as one script call on `connected`, waiting for its reply until
    /// `deadlines.last`. One result per item, in order: its reply, its own error, or the
    /// failure of the whole call.
    ///
    /// A reply not in by `deadlines.first` makes the next call start on a new connection
    /// (the socket may be silent, or lead to a node that is gone), as the earliest item's
    /// caller gives up then; the call itself keeps waiting for the others.
    async fn send(
        &self,
        generation: u64,
        connected: &Connected,
        items: &[batch::Item],
        deadlines: batch::Deadlines,
    ) -> Vec<batch::ItemResult> {
        self.send_via(generation, connected, items, deadlines, None)
            .await
    }

    /// `send`, on the node a redirection named when `via` says which.
    async fn send_via(
        &self,
        generation: u64,
        connected: &Connected,
        items: &[batch::Item],
        deadlines: batch::Deadlines,
        via: Option<Redirection>,
    ) -> Vec<batch::ItemResult> {
        let asking = via == Some(Redirection::Ask);
        let started = Instant::now();
        let id = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let command = batch::command(id, items);
        let mut connection = connected.connection.clone();
        let reply = eval(&mut connection, &command, asking);
        tokio::pin!(reply);
        let reply = match tokio::time::timeout_at(deadlines.first, &mut reply).await {
            Ok(reply) => Ok(reply),
            Err(_) => {
                self.discard(generation, connected);
                tokio::time::timeout_at(deadlines.last, reply).await
            }
        };
        let failure = match reply {
            Ok(Ok(value)) => match parse::batch(value, id, items.len()) {
                Ok(replies) => {
                    return replies
                        .into_iter()
                        .map(|reply| match reply {
                            Value::ServerError(e) => {
                                let e = redis::RedisError::from(e);
                                self.forget_on(generation, connected, &e);
                                Err(classify::command_failure(&e))
                            }
                            reply => Ok(reply),
                        })
                        .collect();
                }
                Err(m) => {
                    // Possibly another call's reply: this connection's stream cannot be
                    // trusted any more.
                    self.discard(generation, connected);
                    SendFailure::MaybeSent(FailureDetail::new(FailureKind::MalformedReply, m))
                }
            },
            Err(_) => {
                self.discard(generation, connected);
                SendFailure::MaybeSent(FailureDetail::new(
                    FailureKind::Timeout,
                    format!("no reply within {:?}", deadlines.last - started),
                ))
            }
            Ok(Err(e)) => {
                self.forget_on(generation, connected, &e);
                if via.is_none()
                    && let Some(results) = self.follow(&e, items, deadlines).await
                {
                    return results;
                }
                if items.len() > 1 && classify::may_concern_some_keys(&e) {
                    // Refused before running (invariant 4 of `batch`): each item alone.
                    let alone = items.iter().map(|item| {
                        let one = std::slice::from_ref(item);
                        Box::pin(self.send(generation, connected, one, deadlines))
                    });
                    return futures_util::future::join_all(alone)
                        .await
                        .into_iter()
                        .flatten()
                        .collect();
                }
                classify::command_failure(&e)
            }
        };
        vec![Err(failure); items.len()]
    }

    /// The call again on the Cluster node a redirection names — once: a call refused by a
    /// redirection did not run. After `MOVED` (the slot has a new owner; the map was
    /// forgotten) plainly; after `ASK` (the slot is migrating and the source no longer has
    /// the keys) with `ASKING`, on the importing node. `None` when `e` is no redirection,
    /// names no node, or the backend is not a Cluster: the caller handles `e` as it is.
    async fn follow(
        &self,
        e: &redis::RedisError,
        items: &[batch::Item],
        deadlines: batch::Deadlines,
    ) -> Option<Vec<batch::ItemResult>> {
        let Topology::Cluster(cluster) = &self.inner.topology else {
            return None;
        };
        let via = Redirection::of(e)?;
        let (addr, _slot) = e.redirect_node()?;
        let (host, port) = addr.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let node = self
            .gated(
                deadlines.last,
                || cluster.current_node(host, port),
                |bound| cluster.node(host, port, bound),
            )
            .await;
        Some(match node {
            Ok((generation, connected)) => {
                let again = self.send_via(generation, &connected, items, deadlines, Some(via));
                Box::pin(again).await
            }
            Err(failure) => vec![Err(failure); items.len()],
        })
    }

    /// Forgets what error `e` shows to be unusable: the connection (broken, or to a node
    /// that is no longer the primary), and under Cluster a stale slot map.
    fn forget_on(&self, generation: u64, connected: &Connected, e: &redis::RedisError) {
        if classify::needs_new_connection(e) {
            self.discard(generation, connected);
        }
        if let Topology::Cluster(cluster) = &self.inner.topology
            && cluster::map_is_stale(e)
        {
            // Forgets the node's connection and the slot map.
            self.discard(generation, connected);
            cluster.forget_map();
        }
    }

    /// `WAIT wait.replicas() wait.timeout()` on `connected`, the connection that just wrote
    /// the acquisition: how many replicas acknowledged every write made on it so far.
    async fn wait_replicas(
        &self,
        generation: u64,
        connected: &Connected,
        wait: ReplicaWait,
        deadline: Instant,
    ) -> Result<u32, FailureDetail> {
        let millis = u64::try_from(wait.timeout().as_millis()).unwrap_or(u64::MAX);
        let mut command = redis::cmd("WAIT");
        command.arg(wait.replicas()).arg(millis);
        let mut connection = connected.connection.clone();
        let sent = tokio::time::timeout_at(deadline, connection.send_packed_command(&command));
        match sent.await {
            Ok(Ok(Value::Int(acked))) => Ok(u32::try_from(acked).unwrap_or(0)),
            Ok(Ok(Value::ServerError(e))) => Err(FailureDetail::new(
                FailureKind::ServerError,
                redis::RedisError::from(e).to_string(),
            )),
            Ok(Ok(other)) => Err(FailureDetail::new(
                FailureKind::MalformedReply,
                format!("expected the number of replicas from WAIT, got {other:?}"),
            )),
            Ok(Err(e)) => {
                self.forget_on(generation, connected, &e);
                Err(classify::command_failure(&e).detail().clone())
            }
            Err(_) => {
                self.discard(generation, connected);
                Err(FailureDetail::new(
                    FailureKind::Timeout,
                    "WAIT did not answer before the call's deadline",
                ))
            }
        }
    }

    /// Runs one operation and decodes its reply with `parse`.
    fn operation<'a, T: Send + 'a>(
        &'a self,
        item: batch::Item,
        timeout: Duration,
        parse: fn(Value) -> Result<T, String>,
    ) -> BackendFuture<'a, T> {
        Box::pin(async move { parse(self.call(item, timeout).await?).map_err(malformed) })
    }
}

/// Counts a caller as obtaining a connection while it lives.
struct Obtaining<'a>(&'a AtomicUsize);

impl<'a> Obtaining<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Obtaining<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A Cluster redirection, which `RedisBackend::follow` follows once within a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redirection {
    /// `MOVED`: the slot has a new owner.
    Moved,
    /// `ASK`: the slot is migrating, and the source no longer has the keys.
    Ask,
}

impl Redirection {
    fn of(e: &redis::RedisError) -> Option<Self> {
        match e.code() {
            Some("MOVED") => Some(Self::Moved),
            Some("ASK") => Some(Self::Ask),
            _ => None,
        }
    }
}

/// `command` (an `EVALSHA`), loading the script first if the server does not know it
/// (`NOSCRIPT`: after `SCRIPT FLUSH`, or a restart without persistence); after `ASKING`
/// when `asking` (a Cluster node named by an `ASK` redirection).
async fn eval(
    connection: &mut MultiplexedConnection,
    command: &redis::Cmd,
    asking: bool,
) -> redis::RedisResult<Value> {
    match send_script(connection, command, asking).await {
        Err(e) if e.code() == Some("NOSCRIPT") => {
            scripts::BATCH
                .prepare_invoke()
                .load_async(connection)
                .await?;
            send_script(connection, command, asking).await
        }
        result => result,
    }
}

/// One send of `command`; a top-level error reply is an `Err`.
async fn send_script(
    connection: &mut MultiplexedConnection,
    command: &redis::Cmd,
    asking: bool,
) -> redis::RedisResult<Value> {
    let value = if asking {
        // `ASKING` applies to the connection's next command: both go out in one write, so
        // no other call on the multiplexed connection comes between them.
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(command.clone());
        let mut values = connection.send_packed_commands(&pipe, 1, 1).await?;
        values.pop().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "no reply after ASKING"))
        })?
    } else {
        connection.send_packed_command(command).await?
    };
    match value {
        Value::ServerError(e) => Err(redis::RedisError::from(e)),
        value => Ok(value),
    }
}

/// Parses `url` into a client, without I/O.
fn open_client(url: &str) -> Result<Client, String> {
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") {
        // The redis crate selects no rustls provider; without one, the first TLS
        // handshake panics (docs/design.md §12). Another provider installed first wins.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let info = url.into_connection_info().map_err(|e| e.to_string())?;
    // Without TCP_NODELAY a script call written in more than one segment waits for the
    // server's acknowledgement of the first (Nagle): measured 1-4 ms per 32-item call.
    let info = info.set_tcp_settings(TcpSettings::default().set_nodelay(true));
    Client::open(info).map_err(|e| e.to_string())
}

/// A reply that could not be decoded: the script may have run.
fn malformed(message: String) -> SendFailure {
    SendFailure::MaybeSent(FailureDetail::new(FailureKind::MalformedReply, message))
}

fn invalid_url(reason: impl Into<String>) -> LeaseError {
    LeaseError::InvalidRedisUrl {
        reason: reason.into(),
    }
}

fn not_sent(message: impl Into<String>) -> SendFailure {
    SendFailure::NotSent(FailureDetail::new(FailureKind::Connect, message))
}

/// Connection settings for a connection that must be made by `bound`.
fn connection_config(bound: Instant) -> AsyncConnectionConfig {
    // Our own timeouts bound every call; the crate's response timeout would only race them.
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(bound.saturating_duration_since(Instant::now())))
        .set_response_timeout(None)
}

impl LeaseBackend for RedisBackend {
    fn acquire<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        ttl: Duration,
        timeout: Duration,
    ) -> BackendFuture<'a, AcquireReply> {
        let item = batch::Item::acquire(keys, attempt, ttl);
        self.operation(item, timeout, parse::acquire)
    }

    /// On the twin's connections (see `Inner::replicated`), alone: the script, then `WAIT`
    /// on the same connection.
    fn acquire_replicated<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        ttl: Duration,
        wait: ReplicaWait,
        timeout: Duration,
    ) -> BackendFuture<'a, ReplicatedReply> {
        Box::pin(async move {
            let twin = self.inner.replicated.as_ref().unwrap_or(self);
            let deadline = Instant::now() + timeout;
            let (generation, connected) = twin.connection(deadline, &keys.lease).await?;
            let item = batch::Item::acquire(keys, attempt, ttl);
            let value = twin
                .send_one(generation, &connected, &item, deadline)
                .await?;
            let reply = parse::acquire(value).map_err(malformed)?;
            let acked = match reply {
                AcquireReply::Acquired { .. } => Some(
                    twin.wait_replicas(generation, &connected, wait, deadline)
                        .await,
                ),
                _ => None,
            };
            Ok(ReplicatedReply { reply, acked })
        })
    }

    fn renew<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        ttl: Duration,
        timeout: Duration,
    ) -> BackendFuture<'a, RenewReply> {
        let item = batch::Item::renew(keys, attempt, ttl);
        self.operation(item, timeout, parse::renew)
    }

    fn release<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseReply> {
        let item = batch::Item::release(keys, attempt);
        self.operation(item, timeout, parse::release)
    }

    fn inspect<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, InspectReply> {
        let item = batch::Item::inspect(keys, attempt);
        self.operation(item, timeout, parse::inspect)
    }

    fn subscribe_releases<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            // On the node of the shared connection: the primary the scripts publish on.
            // Under Cluster a PUBLISH reaches every node: the slot owner's will do.
            let (_, current) = self.connection(deadline, &keys.lease).await?;
            let failed = |kind, m: String| SendFailure::NotSent(FailureDetail::new(kind, m));
            let subscribe = async {
                let mut pubsub = current.node.client.get_async_pubsub().await?;
                pubsub.subscribe(&keys.release_channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let bound = deadline.min(Instant::now() + self.inner.connect_timeout);
            let pubsub = tokio::time::timeout_at(bound, subscribe)
                .await
                .map_err(|_| failed(FailureKind::Timeout, "subscribe timed out".into()))?
                .map_err(|e| failed(FailureKind::Connect, e.to_string()))?;
            // Under Cluster no primary is announced: the subscription ends with its connection.
            let follow_primary = !matches!(self.inner.topology, Topology::Cluster(_));
            let mut primary = self.inner.shared.primary.subscribe();
            // The primary may have moved while subscribing: look once before waiting.
            primary.mark_changed();
            let endpoint = current.endpoint().to_owned();
            // Releases are published on the new primary once it moved: the subscription
            // ends then, so the caller polls (or subscribes again, on the new primary).
            let moved = async move {
                if !follow_primary {
                    return std::future::pending().await;
                }
                loop {
                    let changed = primary.changed().await;
                    let moved = primary.borrow_and_update().as_deref() != Some(&endpoint);
                    if changed.is_err() || moved {
                        return;
                    }
                }
            };
            let notices = pubsub.into_on_message().map(|_| ()).take_until(moved);
            Ok(ReleaseNotices::new(notices))
        })
    }
}
