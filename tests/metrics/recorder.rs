//! A `metrics` recorder that keeps every series it is handed, for assertions: counters
//! summed, histograms as every recorded value, gauges at their last value. A series exists
//! from its registration on, at zero, so a test sees a counter created at zero.
//!
//! Installed thread-locally (`metrics::set_default_local_recorder`), so each test sees only
//! its own series under paused time on a current-thread runtime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// A metric name with its sorted labels.
pub type Series = (String, Vec<(String, String)>);

/// The series `name` with `labels`, in the order `Recorded` keeps them.
pub fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    sorted(name, labels.iter().map(|&(k, v)| (k, v)))
}

fn sorted<'a>(name: &str, labels: impl Iterator<Item = (&'a str, &'a str)>) -> Series {
    let mut labels: Vec<(String, String)> =
        labels.map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    labels.sort();
    (name.to_owned(), labels)
}

#[derive(Default)]
struct Store {
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
    gauges: HashMap<Series, f64>,
}

/// Everything recorded since it was made; clones share one store.
#[derive(Clone, Default)]
pub struct Recorded {
    store: Arc<Mutex<Store>>,
}

impl Recorded {
    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panicking assertion elsewhere must not hide what was recorded.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sum of `name{labels}`'s increments; 0 when it was never registered.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let want = series(name, labels);
        self.lock().counters.get(&want).copied().unwrap_or(0)
    }

    /// Every counter registered so far, with its sum.
    pub fn counters(&self) -> HashMap<Series, u64> {
        self.lock().counters.clone()
    }

    /// Every value recorded into `name{labels}`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let want = series(name, labels);
        self.lock()
            .histograms
            .get(&want)
            .cloned()
            .unwrap_or_default()
    }

    /// The last value of `name{labels}`; `None` when it was never registered.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want = series(name, labels);
        self.lock().gauges.get(&want).copied()
    }

    /// Every label value of every series registered.
    pub fn all_label_values(&self) -> Vec<String> {
        let store = self.lock();
        let keys = store
            .counters
            .keys()
            .chain(store.histograms.keys())
            .chain(store.gauges.keys());
        keys.flat_map(|(_, labels)| labels.iter().map(|(_, v)| v.clone()))
            .collect()
    }

    fn handle(&self, key: &Key) -> Arc<Handle> {
        Arc::new(Handle {
            id: sorted(key.name(), key.labels().map(|l| (l.key(), l.value()))),
            recorded: self.clone(),
        })
    }
}

/// One registered series, writing into the shared store.
struct Handle {
    id: Series,
    recorded: Recorded,
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        *self
            .recorded
            .lock()
            .counters
            .entry(self.id.clone())
            .or_default() += value;
    }

    fn absolute(&self, value: u64) {
        let mut store = self.recorded.lock();
        let count = store.counters.entry(self.id.clone()).or_default();
        *count = (*count).max(value);
    }
}

impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        *self
            .recorded
            .lock()
            .gauges
            .entry(self.id.clone())
            .or_default() += value;
    }

    fn decrement(&self, value: f64) {
        *self
            .recorded
            .lock()
            .gauges
            .entry(self.id.clone())
            .or_default() -= value;
    }

    fn set(&self, value: f64) {
        self.recorded.lock().gauges.insert(self.id.clone(), value);
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        let mut store = self.recorded.lock();
        store
            .histograms
            .entry(self.id.clone())
            .or_default()
            .push(value);
    }
}

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let handle = self.handle(key);
        self.lock().counters.entry(handle.id.clone()).or_default();
        Counter::from_arc(handle)
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let handle = self.handle(key);
        self.lock().gauges.entry(handle.id.clone()).or_default();
        Gauge::from_arc(handle)
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let handle = self.handle(key);
        self.lock().histograms.entry(handle.id.clone()).or_default();
        Histogram::from_arc(handle)
    }
}
