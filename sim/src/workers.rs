//! The work the simulated clients run: each records what it sees of its lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use leasehold::ractor::{Actor, ActorProcessingErr, ActorRef};
use leasehold::runtime::{CancelReason, LeaseActorMsg, LeaseCancelled, LeaseContext};

use crate::history::{Recorder, What, WorkerId};

/// What every worker of a run shares: the history and the next worker's id.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    pub recorder: Recorder,
    next: Arc<AtomicU32>,
}

impl Shared {
    /// Records a worker's start under `ctx` and returns its id and the guard that records
    /// its end when dropped (the work returned, or was stopped).
    pub fn start(&self, ctx: &LeaseContext, client: usize, resource: usize) -> Ended {
        let worker = self.next.fetch_add(1, Ordering::Relaxed);
        let rec = &self.recorder;
        rec.record(What::Started {
            worker,
            client,
            resource,
            slot: ctx.slot().unwrap_or(0),
            token: ctx.token().get(),
            stop_by: rec.since_start(ctx.stop_by()),
        });
        // Every renewal's new validity, as the worker sees it, until the lease actor ends.
        let mut watched = ctx.clone();
        let recorder = rec.clone();
        tokio::spawn(async move {
            let mut last = watched.status().stop_by;
            while watched.changed().await {
                let status = watched.status();
                if status.cancelled.is_none() && status.stop_by != last {
                    last = status.stop_by;
                    recorder.record(What::Validity {
                        worker,
                        stop_by: recorder.since_start(status.stop_by),
                    });
                }
            }
        });
        Ended {
            worker,
            recorder: rec.clone(),
        }
    }

    /// Records that `worker` was told, with its context's reason and validity end.
    pub fn told(&self, worker: WorkerId, reason: CancelReason, stop_by: tokio::time::Instant) {
        let stop_by = self.recorder.since_start(stop_by);
        self.recorder.record(What::Told {
            worker,
            reason,
            stop_by,
        });
    }
}

/// Records the worker's end when dropped.
#[derive(Debug)]
pub struct Ended {
    pub worker: WorkerId,
    recorder: Recorder,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.recorder.record(What::Ended {
            worker: self.worker,
        });
    }
}

/// A `run_under_lease` job: works for `work`, or until told, then takes `reaction` to stop.
pub async fn job(
    shared: Shared,
    ctx: LeaseContext,
    client: usize,
    work: Duration,
    reaction: Duration,
) {
    let ended = shared.start(&ctx, client, 1);
    tokio::select! {
        biased;
        () = ctx.cancelled() => {
            let reason = ctx.cancel_reason().unwrap_or(CancelReason::Unknown);
            shared.told(ended.worker, reason, ctx.stop_by());
            tokio::time::sleep(reaction).await;
        }
        () = tokio::time::sleep(work) => {}
    }
}

/// A `spawn_under_lease` job's worker actor: works for `work` (a message it sends itself),
/// or until told, then takes its reaction time to stop.
pub struct Job;

/// What a [`Job`] hears: its lease's cancellation, or its own work's end.
pub enum JobMsg {
    Cancelled(LeaseCancelled),
    Done,
}

impl From<LeaseCancelled> for JobMsg {
    fn from(cancelled: LeaseCancelled) -> Self {
        JobMsg::Cancelled(cancelled)
    }
}

pub struct JobArgs {
    pub shared: Shared,
    pub ctx: LeaseContext,
    pub client: usize,
    pub work: Duration,
    pub reaction: Duration,
}

impl Actor for Job {
    type Msg = JobMsg;
    type State = TermState;
    type Arguments = JobArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<JobMsg>,
        args: JobArgs,
    ) -> Result<TermState, ActorProcessingErr> {
        let ended = args.shared.start(&args.ctx, args.client, 1);
        myself.send_after(args.work, || JobMsg::Done);
        Ok(TermState {
            shared: args.shared,
            reaction: args.reaction,
            ended,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<JobMsg>,
        msg: JobMsg,
        state: &mut TermState,
    ) -> Result<(), ActorProcessingErr> {
        if let JobMsg::Cancelled(cancelled) = msg {
            state.on_cancelled(&cancelled).await;
        }
        myself.stop(None);
        Ok(())
    }
}

/// A supervisor's term: runs until told, then takes its reaction time to stop.
pub struct Term;

pub struct TermArgs {
    pub shared: Shared,
    pub ctx: LeaseContext,
    pub client: usize,
    pub reaction: Duration,
}

pub struct TermState {
    shared: Shared,
    reaction: Duration,
    /// Dropped with the state: when the actor ends, stopped or killed.
    ended: Ended,
}

impl TermState {
    /// Told: recorded with the cancellation's reason and validity end, then the reaction
    /// time taken to stop.
    async fn on_cancelled(&self, cancelled: &LeaseCancelled) {
        self.shared
            .told(self.ended.worker, cancelled.reason, cancelled.stop_by);
        tokio::time::sleep(self.reaction).await;
    }
}

impl Actor for Term {
    type Msg = LeaseCancelled;
    type State = TermState;
    type Arguments = TermArgs;

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        args: TermArgs,
    ) -> Result<TermState, ActorProcessingErr> {
        let ended = args.shared.start(&args.ctx, args.client, 0);
        Ok(TermState {
            shared: args.shared,
            reaction: args.reaction,
            ended,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<LeaseCancelled>,
        cancelled: LeaseCancelled,
        state: &mut TermState,
    ) -> Result<(), ActorProcessingErr> {
        state.on_cancelled(&cancelled).await;
        myself.stop(None);
        Ok(())
    }
}

/// A long-running worker that takes leases attached to it (`LeaseRuntime::attach`): told
/// of each one with [`HolderMsg::Work`], it works for a while, then stops working and
/// releases; told the lease is lost, it takes its reaction time to stop, then releases. It
/// outlives its leases.
pub struct Holder;

/// What a [`Holder`] hears.
pub enum HolderMsg {
    /// Work under the lease this actor was attached to.
    Work {
        ctx: LeaseContext,
        lease: ActorRef<LeaseActorMsg>,
        work: Duration,
        reaction: Duration,
    },
    Cancelled(LeaseCancelled),
    /// The end of the work under the lease of this token.
    Done(u64),
}

impl From<LeaseCancelled> for HolderMsg {
    fn from(cancelled: LeaseCancelled) -> Self {
        HolderMsg::Cancelled(cancelled)
    }
}

pub struct HolderState {
    shared: Shared,
    client: usize,
    /// The work under way: its lease's token, its record, its lease actor.
    working: Option<(u64, TermState, ActorRef<LeaseActorMsg>)>,
    /// The token of a lease whose loss was told before its work began.
    told_first: Option<u64>,
}

impl HolderState {
    /// Stops working (its end recorded), then asks for the release.
    fn stop_and_release(&mut self) {
        if let Some((_, term, lease)) = self.working.take() {
            drop(term);
            let _ = lease.send_message(LeaseActorMsg::release());
        }
    }
}

impl Actor for Holder {
    type Msg = HolderMsg;
    type State = HolderState;
    type Arguments = (Shared, usize);

    async fn pre_start(
        &self,
        _: ActorRef<HolderMsg>,
        (shared, client): (Shared, usize),
    ) -> Result<HolderState, ActorProcessingErr> {
        Ok(HolderState {
            shared,
            client,
            working: None,
            told_first: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<HolderMsg>,
        msg: HolderMsg,
        state: &mut HolderState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HolderMsg::Work {
                ctx,
                lease,
                work,
                reaction,
            } => {
                let token = ctx.token().get();
                if state.told_first.take() == Some(token) {
                    // The loss came before the work: nothing begins; the lease is let go.
                    let _ = lease.send_message(LeaseActorMsg::release());
                    return Ok(());
                }
                let ended = state.shared.start(&ctx, state.client, 1);
                let term = TermState {
                    shared: state.shared.clone(),
                    reaction,
                    ended,
                };
                state.working = Some((token, term, lease));
                myself.send_after(work, move || HolderMsg::Done(token));
            }
            HolderMsg::Cancelled(cancelled) => match &state.working {
                Some((token, term, _)) if *token == cancelled.token.get() => {
                    term.on_cancelled(&cancelled).await;
                    state.stop_and_release();
                }
                // A lease whose work has not begun (or is over: then nothing follows).
                _ => state.told_first = Some(cancelled.token.get()),
            },
            HolderMsg::Done(token) => {
                if state.working.as_ref().is_some_and(|(t, ..)| *t == token) {
                    state.stop_and_release();
                }
            }
        }
        Ok(())
    }
}
