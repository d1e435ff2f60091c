//! leasehold's own lines on stderr — one per event an operator must know of — as
//! `leasehold: …`, or, under `--log-format json`, as one JSON object per line in the shape
//! of the JSON logs (`timestamp`, `level`, `fields.message`, `target`), so that every line
//! leasehold writes parses.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

static JSON: AtomicBool = AtomicBool::new(false);

/// Lines from now on are JSON.
pub(crate) fn json_lines() {
    JSON.store(true, Ordering::Relaxed);
}

/// How serious a line is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Level {
    Warn,
    Error,
}

/// Writes one line.
pub(crate) fn line(level: Level, message: impl Display) {
    if JSON.load(Ordering::Relaxed) {
        let value = serde_json::json!({
            "timestamp": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            "level": match level {
                Level::Warn => "WARN",
                Level::Error => "ERROR",
            },
            "fields": { "message": message.to_string() },
            "target": "leasehold",
        });
        eprintln!("{value}");
    } else {
        eprintln!("leasehold: {message}");
    }
}

/// A line about something the operator should know (a signal, processes left behind).
pub(crate) fn warn(message: impl Display) {
    line(Level::Warn, message);
}
