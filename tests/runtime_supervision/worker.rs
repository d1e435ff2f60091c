//! The scripted worker every test here runs: it reports each event (started, cancelled,
//! stopped) to the test, and exits, errs, panics or ignores its cancellation on command,
//! so one actor can play every worker of the supervision grid.

use leasehold::runtime::*;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCancel {
    Exit,
    Ignore,
}

#[derive(Debug)]
pub enum Event {
    Started,
    Cancelled(LeaseCancelled, Instant),
    Stopped,
}

pub struct Worker;

pub struct WorkerArgs {
    pub on_cancel: OnCancel,
    pub events: mpsc::UnboundedSender<Event>,
}

#[derive(Debug)]
pub enum WorkerMsg {
    Cancelled(LeaseCancelled),
    Exit,
    Fail,
    Panic,
}

impl From<LeaseCancelled> for WorkerMsg {
    fn from(c: LeaseCancelled) -> Self {
        Self::Cancelled(c)
    }
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = WorkerArgs;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        args: WorkerArgs,
    ) -> Result<WorkerArgs, ActorProcessingErr> {
        let _ = args.events.send(Event::Started);
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Cancelled(c) => {
                let _ = state.events.send(Event::Cancelled(c, Instant::now()));
                if state.on_cancel == OnCancel::Exit {
                    myself.stop(None);
                }
            }
            WorkerMsg::Exit => myself.stop(None),
            WorkerMsg::Fail => return Err("job failed".into()),
            WorkerMsg::Panic => panic!("job panicked"),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<WorkerMsg>,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let _ = state.events.send(Event::Stopped);
        Ok(())
    }
}
