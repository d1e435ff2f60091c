//! `SCAN` for the lease keys a listing reads: on the one node of standalone and Sentinel,
//! on every primary of a Cluster, one after another. Read only. Each step is bounded by
//! the timeout on its own; the whole is bounded by the caller, who stops polling.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::connection::Connected;
use super::{RedisBackend, Topology, classify};
use crate::backend::{FailureDetail, FailureKind, KeyPages, SendFailure};
use crate::protocol::limits::{LIST_ATTEMPTS, deadline_after};

/// Keys `SCAN` is asked to look at per step: large enough to cross a keyspace in few round
/// trips, small enough that one step never blocks Redis for long (docs/performance.md,
/// "Behind the constants").
const STEP: usize = 1000;

impl RedisBackend {
    /// Keys matching `pattern` (a `SCAN MATCH` glob), one page per `SCAN` step, each
    /// attempt at a step (obtaining its connection included) bounded by `timeout`; a step
    /// fails the scan after [`LIST_ATTEMPTS`].
    pub(super) fn scan_keys(&self, pattern: String, timeout: Duration) -> KeyPages<'_> {
        let scan = Scan {
            backend: self,
            pattern,
            timeout,
            primaries: None,
            at: 0,
            cursor: 0,
            scanning: None,
        };
        Box::pin(futures_util::stream::unfold(
            Some(scan),
            |scan| async move {
                let mut scan = scan?;
                let mut attempt = 1;
                loop {
                    // A failed step left the cursor where it was: the step is asked again.
                    match scan.step().await {
                        Ok((keys, done)) => return Some((Ok(keys), (!done).then_some(scan))),
                        Err(failure) if attempt < LIST_ATTEMPTS => {
                            tracing::debug!(attempt, %failure, "SCAN step failed; again");
                            // Keeps a connection that fails at once from spinning.
                            tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
                            attempt += 1;
                        }
                        Err(failure) => return Some((Err(failure), None)),
                    }
                }
            },
        ))
    }
}

/// Where a scan is: which node (under Cluster, the index into its primaries, listed at
/// the first step) and the cursor there.
struct Scan<'a> {
    backend: &'a RedisBackend,
    pattern: String,
    timeout: Duration,
    primaries: Option<Vec<(String, u16)>>,
    at: usize,
    cursor: u64,
    /// The endpoint the cursor belongs to.
    scanning: Option<String>,
}

impl Scan<'_> {
    /// One `SCAN` step: the keys it found, and whether the scan is over.
    async fn step(&mut self) -> Result<(Vec<String>, bool), SendFailure> {
        let deadline = deadline_after(Instant::now(), self.timeout);
        let Some((generation, node)) = self.node(deadline).await? else {
            // A Cluster without a primary: nothing to scan.
            return Ok((Vec::new(), true));
        };
        if self.scanning.as_deref() != Some(node.endpoint()) {
            // A cursor means nothing on another node (a Sentinel failover between steps):
            // start over there; the listing reads a key given twice once.
            self.cursor = 0;
            self.scanning = Some(node.endpoint().to_owned());
        }
        let mut command = redis::cmd("SCAN");
        command
            .arg(self.cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(STEP);
        let mut connection = node.connection.clone();
        let step = command.query_async::<(u64, Vec<Value>)>(&mut connection);
        let (next, found) = match tokio::time::timeout_at(deadline, step).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                self.backend.forget_on(generation, &node, &e);
                return Err(classify::command_failure(&e));
            }
            Err(_) => {
                // As after any call that timed out: the socket may be silent.
                self.backend.discard(generation, &node);
                let message = format!("SCAN on {} timed out", node.endpoint());
                let detail = FailureDetail::new(FailureKind::Timeout, message);
                return Err(SendFailure::MaybeSent(detail));
            }
        };
        let keys = found
            .into_iter()
            .filter_map(|key| match key {
                Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
                _ => None,
            })
            .collect();
        self.cursor = next;
        if next == 0 {
            self.at += 1;
            self.scanning = None;
        }
        let nodes = self.primaries.as_ref().map_or(1, Vec::len);
        Ok((keys, self.at >= nodes))
    }

    /// The connection of the node the scan is on, obtained by `deadline`; `None` once a
    /// Cluster's primaries are all scanned (none at all, say).
    async fn node(&mut self, deadline: Instant) -> Result<Option<(u64, Connected)>, SendFailure> {
        let backend = self.backend;
        let Topology::Cluster(cluster) = &backend.inner.topology else {
            return backend.connection(deadline, &self.pattern).await.map(Some);
        };
        if self.primaries.is_none() {
            self.primaries = Some(cluster.primaries(deadline).await?);
        }
        let Some((host, port)) = self.primaries.as_ref().and_then(|p| p.get(self.at)) else {
            return Ok(None);
        };
        let node = backend
            .gated(
                deadline,
                || cluster.current_node(host, *port),
                |bound| cluster.node(host, *port, bound),
            )
            .await?;
        Ok(Some(node))
    }
}
