//! A term as the supervisor holds it — its lease actor, its fencing token, the report that
//! says it ended — and ending it from here, bounded.

use std::time::Duration;

use futures_util::future::Shared;
use ractor::{Actor, ActorRef};
use tokio::sync::oneshot;

use super::Core;
use crate::protocol::FencingToken;
use crate::runtime::LeaseReport;
use crate::runtime::job::report_or_vanished;
use crate::runtime::lease_actor::message::LeaseActorMsg;
use crate::runtime::lease_actor::stop_time;

pub(super) struct Term {
    pub(super) lease: ActorRef<LeaseActorMsg>,
    pub(super) token: FencingToken,
    /// The lease actor's report, awaited by the task that tells the supervisor the term
    /// ended, and by whoever ends the term from here.
    pub(super) report: Shared<oneshot::Receiver<Box<LeaseReport>>>,
}

impl Term {
    /// The report, or a "vanished" one if the lease actor ended without one.
    pub(super) async fn report(self) -> LeaseReport {
        report_or_vanished(self.report.await.ok().map(|report| *report), self.token)
    }

    /// Ends the term from here — the lease actor stopped from outside: its worker sent
    /// `LeaseCancelled` with `Shutdown` and given a grace, then stopped; the lease
    /// released — and returns its report, waiting at most `bound` for it.
    pub(super) async fn end(self, bound: Duration) -> LeaseReport {
        self.lease.stop(None);
        let token = self.token;
        let report = tokio::time::timeout(bound, self.report).await;
        report_or_vanished(
            report.ok().and_then(Result::ok).map(|report| *report),
            token,
        )
    }
}

/// How long ending a term from here may take: the lease actor's stop, and a margin for a
/// report that never comes.
pub(super) fn end_bound<W: Actor>(core: &Core<W>) -> Duration {
    REPORT_WAIT + stop_time(core.runtime.client().settings().command_timeout)
}

/// Bound on waiting for a stopped lease actor's report, and for a stopped worker.
const REPORT_WAIT: Duration = Duration::from_secs(1);
