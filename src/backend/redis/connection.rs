//! How a call obtains its connection: the topology that makes one, the shared connection
//! and the node it leads to, the connect gate (one attempt at a time), and what an error
//! shows to be unusable. Every failure here is `NotSent`: no script was sent.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{RedisBackend, ServerCapabilities, classify, cluster, pubsub, sentinel};
use crate::backend::{FailureDetail, FailureKind, SendFailure};

/// How a connection to the node that takes writes is obtained: the one thing the
/// topologies do differently.
pub(super) enum Topology {
    Standalone(Client),
    Sentinel(sentinel::Sentinels),
    /// One connection per primary, kept by `cluster::Cluster` rather than in [`Shared`].
    Cluster(cluster::Cluster),
}

impl Topology {
    /// A connection to the primary, obtained by `bound`. Every failure is `NotSent`: no
    /// script was sent.
    pub(super) async fn connect(&self, bound: Instant) -> Result<Connected, SendFailure> {
        match self {
            Self::Standalone(client) => {
                let connection = tokio::time::timeout_at(
                    bound,
                    client.get_multiplexed_async_connection_with_config(&connection_config(bound)),
                )
                .await
                .map_err(|_| not_sent("connect timed out"))?
                .map_err(|e| classify::connect_failure(&e))?;
                Connected::open(connection, client.clone(), bound).await
            }
            Self::Sentinel(sentinels) => sentinels.connect(bound).await,
            // `RedisBackend::connection` asks the cluster for the hash slot's node instead.
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
pub(super) struct Connected {
    pub(super) connection: MultiplexedConnection,
    pub(super) node: Arc<Node>,
}

pub(super) struct Node {
    /// A client for the node, for pub/sub.
    pub(super) client: Client,
    /// `host:port` of the node, as the sentinels spell it in `+switch-master`.
    pub(super) endpoint: String,
    /// The node's pub/sub connection, shared by every subscription of the backend.
    pub(super) notices: pubsub::Hub,
    /// What the node's server can do beyond the scripts, read when connecting.
    pub(super) capabilities: ServerCapabilities,
    /// Set once the user was refused one of those commands (an ACL written for the
    /// script): the script does everything on this connection from then on.
    native_refused: AtomicBool,
}

impl Node {
    pub(super) fn native_refused(&self) -> bool {
        self.native_refused.load(Ordering::Relaxed)
    }

    pub(super) fn refuse_native(&self) {
        self.native_refused.store(true, Ordering::Relaxed);
    }
}

impl Connected {
    /// A new connection to the node `client` names, once its capabilities are read (by
    /// `bound`; a failure is `NotSent`).
    pub(super) async fn open(
        mut connection: MultiplexedConnection,
        client: Client,
        bound: Instant,
    ) -> Result<Self, SendFailure> {
        let capabilities = ServerCapabilities::read(&mut connection, bound).await?;
        let endpoint = client.get_connection_info().addr().to_string();
        Ok(Self {
            connection,
            node: Arc::new(Node {
                client,
                endpoint,
                notices: pubsub::Hub::default(),
                capabilities,
                native_refused: AtomicBool::new(false),
            }),
        })
    }

    pub(super) fn endpoint(&self) -> &str {
        &self.node.endpoint
    }
}

/// What the calls share with the background tasks (sentinel watcher, subscriptions).
pub(super) struct Shared {
    pub(super) state: Mutex<ConnectionState>,
    /// The latest primary endpoint, connected to or announced; mirrors
    /// `ConnectionState::primary` for subscriptions, which end when it moves.
    pub(super) primary: watch::Sender<Option<String>>,
}

/// The shared connection (standalone, Sentinel) and what is known of the primary it must
/// lead to.
#[derive(Default)]
pub(super) struct ConnectionState {
    pub(super) generation: u64,
    pub(super) current: Option<Connected>,
    /// The latest primary endpoint, connected to or announced by a sentinel.
    pub(super) primary: Option<String>,
    /// How many times a sentinel announced a primary other than `primary`.
    pub(super) moves: u64,
}

impl Shared {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(ConnectionState::default()),
            primary: watch::Sender::new(None),
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, ConnectionState> {
        // The state holds plain values replaced whole; a poisoned lock still holds valid ones.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn current(&self) -> Option<(u64, Connected)> {
        let state = self.state();
        state.current.clone().map(|c| (state.generation, c))
    }

    pub(super) fn moves(&self) -> u64 {
        self.state().moves
    }

    /// Makes `connected` the shared connection — unless a sentinel announced another
    /// primary after `moves_before` was read, while it was being made.
    pub(super) fn install(
        &self,
        connected: &Connected,
        moves_before: u64,
    ) -> Result<u64, SendFailure> {
        let mut state = self.state();
        if state.moves != moves_before && state.primary.as_deref() != Some(connected.endpoint()) {
            return Err(not_sent(
                "a sentinel announced another primary while connecting",
            ));
        }
        state.generation += 1;
        state.current = Some(connected.clone());
        state.primary = Some(connected.endpoint().to_owned());
        let generation = state.generation;
        drop(state);
        self.publish(connected.endpoint());
        Ok(generation)
    }

    /// Forgets connection `generation` if it is still the current one.
    pub(super) fn discard(&self, generation: u64) {
        let mut state = self.state();
        if state.generation == generation {
            state.current = None;
        }
    }

    /// A sentinel names `endpoint` as the primary: a connection to any other node is
    /// forgotten, so the next call finds the primary again.
    pub(super) fn primary_moved(&self, endpoint: &str) {
        let mut state = self.state();
        if state.primary.as_deref() == Some(endpoint) {
            return;
        }
        state.primary = Some(endpoint.to_owned());
        state.moves += 1;
        if state
            .current
            .as_ref()
            .is_some_and(|c| c.endpoint() != endpoint)
        {
            state.current = None;
        }
        drop(state);
        self.publish(endpoint);
    }

    pub(super) fn publish(&self, endpoint: &str) {
        self.primary.send_if_modified(|primary| {
            if primary.as_deref() == Some(endpoint) {
                return false;
            }
            *primary = Some(endpoint.to_owned());
            true
        });
    }
}

impl RedisBackend {
    /// The connection for a script on `key` — the shared connection, or under Cluster the
    /// one to the owner of `key`'s hash slot — obtained if there is none. Every failure
    /// here is `NotSent`.
    pub(super) async fn connection(
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
    pub(super) async fn gated<Connect>(
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
    pub(super) fn discard(&self, generation: u64, connected: &Connected) {
        match &self.inner.topology {
            Topology::Cluster(cluster) => cluster.discard(connected.endpoint(), generation),
            _ => self.inner.shared.discard(generation),
        }
    }

    /// Whether a caller is obtaining a connection now.
    pub(super) fn obtaining(&self) -> bool {
        self.inner.obtaining.load(Ordering::Relaxed) > 0
    }

    /// Forgets what error `e` shows to be unusable: the connection (broken, or to a node
    /// that is no longer the primary), and under Cluster a stale slot map.
    pub(super) fn forget_on(&self, generation: u64, connected: &Connected, e: &redis::RedisError) {
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
}

/// Counts a caller as obtaining a connection while it lives.
pub(super) struct Obtaining<'a>(&'a AtomicUsize);

impl<'a> Obtaining<'a> {
    pub(super) fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Obtaining<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) fn not_sent(message: impl Into<String>) -> SendFailure {
    SendFailure::NotSent(FailureDetail::new(FailureKind::Connect, message))
}

/// Connection settings for a connection that must be made by `bound`.
pub(super) fn connection_config(bound: Instant) -> AsyncConnectionConfig {
    // Our own timeouts bound every call; the crate's response timeout would only race them.
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(bound.saturating_duration_since(Instant::now())))
        .set_response_timeout(None)
}
