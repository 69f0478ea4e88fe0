//! The metrics a consumer records, read from a recorder installed for the test's thread only
//! (the runtime is single-threaded, so every task records into it).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use rebalance_runtime::config::{ConsumeOrder, Intervals};
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::metrics as names;
use rebalance_runtime::{
    Consumer, ListenerError, QueueLease, QueueListener, QueueLocker, RemovedQueue,
};
use tokio::time::sleep;

/// Keeps every metric's value (reading does not reset it).
#[derive(Clone)]
struct TestRecorder(Arc<Registry<Key, AtomicStorage>>);

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
    fn new() -> Self {
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
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.0
            .get_counter_handles()
            .iter()
            .filter(|(k, _)| Self::matches(k, name, labels))
            .map(|(_, c)| c.load(Ordering::SeqCst))
            .sum()
    }

    /// The sum of the gauges `name` with `labels`.
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .get_gauge_handles()
            .iter()
            .filter(|(k, _)| Self::matches(k, name, labels))
            .map(|(_, g)| f64::from_bits(g.load(Ordering::SeqCst)))
            .sum()
    }
}

/// Runs `test` on a paused single-threaded runtime with `recorder` as this thread's recorder.
fn with_recorder<F: Future<Output = ()>>(recorder: &TestRecorder, test: impl FnOnce() -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(recorder, || runtime.block_on(test()));
}

const T: [(&str, &str); 2] = [("group", "G"), ("topic", "T")];

/// The Java timing: the first round at once (no start-up settle window).
fn java_intervals() -> Intervals {
    Intervals {
        adaptive_settle: None,
        ..Intervals::default()
    }
}

struct Failing;

#[async_trait]
impl QueueListener for Failing {
    async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> {
        Err("no room".into())
    }
    async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> {
        Ok(())
    }
}

/// A failing callback is counted under its name; a consumer that dies holds nothing.
#[test]
fn callback_failures_are_counted_and_a_dead_consumer_holds_nothing() {
    let recorder = TestRecorder::new();
    with_recorder(&recorder, || async {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 4);
        let consumer = Consumer::builder("G")
            .subscribe("T")
            .consume_retry_topic(false)
            .intervals(java_intervals())
            .cluster(cluster.client("a@1"))
            .listener(Arc::new(Failing))
            .start()
            .await
            .unwrap();
        sleep(Duration::from_secs(1)).await;
        assert_eq!(
            recorder.counter(
                names::CALLBACK_FAILURES,
                &[("topic", "T"), ("callback", "queues_added")]
            ),
            1
        );
        assert_eq!(recorder.gauge(names::QUEUES_OWNED, &T), 4.0);
        consumer.abort();
        sleep(Duration::from_secs(1)).await;
        assert_eq!(recorder.gauge(names::QUEUES_OWNED, &T), 0.0);
    });
}

struct Quiet;

#[async_trait]
impl QueueListener for Quiet {
    async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> {
        Ok(())
    }
    async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> {
        Ok(())
    }
}

/// A queue whose lock another client holds is refused at every round (retried every 500 ms):
/// one refusal per round.
#[test]
fn lock_refusals_are_counted_per_refused_queue() {
    let recorder = TestRecorder::new();
    with_recorder(&recorder, || async {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 2);
        let intruder = cluster.client("intruder@1");
        let queue = rebalance_core::MessageQueue::new("T", "broker-0", 0);
        let answer = intruder
            .lock("G", intruder.client_id(), std::slice::from_ref(&queue))
            .await
            .unwrap();
        assert_eq!(answer.granted, [queue]);
        let consumer = Consumer::builder("G")
            .subscribe("T")
            .consume_retry_topic(false)
            .intervals(java_intervals())
            .consume_order(ConsumeOrder::Orderly)
            .cluster(cluster.client("a@1"))
            .listener(Arc::new(Quiet))
            .start()
            .await
            .unwrap();
        sleep(Duration::from_millis(2_100)).await;
        let rounds = recorder.counter(names::ROUNDS, &T);
        let refusals = recorder.counter(names::LOCK_REFUSALS, &T);
        assert!(rounds >= 4, "retried every 500 ms: {rounds}");
        assert_eq!(refusals, rounds, "one refused queue per round");
        assert_eq!(recorder.gauge(names::QUEUES_OWNED, &T), 1.0);
        consumer.shutdown().await;
    });
}
