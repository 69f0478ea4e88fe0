//! The consumer's lifecycle seen from the listener: a shutdown asked for during a round, and
//! callbacks that call back into their own consumer.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    ConsumerHandle, ListenerError, QueueLease, QueueListener, RemovalReason, RemovedQueue,
};

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
/// A listener that subscribes its consumer to `U` when it is given `T`'s queues.
struct SubscribesFromCallback {
    recorder: Arc<Recorder>,
    handle: OnceLock<ConsumerHandle>,
}

#[async_trait]
impl QueueListener for SubscribesFromCallback {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.recorder.queues_added(topic, queues).await?;
        if topic == "T" {
            let handle = self.handle.get().expect("handle set after start");
            handle.subscribe("U").await?;
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
async fn a_callback_may_change_the_subscriptions_of_its_own_consumer() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.create_topic("U", 1, 3);
    let recorder = Recorder::new();
    let listener = Arc::new(SubscribesFromCallback {
        recorder: recorder.clone(),
        handle: OnceLock::new(),
    });
    let handle = builder(&cluster, 0, &["T"], recorder.clone())
        .listener(listener.clone())
        .start()
        .await
        .unwrap();
    listener.handle.set(handle.clone()).unwrap();
    settle(Duration::from_secs(3)).await;
    let errors = handle.rounds().borrow().callback_errors.clone();
    assert!(errors.is_empty(), "the callback did not return: {errors:?}");
    assert_eq!(handle.assignment().len(), 5, "T and U are held");
    handle.shutdown().await;
    assert!(recorder.held().is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_shuts_the_consumer_down() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = start(&cluster, 0, &["T"]).await;
    settle(Duration::from_secs(1)).await;
    assert_eq!(a.recorder.held().len(), 2);
    let Member {
        handle, recorder, ..
    } = a;
    let token = handle.token().clone();
    drop(handle);
    settle(Duration::from_secs(1)).await;
    assert!(token.is_cancelled());
    assert_eq!(recorder.removed_with(RemovalReason::Shutdown).len(), 2);
    assert!(cluster.members(GROUP).is_empty());
}

#[tokio::test(start_paused = true)]
async fn subscriptions_cannot_change_once_shutting_down() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = start(&cluster, 0, &["T"]).await;
    a.handle.shutdown().await;
    assert!(matches!(
        a.handle.subscribe("U").await,
        Err(rebalance_runtime::ConsumerError::ShutDown)
    ));
    assert!(matches!(
        a.handle.unsubscribe("T").await,
        Err(rebalance_runtime::ConsumerError::ShutDown)
    ));
}

/// A listener that shuts its consumer down when it is given `T`'s queues.
struct ShutsDownFromCallback {
    recorder: Arc<Recorder>,
    handle: OnceLock<ConsumerHandle>,
}

#[async_trait]
impl QueueListener for ShutsDownFromCallback {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.recorder.queues_added(topic, queues).await?;
        let handle = self.handle.get().expect("handle set after start");
        handle.shutdown().await;
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
async fn a_callback_may_shut_its_own_consumer_down() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    let listener = Arc::new(ShutsDownFromCallback {
        recorder: recorder.clone(),
        handle: OnceLock::new(),
    });
    let started = tokio::time::Instant::now();
    let handle = builder(&cluster, 0, &["T"], recorder.clone())
        .listener(listener.clone())
        .start()
        .await
        .unwrap();
    listener.handle.set(handle.clone()).unwrap();
    handle.join().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the shutdown waited for the callback that asked for it: {:?}",
        started.elapsed()
    );
    let errors = handle.rounds().borrow().callback_errors.clone();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(recorder.removed_with(RemovalReason::Shutdown).len(), 2);
    assert!(cluster.members(GROUP).is_empty());
}
