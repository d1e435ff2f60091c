//! One pub/sub connection per node, shared by every waiter and observer of the backend
//! (docs/design.md §10): a wait on a contended lease costs a `SUBSCRIBE` on a connection
//! that is already open — or nothing, when another waiter of the process already listens on
//! that channel — not a connection of its own.
//!
//! A channel is subscribed on the server while at least one subscription routes it. The
//! `SUBSCRIBE`s and `UNSUBSCRIBE`s are decided and sent one at a time, under one lock, from
//! the routes as they are then, so whatever order subscriptions come and go in, the server
//! ends up subscribed to exactly the routed channels. A subscription is returned only once
//! the server confirmed its channels (or they were already subscribed): a notice published
//! after that reaches it (the wait loop's invariant 4).
//!
//! When the connection ends, every subscription on it ends (the waiters fall back to
//! polling), and the next subscription opens a new connection.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures_util::{Stream, StreamExt as _};
use redis::aio::{PubSubSink, PubSubStream};
use redis::{Client, RedisResult};
use tokio::sync::mpsc;

/// A node's shared pub/sub connection, opened on first use and again after it ended.
#[derive(Default)]
pub(super) struct Hub {
    line: tokio::sync::Mutex<Option<Arc<Line>>>,
}

/// One open pub/sub connection and who listens on which channel.
struct Line {
    /// The commands side, and the channels the server has subscribed: one decision and
    /// one command at a time.
    sink: tokio::sync::Mutex<(PubSubSink, HashSet<String>)>,
    routes: Mutex<Routes>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Routes {
    /// Channel → the subscriptions it wakes (id, and a one-slot queue: notices coalesce).
    by_channel: HashMap<String, Vec<(u64, mpsc::Sender<()>)>>,
    /// False once the connection ended: no new route is taken.
    closed: bool,
}

impl Hub {
    /// Subscribes to `channels` on the node `client` leads to. The stream yields one item
    /// per notice (coalesced while nobody reads) and ends when the connection does; dropping
    /// it unsubscribes.
    pub(super) async fn subscribe(
        &self,
        client: &Client,
        channels: Vec<String>,
    ) -> RedisResult<impl Stream<Item = ()> + Send + 'static> {
        let line = self.line(client).await?;
        let (tx, rx) = mpsc::channel(1);
        let id = line.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut routes = line.lock_routes();
            if routes.closed {
                return Err(closed());
            }
            for channel in &channels {
                let listeners = routes.by_channel.entry(channel.clone()).or_default();
                listeners.push((id, tx.clone()));
            }
        }
        let route = Route {
            line: line.clone(),
            id,
            channels,
        };
        // On failure `route` drops here, which takes its routes back.
        line.sync(&route.channels).await?;
        drop(tx);
        Ok(futures_util::stream::unfold(
            (rx, route),
            |(mut rx, route)| async move { rx.recv().await.map(|()| ((), (rx, route))) },
        ))
    }

    /// The open line, or a new one when there is none or it ended.
    async fn line(&self, client: &Client) -> RedisResult<Arc<Line>> {
        let mut line = self.line.lock().await;
        if let Some(open) = line.as_ref().filter(|l| !l.lock_routes().closed) {
            return Ok(open.clone());
        }
        let (sink, stream) = client.get_async_pubsub().await?.split();
        let opened = Arc::new(Line {
            sink: tokio::sync::Mutex::new((sink, HashSet::new())),
            routes: Mutex::new(Routes::default()),
            next_id: AtomicU64::new(0),
        });
        tokio::spawn(deliver(stream, Arc::downgrade(&opened)));
        *line = Some(opened.clone());
        Ok(opened)
    }
}

impl Line {
    fn lock_routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        // A panic while holding the routes leaves them consistent (plain inserts and
        // removals): keep using them.
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Brings the server's subscriptions for `channels` in line with the routes.
    async fn sync(&self, channels: &[String]) -> RedisResult<()> {
        let mut sink = self.sink.lock().await;
        let (sink, subscribed) = &mut *sink;
        for channel in channels {
            let routed = self.lock_routes().by_channel.contains_key(channel);
            if routed && !subscribed.contains(channel) {
                sink.subscribe(channel).await?;
                subscribed.insert(channel.clone());
            } else if !routed && subscribed.contains(channel) {
                subscribed.remove(channel);
                sink.unsubscribe(channel).await?;
            }
        }
        Ok(())
    }
}

/// One subscription's routes; dropping it takes them back and unsubscribes the channels
/// nobody else listens on.
struct Route {
    line: Arc<Line>,
    id: u64,
    channels: Vec<String>,
}

impl Drop for Route {
    fn drop(&mut self) {
        {
            let mut routes = self.line.lock_routes();
            for channel in &self.channels {
                if let Some(listeners) = routes.by_channel.get_mut(channel) {
                    listeners.retain(|(id, _)| *id != self.id);
                    if listeners.is_empty() {
                        routes.by_channel.remove(channel);
                    }
                }
            }
        }
        // Outside a runtime (a process shutting down) the connection goes with the hub.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (line, channels) = (self.line.clone(), std::mem::take(&mut self.channels));
            runtime.spawn(async move {
                // A failed UNSUBSCRIBE leaves a channel nobody reads: harmless.
                let _ = line.sync(&channels).await;
            });
        }
    }
}

/// Routes each message to the subscriptions of its channel, until the connection ends;
/// then ends them all.
async fn deliver(mut stream: PubSubStream, line: Weak<Line>) {
    while let Some(message) = stream.next().await {
        let Some(line) = line.upgrade() else { return };
        let routes = line.lock_routes();
        if let Some(listeners) = routes.by_channel.get(message.get_channel_name()) {
            for (_, tx) in listeners {
                // Full: a notice is already waiting to be read, which this one joins.
                let _ = tx.try_send(());
            }
        }
    }
    if let Some(line) = line.upgrade() {
        let mut routes = line.lock_routes();
        routes.closed = true;
        // Dropping the senders ends every subscription's stream.
        routes.by_channel.clear();
    }
}

fn closed() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "the shared pub/sub connection closed"))
}
