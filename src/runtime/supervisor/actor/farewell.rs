//! How the supervisor ends, however it ends — stopped, failed, killed: its watchers told
//! `Stopped` and given the summary, an acquisition in flight given up, a term still running
//! ended as a stop from outside ends it and counted first.

use ractor::Actor;
use tokio::sync::watch;

use super::term::end_bound;
use super::{Core, Phase, given_up};
use crate::runtime::LeaseReport;
use crate::runtime::supervisor::{SupervisorState, SupervisorSummary};

impl<W: Actor> Drop for Core<W> {
    /// However the actor ends — stopped, failed, killed — watchers see `Stopped` and
    /// [`LeaseSupervisor::join`](crate::runtime::LeaseSupervisor::join) gets the summary; an
    /// acquisition in flight is given up. A term still running — the supervisor was killed,
    /// say with its application, and ractor skipped `post_stop` — is ended in a task, as a
    /// stop from outside ends it, and counted before the summary goes out.
    fn drop(&mut self) {
        let bound = end_bound(self);
        let farewell = Farewell {
            state: std::mem::replace(
                &mut self.state,
                watch::Sender::new(SupervisorState::Stopped),
            ),
            summary: std::mem::replace(&mut self.summary, watch::Sender::new(None)),
            terms: self.terms,
            last: self.last.take(),
        };
        match std::mem::replace(&mut self.phase, Phase::Paused) {
            Phase::Acquiring(cancel, _) => cancel.cancel(),
            Phase::Holding(term) => match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move { farewell.publish(Some(term.end(bound).await)) });
                    return;
                }
                // No runtime to wait in: the lease actor still ends its term on its own.
                Err(_) => term.lease.stop(None),
            },
            Phase::Paused => {
                // An acquisition that may have landed is given up by its attempt
                // (owner-checked), as one in flight is.
                if let (Some(request), Ok(runtime)) =
                    (self.unsettled.take(), tokio::runtime::Handle::try_current())
                {
                    let client = self.runtime.client().clone();
                    runtime.spawn(async move {
                        given_up(&client.release_attempt(&request).await);
                    });
                }
            }
        }
        farewell.publish(None);
    }
}

/// What watchers are told when the supervisor is gone.
struct Farewell {
    state: watch::Sender<SupervisorState>,
    summary: watch::Sender<Option<SupervisorSummary>>,
    terms: u64,
    last: Option<LeaseReport>,
}

impl Farewell {
    /// `Stopped`, and the summary — with `ended`, a term that ended last, counted.
    fn publish(mut self, ended: Option<LeaseReport>) {
        if let Some(report) = ended {
            self.terms += 1;
            self.last = Some(report);
        }
        self.state.send_replace(SupervisorState::Stopped);
        self.summary.send_replace(Some(SupervisorSummary {
            terms: self.terms,
            last: self.last,
        }));
    }
}
