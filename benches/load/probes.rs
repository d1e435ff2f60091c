//! The metrics recorder: the few series the benchmark reads; no-op handles for the rest.

use super::*;

pub(crate) struct Probes {
    /// `leasehold_wait_retries_total{cause="contended"}`: the handoff waiter is blocked
    /// once it counted two (the try before subscribing and the one after).
    pub(crate) contended_retries: Arc<AtomicU64>,
    /// `leasehold_cancellations_total` with any reason but `shutdown`.
    pub(crate) cancellations: Arc<AtomicU64>,
    /// `leasehold_renew_margin_seconds`: minimum (as f64 bits; they order like the values
    /// for non-negative floats) and count, over the child's whole life...
    pub(crate) margin: Arc<MarginProbe>,
    /// ... and only while `in_window` is set (R's measurement window).
    pub(crate) margin_window: Arc<MarginProbe>,
    pub(crate) in_window: Arc<AtomicBool>,
    /// `leasehold_operation_seconds{operation="renew"}` samples.
    pub(crate) renew_latency: Arc<LatencyProbe>,
}

pub(crate) static PROBES: LazyLock<Probes> = LazyLock::new(|| Probes {
    contended_retries: Arc::new(AtomicU64::new(0)),
    cancellations: Arc::new(AtomicU64::new(0)),
    margin: Arc::new(MarginProbe::default()),
    margin_window: Arc::new(MarginProbe::default()),
    in_window: Arc::new(AtomicBool::new(false)),
    renew_latency: Arc::new(LatencyProbe(Mutex::new(Vec::new()))),
});

pub(crate) struct MarginProbe {
    pub(crate) min_bits: AtomicU64,
    pub(crate) count: AtomicU64,
}

impl Default for MarginProbe {
    fn default() -> Self {
        Self {
            min_bits: AtomicU64::new(u64::MAX),
            count: AtomicU64::new(0),
        }
    }
}

impl MarginProbe {
    pub(crate) fn note(&self, value: f64) {
        self.min_bits
            .fetch_min(value.max(0.0).to_bits(), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// The margin histogram handle: feeds the whole-life probe, and the window probe while the
/// window is open.
pub(crate) struct MarginHistogram;

impl HistogramFn for MarginHistogram {
    fn record(&self, value: f64) {
        PROBES.margin.note(value);
        if PROBES.in_window.load(Ordering::Relaxed) {
            PROBES.margin_window.note(value);
        }
    }
}

impl MarginProbe {
    pub(crate) fn min_seconds(&self) -> Option<f64> {
        let bits = self.min_bits.load(Ordering::Relaxed);
        (bits != u64::MAX).then(|| f64::from_bits(bits))
    }
}

pub(crate) struct LatencyProbe(pub(crate) Mutex<Vec<f64>>);

impl HistogramFn for LatencyProbe {
    fn record(&self, value: f64) {
        if PROBES.in_window.load(Ordering::Relaxed) {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(value);
        }
    }
}

pub(crate) static MARGIN_HISTOGRAM: LazyLock<Arc<MarginHistogram>> =
    LazyLock::new(|| Arc::new(MarginHistogram));

pub(crate) struct ProbeRecorder;

pub(crate) fn label<'a>(key: &'a Key, name: &str) -> Option<&'a str> {
    key.labels().find(|l| l.key() == name).map(|l| l.value())
}

impl metrics::Recorder for ProbeRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let name = key.name();
        if name == names::WAIT_RETRIES_TOTAL && label(key, "cause") == Some("contended") {
            Counter::from_arc(PROBES.contended_retries.clone())
        } else if name == names::CANCELLATIONS_TOTAL && label(key, "reason") != Some("shutdown") {
            Counter::from_arc(PROBES.cancellations.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let name = key.name();
        if name == names::RENEW_MARGIN_SECONDS {
            Histogram::from_arc(MARGIN_HISTOGRAM.clone())
        } else if name == names::OPERATION_SECONDS && label(key, "operation") == Some("renew") {
            Histogram::from_arc(PROBES.renew_latency.clone())
        } else {
            Histogram::noop()
        }
    }
}
