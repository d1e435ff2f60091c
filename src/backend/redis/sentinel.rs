//! Finding the primary through Redis Sentinel, and hearing when it moves.
//!
//! [`Sentinels::connect`] is the Sentinel arm of `Topology::connect`; [`Sentinels::watch`]
//! starts the `+switch-master` watcher. Both follow the Sentinel client guidelines: ask the
//! sentinels for the primary's address, then check with `ROLE` that the node really is the
//! primary.
//!
//! # Invariants
//!
//! 1. `connect` hands out a connection only after `ROLE` *on that same connection* answered
//!    `master` (or was forbidden by the user's ACL, `NOPERM`: then the sentinels' word is
//!    taken, and a demoted node will show itself by `READONLY`).
//! 2. Nothing here sends a lease script, so every failure of `connect` is `NotSent`.
//! 3. Every await of `connect` is bounded by its `bound`. The watcher runs on no call's
//!    path; each of its awaits that can hang on a silent peer is bounded by the connect
//!    timeout, except the wait for the next message, which can only end the watcher's own
//!    subscription.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::{Client, ConnectionAddr, ConnectionInfo, Role};
use tokio::time::Instant;

use super::{Connected, Shared, connection_config, invalid_url, not_sent, open_client};
use crate::backend::{AbortOnDrop, SendFailure};
use crate::error::{LeaseError, excerpt};

/// The channel on which every sentinel announces a completed failover:
/// `<master name> <old ip> <old port> <new ip> <new port>`.
const SWITCH_CHANNEL: &str = "+switch-master";
/// The data nodes' login when no template is given: no credentials, database 0, no TLS.
/// The host is a placeholder, replaced by the address the sentinels report.
const DEFAULT_NODE_TEMPLATE: &str = "redis://sentinel-named-primary";
/// Longest master name accepted (sentinel.conf has no limit; this keeps messages short).
const MASTER_NAME_MAX: usize = 128;
/// The watcher's first pause after a failed or ended subscription; it doubles up to
/// `WATCH_RETRY_MAX`, so a sentinel that is down costs one connection attempt per 5 s.
const WATCH_RETRY_MIN: Duration = Duration::from_millis(100);
const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

/// The sentinels of one monitored master, and how to log in to the nodes they name.
pub(super) struct Sentinels {
    sentinels: Vec<Sentinel>,
    master_name: String,
    /// Login for the data nodes; its address is replaced by the one the sentinels report.
    node_template: ConnectionInfo,
    connect_timeout: Duration,
    /// One `+switch-master` listener per sentinel, started with the first connection;
    /// aborted when the backend is dropped.
    watchers: OnceLock<Vec<AbortOnDrop>>,
}

#[derive(Clone)]
struct Sentinel {
    client: Client,
    /// `host:port`, for messages: never the URL, which may hold a password.
    label: String,
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentinel")
            .field("master_name", &self.master_name)
            .field("sentinels", &self.sentinels.len())
            .finish_non_exhaustive()
    }
}

impl Sentinels {
    /// Parses and checks everything, without I/O.
    pub(super) fn new(
        urls: &[String],
        master_name: String,
        node_url_template: Option<&str>,
        connect_timeout: Duration,
    ) -> Result<Self, LeaseError> {
        if urls.is_empty() {
            return Err(invalid_url(
                "a sentinel configuration needs at least one sentinel URL",
            ));
        }
        check_master_name(&master_name)?;
        let count = urls.len();
        let sentinels = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let which = format!("sentinel URL {} of {count}", i + 1);
                let client = open_client(url).map_err(|e| invalid_url(format!("{which}: {e}")))?;
                let info = client.get_connection_info();
                let db = info.redis_settings().db();
                if db != 0 {
                    // A sentinel has no `SELECT`: every connection to it would fail.
                    return Err(invalid_url(format!(
                        "{which} names database {db}, but sentinels have none \
                         (the data nodes' database goes in sentinel_node_url_template)"
                    )));
                }
                Ok(Sentinel {
                    label: info.addr().to_string(),
                    client,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let template = open_client(node_url_template.unwrap_or(DEFAULT_NODE_TEMPLATE))
            .map_err(|e| invalid_url(format!("sentinel_node_url_template: {e}")))?;
        let node_template = template.get_connection_info().clone();
        if !matches!(
            node_template.addr(),
            ConnectionAddr::Tcp(..) | ConnectionAddr::TcpTls { .. }
        ) {
            return Err(invalid_url(
                "sentinel_node_url_template must be redis:// or rediss://: \
                 sentinels name TCP addresses",
            ));
        }
        Ok(Self {
            sentinels,
            master_name,
            node_template,
            connect_timeout,
            watchers: OnceLock::new(),
        })
    }

    /// A connection to the primary, obtained by `bound` (invariants 1–3).
    ///
    /// 1. Every sentinel is asked at once (`SENTINEL get-master-addr-by-name`). The lookup
    ///    ends when all have answered or failed, when a majority of the configured
    ///    sentinels named the same address, or — once one has named a primary — at half
    ///    the time left, so silent sentinels cost at most that.
    /// 2. The address most sentinels named is tried first (a stale minority is outvoted),
    ///    then the others: connect, then `ROLE`.
    pub(super) async fn connect(&self, bound: Instant) -> Result<Connected, SendFailure> {
        let started = Instant::now();
        let mut problems = Vec::new();
        match tokio::time::timeout_at(bound, self.find(bound, &mut problems)).await {
            Ok(Some(connected)) => Ok(connected),
            Ok(None) => Err(not_sent(format!(
                "no primary for {:?}: {}",
                self.master_name,
                problems.join("; ")
            ))),
            Err(_) => {
                let waited = bound.saturating_duration_since(started);
                let mut message = format!(
                    "finding the primary of {:?} timed out after {waited:?}",
                    self.master_name
                );
                if !problems.is_empty() {
                    message = format!("{message}: {}", problems.join("; "));
                }
                Err(not_sent(message))
            }
        }
    }

    async fn find(&self, bound: Instant, problems: &mut Vec<String>) -> Option<Connected> {
        let started = Instant::now();
        let patience = started + bound.saturating_duration_since(started) / 2;
        let mut lookups: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|sentinel| async move {
                let answer = ask(&sentinel.client, &self.master_name, bound).await;
                (sentinel, answer)
            })
            .collect();
        let mut silent: Vec<&str> = self.sentinels.iter().map(|s| s.label.as_str()).collect();
        // (host, port, how many sentinels named it), in order of first arrival.
        let mut named: Vec<(String, u16, usize)> = Vec::new();
        loop {
            let until = if named.is_empty() { bound } else { patience };
            let Ok(Some((sentinel, answer))) = tokio::time::timeout_at(until, lookups.next()).await
            else {
                break;
            };
            silent.retain(|label| *label != sentinel.label);
            match answer {
                Ok(Some((host, port))) => {
                    let votes = match named.iter_mut().find(|(h, p, _)| *h == host && *p == port) {
                        Some((_, _, votes)) => {
                            *votes += 1;
                            *votes
                        }
                        None => {
                            named.push((host, port, 1));
                            1
                        }
                    };
                    if 2 * votes > self.sentinels.len() {
                        // A majority agrees: no answer still out can outvote it.
                        break;
                    }
                }
                Ok(None) => problems.push(format!(
                    "sentinel {} does not monitor {:?}",
                    sentinel.label, self.master_name
                )),
                Err(e) => problems.push(format!("sentinel {}: {e}", sentinel.label)),
            }
        }
        drop(lookups);
        problems.extend(
            silent
                .into_iter()
                .map(|label| format!("sentinel {label}: no answer when the lookup ended")),
        );
        // Stable: equal votes keep their order of arrival.
        named.sort_by_key(|(_, _, votes)| std::cmp::Reverse(*votes));
        for (host, port, _) in named {
            match self.connect_primary(&host, port, bound).await {
                Ok(connected) => return Some(connected),
                Err(e) => problems.push(format!("{}: {e}", endpoint(&host, port))),
            }
        }
        None
    }

    /// Connects to `host:port` with the nodes' login and keeps the connection only if it
    /// leads to a primary (invariant 1).
    async fn connect_primary(
        &self,
        host: &str,
        port: u16,
        bound: Instant,
    ) -> Result<Connected, String> {
        let info =
            self.node_template
                .clone()
                .set_addr(node_addr(self.node_template.addr(), host, port));
        let node = Client::open(info).map_err(|e| e.to_string())?;
        let mut connection = node
            .get_multiplexed_async_connection_with_config(&connection_config(bound))
            .await
            .map_err(|e| e.to_string())?;
        match redis::cmd("ROLE")
            .query_async::<Role>(&mut connection)
            .await
        {
            Ok(Role::Primary { .. }) => {}
            Ok(Role::Replica { .. }) => return Err("is a replica".to_owned()),
            Ok(_) => return Err("is not a primary".to_owned()),
            // Invariant 1: an ACL without ROLE; take the sentinels' word.
            Err(e) if e.code() == Some("NOPERM") => {}
            Err(e) => return Err(e.to_string()),
        }
        Connected::open(connection, node, bound)
            .await
            .map_err(|e| e.to_string())
    }

    /// Starts the watcher, once: one task per sentinel that forgets the shared connection
    /// when that sentinel announces a primary elsewhere.
    pub(super) fn watch(&self, shared: &Arc<Shared>) {
        self.watchers.get_or_init(|| {
            self.sentinels
                .iter()
                .map(|sentinel| {
                    AbortOnDrop(tokio::spawn(watch_one(
                        sentinel.clone(),
                        self.master_name.clone(),
                        self.connect_timeout,
                        Arc::clone(shared),
                    )))
                })
                .collect()
        });
    }
}

/// Listens for `+switch-master` on one sentinel, for ever (until aborted).
async fn watch_one(
    sentinel: Sentinel,
    master_name: String,
    connect_timeout: Duration,
    shared: Arc<Shared>,
) {
    let mut retry = WATCH_RETRY_MIN;
    loop {
        let subscribe = async {
            let mut pubsub = sentinel.client.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(connect_timeout, subscribe).await {
            Ok(Ok(pubsub)) => {
                retry = WATCH_RETRY_MIN;
                // A switch announced while nobody listened would go unheard: ask once.
                let bound = Instant::now() + connect_timeout;
                let asked =
                    tokio::time::timeout_at(bound, ask(&sentinel.client, &master_name, bound));
                if let Ok(Ok(Some((host, port)))) = asked.await {
                    shared.primary_moved(&endpoint(&host, port));
                }
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let Ok(payload) = message.get_payload::<String>() else {
                        continue;
                    };
                    if let Some(primary) = parse_switch(&payload, &master_name) {
                        tracing::info!(
                            sentinel = %sentinel.label,
                            master = %master_name,
                            %primary,
                            "sentinel announced a new primary"
                        );
                        shared.primary_moved(&primary);
                    }
                }
                tracing::debug!(sentinel = %sentinel.label, "sentinel watch ended");
            }
            Ok(Err(e)) => {
                tracing::debug!(sentinel = %sentinel.label, error = %e, "cannot watch sentinel");
            }
            Err(_) => {
                tracing::debug!(sentinel = %sentinel.label, "watching sentinel timed out");
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(WATCH_RETRY_MAX);
    }
}

/// `SENTINEL get-master-addr-by-name` on a fresh connection made by `bound`. The caller
/// bounds the whole.
async fn ask(
    sentinel: &Client,
    master_name: &str,
    bound: Instant,
) -> Result<Option<(String, u16)>, String> {
    let mut connection = sentinel
        .get_multiplexed_async_connection_with_config(&connection_config(bound))
        .await
        .map_err(|e| e.to_string())?;
    redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master_name)
        .query_async(&mut connection)
        .await
        .map_err(|e| e.to_string())
}

/// The new primary of `master_name` from a `+switch-master` payload, as `host:port`.
fn parse_switch(payload: &str, master_name: &str) -> Option<String> {
    match payload.split(' ').collect::<Vec<_>>().as_slice() {
        [name, _old_host, _old_port, host, port] if *name == master_name => {
            Some(endpoint(host, port.parse().ok()?))
        }
        _ => None,
    }
}

/// `host:port`, spelled as `ConnectionAddr`'s `Display` spells it.
fn endpoint(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// The template's kind of address (TLS or not, its TLS options) at `host:port`.
pub(super) fn node_addr(template: &ConnectionAddr, host: &str, port: u16) -> ConnectionAddr {
    match template {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        // `Sentinels::new` admits only TCP templates.
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    }
}

fn check_master_name(name: &str) -> Result<(), LeaseError> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.len() > MASTER_NAME_MAX {
        "is longer than 128 bytes"
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        // `+switch-master` separates its fields by spaces.
        "holds whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(invalid_url(format!(
        "sentinel master name {:?} {problem}",
        excerpt(name)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_announcement_names_the_new_primary_of_our_master_only() {
        let payload = "leases 127.0.0.1 7001 127.0.0.1 7003";
        assert_eq!(
            parse_switch(payload, "leases").as_deref(),
            Some("127.0.0.1:7003")
        );
        assert_eq!(parse_switch(payload, "other"), None);
        assert_eq!(parse_switch("leases 127.0.0.1 7001", "leases"), None);
        assert_eq!(parse_switch("leases a 1 b port", "leases"), None);
    }

    #[test]
    fn the_endpoint_is_spelled_like_the_connection_address() {
        let addr = node_addr(&ConnectionAddr::Tcp("x".into(), 1), "10.0.0.7", 6380);
        assert_eq!(addr.to_string(), endpoint("10.0.0.7", 6380));
    }
}
