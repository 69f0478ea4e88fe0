//! A message sent once `ready()` returned is consumed, even by a new group consuming from the
//! last offset: the start positions are resolved before the queues are announced.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer,
};
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::memory::{ClusterCall, InMemoryCluster};

struct Count(AtomicUsize);

#[async_trait]
impl ConcurrentListener for Count {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.0.fetch_add(messages.len(), Ordering::SeqCst);
        ConsumeResult::Success
    }
}

async fn sent_right_after_ready_is_consumed(from: ConsumeFrom, failed_lookups: usize) {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    // The first lookups of the start positions fail: they are tried again before the queues
    // are announced, not 3 s later by the pull loops (after the sends below).
    cluster.fail_next(ClusterCall::QueryOffset, failed_lookups);
    // Messages from before: a consumer from the last offset must skip them.
    for i in 0..8 {
        cluster
            .send("T", OutgoingMessage::new(format!("old {i}")))
            .unwrap();
    }
    let client = cluster.client("a@1");
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let consumer = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_from(from)
                .consume_retry_topic(false)
        })
        .source(Arc::new(client))
        .concurrently(count.clone())
        .start()
        .await
        .unwrap();
    consumer
        .consumer()
        .ready(Duration::from_secs(10))
        .await
        .unwrap();
    // No yield between `ready` and the sends: the pull loops have not run yet.
    for i in 0..8 {
        cluster
            .send("T", OutgoingMessage::new(format!("new {i}")))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let expected = match from {
        ConsumeFrom::FirstOffset => 16,
        _ => 8,
    };
    assert_eq!(count.0.load(Ordering::SeqCst), expected);
    consumer.shutdown().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn from_the_last_offset_a_message_sent_right_after_ready_is_consumed() {
    sent_right_after_ready_is_consumed(ConsumeFrom::LastOffset, 0).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn from_the_last_offset_failed_lookups_are_retried_before_the_queues_are_announced() {
    sent_right_after_ready_is_consumed(ConsumeFrom::LastOffset, 8).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn from_the_first_offset_everything_is_consumed() {
    sent_right_after_ready_is_consumed(ConsumeFrom::FirstOffset, 0).await;
}
