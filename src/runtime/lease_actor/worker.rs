//! The worker a lease actor protects: how it is handed over (an actor to spawn as its
//! child, one already running, or work run in its caller's future), how the actor holds
//! it, and how that work tells the actor that it ended.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ractor::{ActorCell, ActorRef, SpawnErr};

use super::published::{WorkLink, WorkSwitch};
use super::watchdog::WorkerView;
use crate::runtime::LeaseActorMsg;

pub(crate) type SpawnFuture<M> =
    Pin<Box<dyn Future<Output = Result<ActorRef<M>, SpawnErr>> + Send>>;
/// Spawns the worker linked under the given supervisor cell.
pub(crate) type Spawner<M> = Box<dyn FnOnce(ActorCell) -> SpawnFuture<M> + Send>;

/// Hands the work to its caller's future (in `post_start`), with a [`WorkGuard`] that
/// tells the lease actor when it ends.
pub(crate) type TaskStarter = Box<dyn FnOnce(ActorRef<LeaseActorMsg>) + Send>;

pub(crate) enum Worker<M> {
    /// Spawned in `post_start` as the lease actor's child.
    Spawn(Spawner<M>),
    /// An actor that already runs; it is told, not supervised.
    Attached(ActorRef<M>),
    /// A future run in its caller's future (`run_under_lease`), handed over in
    /// `post_start`: its cancellation is the context's, and it is stopped by the
    /// [`WorkSwitch`] (dropped by its caller without being polled again).
    Task(TaskStarter),
}

/// Kept beside the work in its caller's future (`run_under_lease`): says when the work must
/// stop, and when dropped — after the work — that it ended, to the lease's status (for a
/// release that waits for the end) and to the lease actor (a message): it returned, was
/// dropped (stopped, or its caller's future dropped), or panicked
/// ([`failed`](Self::failed)).
pub(crate) struct WorkGuard {
    link: WorkLink,
    /// Taken by `failed`, which tells the actor itself.
    actor: Option<ActorRef<LeaseActorMsg>>,
}

impl WorkGuard {
    pub(crate) fn new(link: WorkLink, actor: ActorRef<LeaseActorMsg>) -> Self {
        Self {
            link,
            actor: Some(actor),
        }
    }

    pub(crate) fn link(&self) -> &WorkLink {
        &self.link
    }

    /// The work panicked with `message`: this guard's drop will not tell the actor; the
    /// returned teller does, to be called once the work is dropped.
    pub(crate) fn failed(&mut self, message: String) -> impl FnOnce() + use<> {
        let actor = self.actor.take();
        move || {
            if let Some(actor) = actor {
                let _ = actor.send_message(LeaseActorMsg::task_ended(Some(message)));
            }
        }
    }
}

impl Drop for WorkGuard {
    fn drop(&mut self) {
        self.link.ended();
        // The actor may be gone already (stopped from outside): nothing left to tell.
        if let Some(actor) = self.actor.take() {
            let _ = actor.send_message(LeaseActorMsg::task_ended(None));
        }
    }
}

/// The worker as the lease actor holds it.
pub(crate) enum WorkerState<M> {
    Pending(Spawner<M>),
    PendingTask(TaskStarter),
    Child { worker: ActorRef<M>, alive: bool },
    Attached(ActorRef<M>),
    Task { work: WorkSwitch, alive: bool },
    Starting,
}

impl<M> WorkerState<M> {
    /// Still running (an attached worker always counts as running).
    pub(crate) fn alive(&self) -> bool {
        match self {
            WorkerState::Child { alive, .. } | WorkerState::Task { alive, .. } => *alive,
            WorkerState::Attached(_) => true,
            WorkerState::Pending(_) | WorkerState::PendingTask(_) | WorkerState::Starting => false,
        }
    }

    /// The worker, if it runs and is the lease actor's to stop (a child or a task), taken
    /// out to be stopped: from now on it counts as ended.
    pub(crate) fn take_running(&mut self) -> Option<Running> {
        match std::mem::replace(self, WorkerState::Starting) {
            WorkerState::Child {
                worker,
                alive: true,
            } => {
                let cell = worker.get_cell();
                *self = WorkerState::Child {
                    worker,
                    alive: false,
                };
                Some(Running::Actor(cell))
            }
            WorkerState::Task { work, alive: true } => Some(Running::Task(work)),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The worker as the watchdog needs to know it.
    pub(crate) fn view(&self) -> WorkerView {
        WorkerView {
            attached: matches!(self, WorkerState::Attached(_)),
            alive: self.alive(),
        }
    }
}

/// A running worker taken out of its lease actor to be stopped; it carries no message type,
/// so it can outlive the actor (a killed actor's release waits for it in a task).
pub(crate) enum Running {
    Actor(ActorCell),
    Task(WorkSwitch),
}

impl Running {
    /// Waits up to `grace` for it to end on its own; `None` if it did, itself if not.
    pub(crate) async fn ended_within(mut self, grace: Duration) -> Option<Self> {
        let ended = match &mut self {
            Running::Actor(cell) => cell.wait(Some(grace)).await.is_ok(),
            Running::Task(work) => tokio::time::timeout(grace, work.ended()).await.is_ok(),
        };
        (!ended).then_some(self)
    }

    /// Stops it now, without waiting.
    pub(crate) fn kill(&self) {
        match self {
            Running::Actor(cell) => cell.kill(),
            Running::Task(work) => work.kill(),
        }
    }

    /// Kills it (ractor's `kill`: no `post_stop` wait; work in its caller's future
    /// dropped) and waits, up to `wait`, for its end.
    pub(crate) async fn kill_and_wait(self, wait: Duration) {
        match self {
            Running::Actor(cell) => {
                let _ = cell.kill_and_wait(Some(wait)).await;
            }
            Running::Task(work) => {
                work.kill();
                let _ = tokio::time::timeout(wait, work.ended()).await;
            }
        }
    }
}
