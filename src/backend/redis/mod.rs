//! `RedisBackend`: the scripts of `lua/` on a standalone Redis.
//!
//! # Behaviour, and the time bound of every await
//!
//! * Construction parses the URL and opens nothing: a bad URL is an error before any I/O,
//!   and a Redis that is down shows up as `NotSent` on the first call, not at start-up.
//! * One multiplexed connection is shared by every call. It is made on first use and made
//!   again after it breaks, bounded by `min(connect_timeout, the call's timeout)`. A failure
//!   to connect is `NotSent`: nothing was written.
//! * Each script call is bounded by its `timeout` (`tokio::time::timeout`, covering the
//!   `NOSCRIPT` reload too). A call that times out is `MaybeSent`, and the connection is
//!   dropped so the next call starts on a fresh one rather than behind a silent socket.
//! * Server errors Redis raises before running (`LOADING`, `BUSY`, `OOM`, `READONLY`…) are
//!   `NotSent`; other errors and unreadable replies are `MaybeSent` (see `classify`).
//! * Release notices use one pub/sub connection per subscription, bounded by the
//!   subscription's timeout; it is closed when the subscription is dropped.

mod classify;
mod parse;
mod scripts;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{BackendFuture, FailureDetail, FailureKind, LeaseBackend, ReleaseNotices, SendFailure};
use crate::error::LeaseError;
use crate::protocol::limits::{CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT};
use crate::protocol::{AcquireReply, Attempt, InspectReply, LeaseKeys, ReleaseReply, RenewReply};

/// Where and how to reach Redis.
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    connect_timeout: Duration,
}

impl RedisConfig {
    /// `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS, with the `tls` feature),
    /// or `unix:///path/to/socket`. Connect timeout defaults to 1 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Bound on establishing one connection (1 ms ..= 60 s).
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RedisConfig")
            .field("url", &"<redacted>")
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// Leases in a standalone Redis (6.2 or later).
///
/// Cloning is cheap and shares the connection.
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
    client: Client,
    connect_timeout: Duration,
    slot: Mutex<Slot>,
    /// Serialises reconnects so a burst of calls after a break opens one connection.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Slot {
    generation: u64,
    connection: Option<MultiplexedConnection>,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("connect_timeout", &self.inner.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Validates the configuration; connects on first use.
    ///
    /// # Errors
    /// [`LeaseError::InvalidRedisUrl`] for an unparsable URL or an unsupported scheme (such as
    /// `rediss://` without the `tls` feature); [`LeaseError::InvalidDuration`] for the connect
    /// timeout.
    pub fn new(config: RedisConfig) -> Result<Self, LeaseError> {
        let connect_timeout = CONNECT_TIMEOUT.check(config.connect_timeout)?;
        #[cfg(feature = "tls")]
        if config.url.starts_with("rediss://") {
            // The redis crate selects no rustls provider; without one, the first TLS
            // handshake panics (DESIGN §12). Another provider installed first wins.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client =
            Client::open(config.url.as_str()).map_err(|e| LeaseError::InvalidRedisUrl {
                reason: e.to_string(),
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                connect_timeout,
                slot: Mutex::new(Slot::default()),
                connecting: tokio::sync::Mutex::new(()),
            }),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        // The slot is a plain value replaced whole; a poisoned lock still holds a valid one.
        self.inner.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        let slot = self.slot();
        slot.connection.clone().map(|c| (slot.generation, c))
    }

    /// The shared connection, made if there is none. Every failure here is `NotSent`.
    async fn connection(
        &self,
        deadline: Instant,
    ) -> Result<(u64, MultiplexedConnection), SendFailure> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let not_sent =
            |m: &str| SendFailure::NotSent(FailureDetail::new(FailureKind::Connect, m.to_owned()));
        let _gate = tokio::time::timeout_at(deadline, self.inner.connecting.lock())
            .await
            .map_err(|_| not_sent("timed out waiting for a connection"))?;
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let bound = self
            .inner
            .connect_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        // Our own timeouts bound every call; the crate's response timeout would only race them.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(bound))
            .set_response_timeout(None);
        let connection = tokio::time::timeout(
            bound,
            self.inner
                .client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| not_sent("connect timed out"))?
        .map_err(|e| classify::connect_failure(&e))?;
        let mut slot = self.slot();
        slot.generation += 1;
        slot.connection = Some(connection.clone());
        Ok((slot.generation, connection))
    }

    /// Forgets connection `generation` if it is still the current one.
    fn discard(&self, generation: u64) {
        let mut slot = self.slot();
        if slot.generation == generation {
            slot.connection = None;
        }
    }

    fn invoke<'a, T: Send + 'a>(
        &'a self,
        script: &'static redis::Script,
        keys: Vec<&'a str>,
        args: Vec<Vec<u8>>,
        timeout: Duration,
        parse: fn(Value) -> Result<T, String>,
    ) -> BackendFuture<'a, T> {
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            let (generation, mut connection) = self.connection(deadline).await?;
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(key);
            }
            for arg in &args {
                invocation.arg(arg.as_slice());
            }
            let value = match tokio::time::timeout_at(
                deadline,
                invocation.invoke_async::<Value>(&mut connection),
            )
            .await
            {
                Err(_) => {
                    self.discard(generation);
                    return Err(SendFailure::MaybeSent(FailureDetail::new(
                        FailureKind::Timeout,
                        format!("no reply within {timeout:?}"),
                    )));
                }
                Ok(Err(e)) => {
                    if classify::breaks_connection(&e) {
                        self.discard(generation);
                    }
                    return Err(classify::command_failure(&e));
                }
                Ok(Ok(value)) => value,
            };
            parse(value).map_err(|m| {
                SendFailure::MaybeSent(FailureDetail::new(FailureKind::MalformedReply, m))
            })
        })
    }
}

fn ownership(attempt: &Attempt) -> Vec<Vec<u8>> {
    vec![
        attempt.owner().expose().as_bytes().to_vec(),
        attempt.operation().as_str().as_bytes().to_vec(),
    ]
}

fn millis_arg(d: Duration) -> Vec<u8> {
    d.as_millis().to_string().into_bytes()
}

impl LeaseBackend for RedisBackend {
    fn acquire<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        ttl: Duration,
        timeout: Duration,
    ) -> BackendFuture<'a, AcquireReply> {
        let mut args = ownership(attempt);
        args.push(millis_arg(ttl));
        let both = vec![keys.lease.as_str(), keys.fence.as_str()];
        self.invoke(&scripts::ACQUIRE, both, args, timeout, parse::acquire)
    }

    fn renew<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        ttl: Duration,
        timeout: Duration,
    ) -> BackendFuture<'a, RenewReply> {
        let mut args = ownership(attempt);
        args.push(millis_arg(ttl));
        self.invoke(
            &scripts::RENEW,
            vec![keys.lease.as_str()],
            args,
            timeout,
            parse::renew,
        )
    }

    fn release<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseReply> {
        let mut args = ownership(attempt);
        args.push(keys.release_channel.as_bytes().to_vec());
        self.invoke(
            &scripts::RELEASE,
            vec![keys.lease.as_str()],
            args,
            timeout,
            parse::release,
        )
    }

    fn inspect<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, InspectReply> {
        self.invoke(
            &scripts::INSPECT,
            vec![keys.lease.as_str()],
            ownership(attempt),
            timeout,
            parse::inspect,
        )
    }

    fn subscribe_releases<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        Box::pin(async move {
            let failed = |kind, m: String| SendFailure::NotSent(FailureDetail::new(kind, m));
            let subscribe = async {
                let mut pubsub = self.inner.client.get_async_pubsub().await?;
                pubsub.subscribe(&keys.release_channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let pubsub = tokio::time::timeout(timeout.min(self.inner.connect_timeout), subscribe)
                .await
                .map_err(|_| failed(FailureKind::Timeout, "subscribe timed out".into()))?
                .map_err(|e| failed(FailureKind::Connect, e.to_string()))?;
            let (tx, rx) = mpsc::channel(1);
            let task = tokio::spawn(async move {
                let mut messages = pubsub.into_on_message();
                while messages.next().await.is_some() {
                    if let Err(mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
                        break;
                    }
                }
            });
            Ok(ReleaseNotices::new(rx, Some(task)))
        })
    }
}
