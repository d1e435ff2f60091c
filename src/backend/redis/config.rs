//! `RedisConfig`: where and how to reach Redis — one standalone node, the primary Redis
//! Sentinel names, or a Redis Cluster — checked without I/O, and the one way a URL becomes
//! a client.

use std::fmt;
use std::time::Duration;

use redis::io::tcp::TcpSettings;
use redis::{Client, IntoConnectionInfo as _};

use crate::error::LeaseError;
use crate::protocol::limits::DEFAULT_CONNECT_TIMEOUT;

/// Operations a Redis backend keeps waiting to be sent, by default
/// ([`RedisConfig::queue_limit`]). Enough for a burst of ten thousand acquisitions from one
/// client; at what Redis spends on an operation of a batch (docs/performance.md), a full
/// queue is a fraction of a second of its time — the last admitted operation leaves well
/// within a second on a healthy server — and at most a few megabytes here (a waiting
/// operation holds its keys and arguments, a few hundred bytes).
const DEFAULT_QUEUE_LIMIT: usize = 16_384;

/// Where and how to reach Redis: one standalone node ([`new`](Self::new)), the primary
/// that Redis Sentinel names ([`sentinel`](Self::sentinel)), or a Redis Cluster
/// ([`cluster`](Self::cluster)).
#[derive(Clone)]
pub struct RedisConfig {
    pub(super) target: Target,
    pub(super) node_url_template: Option<String>,
    pub(super) connect_timeout: Duration,
    pub(super) queue_limit: usize,
    pub(super) native_commands: bool,
}

#[derive(Clone)]
pub(super) enum Target {
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
            queue_limit: DEFAULT_QUEUE_LIMIT,
            native_commands: true,
        }
    }

    /// The primary that the sentinels at `sentinel_urls` monitor as `master_name`, found
    /// again after every failover ([`RedisBackend`](crate::RedisBackend)'s docs say when,
    /// and how long each step may take).
    ///
    /// Each sentinel URL is `redis://[user:password@]host:port` — the sentinel's own
    /// credentials, if it has any — or `rediss://…`; it names no database, since sentinels
    /// have none. The data nodes are reached at the address the sentinels report, logged in
    /// as [`sentinel_node_url_template`](Self::sentinel_node_url_template) says (by default
    /// plain `redis://`, no credentials, database 0). The connect timeout (default 1 s)
    /// bounds finding the primary and connecting to it, together.
    ///
    /// Nothing is checked here: [`RedisBackend::new`](crate::RedisBackend::new) validates
    /// everything before any I/O.
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
            queue_limit: DEFAULT_QUEUE_LIMIT,
            native_commands: true,
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
            queue_limit: DEFAULT_QUEUE_LIMIT,
            native_commands: true,
        }
    }

    /// Sentinel only: how to log in to the data nodes the sentinels name. A `redis://` or
    /// `rediss://` URL whose scheme (TLS or not, `#insecure`), user, password, database and
    /// `protocol` apply to every primary; its host and port are ignored and replaced by the
    /// address the sentinels report. With TLS the certificate is checked against that
    /// address (an IP, unless the sentinels announce hostnames).
    ///
    /// [`RedisBackend::new`](crate::RedisBackend::new) rejects it on a standalone
    /// configuration.
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

    /// Most operations the backend keeps waiting to be sent (1 ..=
    /// [`MAX_QUEUE_LIMIT`](crate::protocol::limits::MAX_QUEUE_LIMIT); default 16,384).
    ///
    /// Under standalone and Sentinel, operations beyond what the script calls in flight
    /// carry wait in one queue, whatever their number, as long as the connection answers;
    /// time spent there is not counted against the command timeout. An acquisition or a
    /// read that finds this many waiting is refused at once
    /// ([`AcquireOutcome::QueueFull`](crate::AcquireOutcome::QueueFull)), nothing sent;
    /// renewals and releases — at most one per lease held — are never refused, and go
    /// first. The limit bounds how long an admitted operation can wait: the queue drains
    /// by 128 operations per round trip while the server answers (4 calls of 32 in
    /// flight), and every operation waiting is answered `Unavailable` as soon as a new
    /// connection cannot be had after a call that got no reply.
    pub fn queue_limit(mut self, queue_limit: usize) -> Self {
        self.queue_limit = queue_limit;
        self
    }

    /// Whether renewals and releases use the server's own compare-and-set commands where
    /// it has them ([`ServerCapabilities`](crate::ServerCapabilities): Valkey 8.1 and 9.0
    /// on), default `true`. `false` keeps every operation on the script, whatever the
    /// server — the path of every other server, with the same replies and guarantees.
    pub fn native_commands(mut self, native_commands: bool) -> Self {
        self.native_commands = native_commands;
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
        d.field("connect_timeout", &self.connect_timeout)
            .field("queue_limit", &self.queue_limit)
            .field("native_commands", &self.native_commands)
            .finish()
    }
}

/// Parses `url` into a client, without I/O.
pub(super) fn open_client(url: &str) -> Result<Client, String> {
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") {
        // The redis crate selects no rustls provider; without one, the first TLS
        // handshake panics (docs/design.md §12). Another provider installed first wins.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let info = url.into_connection_info().map_err(|e| e.to_string())?;
    // Without TCP_NODELAY a script call written in more than one segment waits for the
    // server's acknowledgement of the first (Nagle; docs/performance.md, "Behind the
    // constants").
    let info = info.set_tcp_settings(TcpSettings::default().set_nodelay(true));
    Client::open(info).map_err(|e| e.to_string())
}

pub(super) fn invalid_url(reason: impl Into<String>) -> LeaseError {
    LeaseError::InvalidRedisUrl {
        reason: reason.into(),
    }
}
