//! One script call on a connection: the `EVALSHA` (loading the script on `NOSCRIPT`), its
//! deadlines, and under Cluster the one redirection (`MOVED`, `ASK`) followed within it.

use std::sync::atomic::Ordering;

use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::connection::{Connected, Topology};
use super::{RedisBackend, batch, classify, parse, scripts};
use crate::backend::{FailureDetail, FailureKind, SendFailure};

impl RedisBackend {
    /// `send` of one item.
    pub(super) async fn send_one(
        &self,
        generation: u64,
        connected: &Connected,
        item: &batch::Item,
        deadlines: batch::Deadlines,
    ) -> batch::ItemResult {
        let items = std::slice::from_ref(item);
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
    pub(super) async fn send(
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
    pub(super) async fn send_via(
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
        let reply = match deadlines.first.wait(reply.as_mut()).await {
            Some(reply) => Some(reply),
            None => {
                self.discard(generation, connected);
                deadlines.last.wait(reply.as_mut()).await
            }
        };
        let failure = match reply {
            Some(Ok(value)) => match parse::batch(value, id, items.len()) {
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
            None => {
                self.discard(generation, connected);
                SendFailure::MaybeSent(FailureDetail::new(
                    FailureKind::Timeout,
                    format!(
                        "no reply within {:?}",
                        deadlines.last.at.saturating_duration_since(started)
                    ),
                ))
            }
            Some(Err(e)) => {
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
    pub(super) async fn follow(
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
                deadlines.last.at,
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
}

/// A Cluster redirection, which `RedisBackend::follow` follows once within a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirection {
    /// `MOVED`: the slot has a new owner.
    Moved,
    /// `ASK`: the slot is migrating, and the source no longer has the keys.
    Ask,
}

impl Redirection {
    pub(super) fn of(e: &redis::RedisError) -> Option<Self> {
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
pub(super) async fn eval(
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
pub(super) async fn send_script(
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

/// A reply that could not be decoded: the script may have run.
pub(super) fn malformed(message: String) -> SendFailure {
    SendFailure::MaybeSent(FailureDetail::new(FailureKind::MalformedReply, message))
}
