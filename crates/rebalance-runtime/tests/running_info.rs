//! `ConsumerHandle::running_info`: what a broker's GET_CONSUMER_RUNNING_INFO is answered with,
//! from the rebalance alone and with the push consumer's figures; and an offset the source
//! moved is persisted at once, not at the next persistence tick.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{GROUP, Recorder, settle, start_recording};
use rebalance_core::MessageQueue;
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer,
};
use rebalance_runtime::memory::{InMemoryCluster, OutgoingMessage};
use rebalance_runtime::running::QueueBuffer;

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
async fn a_rebalance_only_consumer_shows_its_queues_and_commits_with_zero_figures() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(12);
    let member = start_recording(&cluster, 0, &["T"], recorder, |b| b).await;
    settle(Duration::from_secs(1)).await;
    let info = member.handle.running_info();
    assert_eq!(info.group, GROUP);
    assert_eq!(info.client_id, member.id);
    assert!(!info.consuming, "no consume layer recorded anything");
    let topics: Vec<&str> = info
        .subscriptions
        .iter()
        .map(|s| s.topic.as_str())
        .collect();
    assert_eq!(topics, ["%RETRY%G", "T"]);
    let queues: Vec<(MessageQueue, i64)> = info.committed_offsets(Some("T"));
    assert_eq!(queues, vec![(queue(0), 12), (queue(1), 12)]);
    for q in &info.queues {
        assert_eq!(q.buffer, QueueBuffer::default());
        assert!(!q.locked && q.last_lock.is_none());
        assert!(q.last_pull.is_none() && q.last_consume.is_none());
    }
    assert_eq!(info.status["T"].consume_ok_tps, 0.0);
    assert!(
        info.diagnostics.contains_key("fingerprint:T"),
        "{:?}",
        info.diagnostics
    );
    member.handle.shutdown().await;
    assert!(
        member.handle.running_info().queues.is_empty(),
        "nothing held after shutdown"
    );
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
                .intervals(common::java_intervals())
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
