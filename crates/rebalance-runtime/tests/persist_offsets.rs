//! `ConsumerHandle::persist_offsets`: the held queues' committed offsets stored now, not at the
//! next persistence tick; the queues whose offset the store refused named in the error.

mod common;

use std::time::Duration;

use common::{GROUP, Recorder, java_intervals, settle, start_recording};
use rebalance_core::MessageQueue;
use rebalance_runtime::ConsumerError;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::{ClusterCall, InMemoryCluster};

fn queue(id: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", id)
}

#[tokio::test(start_paused = true)]
async fn persist_offsets_stores_the_committed_offsets_before_the_tick() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    let hourly = Intervals {
        persist_offsets: Duration::from_secs(3600),
        ..java_intervals()
    };
    let member = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.consume_retry_topic(false).intervals(hourly)
    })
    .await;
    settle(Duration::from_secs(6)).await;
    let leases = recorder.held_leases();
    assert_eq!(leases.len(), 2);
    for (i, lease) in leases.iter().enumerate() {
        lease.commit(10 + i as i64);
    }
    settle(Duration::from_secs(1)).await;
    assert_eq!(
        cluster.offset(GROUP, &queue(0)),
        None,
        "the tick is an hour away"
    );

    member.handle.persist_offsets().await.unwrap();
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(10));
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(11));

    leases[0].commit(20);
    cluster.fail_next(ClusterCall::PersistOffset, 1);
    match member.handle.persist_offsets().await {
        Err(ConsumerError::OffsetsNotPersisted { refused }) => {
            let queues: Vec<&MessageQueue> = refused.iter().map(|(q, _)| q).collect();
            assert_eq!(
                queues,
                vec![&queue(0)],
                "only the one that changed was written"
            );
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(10));
    member.handle.persist_offsets().await.unwrap();
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(20));

    member.handle.shutdown().await;
    assert!(matches!(
        member.handle.persist_offsets().await,
        Err(ConsumerError::ShutDown)
    ));
}

/// A store whose batch write answers nothing (against its contract: one answer per queue) and
/// stores nothing.
struct Silent(rebalance_runtime::memory::ClusterClient);

#[async_trait::async_trait]
impl rebalance_runtime::OffsetStore for Silent {
    async fn read(
        &self,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<Option<i64>, rebalance_runtime::RemoteError> {
        self.0.read(group, queue).await
    }

    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), rebalance_runtime::RemoteError> {
        self.0.persist(group, queue, offset).await
    }

    async fn persist_many(
        &self,
        _group: &str,
        _offsets: &[(MessageQueue, i64)],
    ) -> Vec<Result<(), rebalance_runtime::RemoteError>> {
        Vec::new()
    }
}

#[tokio::test(start_paused = true)]
async fn offsets_the_store_did_not_answer_for_are_not_reported_persisted() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let recorder = Recorder::new();
    let store = std::sync::Arc::new(Silent(cluster.client(common::client_id(0))));
    let member = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.consume_retry_topic(false).offset_store(store)
    })
    .await;
    settle(Duration::from_secs(1)).await;
    recorder.held_leases()[0].commit(10);
    match member.handle.persist_offsets().await {
        Err(ConsumerError::OffsetsNotPersisted { refused }) => {
            let queues: Vec<&MessageQueue> = refused.iter().map(|(q, _)| q).collect();
            assert_eq!(queues, vec![&queue(0)]);
        }
        other => panic!("nothing was stored, yet the answer was {other:?}"),
    }
    assert_eq!(cluster.offset(GROUP, &queue(0)), None);
    member.handle.shutdown().await;
}
