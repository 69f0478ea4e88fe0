//! A `metrics` recorder for tests: it keeps every metric's value, and a test reads them back
//! while a consumer runs on a paused single-threaded runtime with the recorder installed for
//! that thread only. Shared by the runtime's and the consume layer's metrics tests (included
//! with `#[path]`); each uses what it needs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};

/// Keeps every metric's value (reading does not reset it).
#[derive(Clone)]
pub(crate) struct TestRecorder(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

impl TestRecorder {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Registry::atomic()))
    }

    /// Whether `key` has every label of `labels`.
    fn matches(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
        key.name() == name
            && labels
                .iter()
                .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
    }

    /// The sum of the counters `name` with `labels`.
    pub(crate) fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.0
            .get_counter_handles()
            .iter()
            .filter(|(k, _)| Self::matches(k, name, labels))
            .map(|(_, c)| c.load(Ordering::SeqCst))
            .sum()
    }

    /// The sum of the gauges `name` with `labels`.
    pub(crate) fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .get_gauge_handles()
            .iter()
            .filter(|(k, _)| Self::matches(k, name, labels))
            .map(|(_, g)| f64::from_bits(g.load(Ordering::SeqCst)))
            .sum()
    }

    /// The values of the histograms `name` with `labels`.
    pub(crate) fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let mut values = Vec::new();
        for (key, h) in self.0.get_histogram_handles() {
            if Self::matches(&key, name, labels) {
                values.extend(h.data());
            }
        }
        values
    }

    /// Each counter `name`'s value by the value of its label `by`.
    pub(crate) fn counters_by(&self, name: &str, by: &str) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (key, c) in self.0.get_counter_handles() {
            if key.name() != name {
                continue;
            }
            if let Some(label) = key.labels().find(|l| l.key() == by) {
                *out.entry(label.value().to_string()).or_default() += c.load(Ordering::SeqCst);
            }
        }
        out
    }
}

/// Runs `test` on a paused single-threaded runtime with `recorder` as this thread's recorder.
pub(crate) fn with_recorder<F: Future<Output = ()>>(
    recorder: &TestRecorder,
    test: impl FnOnce() -> F,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(recorder, || runtime.block_on(test()));
}
