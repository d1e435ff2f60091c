//! One pub/sub connection per node, shared by every waiter and observer of the backend
//! (docs/design.md §10): a wait on a contended lease costs a `SUBSCRIBE` on a connection
//! that is already open — or nothing, when another waiter of the process already listens on
//! that channel — not a connection of its own.
//!
//! # How the server's subscriptions follow the listeners
//!
//! A channel is subscribed on the server while at least one subscription routes it. One
//! task per connection, the writer, brings the server in line with the routes in rounds:
//! each round takes every change made since the last one started and sends it as
//! `SUBSCRIBE`s and `UNSUBSCRIBE`s of up to [`CHANNELS_PER_COMMAND`] channels each, all of
//! them issued before any confirmation is awaited (joined, not one after another). Waiters
//! share a round only when all of them routed their channels before the writer's next
//! round started: `tests/notices.rs` shows a thousand waiters subscribing within one poll
//! on one thread (no cooperative-budget cut) costing two `SUBSCRIBE`s of 500 channels;
//! waiters arriving spread over time, or while a round is under way, take as many rounds
//! as the writer found batches. Rounds run one at a
//! time and each is decided from the routes as they are when it starts, so whatever order
//! subscriptions come and go in, the server ends up subscribed to exactly the routed
//! channels. A subscription is returned only once the server confirmed its channels (or they
//! already were): a notice published after that reaches it (the wait loop's invariant 4).
//!
//! # Nothing outlives its use
//!
//! The connection has two tasks: the writer, and the one that delivers messages. Both end —
//! and with them the connection, whose socket the delivering task's stream owns — when the
//! hub is dropped (the node's shared connection was replaced after a fault, or the backend
//! dropped), when the server closes the connection, and when a round is not confirmed
//! within its bound (a server that froze, or a connection that went silent). Every
//! subscription on a connection that ended ends too: its waiter subscribes again, on the
//! node's current connection.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use redis::aio::{PubSubSink, PubSubStream};
use redis::{Client, RedisResult};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Channels named by one `SUBSCRIBE` or `UNSUBSCRIBE`: a round with more sends several,
/// all in flight at once, so no command grows with the number of waiters.
pub(super) const CHANNELS_PER_COMMAND: usize = 500;

/// A node's shared pub/sub connection, opened on first use and again after it ended.
#[derive(Default)]
pub(super) struct Hub {
    line: tokio::sync::Mutex<Option<Arc<Line>>>,
}

/// One open pub/sub connection, as its users hold it: the last one dropped closes it.
struct Line {
    shared: Arc<Shared>,
}

/// What the connection's users and its two tasks share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the writer: the routes changed.
    wake: Notify,
    /// The rounds the writer finished, and whether the connection ended.
    progress: watch::Sender<Progress>,
    /// Ends both tasks, which closes the connection.
    close: CancellationToken,
    next_id: AtomicU64,
}

/// One subscription's route on a channel.
struct Listener {
    id: u64,
    /// Only messages with this payload wake it (a waiter's turn on its client's channel);
    /// `None`: every message.
    only: Option<Arc<str>>,
    /// A one-slot queue: notices coalesce.
    tx: mpsc::Sender<()>,
}

#[derive(Default)]
struct State {
    /// Channel → the subscriptions it wakes.
    by_channel: HashMap<String, Vec<Listener>>,
    /// Channels the server confirmed and no `UNSUBSCRIBE` is on its way for.
    subscribed: HashSet<String>,
    /// Channels whose routes changed since the last round started: what it looks at.
    changed: HashSet<String>,
    /// Rounds the writer started.
    started: u64,
    /// True once the connection ended: no new route is taken.
    closed: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    done: u64,
    closed: bool,
}

impl Hub {
    /// Subscribes to `channels` on the node `client` leads to; `round_timeout` bounds how
    /// long the server may take to confirm a round before the connection is given up. The
    /// stream yields one item per notice (coalesced while nobody reads) and ends when the
    /// connection does; dropping it unsubscribes.
    ///
    /// With `only`, a message wakes the subscription only when its payload is exactly
    /// that: the channel is subscribed once on the server for every subscription that
    /// routes it, whatever payload each waits for.
    ///
    /// Cancel safe: a subscription given up while waiting for its confirmation takes its
    /// routes back, and the next round unsubscribes what nobody else routes.
    pub(super) async fn subscribe(
        &self,
        client: &Client,
        channels: Vec<String>,
        only: Option<Arc<str>>,
        round_timeout: Duration,
    ) -> RedisResult<impl Stream<Item = ()> + Send + 'static> {
        let line = self.line(client, round_timeout).await?;
        let (tx, rx) = mpsc::channel(1);
        let shared = &line.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let round = {
            let mut state = shared.lock();
            if state.closed {
                return Err(closed());
            }
            let mut confirmed = true;
            for channel in &channels {
                let listeners = state.by_channel.entry(channel.clone()).or_default();
                listeners.push(Listener {
                    id,
                    only: only.clone(),
                    tx: tx.clone(),
                });
                if !state.subscribed.contains(channel) {
                    state.changed.insert(channel.clone());
                    confirmed = false;
                }
            }
            // A round that starts after this one saw these routes.
            (!confirmed).then_some(state.started + 1)
        };
        let route = Route {
            line: line.clone(),
            id,
            channels,
        };
        if let Some(round) = round {
            shared.wake.notify_one();
            // On failure `route` drops here, which takes its routes back.
            route.confirmed(round).await?;
        }
        drop(tx);
        Ok(futures_util::stream::unfold(
            (rx, route),
            |(mut rx, route)| async move { rx.recv().await.map(|()| ((), (rx, route))) },
        ))
    }

    /// The open line, or a new one when there is none or it ended.
    async fn line(&self, client: &Client, round_timeout: Duration) -> RedisResult<Arc<Line>> {
        let mut line = self.line.lock().await;
        if let Some(open) = line.as_ref().filter(|l| !l.shared.lock().closed) {
            return Ok(open.clone());
        }
        let (sink, stream) = client.get_async_pubsub().await?.split();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            progress: watch::Sender::new(Progress::default()),
            close: CancellationToken::new(),
            next_id: AtomicU64::new(0),
        });
        tokio::spawn(deliver(stream, shared.clone()));
        tokio::spawn(write(sink, shared.clone(), round_timeout));
        let opened = Arc::new(Line { shared });
        *line = Some(opened.clone());
        Ok(opened)
    }
}

impl Drop for Hub {
    /// The node's shared connection was replaced (after a fault) or the backend dropped:
    /// the pub/sub connection opened for it closes too, and the subscriptions on it end —
    /// their waiters subscribe again, on the node's next connection — so no pub/sub
    /// connection outlives the connection it was opened beside.
    fn drop(&mut self) {
        if let Some(line) = self.line.get_mut().take() {
            line.shared.end();
        }
    }
}

impl Drop for Line {
    /// Nobody uses the connection any more: its tasks end, and it closes.
    fn drop(&mut self) {
        self.shared.end();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the state leaves it consistent (plain inserts and
        // removals): keep using it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a round: what the server must subscribe and unsubscribe, among the channels
    /// whose routes changed, for it to match the routes now. Channels being unsubscribed no
    /// longer count as subscribed, so a subscription arriving meanwhile waits for the next
    /// round, which subscribes them again.
    fn start_round(&self) -> (u64, Vec<String>, Vec<String>) {
        let mut state = self.lock();
        state.started += 1;
        let (mut subscribe, mut unsubscribe) = (Vec::new(), Vec::new());
        for channel in std::mem::take(&mut state.changed) {
            let routed = state.by_channel.contains_key(&channel);
            if routed && !state.subscribed.contains(&channel) {
                subscribe.push(channel);
            } else if !routed && state.subscribed.remove(&channel) {
                unsubscribe.push(channel);
            }
        }
        (state.started, subscribe, unsubscribe)
    }

    /// A round ended; `confirmed` are the channels the server subscribed in it. A channel
    /// unrouted meanwhile is subscribed all the same: the next round unsubscribes it.
    fn finish_round(&self, round: u64, confirmed: Vec<String>) {
        self.lock().subscribed.extend(confirmed);
        self.progress.send_modify(|p| p.done = round);
    }

    /// The connection ended (or nobody uses it): every subscription on it ends (dropping
    /// the routes' senders ends their streams), no new one is taken, and both tasks stop.
    fn end(&self) {
        {
            let mut state = self.lock();
            state.closed = true;
            state.by_channel.clear();
            state.subscribed.clear();
            state.changed.clear();
        }
        self.progress.send_modify(|p| p.closed = true);
        self.close.cancel();
    }
}

/// One subscription's routes; dropping it takes them back and has the channels nobody
/// else listens on unsubscribed.
struct Route {
    line: Arc<Line>,
    id: u64,
    channels: Vec<String>,
}

impl Route {
    /// Waits for `round` to end, then checks it subscribed every channel of this route.
    async fn confirmed(&self, round: u64) -> RedisResult<()> {
        let shared = &self.line.shared;
        let mut progress = shared.progress.subscribe();
        let ended = progress
            .wait_for(|p| p.closed || p.done >= round)
            .await
            .map_or(true, |p| p.closed);
        if ended {
            return Err(closed());
        }
        let state = shared.lock();
        if self.channels.iter().all(|c| state.subscribed.contains(c)) {
            Ok(())
        } else {
            Err(refused())
        }
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        let shared = &self.line.shared;
        let mut unrouted = false;
        {
            let mut state = shared.lock();
            for channel in &self.channels {
                if let Some(listeners) = state.by_channel.get_mut(channel) {
                    listeners.retain(|l| l.id != self.id);
                    if listeners.is_empty() {
                        state.by_channel.remove(channel);
                        state.changed.insert(channel.clone());
                        unrouted = true;
                    }
                }
            }
        }
        if unrouted {
            shared.wake.notify_one();
        }
    }
}

/// The writer: one round per wake-up, until the connection ends. A round the server does
/// not confirm within `round_timeout`, or that breaks the connection, ends it.
async fn write(sink: PubSubSink, shared: Arc<Shared>, round_timeout: Duration) {
    loop {
        tokio::select! {
            () = shared.close.cancelled() => return,
            () = shared.wake.notified() => {}
        }
        let (round, subscribe, unsubscribe) = shared.start_round();
        let sent = tokio::select! {
            () = shared.close.cancelled() => return,
            sent = tokio::time::timeout(round_timeout, send(&sink, subscribe, unsubscribe)) => sent,
        };
        match sent {
            Ok(Ok(confirmed)) => shared.finish_round(round, confirmed),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the pub/sub connection broke; it is closed");
                return shared.end();
            }
            Err(_) => {
                tracing::debug!(
                    "a pub/sub round was not confirmed in time; the connection is closed"
                );
                return shared.end();
            }
        }
    }
}

/// Sends a round's commands, all in flight at once; returns the channels the server
/// subscribed. A command the server refused (an ACL denying the channels) leaves its
/// channels out and the connection usable; an I/O error is the connection's end.
async fn send(
    sink: &PubSubSink,
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
) -> RedisResult<Vec<String>> {
    let subscribing = subscribe.chunks(CHANNELS_PER_COMMAND).map(|chunk| {
        let mut sink = sink.clone();
        async move { (chunk, sink.subscribe(chunk).await) }
    });
    let unsubscribing = unsubscribe.chunks(CHANNELS_PER_COMMAND).map(|chunk| {
        let mut sink = sink.clone();
        async move { sink.unsubscribe(chunk).await }
    });
    let (subscribed, unsubscribed) = futures_util::future::join(
        futures_util::future::join_all(subscribing),
        futures_util::future::join_all(unsubscribing),
    )
    .await;
    let mut confirmed = Vec::new();
    for (chunk, result) in subscribed {
        match result {
            Ok(()) => confirmed.extend_from_slice(chunk),
            Err(e) if breaks_connection(&e) => return Err(e),
            Err(e) => tracing::debug!(error = %e, "SUBSCRIBE refused; those waiters poll"),
        }
    }
    for result in unsubscribed {
        // A refused UNSUBSCRIBE leaves a channel nobody reads: harmless.
        if let Err(e) = result
            && breaks_connection(&e)
        {
            return Err(e);
        }
    }
    Ok(confirmed)
}

/// Anything but an error reply of the server's own (which leaves the connection in step).
fn breaks_connection(e: &redis::RedisError) -> bool {
    !matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// Routes each message to the subscriptions of its channel, until the connection ends or
/// is closed; dropping the stream then closes the socket.
async fn deliver(mut stream: PubSubStream, shared: Arc<Shared>) {
    loop {
        let message = tokio::select! {
            () = shared.close.cancelled() => return,
            message = stream.next() => message,
        };
        let Some(message) = message else { break };
        let state = shared.lock();
        if let Some(listeners) = state.by_channel.get(message.get_channel_name()) {
            let payload = message.get_payload_bytes();
            for listener in listeners {
                if listener
                    .only
                    .as_deref()
                    .is_some_and(|p| p.as_bytes() != payload)
                {
                    continue;
                }
                // Full: a notice is already waiting to be read, which this one joins.
                let _ = listener.tx.try_send(());
            }
        }
    }
    shared.end();
}

fn closed() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "the shared pub/sub connection closed"))
}

fn refused() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "the server refused to subscribe the channels",
    ))
}
