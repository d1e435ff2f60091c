//! `SCAN` for the lease keys a listing reads: on the one node of standalone and Sentinel,
//! on every primary of a Cluster. Read only; bounded by the caller's deadline and limit.

use redis::Value;
use tokio::time::Instant;

use super::connection::not_sent;
use super::{Connected, RedisBackend, Topology, classify};
use crate::backend::SendFailure;

/// Keys `SCAN` is asked to look at per step: large enough to cross a keyspace in few round
/// trips, small enough that one step never blocks Redis for long.
const STEP: usize = 1000;

impl RedisBackend {
    /// Keys matching `pattern` (a `SCAN MATCH` glob), at most `limit` of them, found by
    /// `deadline`; the flag says whether the scan stopped at the limit.
    pub(super) async fn scan_keys(
        &self,
        pattern: &str,
        limit: usize,
        deadline: Instant,
    ) -> Result<(Vec<String>, bool), SendFailure> {
        let nodes = match &self.inner.topology {
            Topology::Cluster(cluster) => {
                let mut nodes = Vec::new();
                for (host, port) in cluster.primaries(deadline).await? {
                    let node = self
                        .gated(
                            deadline,
                            || cluster.current_node(&host, port),
                            |bound| cluster.node(&host, port, bound),
                        )
                        .await?;
                    nodes.push(node.1);
                }
                nodes
            }
            _ => vec![self.connection(deadline, pattern).await?.1],
        };
        let mut keys = Vec::new();
        for node in nodes {
            if scan_node(&node, pattern, limit, deadline, &mut keys).await? {
                return Ok((keys, true));
            }
        }
        Ok((keys, false))
    }
}

/// Adds `node`'s matching keys to `keys`; true once `keys` holds `limit`.
async fn scan_node(
    node: &Connected,
    pattern: &str,
    limit: usize,
    deadline: Instant,
    keys: &mut Vec<String>,
) -> Result<bool, SendFailure> {
    let mut connection = node.connection.clone();
    let mut cursor = 0u64;
    loop {
        let mut command = redis::cmd("SCAN");
        command
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(STEP);
        let step = command.query_async::<(u64, Vec<Value>)>(&mut connection);
        let (next, found) = tokio::time::timeout_at(deadline, step)
            .await
            .map_err(|_| not_sent(format!("SCAN on {} timed out", node.endpoint())))?
            .map_err(|e| classify::command_failure(&e))?;
        for key in found {
            if let Value::BulkString(bytes) = key
                && let Ok(key) = String::from_utf8(bytes)
            {
                if keys.len() == limit {
                    return Ok(true);
                }
                keys.push(key);
            }
        }
        if next == 0 {
            return Ok(false);
        }
        cursor = next;
    }
}
