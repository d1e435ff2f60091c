//! One call on a connection: the `EVALSHA` (loading the script on `NOSCRIPT`) and the
//! pipeline of the node's own commands beside it, their deadlines, and under Cluster the one
//! redirection (`MOVED`, `ASK`) followed within it.

use std::sync::atomic::Ordering;

use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::batch::NativeReply;
use super::connection::{Connected, Topology};
use super::{RedisBackend, ServerCapabilities, batch, classify, parse, scripts};
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

    /// Sends `items` on `connected`, waiting for the replies until `deadlines.last`. One
    /// result per item, in order: its reply, its own error, or the failure of the whole
    /// call.
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
        let items: Vec<&batch::Item> = items.iter().collect();
        self.send_via(generation, connected, &items, deadlines, None)
            .await
    }

    /// `send`, on the node a redirection named when `via` says which. The items the node
    /// runs by its own commands (`batch::Item::native`) go as one pipeline of them, the
    /// others as one script call, both at once.
    pub(super) async fn send_via(
        &self,
        generation: u64,
        connected: &Connected,
        items: &[&batch::Item],
        deadlines: batch::Deadlines,
        via: Option<Redirection>,
    ) -> Vec<batch::ItemResult> {
        // Decided once per call: the node's capabilities may change while the call is out
        // (`Node::refuse_native`), and each result must go back to the item it answers.
        let capabilities = self.capabilities(connected);
        let native: Vec<bool> = items.iter().map(|item| item.native(capabilities)).collect();
        if !native.contains(&true) {
            return self
                .send_script(generation, connected, items, deadlines, via)
                .await;
        }
        let (mut natively, mut scripted) = (Vec::new(), Vec::new());
        for (item, &native) in items.iter().zip(&native) {
            if native {
                natively.push(*item);
            } else {
                scripted.push(*item);
            }
        }
        let script = async {
            if scripted.is_empty() {
                return Vec::new();
            }
            Box::pin(self.send_script(generation, connected, &scripted, deadlines, via)).await
        };
        let own = self.send_native(generation, connected, &natively, deadlines, via);
        let (scripted, natively) = futures_util::future::join(script, own).await;
        let (mut scripted, mut natively) = (scripted.into_iter(), natively.into_iter());
        let missing = || Err(malformed("no result for the item".to_owned()));
        native
            .iter()
            .map(|&native| {
                let next = if native {
                    natively.next()
                } else {
                    scripted.next()
                };
                next.unwrap_or_else(missing)
            })
            .collect()
    }

    /// What `connected`'s node may run by its own commands: nothing if the configuration
    /// keeps every operation on the script, or once the user was refused one of them.
    pub(super) fn capabilities(&self, connected: &Connected) -> ServerCapabilities {
        if self.inner.native_commands && !connected.node.native_refused() {
            connected.node.capabilities
        } else {
            ServerCapabilities::SCRIPTS_ONLY
        }
    }

    /// Waits for `reply` until `deadlines.last`; a reply not in by `deadlines.first`
    /// forgets the connection (see `send`). `None`: no reply in time.
    async fn within<T>(
        &self,
        generation: u64,
        connected: &Connected,
        deadlines: batch::Deadlines,
        reply: impl Future<Output = T>,
    ) -> Option<T> {
        tokio::pin!(reply);
        match deadlines.first.wait(reply.as_mut()).await {
            Some(reply) => Some(reply),
            None => {
                self.discard(generation, connected);
                deadlines.last.wait(reply.as_mut()).await
            }
        }
    }

    /// Sends `items` as one script call.
    async fn send_script(
        &self,
        generation: u64,
        connected: &Connected,
        items: &[&batch::Item],
        deadlines: batch::Deadlines,
        via: Option<Redirection>,
    ) -> Vec<batch::ItemResult> {
        let asking = via == Some(Redirection::Ask);
        let started = Instant::now();
        let id = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let command = batch::command(id, items);
        let mut connection = connected.connection.clone();
        let reply = eval(&mut connection, &command, asking);
        let reply = self.within(generation, connected, deadlines, reply).await;
        let failure = match reply {
            Some(Ok(value)) => match parse::batch(value, id, items.len()) {
                Ok(replies) => {
                    return replies
                        .into_iter()
                        .map(|reply| self.item_reply(generation, connected, reply))
                        .collect();
                }
                Err(m) => {
                    // Possibly another call's reply: this connection's stream cannot be
                    // trusted any more.
                    self.discard(generation, connected);
                    malformed(m)
                }
            },
            None => self.no_reply(generation, connected, deadlines, started),
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
                        Box::pin(self.send_script(generation, connected, one, deadlines, None))
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

    /// Sends `items` (each one `native` accepted) as one pipeline of the node's own
    /// commands, ended by a `PING` of the call's id: a reply read for another call is
    /// `MaybeSent` for every item, never decoded as theirs. An item whose command found the
    /// key holding its attempt's lease under another value (`NativeReply::Script`), or
    /// whose command the user may not run, runs again by the script, at once.
    async fn send_native(
        &self,
        generation: u64,
        connected: &Connected,
        items: &[&batch::Item],
        deadlines: batch::Deadlines,
        via: Option<Redirection>,
    ) -> Vec<batch::ItemResult> {
        let asking = via == Some(Redirection::Ask);
        let started = Instant::now();
        let id = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let pipe = batch::native_pipeline(id, items, asking);
        let widths: Vec<usize> = items.iter().map(|i| i.native_commands()).collect();
        let mut connection = connected.connection.clone();
        let reply = connection.send_packed_commands(&pipe, 0, pipe.len());
        let reply = self.within(generation, connected, deadlines, reply).await;
        let failure = match reply {
            Some(Ok(values)) => match parse::native(values, id, &widths, asking) {
                Ok(replies) => {
                    return self
                        .native_results(generation, connected, items, replies, deadlines, via)
                        .await;
                }
                Err(m) => {
                    self.discard(generation, connected);
                    malformed(m)
                }
            },
            None => self.no_reply(generation, connected, deadlines, started),
            Some(Err(e)) => {
                self.forget_on(generation, connected, &e);
                classify::command_failure(&e)
            }
        };
        vec![Err(failure); items.len()]
    }

    /// Each native item's result from its command's reply: the script's words for it, its
    /// own error (a redirection followed once), or — for the items only the script can
    /// answer — the script's answer, all of them in one script call.
    async fn native_results(
        &self,
        generation: u64,
        connected: &Connected,
        items: &[&batch::Item],
        replies: Vec<Value>,
        deadlines: batch::Deadlines,
        via: Option<Redirection>,
    ) -> Vec<batch::ItemResult> {
        let mut results = Vec::with_capacity(items.len());
        let mut scripted = Vec::new();
        for (at, (item, reply)) in items.iter().zip(replies).enumerate() {
            let result = match reply {
                Value::ServerError(e) => {
                    let e = redis::RedisError::from(e);
                    if classify::command_refused(&e) {
                        // Not run: an ACL written for the script (before the server's own
                        // commands were used). The script, from now on on this connection.
                        connected.node.refuse_native();
                        scripted.push((at, item.scripted()));
                        continue;
                    }
                    self.forget_on(generation, connected, &e);
                    let one = std::slice::from_ref(item);
                    match via {
                        None => Box::pin(self.follow(&e, one, deadlines)).await,
                        Some(_) => None,
                    }
                    .and_then(|mut followed| followed.pop())
                    .unwrap_or_else(|| Err(classify::command_failure(&e)))
                }
                reply => match item.native_reply(reply) {
                    NativeReply::Reply(reply) => Ok(reply),
                    NativeReply::Script => {
                        scripted.push((at, item.scripted()));
                        continue;
                    }
                },
            };
            results.push((at, result));
        }
        if !scripted.is_empty() {
            let again: Vec<&batch::Item> = scripted.iter().map(|(_, item)| item).collect();
            let answers =
                Box::pin(self.send_script(generation, connected, &again, deadlines, via)).await;
            results.extend(scripted.iter().map(|(at, _)| *at).zip(answers));
            results.sort_by_key(|(at, _)| *at);
        }
        results.into_iter().map(|(_, result)| result).collect()
    }

    /// An item's own reply in a script call's: an error reply is the item's failure.
    fn item_reply(
        &self,
        generation: u64,
        connected: &Connected,
        reply: Value,
    ) -> batch::ItemResult {
        match reply {
            Value::ServerError(e) => {
                let e = redis::RedisError::from(e);
                self.forget_on(generation, connected, &e);
                Err(classify::command_failure(&e))
            }
            reply => Ok(reply),
        }
    }

    /// The failure of a call whose reply did not come by `deadlines.last`: its connection
    /// is forgotten (the socket may be silent).
    fn no_reply(
        &self,
        generation: u64,
        connected: &Connected,
        deadlines: batch::Deadlines,
        started: Instant,
    ) -> SendFailure {
        self.discard(generation, connected);
        SendFailure::MaybeSent(FailureDetail::new(
            FailureKind::Timeout,
            format!(
                "no reply within {:?}",
                deadlines.last.at.saturating_duration_since(started)
            ),
        ))
    }

    /// The call again on the Cluster node a redirection names — once: a call refused by a
    /// redirection did not run. After `MOVED` (the slot has a new owner; the map was
    /// forgotten) plainly; after `ASK` (the slot is migrating and the source no longer has
    /// the keys) with `ASKING`, on the importing node. `None` when `e` is no redirection,
    /// names no node, or the backend is not a Cluster: the caller handles `e` as it is.
    pub(super) async fn follow(
        &self,
        e: &redis::RedisError,
        items: &[&batch::Item],
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
