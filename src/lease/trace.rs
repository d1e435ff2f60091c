//! The one way leasehold opens and closes an operation span (docs/design.md §9).
//!
//! Fields: `purpose`, `digest` (12 hex digits), `op_id`, `token` (once known), `outcome`,
//! `latency_us`. Never the
//! owner token, never a raw resource id — the span macro only accepts the typed values, and
//! their `Display` cannot print either.

use std::time::Duration;

use tokio::time::Instant;

use crate::protocol::{FencingToken, Purpose};
use crate::telemetry::{self, Label, Operation};

/// Opens an `INFO` span named `$name` with the standard fields; `outcome` and `latency_us`
/// are filled in by [`finish`].
macro_rules! span {
    ($name:literal, $purpose:expr, $resource:expr, $attempt:expr) => {
        tracing::info_span!(
            $name,
            purpose = %$purpose,
            digest = %$resource.short(),
            op_id = %$attempt.operation(),
            token = tracing::field::Empty,
            outcome = tracing::field::Empty,
            latency_us = tracing::field::Empty,
        )
    };
}
pub(crate) use span;

/// Records the outcome and latency on `span`, emits one event inside it, and — for the
/// operations with an outcome counter — records the metrics of [`crate::telemetry`].
pub(crate) fn finish(
    span: &tracing::Span,
    metric: Option<(Operation, &Purpose)>,
    outcome: &impl Label,
    started: Instant,
) {
    finish_after(span, metric, outcome, started.elapsed());
}

/// As [`finish`], for an operation whose latency the caller measured on a clock it read
/// anyway (a renewal, whose end is handled at the instant its owner reads).
pub(crate) fn finish_after(
    span: &tracing::Span,
    metric: Option<(Operation, &Purpose)>,
    outcome: &impl Label,
    latency: Duration,
) {
    if let Some((op, purpose)) = metric {
        telemetry::operation(op, purpose, outcome, latency);
    }
    let latency_us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    let outcome = outcome.label();
    span.record("outcome", outcome);
    span.record("latency_us", latency_us);
    span.in_scope(|| tracing::debug!(outcome, latency_us, "lease operation finished"));
}

/// Records the token of an acquisition on its span, once one was issued.
pub(crate) fn record_token(span: &tracing::Span, token: Option<FencingToken>) {
    if let Some(token) = token {
        span.record("token", token.get());
    }
}
