//! The memory backend's operations (`Operations`): each one the script's semantics over
//! the store, under its lock, on the store's clock.

use std::time::Duration;

use tokio::time::Instant;

use super::{MemoryBackend, line};
use crate::backend::{
    BackendFuture, KeyPages, Operations, ReleaseNotices, RenewBound, ReplicatedReply,
};
use crate::protocol::LINE_KEEP;
use crate::protocol::limits::deadline_after;
use crate::protocol::{
    AcquireReply, Attempt, FencingToken, Holding, InspectReply, Inspected, LeaseKeys, LeaseRequest,
    LinePlace, LineSession, ReleaseReply, RenewReply, ReplicaWait, WaiterId,
};

impl Operations for MemoryBackend {
    fn acquire<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        request: &'a LeaseRequest,
        place: LinePlace,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, AcquireReply> {
        self.run(timeout, move |store, now| {
            store.acquire(keys, request, place, id, now)
        })
    }

    /// In process there are no replicas: an acquisition is acknowledged by none, at once.
    fn acquire_replicated<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        request: &'a LeaseRequest,
        place: LinePlace,
        id: &'a WaiterId,
        _wait: ReplicaWait,
        timeout: Duration,
    ) -> BackendFuture<'a, ReplicatedReply> {
        Box::pin(async move {
            let reply = self.acquire(keys, request, place, id, timeout).await?;
            let acked = matches!(reply, AcquireReply::Acquired { .. }).then_some(Ok(0));
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
        let attempt = holding.attempt();
        // No local wait here: the call is its round trip.
        self.run(bound.timeout_at(Instant::now()), move |store, now| {
            match store.live(keys.lease(), now) {
                None => RenewReply::Absent,
                Some(entry) if !entry.is(attempt) => RenewReply::NotOwner,
                // Ended: the entry only holds its lock-delay, which a renewal never undoes.
                Some(entry) if entry.expires_at <= now => RenewReply::Absent,
                Some(entry) => {
                    entry.expires_at = deadline_after(now, ttl);
                    RenewReply::Renewed
                }
            }
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        holding: &'a Holding,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseReply> {
        let attempt = holding.attempt();
        self.run(timeout, move |store, now| {
            match store.live(keys.lease(), now) {
                None => ReleaseReply::Absent,
                Some(entry) if !entry.is(attempt) => ReleaseReply::NotOwner,
                Some(_) => {
                    store.leases.remove(keys.lease());
                    store.notify(keys.release_channel());
                    ReleaseReply::Released
                }
            }
        })
    }

    fn inspect<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        attempt: &'a Attempt,
        timeout: Duration,
    ) -> BackendFuture<'a, Inspected> {
        self.run(timeout, move |store, now| {
            let waiting = store.lines.get(&keys.line()).map_or(0, |l| l.entries(now));
            let reply = match store.live(keys.lease(), now) {
                None => InspectReply::Absent,
                Some(entry) => {
                    let ((pttl, ended), token) = (entry.left(now), FencingToken::new(entry.token));
                    let holder = entry.holder.clone();
                    if ended {
                        InspectReply::Delayed {
                            pttl,
                            token,
                            holder,
                        }
                    } else if entry.is(attempt) {
                        InspectReply::HeldByAttempt {
                            pttl,
                            token,
                            holder,
                        }
                    } else {
                        InspectReply::HeldByOther {
                            pttl,
                            token,
                            holder,
                        }
                    }
                }
            };
            Inspected {
                reply,
                waiting: u64::try_from(waiting).ok(),
            }
        })
    }

    fn subscribe_releases<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        self.run(timeout, move |store, _| {
            store.subscribe([keys.release_channel().to_owned()])
        })
    }

    fn leave_line<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        _attempt: &'a Attempt,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, ()> {
        let permits = usize::from(keys.permits());
        self.run(timeout, move |store, _| {
            let line = keys.line();
            let Some(waiting) = store.lines.get_mut(&line) else {
                return;
            };
            if let Some(next) = waiting.leave(id.as_str(), permits) {
                store.notify(&line::turn_channel(keys, &next));
            }
        })
    }

    fn keep_in_line<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        session: &'a LineSession,
        extend: bool,
        timeout: Duration,
    ) -> BackendFuture<'a, ()> {
        self.run(timeout, move |store, now| {
            if extend && let Some(line) = store.lines.get_mut(&keys.line()) {
                line.extend(now);
            }
            // Ended keep-alives go once the map doubled since the last sweep: a sweep's
            // cost is spread over as many keeps as it looks at.
            if store.kept.len() >= store.kept_sweep_at {
                store.kept.retain(|_, until| now < *until);
                store.kept_sweep_at = (2 * store.kept.len()).max(64);
            }
            let until = deadline_after(now, LINE_KEEP);
            store.kept.insert(keys.keep_alive(session.as_str()), until);
        })
    }

    fn subscribe_turn<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        id: &'a WaiterId,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        self.run(timeout, move |store, _| {
            store.subscribe([line::turn_channel(keys, id.as_str())])
        })
    }

    fn scan_leases<'a>(&'a self, prefix: &'a str, timeout: Duration) -> KeyPages<'a> {
        // One page: the whole store is one step.
        let page = self.run(timeout, move |store, now| {
            store
                .leases
                .iter()
                .filter(|(key, entry)| key.starts_with(prefix) && entry.expires_at > now)
                .map(|(key, _)| key.clone())
                .collect()
        });
        Box::pin(futures_util::stream::once(page))
    }

    fn subscribe_changes<'a>(
        &'a self,
        keys: &'a LeaseKeys,
        timeout: Duration,
    ) -> BackendFuture<'a, ReleaseNotices> {
        self.run(timeout, move |store, _| {
            store.subscribe([keys.release_channel().to_owned(), keys.acquire_channel()])
        })
    }
}
