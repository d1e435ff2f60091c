//! The signals leasehold forwards (HUP, INT, QUIT, TERM, USR1, USR2, ALRM), as one stream.
//!
//! Installed before anything reaches Redis: from then on none of them can kill leasehold
//! and leave a lease or a command behind. Before the command starts, one of them abandons
//! the run; after, each is passed on to the command — and so is `--timeout`'s signal, which
//! comes out of this stream when its time is up, as if it had been sent to leasehold.

use std::pin::Pin;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::holders::time;
use crate::keeper::Signal;

/// Every forwarded signal leasehold receives, in order.
pub(crate) struct Signals {
    received: mpsc::UnboundedReceiver<Signal>,
    /// `--timeout`: when, which signal, and the duration (for the line saying so).
    timeout: Option<(Pin<Box<Sleep>>, Signal, Duration)>,
    timed_out: bool,
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
        Ok(Signals {
            received,
            timeout: None,
            timed_out: false,
        })
    }

    /// `signal` comes out of [`recv`](Self::recv) once `after` has passed from now (once).
    pub(crate) fn time_out(&mut self, after: Duration, signal: Signal) {
        self.timeout = Some((Box::pin(tokio::time::sleep(after)), signal, after));
    }

    /// Whether the timeout's signal came out.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The next signal.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn recv(&mut self) -> Option<Signal> {
        let Some((sleep, signal, after)) = &mut self.timeout else {
            return self.received.recv().await;
        };
        tokio::select! {
            received = self.received.recv() => received,
            () = sleep.as_mut() => {
                let (signal, after) = (*signal, *after);
                self.timeout = None;
                self.timed_out = true;
                say!(
                    "the command ran past --timeout {}; sending it {}",
                    time(after),
                    signal.name()
                );
                Some(signal)
            }
        }
    }

    /// A signal already received, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Signal> {
        self.received.try_recv().ok()
    }
}
