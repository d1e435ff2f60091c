//! Worker actors shared by the runtime tests.

use leasehold::ractor::{Actor, ActorProcessingErr, ActorRef};
use leasehold::runtime::LeaseCancelled;

/// A job that runs until its lease ends: it stops on its `LeaseCancelled`.
pub struct UntilCancelled;

impl Actor for UntilCancelled {
    type Msg = LeaseCancelled;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LeaseCancelled>,
        _: LeaseCancelled,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        myself.stop(None);
        Ok(())
    }
}

/// A worker that hears its cancellation and carries on.
pub struct Deaf;

impl Actor for Deaf {
    type Msg = LeaseCancelled;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<LeaseCancelled>,
        _: LeaseCancelled,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

/// A worker that cannot start: its `pre_start` fails.
pub struct FailsToStart;

impl Actor for FailsToStart {
    type Msg = LeaseCancelled;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Err("cannot open the job's input".into())
    }
}

/// A job that runs until its lease ends, and tells the test the cancellation it got.
pub struct TellsCancelled;

impl Actor for TellsCancelled {
    type Msg = LeaseCancelled;
    type State = tokio::sync::mpsc::UnboundedSender<LeaseCancelled>;
    type Arguments = tokio::sync::mpsc::UnboundedSender<LeaseCancelled>;

    async fn pre_start(
        &self,
        _: ActorRef<LeaseCancelled>,
        told: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(told)
    }

    async fn handle(
        &self,
        myself: ActorRef<LeaseCancelled>,
        cancelled: LeaseCancelled,
        told: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = told.send(cancelled);
        myself.stop(None);
        Ok(())
    }
}
