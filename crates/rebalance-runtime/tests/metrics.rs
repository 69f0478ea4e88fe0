//! The metrics a consumer records, read from a recorder installed for the test's thread only
//! (the runtime is single-threaded, so every task records into it).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_runtime::config::{ConsumeOrder, Intervals};
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::metrics as names;
use rebalance_runtime::{
    Consumer, ListenerError, QueueLease, QueueListener, QueueLocker, RemovedQueue,
};
use tokio::time::sleep;

#[path = "support/recorder.rs"]
mod recorder;

use recorder::{TestRecorder, with_recorder};

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

/// A queue released between rounds (here by an offset reset, reported at the next round) and
/// a consumer aborted before that round: nothing stays in the gauge (found by review: the
/// aborted consumer took out only what its last assignment held, and the reset queue stayed
/// counted for good).
#[test]
fn a_queue_released_between_rounds_leaves_the_gauge_when_the_consumer_is_aborted() {
    let recorder = TestRecorder::new();
    with_recorder(&recorder, || async {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 4);
        let consumer = Consumer::builder("G")
            .subscribe("T")
            .consume_retry_topic(false)
            .intervals(Intervals {
                rebalance_min: Duration::from_secs(5),
                ..java_intervals()
            })
            .cluster(cluster.client("a@1"))
            .listener(Arc::new(Quiet))
            .start()
            .await
            .unwrap();
        sleep(Duration::from_secs(1)).await;
        assert_eq!(recorder.gauge(names::QUEUES_OWNED, &T), 4.0);
        let queue = rebalance_core::MessageQueue::new("T", "broker-0", 0);
        consumer.reset_offsets([(queue, 0)]).unwrap();
        sleep(Duration::from_millis(100)).await;
        let held = consumer.assignment().queues.get("T").map(Vec::len);
        assert_eq!(
            held,
            Some(3),
            "the reset released the queue before the next round"
        );
        consumer.abort();
        sleep(Duration::from_secs(1)).await;
        assert_eq!(recorder.gauge(names::QUEUES_OWNED, &T), 0.0);
    });
}
