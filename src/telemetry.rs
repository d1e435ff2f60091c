//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade. leasehold installs no
//! exporter: the application picks one (the CLI's `--metrics-addr` serves Prometheus text).
//!
//! Every series carries `purpose` and nothing that identifies a resource or an owner — no
//! digest, no owner token, no raw id — so cardinality stays bounded by the purposes you use.
//!
//! | name | kind | labels | what it measures |
//! |---|---|---|---|
//! | `leasehold_acquire_total` | counter | `purpose`, `outcome` | acquisition tries (`try_acquire`, and each try of `acquire`) by outcome |
//! | `leasehold_renew_total` | counter | `purpose`, `outcome` | `renew` calls by outcome |
//! | `leasehold_release_total` | counter | `purpose`, `outcome` | `release` calls by outcome |
//! | `leasehold_inspect_total` | counter | `purpose`, `outcome` | `inspect` calls by outcome |
//! | `leasehold_state_transitions_total` | counter | `purpose`, `from`, `to` | handle state changes (`active`, `lost`, `unknown`, `released`) |
//! | `leasehold_cancellations_total` | counter | `purpose`, `reason` | `LeaseCancelled` messages sent to workers |
//! | `leasehold_wait_retries_total` | counter | `purpose`, `cause` | retries inside `acquire`: `contended`, `lock_delayed`, `indeterminate`, `unavailable`, `queue_full` |
//! | `leasehold_wait_wakeups_total` | counter | `purpose` | waits in `acquire` cut short by a release notice |
//! | `leasehold_operation_seconds` | histogram | `purpose`, `operation` | latency of `acquire`, `renew`, `release`, `inspect` (one call, retries included) |
//! | `leasehold_renew_margin_seconds` | histogram | `purpose` | local validity left when a renewal was confirmed; near zero means renewals barely make it |
//! | `leasehold_wait_seconds` | histogram | `purpose`, `outcome` | time spent in `acquire` |
//! | `leasehold_cancel_delay_seconds` | histogram | `purpose`, `reason` | from the start of the first renewal that failed (or found the lease gone) to the worker's cancellation |
//! | `leasehold_leases_held` | gauge | `purpose` | ACTIVE handles in this process |
//! | `leasehold_line_length` | gauge | `purpose` | entries in the lines of waiters of the leases this process observes (`LeaseClient::observe`), as each observer last read its line, summed |
//! | `leasehold_min_remaining_validity_seconds` | gauge | — | smallest local validity left among ACTIVE handles, as of the last acquisition, renewal or loss |
//!
//! Outcome, state and reason labels are the `as_str()` spellings of the corresponding
//! enums, so a log line, a metric and the CLI say the same word.
//!
//! The event counters a dashboard watches for trouble — cancellations by reason, renewals
//! `lost`, `indeterminate` and `unavailable`, transitions from `active` into `lost` and
//! `unknown` — exist at zero from the first lease a purpose holds in the process, and a
//! waiter's — acquisitions `acquired`, wake-ups by a release notice — from the purpose's
//! first wait, so Prometheus's `increase` sees their first event too.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use metrics::{
    Key, Label as MetricLabel, Level, Metadata, SharedString, counter, gauge, histogram,
};
use tokio::time::Instant;

use crate::protocol::Purpose;

/// Metric names, one constant each, as listed in the module table.
pub mod names {
    /// See the module table.
    pub const ACQUIRE_TOTAL: &str = "leasehold_acquire_total";
    /// See the module table.
    pub const RENEW_TOTAL: &str = "leasehold_renew_total";
    /// See the module table.
    pub const RELEASE_TOTAL: &str = "leasehold_release_total";
    /// See the module table.
    pub const INSPECT_TOTAL: &str = "leasehold_inspect_total";
    /// See the module table.
    pub const STATE_TRANSITIONS_TOTAL: &str = "leasehold_state_transitions_total";
    /// See the module table.
    pub const CANCELLATIONS_TOTAL: &str = "leasehold_cancellations_total";
    /// See the module table.
    pub const WAIT_RETRIES_TOTAL: &str = "leasehold_wait_retries_total";
    /// See the module table.
    pub const WAIT_WAKEUPS_TOTAL: &str = "leasehold_wait_wakeups_total";
    /// See the module table.
    pub const OPERATION_SECONDS: &str = "leasehold_operation_seconds";
    /// See the module table.
    pub const RENEW_MARGIN_SECONDS: &str = "leasehold_renew_margin_seconds";
    /// See the module table.
    pub const WAIT_SECONDS: &str = "leasehold_wait_seconds";
    /// See the module table.
    pub const CANCEL_DELAY_SECONDS: &str = "leasehold_cancel_delay_seconds";
    /// See the module table.
    pub const LEASES_HELD: &str = "leasehold_leases_held";
    /// See the module table.
    pub const MIN_REMAINING_VALIDITY_SECONDS: &str = "leasehold_min_remaining_validity_seconds";
    /// See the module table.
    pub const LINE_LENGTH: &str = "leasehold_line_length";
}

/// What a metric labels by name — an outcome, a state, a reason, a cause: the enums that
/// name what happened. Every label of an outcome, a state, a reason or a cause comes
/// through this trait, never as free text, so its values are the enums' names.
pub(crate) trait Label {
    /// The snake_case name the label carries.
    fn label(&self) -> &'static str;
}

/// The four operations with an outcome counter and a latency histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Acquire,
    Renew,
    Release,
    Inspect,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Renew => "renew",
            Self::Release => "release",
            Self::Inspect => "inspect",
        }
    }

    fn counter_name(self) -> &'static str {
        match self {
            Self::Acquire => names::ACQUIRE_TOTAL,
            Self::Renew => names::RENEW_TOTAL,
            Self::Release => names::RELEASE_TOTAL,
            Self::Inspect => names::INSPECT_TOTAL,
        }
    }
}

fn purpose_label(purpose: &Purpose) -> SharedString {
    SharedString::from(purpose.shared())
}

pub(crate) fn operation(op: Operation, purpose: &Purpose, outcome: &impl Label, latency: Duration) {
    let outcome = outcome.label();
    if op == Operation::Renew
        && outcome == RENEWED
        && let Some(keys) = RenewalKeys::of(purpose)
    {
        metrics::with_recorder(|recorder| {
            recorder
                .register_counter(&keys.renewed, &METADATA)
                .increment(1);
            recorder
                .register_histogram(&keys.latency, &METADATA)
                .record(latency.as_secs_f64());
        });
        return;
    }
    counter!(op.counter_name(), "purpose" => purpose_label(purpose), "outcome" => outcome)
        .increment(1);
    histogram!(
        names::OPERATION_SECONDS,
        "purpose" => purpose_label(purpose),
        "operation" => op.as_str()
    )
    .record(latency.as_secs_f64());
}

pub(crate) fn transition(purpose: &Purpose, from: &impl Label, to: &impl Label) {
    counter!(
        names::STATE_TRANSITIONS_TOTAL,
        "purpose" => purpose_label(purpose),
        "from" => from.label(),
        "to" => to.label()
    )
    .increment(1);
}

pub(crate) fn renew_margin(purpose: &Purpose, margin: Duration) {
    if let Some(keys) = RenewalKeys::of(purpose) {
        metrics::with_recorder(|recorder| {
            recorder
                .register_histogram(&keys.margin, &METADATA)
                .record(margin.as_secs_f64());
        });
        return;
    }
    histogram!(names::RENEW_MARGIN_SECONDS, "purpose" => purpose_label(purpose))
        .record(margin.as_secs_f64());
}

/// The outcome label of a confirmed renewal: `RenewOutcome::Renewed`'s name, which takes
/// it from here (the one outcome whose keys this module keeps).
pub(crate) const RENEWED: &str = "renewed";

/// What the `counter!` and `histogram!` macros would give these series: this module's path
/// as the target, at INFO.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The series a confirmed renewal of one purpose records, made once per purpose: every
/// lease renews once per cadence, and the macros build each key anew — its label list an
/// allocation, its hash computed — on the path that bounds how many leases one thread
/// keeps (docs/performance.md). Recorded through the recorder current at each renewal, as
/// the macros do.
struct RenewalKeys {
    renewed: Key,
    latency: Key,
    margin: Key,
}

/// The purposes whose renewal keys are kept, at most: past it, a renewal builds its keys
/// as the macros do, so a process that makes purposes without end keeps no more.
const RENEWAL_KEYS_KEPT: usize = 256;

static RENEWAL_KEYS: RwLock<Option<HashMap<Arc<str>, Arc<RenewalKeys>>>> = RwLock::new(None);

impl RenewalKeys {
    /// `purpose`'s keys, made on its first renewal; `None` once [`RENEWAL_KEYS_KEPT`]
    /// purposes have theirs.
    fn of(purpose: &Purpose) -> Option<Arc<Self>> {
        let name = purpose.as_str();
        if let Some(keys) = RENEWAL_KEYS
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|kept| kept.get(name))
        {
            return Some(Arc::clone(keys));
        }
        let mut kept = RENEWAL_KEYS.write().unwrap_or_else(PoisonError::into_inner);
        let kept = kept.get_or_insert_with(HashMap::new);
        if let Some(keys) = kept.get(name) {
            return Some(Arc::clone(keys));
        }
        if kept.len() >= RENEWAL_KEYS_KEPT {
            return None;
        }
        let label = || MetricLabel::new("purpose", purpose_label(purpose));
        let keys = Arc::new(Self {
            renewed: Key::from_parts(
                names::RENEW_TOTAL,
                vec![label(), MetricLabel::new("outcome", RENEWED)],
            ),
            latency: Key::from_parts(
                names::OPERATION_SECONDS,
                vec![
                    label(),
                    MetricLabel::new("operation", Operation::Renew.as_str()),
                ],
            ),
            margin: Key::from_parts(names::RENEW_MARGIN_SECONDS, vec![label()]),
        });
        kept.insert(purpose.shared(), Arc::clone(&keys));
        Some(keys)
    }
}

/// An acquisition of `purpose` is waiting: its first retry is due (once per wait, not per
/// retry, so the set of purposes seen is consulted once).
pub(crate) fn waiting(purpose: &Purpose) {
    start_at_zero("waiting", AT_ZERO_WAITING, purpose);
}

pub(crate) fn wait_retry(purpose: &Purpose, cause: &impl Label) {
    let cause = cause.label();
    counter!(names::WAIT_RETRIES_TOTAL, "purpose" => purpose_label(purpose), "cause" => cause)
        .increment(1);
}

pub(crate) fn wait_wakeup(purpose: &Purpose) {
    counter!(names::WAIT_WAKEUPS_TOTAL, "purpose" => purpose_label(purpose)).increment(1);
}

pub(crate) fn waited(purpose: &Purpose, outcome: &impl Label, waited: Duration) {
    let outcome = outcome.label();
    histogram!(names::WAIT_SECONDS, "purpose" => purpose_label(purpose), "outcome" => outcome)
        .record(waited.as_secs_f64());
}

pub(crate) fn cancellation(purpose: &Purpose, reason: &impl Label, delay: Option<Duration>) {
    let reason = reason.label();
    counter!(names::CANCELLATIONS_TOTAL, "purpose" => purpose_label(purpose), "reason" => reason)
        .increment(1);
    if let Some(delay) = delay {
        histogram!(
            names::CANCEL_DELAY_SECONDS,
            "purpose" => purpose_label(purpose),
            "reason" => reason
        )
        .record(delay.as_secs_f64());
    }
}

/// ACTIVE handles of this process, for the two gauges: each handle's validity end under
/// its unique id, ordered, so the earliest is found in O(log n) and a process holding 100k
/// leases does not scan them on every renewal. (The handle keeps its own current end, so
/// a change is one removal and one insertion here.)
static HELD: Mutex<BTreeSet<(Instant, u64)>> = Mutex::new(BTreeSet::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One ACTIVE handle's registration; `update` on renewal, dropped when it leaves ACTIVE.
#[derive(Debug)]
pub(crate) struct HeldLease {
    id: u64,
    /// The validity end registered in [`HELD`].
    valid_until: Instant,
    purpose: Purpose,
}

/// Purposes whose event counters this process created at zero ([`start_at_zero`]), by
/// the list they were created from.
static SEEN: Mutex<BTreeSet<(&'static str, String)>> = Mutex::new(BTreeSet::new());

/// A label set of one series created at zero.
type AtZero = (&'static str, &'static [(&'static str, &'static str)]);

/// The event counters a dashboard must see move from zero, once a purpose holds a lease.
/// Prometheus's `increase` cannot tell a series born at its first increment from one that
/// was always there, so a process whose one lease is cancelled once would show no
/// cancellation at all; each of these series is created at zero instead, the first time a
/// purpose holds a lease here. The label values are the `as_str()` spellings of
/// `CancelReason`, `RenewOutcome` and the lease states.
const AT_ZERO_HELD: &[AtZero] = &[
    (names::CANCELLATIONS_TOTAL, &[("reason", "lost")]),
    (names::CANCELLATIONS_TOTAL, &[("reason", "unknown")]),
    (
        names::CANCELLATIONS_TOTAL,
        &[("reason", "renewal_unconfirmed")],
    ),
    (names::CANCELLATIONS_TOTAL, &[("reason", "shutdown")]),
    (names::RENEW_TOTAL, &[("outcome", "lost")]),
    (names::RENEW_TOTAL, &[("outcome", "indeterminate")]),
    (names::RENEW_TOTAL, &[("outcome", "unavailable")]),
    (
        names::STATE_TRANSITIONS_TOTAL,
        &[("from", "active"), ("to", "lost")],
    ),
    (
        names::STATE_TRANSITIONS_TOTAL,
        &[("from", "active"), ("to", "unknown")],
    ),
];

/// The same for a purpose's first wait here: a waiter's one acquisition, and the release
/// notice that woke it, show as an increase.
const AT_ZERO_WAITING: &[AtZero] = &[
    (names::ACQUIRE_TOTAL, &[("outcome", "acquired")]),
    (names::WAIT_WAKEUPS_TOTAL, &[]),
];

/// Creates the series of `list` (named `list_name`) for `purpose`, once per process,
/// list and purpose (`increment(0)` creates a series without changing a count).
fn start_at_zero(list_name: &'static str, list: &[AtZero], purpose: &Purpose) {
    {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.insert((list_name, purpose.as_str().to_owned())) {
            return;
        }
    }
    for &(name, labels) in list {
        let mut all = vec![metrics::Label::new("purpose", purpose_label(purpose))];
        all.extend(
            labels
                .iter()
                .map(|&(key, value)| metrics::Label::new(key, value)),
        );
        counter!(name, all).increment(0);
    }
}

impl HeldLease {
    pub(crate) fn register(purpose: &Purpose, valid_until: Instant) -> Self {
        start_at_zero("held", AT_ZERO_HELD, purpose);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        gauge!(names::LEASES_HELD, "purpose" => purpose_label(purpose)).increment(1.0);
        with_held(|held| {
            held.insert((valid_until, id));
        });
        Self {
            id,
            valid_until,
            purpose: purpose.clone(),
        }
    }

    pub(crate) fn update(&mut self, valid_until: Instant) {
        let (old, id) = (self.valid_until, self.id);
        self.valid_until = valid_until;
        with_held(|held| {
            held.remove(&(old, id));
            held.insert((valid_until, id));
        });
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        gauge!(names::LEASES_HELD, "purpose" => purpose_label(&self.purpose)).decrement(1.0);
        let (end, id) = (self.valid_until, self.id);
        with_held(|held| {
            held.remove(&(end, id));
        });
    }
}

/// One observer's share of [`names::LINE_LENGTH`]: the length of the line it last read,
/// taken back out of the gauge when the observer ends. The gauge sums observers (as
/// `leases_held` sums handles) so that two observed leases of one purpose add up rather than
/// overwrite each other.
#[derive(Debug)]
pub(crate) struct LineLength {
    purpose: Purpose,
    last: u64,
}

impl LineLength {
    /// A share of nothing yet; the series exists from here, at zero.
    pub(crate) fn new(purpose: &Purpose) -> Self {
        gauge!(names::LINE_LENGTH, "purpose" => purpose_label(purpose)).increment(0.0);
        Self {
            purpose: purpose.clone(),
            last: 0,
        }
    }

    /// The line read `entries` long; a read that could not count it (`None`) keeps the
    /// last length.
    pub(crate) fn set(&mut self, entries: Option<u64>) {
        let Some(entries) = entries else {
            return;
        };
        let delta = entries as f64 - self.last as f64;
        self.last = entries;
        if delta != 0.0 {
            gauge!(names::LINE_LENGTH, "purpose" => purpose_label(&self.purpose)).increment(delta);
        }
    }
}

impl Drop for LineLength {
    fn drop(&mut self) {
        gauge!(names::LINE_LENGTH, "purpose" => purpose_label(&self.purpose))
            .decrement(self.last as f64);
    }
}

fn with_held(change: impl FnOnce(&mut BTreeSet<(Instant, u64)>)) {
    // A panic while holding the lock leaves a consistent map (each change is one insert or
    // remove pair); keep going with it rather than poisoning metrics for the process.
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    change(&mut held);
    let min = held.first().map_or(0.0, |(end, _)| {
        end.saturating_duration_since(Instant::now()).as_secs_f64()
    });
    gauge!(names::MIN_REMAINING_VALIDITY_SECONDS).set(min);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries of one registration (other tests register beside it: the set is the
    /// process's).
    fn entries_of(id: u64) -> Vec<Instant> {
        let held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        held.iter()
            .filter(|(_, of)| *of == id)
            .map(|(end, _)| *end)
            .collect()
    }

    #[test]
    fn a_registration_keeps_one_entry_its_latest_end_until_dropped() {
        let purpose = Purpose::new("telemetry-test").unwrap();
        let start = Instant::now();
        let mut lease = HeldLease::register(&purpose, start + Duration::from_secs(5));
        let id = lease.id;
        assert_eq!(entries_of(id), [start + Duration::from_secs(5)]);
        for secs in [9, 3] {
            lease.update(start + Duration::from_secs(secs));
            assert_eq!(entries_of(id), [start + Duration::from_secs(secs)]);
        }
        drop(lease);
        assert!(entries_of(id).is_empty());
    }
}
