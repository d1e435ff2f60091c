//! The one line each fault-matrix test prints on stderr, for `.ci/fault-report`:
//!
//! ```text
//! FAULT row=<id> injected=<n> <key>=<value> …
//! ```
//!
//! `row` names the fault (and, after a `/`, where it was injected: backend or entry point);
//! `injected` is how many faults the test injected. The figures follow as `key=value`:
//! durations in whole milliseconds under a key ending `_ms`, shares as `part/whole`
//! (`cancelled_before_validity_end=6/6`). A value never contains whitespace (it is replaced
//! by `_`), so a line splits on spaces. Print it as soon as the figures are known — before
//! the test's assertions where its flow allows, so a failing run still shows what it saw.

use std::fmt::Display;
use std::time::Duration;

/// One `FAULT` line, built up and then printed with [`FaultLine::print`].
#[must_use = "a fault line says nothing until it is printed"]
pub struct FaultLine {
    text: String,
}

impl FaultLine {
    /// `FAULT row=<row> injected=<injected>`.
    pub fn new(row: &str, injected: usize) -> Self {
        Self {
            text: format!("FAULT row={} injected={injected}", clean(row)),
        }
    }

    /// Appends `key=value`.
    pub fn with(mut self, key: &str, value: impl Display) -> Self {
        self.text
            .push_str(&format!(" {}={}", clean(key), clean(&value.to_string())));
        self
    }

    /// Appends `key=<whole milliseconds>`.
    pub fn ms(self, key: &str, duration: Duration) -> Self {
        self.with(key, duration.as_millis())
    }

    /// Appends `key=<whole milliseconds>`, or `key=none`.
    pub fn opt_ms(self, key: &str, duration: Option<Duration>) -> Self {
        match duration {
            Some(d) => self.ms(key, d),
            None => self.with(key, "none"),
        }
    }

    /// Appends `key=<part>/<whole>`.
    pub fn share(self, key: &str, part: usize, whole: usize) -> Self {
        self.with(key, format!("{part}/{whole}"))
    }

    /// Prints the line on stderr.
    pub fn print(self) {
        eprintln!("{}", self.text);
    }
}

fn clean(text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    if text.is_empty() {
        "-".to_owned()
    } else {
        text
    }
}
