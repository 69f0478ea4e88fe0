//! The consumer's lifecycle seen from the listener: a shutdown asked for during a round, and
//! callbacks that call back into their own consumer.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{ListenerError, QueueLease, QueueListener, RemovalReason, RemovedQueue};

/// Records through a [`Recorder`]; the first `queues_added` of topic `T` takes 2 s.
struct SlowOnT {
    recorder: Arc<Recorder>,
}

#[async_trait]
impl QueueListener for SlowOnT {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.recorder.queues_added(topic, queues).await?;
        if topic == "T" {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        Ok(())
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        self.recorder.queues_removed(topic, queues).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_round_under_way_at_shutdown_adds_no_queue_with_a_cancelled_lease() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.create_topic("U", 1, 2);
    let recorder = Recorder::new();
    let handle = builder(&cluster, 0, &["T", "U"], recorder.clone())
        .listener(Arc::new(SlowOnT {
            recorder: recorder.clone(),
        }))
        .start()
        .await
        .unwrap();
    // The first round is in T's queues_added callback; U comes next.
    settle(Duration::from_secs(1)).await;
    assert_eq!(recorder.held().len(), 2, "T is added");
    handle.shutdown().await;
    let violations = recorder.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    assert!(
        recorder.added().iter().all(|(q, _)| &*q.topic == "T"),
        "nothing is added once the shutdown began: {:?}",
        recorder.events()
    );
    assert_eq!(recorder.removed_with(RemovalReason::Shutdown).len(), 2);
    assert!(recorder.held().is_empty());
    assert!(cluster.members(GROUP).is_empty());
}
