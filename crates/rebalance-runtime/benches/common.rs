//! Shared setup of the runtime benchmarks (and of the consume layer's `table_memory`, which
//! includes this file by path): one consumer on the in-memory cluster, a listener that does
//! nothing, and a topic of many queues.

use std::sync::Arc;

use async_trait::async_trait;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::subscription::Subscription;
use rebalance_runtime::{
    Consumer, ConsumerHandle, GroupDirectory, ListenerError, QueueLease, QueueListener,
    Registration, RemovedQueue,
};

pub struct Quiet;

#[async_trait]
impl QueueListener for Quiet {
    async fn queues_added(
        &self,
        _topic: &str,
        _queues: &[QueueLease],
    ) -> Result<(), ListenerError> {
        Ok(())
    }
    async fn queues_removed(
        &self,
        _topic: &str,
        _queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        Ok(())
    }
}

/// A cluster with topic `T` of `brokers` x `per_broker` queues.
pub fn cluster(brokers: usize, per_broker: i32) -> InMemoryCluster {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", brokers, per_broker);
    cluster
}

/// The id of member `i`.
fn id(i: usize) -> String {
    format!("10.0.0.{}@{}", i + 1, 9000 + i)
}

/// Registers member `i` of group `G` on `T` at the directory, without running a consumer.
#[allow(dead_code)]
pub async fn register(cluster: &InMemoryCluster, i: usize) {
    let id = id(i);
    let registration = Registration {
        client_id: id.as_str().into(),
        group: "G".into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![Subscription::all("T")],
    };
    cluster
        .client(id.as_str())
        .register(&registration)
        .await
        .expect("registered");
}

/// Starts consumer `i` of group `G` on `T` and waits for its first round.
#[allow(dead_code)]
pub async fn start(cluster: &InMemoryCluster, i: usize) -> ConsumerHandle {
    start_with(cluster, i, Intervals::default()).await
}

/// Starts consumer `i` of group `G` on `T` with `intervals` and waits for its first round.
pub async fn start_with(
    cluster: &InMemoryCluster,
    i: usize,
    intervals: Intervals,
) -> ConsumerHandle {
    let id = id(i);
    let handle = Consumer::builder("G")
        .intervals(intervals)
        .client_id(id.as_str())
        .subscribe("T")
        .cluster(cluster.client(id.as_str()))
        .listener(Arc::new(Quiet))
        .start()
        .await
        .expect("consumer starts");
    let mut rounds = handle.rounds();
    rounds
        .wait_for(|r| r.round >= 1)
        .await
        .expect("first round");
    handle
}
