//! `RedisBackend`: the scripts of `lua/` on a standalone Redis, on the primary that Redis
//! Sentinel names, or on the Redis Cluster primary serving the lease's hash slot.
//!
//! The topologies share everything but one step: how a connection to the node that takes
//! writes is obtained (`Topology`). The script calls, the error classification and the
//! release notices are one code path. Standalone and Sentinel share one connection; Cluster
//! keeps one connection per primary, chosen by the hash slot of the lease's hash tag
//! (`cluster` says how the slot map is kept and when it is fetched again).
//!
//! # Where things are
//!
//! This file: the backend, its construction, and its [`Operations`]. `config`
//! where and how to reach Redis; `connection` how a call obtains its connection (topology,
//! shared connection, connect gate); `call` one script call, `NOSCRIPT` and Cluster
//! redirections; `batch` concurrent operations coalesced into one call; `replicas` the
//! `WAIT` after an acquisition; `parse` and `classify` replies and errors; `scripts` the
//! Lua; `pubsub` the notices' shared connection per node; `scan` the key scan behind
//! listing; `sentinel` and `cluster` the two topologies that need more than a URL.
//!
//! What a caller may rely on — the behaviour, the time bound of every await, what Sentinel
//! does not promise — is documented on [`RedisBackend`] itself.

mod batch;
mod call;
mod capabilities;
mod classify;
mod cluster;
mod config;
mod connection;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzzing;
mod operations;
mod parse;
#[cfg(test)]
mod parse_props;
mod pubsub;
mod replicas;
mod scan;
mod scripts;
mod sentinel;
mod url;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::BackendFuture;
use crate::error::LeaseError;
use crate::protocol::limits::{self, CONNECT_TIMEOUT};

use call::malformed;
pub use capabilities::ServerCapabilities;
pub use config::RedisConfig;
use config::{Target, invalid_url, open_client};
use connection::{Connected, Shared, Topology, connection_config, not_sent};

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
///
/// # Behaviour, and the time bound of every await
///
/// * Construction parses every URL and opens nothing: a bad URL (or an empty sentinel list)
///   is an error before any I/O, and a Redis that is down shows up as `NotSent` on the first
///   call, not at start-up.
/// * One multiplexed connection is shared by every call. It is made on first use and made
///   again after it is dropped (see the next bullets). *Obtaining* it is bounded as a whole
///   by `min(connect_timeout, the call's timeout)`; any failure to obtain it is `NotSent`:
///   nothing was written.
///   * Standalone: connect (TCP, TLS, `AUTH`, `SELECT`) to the configured URL.
///   * Sentinel: (1) ask every sentinel at once `SENTINEL get-master-addr-by-name`; the lookup
///     ends when every sentinel has answered or failed, when a majority of the configured
///     sentinels named the same address, or — once one has named a primary — at half the
///     bound, so sentinels that are down or silent cost at most that;
///     (2) connect to the address most sentinels named (then the others), with the data
///     nodes' credentials, database and TLS from `sentinel_node_url_template`; (3) keep that
///     very connection only if `ROLE` on it answers `master` (a user whose ACL forbids
///     `ROLE`, `NOPERM`, is taken at the sentinels' word).
/// * The shared connection is dropped, so the next call obtains a new one — under Sentinel,
///   asks the sentinels again — when a call breaks it (I/O error), when a call times out
///   (the socket may be silent) or its reply cannot be trusted, when the node answers
///   `READONLY` or `MASTERDOWN` (it is not, or no longer, the primary: after a failover the
///   old primary is demoted), and, under Sentinel, when a sentinel announces
///   `+switch-master` to another address.
/// * Sentinel watcher: from the first successful connection on, one pub/sub connection per
///   sentinel listens for `+switch-master`. It runs in the background and is on no call's
///   path; each (re)subscription is bounded by `connect_timeout`, retried after 100 ms
///   doubling to 5 s, and followed by one lookup so a switch announced while it was not
///   listening is not missed. It stops when the last clone of the backend is dropped.
/// * Every operation is one item of a script call (`lua/batch.lua`) — except, on a server
///   with compare-and-set commands ([`ServerCapabilities`], read from `INFO server` when
///   connecting), a renewal (`SET … IFEQ … GET PX`) and a release (`DELIFEQ` and the
///   notice's `PUBLISH`), which go as one pipeline of those commands beside the script call,
///   with the same replies ([`RedisConfig::native_commands`] turns this off). Under
///   standalone and Sentinel, concurrent operations share calls: at most four calls are in
///   flight, and what arrives meanwhile goes out together in the next one (`batch` says
///   how, and what it promises). An operation that finds no call in flight is sent at once,
///   with those arriving at the same moment. Under Cluster each operation is a call of its
///   own, to the owner of its hash slot.
/// * A burst beyond what the calls in flight carry waits in a bounded queue
///   ([`RedisConfig::queue_limit`], default 16,384): renewals and releases first, then
///   acquisitions and reads in arrival order. An acquisition or a read that finds the queue
///   full is refused at once, nothing sent (`NotSent` of kind `QueueFull`); renewals and
///   releases are never refused.
/// * Each operation's `timeout` bounds its round trip, from the instant just before its
///   call is written; time in the queue is not counted — except a renewal's: its timeout
///   runs from the call (the queue and obtaining the connection included), since its
///   caller's deadline is absolute. A deadline is judged once this process has caught up
///   with its queued tasks: a reply that came in time but that the process, busy, had not
///   read yet still counts (`batch` says how long it waits for that). An operation that
///   times out before its call was written is `NotSent`; after, it is `MaybeSent`. A
///   script call whose reply has not come by the earliest deadline of its operations makes
///   the next call start on a new connection, whose set-up needs the server's answer: the
///   operations waiting are not sent into a server that stopped answering. Every reply
///   echoes its call's id (a pipeline of the server's own commands ends with `PING <id>`):
///   a reply read for another call (a stream that lost bytes) is `MaybeSent` for every
///   operation of the call, never decoded as theirs.
/// * Server errors Redis raises before running (`LOADING`, `BUSY`, `OOM`…) are `NotSent`, and
///   so is `READONLY`: a read-only replica runs none of a script's writes, whatever their
///   order. Other errors and unreadable replies are `MaybeSent` (see `classify`).
/// * An acquisition that waits for replicas (`LeaseRequestBuilder::wait_for_replicas`) runs
///   alone on a twin backend with connections of its own — the script, then `WAIT` on the
///   same connection — since `WAIT` blocks its connection until the replicas answer.
/// * Release notices use one pub/sub connection per node, shared by every subscription of
///   the backend (`pubsub`), to the node of the shared connection (under Sentinel: the
///   current primary, where the release script publishes). Obtaining the shared connection,
///   opening the pub/sub one if needed and the server's confirmation are bounded together by
///   the subscription's timeout; concurrent subscriptions are confirmed together, by a few
///   pipelined `SUBSCRIBE`s. The subscription ends — the caller subscribes again soon — when
///   its connection breaks, when the server leaves a round of `SUBSCRIBE`s unconfirmed for
///   the connect timeout, when the shared connection is replaced (the pub/sub connection
///   opened beside it closes then, so none outlives a fault or a dropped backend), or when
///   the primary moves to another node; dropping it unsubscribes.
///
/// # What Sentinel does not promise
///
/// During a failover two nodes can claim to be primary: after `SENTINEL FAILOVER`, the old
/// primary keeps accepting writes until the sentinels demote it (about ten seconds with
/// Redis 7.0), and a partitioned primary keeps accepting them until it rejoins. A call
/// already in flight when `+switch-master` is announced, or one made while this process
/// cannot hear the sentinels, may land on the old primary and its effect may be lost with
/// it. Fencing tokens are what protects the resource then (docs/design.md §4);
/// `min-replicas-to-write` on the server narrows the window.
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
    /// Whether renewals and releases may use a node's compare-and-set commands
    /// (`RedisConfig::native_commands`).
    native_commands: bool,
    /// A twin on the same configuration with connections of its own, for acquisitions that
    /// wait for replicas: `WAIT` blocks its connection, so it must not be the one every
    /// other operation shares. `None` in the twin itself.
    replicated: Option<RedisBackend>,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("topology", &self.inner.topology)
            .field("connect_timeout", &self.inner.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// Script calls one backend has in flight at once, at most (standalone and Sentinel).
/// Operations that arrive while this many are in flight wait in the queue
/// ([`RedisConfig::queue_limit`]), and leave together in the next calls; a renewal that
/// waits past its timeout is `NotSent`.
#[cfg(feature = "fuzzing")]
pub const CALLS_IN_FLIGHT: usize = batch::MAX_IN_FLIGHT;

/// Operations waiting that make a backend with a call in flight start another one (while
/// fewer than [`CALLS_IN_FLIGHT`] are). Fewer wait for the next call of one in flight — one
/// round trip at most. An operation that finds no call in flight leaves at once.
#[cfg(feature = "fuzzing")]
pub const OPERATIONS_FOR_ANOTHER_CALL: usize = batch::ANOTHER_CALL;

impl RedisBackend {
    /// Validates the configuration; connects on first use.
    ///
    /// # Errors
    /// [`LeaseError::InvalidRedisUrl`] (the URL itself is never echoed) for an unparsable
    /// URL or an unsupported scheme (such as `rediss://` without the `tls` feature); for a
    /// sentinel configuration also an empty sentinel list, a sentinel URL naming a
    /// database, a master name that is empty, longer than 128 bytes or holds whitespace,
    /// and a node URL template that is not `redis://` or `rediss://` — or that is set on a
    /// standalone configuration. [`LeaseError::InvalidDuration`] for the connect timeout,
    /// [`LeaseError::InvalidQueueLimit`] for the queue limit.
    pub fn new(config: RedisConfig) -> Result<Self, LeaseError> {
        let replicated = Self::build(config.clone(), None)?;
        Self::build(config, Some(replicated))
    }

    /// A backend on `config`; `replicated` is the twin that runs acquisitions which wait for
    /// replicas (`None`: this is that twin).
    fn build(config: RedisConfig, replicated: Option<RedisBackend>) -> Result<Self, LeaseError> {
        let connect_timeout = CONNECT_TIMEOUT.check(config.connect_timeout)?;
        let queue_limit = limits::check_queue_limit(config.queue_limit)?;
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
                batcher: batch::Batcher::new(queue_limit),
                calls: AtomicU64::new(0),
                native_commands: config.native_commands,
                replicated,
            }),
        })
    }

    /// Runs `item`'s operation within `bound`: under Cluster alone, on the owner of its hash
    /// slot (leases of different hash slots cannot share a script call); otherwise in the
    /// next batch (`batch`).
    async fn call(&self, item: batch::Item, bound: batch::Bound) -> batch::ItemResult {
        if matches!(self.inner.topology, Topology::Cluster(_)) {
            return self.alone(&item, bound).await;
        }
        batch::submit(self, item, bound).await
    }

    /// Runs `item` in a script call of its own, from the caller's task, within `bound`.
    /// Obtaining the connection takes at most the connect timeout and the item's timeout.
    async fn alone(&self, item: &batch::Item, bound: batch::Bound) -> batch::ItemResult {
        let connect_by = bound.deadline(Instant::now()).at;
        let (generation, connected) = self.connection(connect_by, item.route()).await?;
        let now = Instant::now();
        if bound.send_by().is_some_and(|by| by <= now) {
            // Connected just at the deadline: sending now would only time out, and cost
            // the connection.
            return Err(not_sent("not sent before the call's deadline"));
        }
        let deadlines = batch::Deadlines::one(bound.deadline(now));
        self.send_one(generation, &connected, item, deadlines).await
    }

    /// The queue of operations waiting to share a script call, and the calls in flight
    /// (`batch`).
    fn batcher(&self) -> &batch::Batcher {
        &self.inner.batcher
    }

    /// The shared connection, if one is up now: a call goes out on it without waiting.
    fn current_connection(&self) -> Option<(u64, Connected)> {
        self.inner.shared.current()
    }

    /// The bound on obtaining a connection (`RedisConfig::connect_timeout`).
    fn connect_timeout(&self) -> Duration {
        self.inner.connect_timeout
    }

    /// Runs one operation within `bound` and decodes its reply with `parse`.
    fn operation<'a, T: Send + 'a>(
        &'a self,
        item: batch::Item,
        bound: batch::Bound,
        parse: fn(Value) -> Result<T, String>,
    ) -> BackendFuture<'a, T> {
        Box::pin(async move { parse(self.call(item, bound).await?).map_err(malformed) })
    }
}
