//! leasehold's own lines on stderr — one per event an operator must know of — as
//! `leasehold: …`, or, under `--log-format json`, as one JSON object per line in the shape
//! of the JSON logs (`timestamp`, `level`, `fields.message`, `target`), so that every line
//! leasehold writes parses. On a terminal, a status that changes (who a waiting run waits
//! for) is one line rewritten in place instead.

use std::fmt::Display;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

static JSON: AtomicBool = AtomicBool::new(false);

/// Lines from now on are JSON.
pub(crate) fn json_lines() {
    JSON.store(true, Ordering::Relaxed);
}

/// Whether lines are JSON.
pub(crate) fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// How serious a line is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Level {
    Info,
    Warn,
    Error,
}

/// Writes one line.
pub(crate) fn line(level: Level, message: impl Display) {
    event(level, message, serde_json::Value::Null);
}

/// Writes one line; under JSON, `fields` (an object) go beside `message` in `fields`.
pub(crate) fn event(level: Level, message: impl Display, fields: serde_json::Value) {
    if is_json() {
        let mut all = match fields {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        all.insert("message".to_owned(), message.to_string().into());
        let value = serde_json::json!({
            "timestamp": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            "level": match level {
                Level::Info => "INFO",
                Level::Warn => "WARN",
                Level::Error => "ERROR",
            },
            "fields": all,
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

/// Erases the terminal's current line and writes `message` there, without a newline (a
/// terminal only: it is rewritten by the next call, erased by [`clear_status`]).
pub(crate) fn status(message: impl Display) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2Kleasehold: {message}");
    let _ = err.flush();
}

/// Erases what [`status`] wrote.
pub(crate) fn clear_status() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}
