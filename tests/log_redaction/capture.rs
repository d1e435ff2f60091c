//! One buffer for everything a test sees — the subscriber's output and the test's own
//! prints — so a single search over it finds a secret wherever it leaked.

use std::fmt::Debug;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Everything the subscriber writes, and everything the test prints, in one buffer.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock()).into_owned()
    }

    /// Appends `label: {value:?}`.
    pub fn debug(&self, label: &str, value: &dyn Debug) {
        writeln!(self.lock(), "[test] {label}: {value:?}").expect("write to a Vec");
    }

    /// Appends `label: {value}`.
    pub fn display(&self, label: &str, value: &dyn std::fmt::Display) {
        writeln!(self.lock(), "[test] {label}: {value}").expect("write to a Vec");
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A TRACE-level fmt subscriber writing into `capture`, as this thread's default until the
/// guard drops. Every `#[tokio::test]` here runs on a current-thread runtime, so tasks the
/// library spawns (the drop-time release, the redis connection driver) log into it too.
///
/// Every test in this binary installs one before touching leasehold: tracing caches each
/// callsite's interest process-wide, and a callsite first hit on a test thread with no
/// subscriber can be cached as "never" while another thread's scoped subscriber is being
/// registered (a race in tests that run in parallel), which silently drops that callsite's
/// spans everywhere. With a TRACE subscriber on every thread no computation yields "never";
/// the rebuild covers callsites registered before this subscriber.
pub fn install(capture: &Capture) -> tracing::subscriber::DefaultGuard {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::NEW | FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(capture.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    guard
}
