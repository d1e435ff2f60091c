//! The signals leasehold forwards (HUP, INT, QUIT, TERM, USR1, USR2, ALRM), as one stream.
//!
//! Installed before anything reaches Redis: from then on none of them can kill leasehold
//! and leave a lease or a command behind. Before the command starts, one of them abandons
//! the run; after, each is passed on to the command.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::keeper::Signal;

/// Every forwarded signal leasehold receives, in order.
pub(crate) struct Signals {
    received: mpsc::UnboundedReceiver<Signal>,
}

impl Signals {
    /// Installs the handlers (inside the async runtime).
    ///
    /// # Errors
    /// The OS refused a handler.
    pub(crate) fn install() -> std::io::Result<Signals> {
        let (tx, received) = mpsc::unbounded_channel();
        for forwarded in Signal::FORWARDED {
            let mut stream = signal(SignalKind::from_raw(forwarded.raw()))?;
            let tx = tx.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    if tx.send(forwarded).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Signals { received })
    }

    /// The next signal.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn recv(&mut self) -> Option<Signal> {
        self.received.recv().await
    }

    /// A signal already received, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Signal> {
        self.received.try_recv().ok()
    }
}
