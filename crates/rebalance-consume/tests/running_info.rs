//! `ConsumerHandle::running_info` with the push consumer's figures (what a broker's
//! GET_CONSUMER_RUNNING_INFO is answered with); and an offset the source moved is persisted at
//! once, not at the next persistence tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer,
};
use rebalance_core::MessageQueue;
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::InMemoryCluster;

const GROUP: &str = "G";

async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

/// The Java client's intervals, with the first round at once.
fn java_intervals() -> Intervals {
    Intervals {
        adaptive_settle: None,
        ..Intervals::default()
    }
}

struct Counting(AtomicUsize);

#[async_trait]
impl ConcurrentListener for Counting {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.0.fetch_add(messages.len(), Ordering::SeqCst);
        ConsumeResult::Success
    }
}

fn queue(id: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", id)
}

#[tokio::test(start_paused = true)]
async fn the_push_consumer_contributes_its_figures() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    for n in 0..30 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{n}")))
            .unwrap();
    }
    let client = cluster.client("10.0.0.1@1");
    let listener = Arc::new(Counting(AtomicUsize::new(0)));
    let consumer = PushConsumer::builder(GROUP)
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_retry_topic(false)
                .consume_from(ConsumeFrom::FirstOffset)
        })
        .source(Arc::new(client))
        .concurrently(listener.clone())
        .start()
        .await
        .unwrap();
    settle(Duration::from_secs(2)).await;
    assert_eq!(listener.0.load(Ordering::SeqCst), 30);
    let info = consumer.consumer().running_info();
    assert!(info.consuming);
    assert_eq!(info.queues.len(), 1);
    let q = &info.queues[0];
    assert_eq!(q.commit_offset, 30);
    assert_eq!(q.buffer.count, 0, "everything consumed");
    assert!(q.last_pull.is_some() && q.last_consume.is_some());
    assert!(q.last_pull.unwrap() >= info.started_at);
    let status = info.status["T"];
    assert_eq!(status.consume_ok_tps, 30.0 / 60.0);
    assert_eq!(status.consume_failed_tps, 0.0);
    assert!(status.pull_tps > 0.0);
    consumer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_offset_moved_is_persisted_at_once() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    for n in 0..10 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{n}")))
            .unwrap();
    }
    // The group stopped at 2, and retention has deleted everything below 6 since.
    cluster.set_offset(GROUP, &queue(0), 2);
    cluster.truncate(&queue(0), 6);
    let client = cluster.client("10.0.0.1@1");
    // A listener that never finishes, so that nothing but the move is committed.
    struct Stuck;
    #[async_trait]
    impl ConcurrentListener for Stuck {
        async fn consume(&self, _: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
            std::future::pending().await
        }
    }
    let consumer = PushConsumer::builder(GROUP)
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_retry_topic(false)
                .intervals(java_intervals())
        })
        .source(Arc::new(client))
        .concurrently(Arc::new(Stuck))
        .start()
        .await
        .unwrap();
    // Well before the first persistence tick (5 s).
    settle(Duration::from_millis(500)).await;
    assert_eq!(
        cluster.offset(GROUP, &queue(0)),
        Some(6),
        "the moved offset is in the store at once"
    );
    consumer.abort();
}
