//! `LeaseRuntime::shutdown`: the drain a service runs on SIGTERM, so that its successors
//! take its leases over in milliseconds instead of waiting out their TTLs.

use std::time::Duration;

use tokio::time::Instant;

use crate::protocol::limits::deadline_after;
use crate::runtime::LeaseRuntime;
use crate::runtime::lease_actor::message::LeaseActorMsg;
use crate::runtime::lease_actor::release_time;

/// What [`LeaseRuntime::shutdown`] did. The counts add up:
/// `leases == ended + stopped + left`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownSummary {
    /// Leases held or being acquired when the drain began.
    pub leases: usize,
    /// Of those, ended by their work within the drain's time for it (or never started:
    /// acquisitions given up), and released.
    pub ended: usize,
    /// Ended at the drain's deadline: work under [`CancelPolicy::Kill`] that had not
    /// stopped was stopped, then the lease released.
    ///
    /// [`CancelPolicy::Kill`]: crate::runtime::CancelPolicy::Kill
    pub stopped: usize,
    /// Still held when `shutdown` returned: work under
    /// [`CancelPolicy::NotifyOnly`](crate::runtime::CancelPolicy::NotifyOnly) still running
    /// (its lease is released when it ends, or expires by its TTL), a release still
    /// waiting for Redis, or an acquisition given up whose release could not be confirmed
    /// (it may have taken its lease, held until its TTL ends; a warning says so).
    pub left: usize,
    /// How long the drain took.
    pub took: Duration,
}

impl LeaseRuntime {
    /// Drains the runtime, within `grace`: what a service does on SIGTERM.
    ///
    /// 1. From the first moment, every clone of this runtime refuses new leases
    ///    ([`RuntimeError::ShuttingDown`](crate::runtime::RuntimeError::ShuttingDown), before
    ///    any I/O); acquisitions in flight are given up (and released by their attempt, in
    ///    case they landed); a [`supervise`](Self::supervise) loop ends after its term.
    /// 2. Every running job's work is sent [`LeaseCancelled`] with
    ///    [`CancelReason::Shutdown`] (its context's token is cancelled at the same moment),
    ///    and every lease is released as soon as its work stops — an attached worker ends
    ///    it by releasing. Waiters on another runtime are woken by the release notice.
    /// 3. Time for the work to stop on its own ends early enough to leave room for the
    ///    releases (three command timeouts, at most half of `grace`); then work under
    ///    [`CancelPolicy::Kill`] that still runs is stopped and its lease released.
    /// 4. Returns when nothing is held, or when `grace` is over. Any `grace` is taken:
    ///    one beyond [`NO_DEADLINE`] (`Duration::MAX` included) is no deadline — the drain
    ///    waits for the work to stop.
    ///
    /// Local validity bounds everything as always: work never runs past it under `Kill`,
    /// whatever `grace` says.
    ///
    /// # Cancel safety
    /// Cancel safe as far as the leases go: once called, the drain is under way — the
    /// runtime refuses new leases and every lease actor carries on with its release.
    /// Dropping the future only loses the summary and the stop at the deadline.
    ///
    /// [`LeaseCancelled`]: crate::runtime::LeaseCancelled
    /// [`NO_DEADLINE`]: crate::protocol::limits::NO_DEADLINE
    /// [`CancelReason::Shutdown`]: crate::runtime::CancelReason::Shutdown
    /// [`CancelPolicy::Kill`]: crate::runtime::CancelPolicy::Kill
    pub async fn shutdown(&self, grace: Duration) -> ShutdownSummary {
        let began = Instant::now();
        let deadline = deadline_after(began, grace);
        let room = release_time(self.client().settings().command_timeout).min(grace / 2);
        let actors = self.registry.close();
        let leases = self.registry.live();
        tracing::info!(
            leases,
            grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            "lease runtime draining"
        );
        for actor in &actors {
            let _ = actor.send_message(LeaseActorMsg::drain());
        }
        let mut past_due = 0;
        if !self.registry.wait_empty_until(deadline - room).await {
            let running = self.registry.running();
            past_due = self.registry.live();
            for actor in &running {
                let _ = actor.send_message(LeaseActorMsg::drain_deadline());
            }
            self.registry.wait_empty_until(deadline).await;
        }
        let live = self.registry.live();
        // Given up before any term began, so never past due: out of `ended`, into `left`.
        let unreleased = self.registry.unreleased();
        let left = live + unreleased;
        let summary = ShutdownSummary {
            leases,
            ended: leases.saturating_sub(past_due).saturating_sub(unreleased),
            stopped: past_due.saturating_sub(live),
            left,
            took: began.elapsed(),
        };
        tracing::info!(
            leases,
            ended = summary.ended,
            stopped = summary.stopped,
            left,
            took_ms = u64::try_from(summary.took.as_millis()).unwrap_or(u64::MAX),
            "lease runtime drained"
        );
        summary
    }

    /// Whether [`shutdown`](Self::shutdown) was called on this runtime or a clone.
    pub fn is_shutting_down(&self) -> bool {
        self.registry.draining()
    }
}
