//! The worker a lease actor protects: how it is handed over (an actor to spawn as its
//! child, one already running, or a task), how the actor holds it, and how a task tells the
//! actor that it ended.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ractor::{ActorCell, ActorRef, SpawnErr};

use super::watchdog::WorkerView;
use crate::runtime::LeaseActorMsg;

pub(crate) type SpawnFuture<M> =
    Pin<Box<dyn Future<Output = Result<ActorRef<M>, SpawnErr>> + Send>>;
/// Spawns the worker linked under the given supervisor cell.
pub(crate) type Spawner<M> = Box<dyn FnOnce(ActorCell) -> SpawnFuture<M> + Send>;

/// Starts the task that runs the work (in `post_start`, in the lease's span); the task
/// holds a [`TaskEnd`] that tells the lease actor when it ends.
pub(crate) type TaskStarter =
    Box<dyn FnOnce(ActorRef<LeaseActorMsg>) -> tokio::task::JoinHandle<()> + Send>;

pub(crate) enum Worker<M> {
    /// Spawned in `post_start` as the lease actor's child.
    Spawn(Spawner<M>),
    /// An actor that already runs; it is told, not supervised.
    Attached(ActorRef<M>),
    /// A future run as a task of its own, started in `post_start`: its cancellation is the
    /// context's token, and it is stopped by aborting it (dropped at its next `.await`).
    Task(TaskStarter),
}

/// Tells the lease actor, when dropped, that the task running the work ended: it returned,
/// panicked ([`failed`](Self::failed) was called), or was aborted.
pub(crate) struct TaskEnd {
    actor: ActorRef<LeaseActorMsg>,
    failure: Option<String>,
}

impl TaskEnd {
    pub(crate) fn new(actor: ActorRef<LeaseActorMsg>) -> Self {
        Self {
            actor,
            failure: None,
        }
    }

    /// The work panicked with `message`.
    pub(crate) fn failed(&mut self, message: String) {
        self.failure = Some(message);
    }
}

impl Drop for TaskEnd {
    fn drop(&mut self) {
        // The actor may be gone already (stopped from outside): nothing left to tell.
        let _ = self
            .actor
            .send_message(LeaseActorMsg::task_ended(self.failure.take()));
    }
}

/// The worker as the lease actor holds it.
pub(crate) enum WorkerState<M> {
    Pending(Spawner<M>),
    PendingTask(TaskStarter),
    Child {
        worker: ActorRef<M>,
        alive: bool,
    },
    Attached(ActorRef<M>),
    Task {
        task: tokio::task::JoinHandle<()>,
        alive: bool,
    },
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
            WorkerState::Task { task, alive: true } => Some(Running::Task(task)),
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
    Task(tokio::task::JoinHandle<()>),
}

impl Running {
    /// Waits up to `grace` for it to end on its own; `None` if it did, itself if not.
    pub(crate) async fn ended_within(mut self, grace: Duration) -> Option<Self> {
        let ended = match &mut self {
            Running::Actor(cell) => cell.wait(Some(grace)).await.is_ok(),
            Running::Task(task) => tokio::time::timeout(grace, task).await.is_ok(),
        };
        (!ended).then_some(self)
    }

    /// Stops it now, without waiting.
    pub(crate) fn kill(&self) {
        match self {
            Running::Actor(cell) => cell.kill(),
            Running::Task(task) => task.abort(),
        }
    }

    /// Kills it (ractor's `kill`: no `post_stop` wait, a task aborted) and waits, up to
    /// `wait`, for its end.
    pub(crate) async fn kill_and_wait(self, wait: Duration) {
        match self {
            Running::Actor(cell) => {
                let _ = cell.kill_and_wait(Some(wait)).await;
            }
            Running::Task(task) => {
                task.abort();
                let _ = tokio::time::timeout(wait, task).await;
            }
        }
    }
}
