//! What the entry points hand back: a job running under a lease, a lease attached to a
//! worker that already runs, and the report either ends with.

use std::fmt;
use std::future::Future;

use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::oneshot;

use crate::lease::AcquireOutcome;
use crate::protocol::FencingToken;
use crate::runtime::lease_actor::message::LeaseActorMsg;
use crate::runtime::{JobEnd, LeaseContext, LeaseReport, LeaseStatus};
#[cfg(doc)]
use crate::runtime::{LeaseCancelled, LeaseRuntime};

/// What [`LeaseRuntime::spawn_under_lease`] achieved.
#[must_use]
#[derive(Debug)]
// Returned once per job, never stored in bulk: boxing would only cost an allocation.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum SpawnOutcome<M> {
    /// The lease is held and the worker runs under it.
    Started(LeaseJob<M>),
    /// The lease was not acquired within the wait timeout; no worker was started. The
    /// outcome says why (`Contended`, `Unavailable`, `Indeterminate`, `OwnerOperationConflict`).
    NotAcquired(AcquireOutcome),
}

impl<M> SpawnOutcome<M> {
    /// The job, if it started.
    pub fn started(self) -> Option<LeaseJob<M>> {
        match self {
            Self::Started(job) => Some(job),
            Self::NotAcquired(_) => None,
        }
    }
}

pub(crate) struct Started {
    pub(crate) lease: ActorRef<LeaseActorMsg>,
    pub(crate) context: LeaseContext,
    pub(crate) report: oneshot::Receiver<Box<LeaseReport>>,
}

impl Started {
    /// The report, once the lease ended. Not an `async fn`: the future keeps the report's
    /// receiver and the token only, not the context, for as long as the lease is held.
    pub(crate) fn wait(self) -> impl Future<Output = LeaseReport> + use<> {
        wait_report(self.report, self.context.token())
    }

    pub(crate) fn into_job<M>(self, worker: ActorRef<M>) -> LeaseJob<M> {
        LeaseJob {
            lease: self.lease,
            worker,
            context: self.context,
            report: self.report,
        }
    }

    pub(crate) fn into_attached(self) -> AttachedLease {
        AttachedLease {
            lease: self.lease,
            context: self.context,
            report: self.report,
        }
    }
}

async fn wait_report(
    report: oneshot::Receiver<Box<LeaseReport>>,
    token: FencingToken,
) -> LeaseReport {
    report_or_vanished(report.await.ok().map(|report| *report), token)
}

/// The report, or — if the LeaseActor vanished without one — an `Aborted` report.
pub(crate) fn report_or_vanished(report: Option<LeaseReport>, token: FencingToken) -> LeaseReport {
    report.unwrap_or_else(|| LeaseReport {
        // The state's drop always sends a report; this only covers a runtime shutdown.
        end: JobEnd::Aborted,
        cancelled: None,
        release: crate::lease::ReleaseOutcome::Indeterminate {
            detail: crate::backend::FailureDetail::new(
                crate::backend::FailureKind::Abandoned,
                "lease actor vanished without a report",
            ),
        },
        token,
    })
}

/// A worker running under a lease, started by [`LeaseRuntime::spawn_under_lease`].
pub struct LeaseJob<M> {
    lease: ActorRef<LeaseActorMsg>,
    worker: ActorRef<M>,
    context: LeaseContext,
    report: oneshot::Receiver<Box<LeaseReport>>,
}

impl<M> fmt::Debug for LeaseJob<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseJob")
            .field("token", &self.context.token())
            .field("lease_actor", &self.lease.get_id())
            .field("worker", &self.worker.get_id())
            .finish()
    }
}

impl<M> LeaseJob<M> {
    /// The lease actor (to link, monitor or message it).
    pub fn lease_actor(&self) -> &ActorRef<LeaseActorMsg> {
        &self.lease
    }

    /// The worker actor.
    pub fn worker(&self) -> &ActorRef<M> {
        &self.worker
    }

    /// The lease as the worker sees it.
    pub fn context(&self) -> &LeaseContext {
        &self.context
    }

    /// The fencing token.
    pub fn token(&self) -> FencingToken {
        self.context.token()
    }

    /// Asks the worker to stop (a [`LeaseCancelled`] with `Shutdown`); the lease is released
    /// when it has.
    pub fn shutdown(&self) {
        let _ = self.lease.send_message(LeaseActorMsg::release());
    }

    /// The lease actor's current view of the lease; `None` once it ended.
    ///
    /// # Cancel safety
    /// Cancel safe: it only asks.
    pub async fn status(&self) -> Option<LeaseStatus> {
        status(&self.lease).await
    }

    /// Waits for the worker to end and the lease to be released.
    ///
    /// # Cancel safety
    /// Not cancel safe: the report is consumed with `self`. The job carries on regardless.
    pub async fn wait(self) -> LeaseReport {
        wait_report(self.report, self.context.token()).await
    }
}

/// A lease held by a lease actor on behalf of an existing worker (see
/// [`LeaseRuntime::attach`]).
#[derive(Debug)]
pub struct AttachedLease {
    lease: ActorRef<LeaseActorMsg>,
    context: LeaseContext,
    report: oneshot::Receiver<Box<LeaseReport>>,
}

impl AttachedLease {
    /// The lease actor.
    pub fn lease_actor(&self) -> &ActorRef<LeaseActorMsg> {
        &self.lease
    }

    /// The lease as the worker sees it.
    pub fn context(&self) -> &LeaseContext {
        &self.context
    }

    /// Ends the lease and waits for the release outcome.
    ///
    /// # Cancel safety
    /// Not cancel safe: the report is consumed with `self`. The release goes ahead
    /// regardless.
    pub async fn release(self) -> LeaseReport {
        let _ = self.lease.send_message(LeaseActorMsg::release());
        wait_report(self.report, self.context.token()).await
    }

    /// Waits for the lease to end (lost or released) and returns the report.
    ///
    /// # Cancel safety
    /// Not cancel safe: the report is consumed with `self`. The lease carries on regardless.
    pub async fn wait(self) -> LeaseReport {
        wait_report(self.report, self.context.token()).await
    }
}

async fn status(lease: &ActorRef<LeaseActorMsg>) -> Option<LeaseStatus> {
    lease
        .call(
            |reply: RpcReplyPort<LeaseStatus>| LeaseActorMsg::status(reply),
            None,
        )
        .await
        .ok()
        .and_then(|r| match r {
            ractor::rpc::CallResult::Success(s) => Some(s),
            _ => None,
        })
}
