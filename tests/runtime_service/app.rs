//! An application's own supervisor actor, as a service embedding leasehold would have.

use leasehold::runtime::is_lease_end;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::mpsc;

/// An application's supervisor: reports every exit and failure it is told of; with `filter`
/// it lets lease ends pass, without it it keeps ractor's default (stop on any exit).
pub(crate) struct AppSupervisor {
    pub(crate) filter: bool,
}

impl Actor for AppSupervisor {
    type Msg = ();
    type State = mpsc::UnboundedSender<(bool, String)>;
    type Arguments = mpsc::UnboundedSender<(bool, String)>;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: SupervisionEvent,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if matches!(event, SupervisionEvent::ActorStarted(_)) {
            return Ok(());
        }
        let _ = tx.send((is_lease_end(&event), format!("{event:?}")));
        if self.filter && is_lease_end(&event) {
            return Ok(());
        }
        // ractor's default handler: any child's exit or failure stops the supervisor.
        if matches!(
            event,
            SupervisionEvent::ActorTerminated(..) | SupervisionEvent::ActorFailed(..)
        ) {
            myself.stop(None);
        }
        Ok(())
    }
}
