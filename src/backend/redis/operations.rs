//! The backend's operations on Redis (`Operations`): each one batch item, sent by
//! `RedisBackend::call`, and its reply parsed; and the subscriptions, on the shared pub/sub
//! connection of the node the lease's scripts run on.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::time::Instant;

use super::call::malformed;
use super::{RedisBackend, Topology, batch, classify, parse};
use crate::backend::{
    BackendFuture, FailureDetail, FailureKind, KeyPages, Operations, ReleaseNotices, RenewBound,
    ReplicatedReply, SendFailure,
};
use crate::protocol::limits::deadline_after;
use crate::protocol::{
    AcquireReply, Attempt, Holding, Inspected, LeaseKeys, LeaseRequest, LinePlace, LineSession,
    ReleaseReply, RenewReply, ReplicaWait, WaiterId,
};

impl Operations for RedisBackend {
    fn acquire<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        request: &'a LeaseRequest,
        place: LinePlace,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, AcquireReply> {
        let item = batch::Item::acquire(keys, request, place, id);
        self.operation(item, batch::Bound::RoundTrip(timeout), parse::acquire)
    }

    /// On the twin's connections (see `Inner::replicated`), alone: the script, then `WAIT`
    /// on the same connection.
    fn acquire_replicated<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        request: &'a LeaseRequest,
        place: LinePlace,
        id: &'a WaiterId,
        wait: ReplicaWait,
        timeout: Duration,
    ) -> BackendFuture<'a, ReplicatedReply> {
        Box::pin(async move {
            let twin = self.inner.replicated.as_ref().unwrap_or(self);
            let deadline = deadline_after(Instant::now(), timeout);
            let (generation, connected) = twin.connection(deadline, keys.lease()).await?;
            let item = batch::Item::acquire(keys, request, place, id);
            let deadlines = batch::Deadlines::one(batch::Deadline::at(deadline));
            let value = twin
                .send_one(generation, &connected, &item, deadlines)
                .await?;
            let reply = parse::acquire(value).map_err(malformed)?;
            let acked = match reply {
                AcquireReply::Acquired { .. } => Some(
                    twin.wait_replicas(generation, &connected, wait, deadline)
                        .await,
                ),
                _ => None,
            };
            Ok(ReplicatedReply { reply, acked })
        })
    }

    fn renew<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        holding: &'a Holding,
        ttl: Duration,
        bound: RenewBound,
    ) -> BackendFuture<'a, RenewReply> {
        let item = batch::Item::renew(keys, holding, ttl);
        self.operation(item, batch::Bound::renewal(bound), parse::renew)
    }

    fn release<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        holding: &'a Holding,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseReply> {
        let item = batch::Item::release(keys, holding);
        self.operation(item, batch::Bound::RoundTrip(timeout), parse::release)
    }

    fn inspect<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, Inspected> {
        Box::pin(async move {
            let started = Instant::now();
            let value = match self
                .call(
                    batch::Item::inspect(keys, attempt),
                    batch::Bound::RoundTrip(timeout),
                )
                .await
            {
                // A Cluster slot migrating: the lease moved, its line not (yet), and a call
                // naming both is refused before it runs. The lease alone is read instead,
                // within what is left of the bound; the count is then unknown.
                Err(failure) if classify::is_try_again(&failure) => {
                    let left = timeout.saturating_sub(started.elapsed());
                    self.call(
                        batch::Item::inspect_lease(keys, attempt),
                        batch::Bound::RoundTrip(left),
                    )
                    .await?
                }
                read => read?,
            };
            parse::inspect(value).map_err(malformed)
        })
    }

    fn subscribe_releases<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        self.subscribe(keys, vec![keys.release_channel().to_owned()], None, timeout)
    }

    fn leave_line<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, ()> {
        let item = batch::Item::leave(keys, attempt, id);
        self.operation(item, batch::Bound::RoundTrip(timeout), parse::left)
    }

    fn keep_in_line<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        session: &'a LineSession,
        extend: bool,
        timeout: Duration,
    ) -> BackendFuture<'a, ()> {
        let item = batch::Item::keep(keys, session, extend);
        self.operation(item, batch::Bound::RoundTrip(timeout), parse::kept)
    }

    fn subscribe_turn<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        // On its client's channel, which every waiter of the client in this line shares:
        // subscribed once, not once per wait.
        let channel = keys.turn_channel(id.session());
        self.subscribe(keys, vec![channel], Some(Arc::from(id.as_str())), timeout)
    }

    fn scan_leases<'a>(&'a self, prefix: &'a str, timeout: Duration) -> KeyPages<'a> {
        // Namespaces and purposes hold no glob character (`[a-z0-9._:-]`). A lease key ends
        // `{<4 hex>}:<64 hex>`, a counted lease's slot key adds `:n<N>#<i>`; a fence
        // counter `{<4 hex>}:fence` does not match.
        let pattern = format!("{prefix}*{{????}}:{}*", "?".repeat(64));
        self.scan_keys(pattern, timeout)
    }

    fn subscribe_changes<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        let channels = vec![keys.release_channel().to_owned(), keys.acquire_channel()];
        self.subscribe(keys, channels, None, timeout)
    }
}

impl RedisBackend {
    /// Subscribes to `channels` of the lease `keys` names, on the node its scripts run on;
    /// with `only`, to their messages of that payload alone.
    fn subscribe<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        channels: Vec<String>,
        only: Option<Arc<str>>,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        Box::pin(async move {
            let deadline = deadline_after(Instant::now(), timeout);
            // On the node of the shared connection: the primary the scripts publish on.
            // Under Cluster a PUBLISH reaches every node: the slot owner's will do.
            let (_, current) = self.connection(deadline, keys.lease()).await?;
            let failed = |kind, m: String| SendFailure::NotSent(FailureDetail::new(kind, m));
            let node = &current.node;
            let subscribe =
                (node.notices).subscribe(&node.client, channels, only, self.inner.connect_timeout);
            let bound = deadline.min(Instant::now() + self.inner.connect_timeout);
            let notices = tokio::time::timeout_at(bound, subscribe)
                .await
                .map_err(|_| failed(FailureKind::Timeout, "subscribe timed out".into()))?
                .map_err(|e| failed(FailureKind::Connect, e.to_string()))?;
            // Under Cluster no primary is announced: the subscription ends with its connection.
            let follow_primary = !matches!(self.inner.topology, Topology::Cluster(_));
            let mut primary = self.inner.shared.primary.subscribe();
            // The primary may have moved while subscribing: look once before waiting.
            primary.mark_changed();
            let endpoint = current.endpoint().to_owned();
            // Releases are published on the new primary once it moved: the subscription
            // ends then, so the caller polls (or subscribes again, on the new primary).
            let moved = async move {
                if !follow_primary {
                    return std::future::pending().await;
                }
                loop {
                    let changed = primary.changed().await;
                    let moved = primary.borrow_and_update().as_deref() != Some(&endpoint);
                    if changed.is_err() || moved {
                        return;
                    }
                }
            };
            Ok(ReleaseNotices::new(notices.take_until(moved)))
        })
    }
}
