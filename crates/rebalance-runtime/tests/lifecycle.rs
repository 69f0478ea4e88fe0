//! The consumer's lifecycle seen from the listener: a shutdown asked for during a round, and
//! callbacks that call back into their own consumer.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_runtime::memory::{ClusterCall, InMemoryCluster};
use rebalance_runtime::{
    ConsumerHandle, ListenerError, QueueLease, QueueListener, RemovalReason, RemovedQueue,
    WeakConsumerHandle,
};

/// What a listener does once it has recorded that it was given topic `T`'s queues.
#[derive(Clone, Copy)]
enum OnT {
    /// Takes 2 s more.
    Sleep,
    /// Subscribes its own consumer to `U`.
    SubscribeU,
    /// Shuts its own consumer down.
    ShutDown,
}

/// Records through a [`Recorder`], and reacts to being given `T`'s queues.
struct Reacting {
    recorder: Arc<Recorder>,
    on_t: OnT,
    /// The listener's own consumer, set right after `start` (before its first round runs).
    /// Weak, so that the listener does not keep its consumer running.
    handle: OnceLock<WeakConsumerHandle>,
}

impl Reacting {
    fn new(recorder: &Arc<Recorder>, on_t: OnT) -> Arc<Self> {
        Arc::new(Self {
            recorder: recorder.clone(),
            on_t,
            handle: OnceLock::new(),
        })
    }

    fn handle(&self) -> Result<ConsumerHandle, ListenerError> {
        self.handle
            .get()
            .expect("handle set after start")
            .upgrade()
            .ok_or_else(|| "every handle of the consumer was dropped".into())
    }
}

#[async_trait]
impl QueueListener for Reacting {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.recorder.queues_added(topic, queues).await?;
        if topic == "T" {
            match self.on_t {
                OnT::Sleep => tokio::time::sleep(Duration::from_secs(2)).await,
                OnT::SubscribeU => {
                    self.handle()?.subscribe("U")?;
                }
                OnT::ShutDown => self.handle()?.shutdown().await,
            }
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
    let handle = start_recording(&cluster, 0, &["T", "U"], recorder.clone(), |b| {
        b.listener(Reacting::new(&recorder, OnT::Sleep))
    })
    .await
    .handle;
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

#[tokio::test(start_paused = true)]
async fn a_shutdown_during_the_start_offset_reads_adds_nothing_and_leaves_no_lock() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    // The first round locks both queues, then waits 2 s for the first start offset.
    cluster.delay_next(ClusterCall::ReadOffset, 1, Duration::from_secs(2));
    let a = start_with(&cluster, 0, &["T"], |b| b.exclusive_hand_off(true)).await;
    settle(Duration::from_millis(500)).await;
    let queues = all_queues(&cluster, &["T"]);
    assert!(
        queues
            .iter()
            .all(|q| cluster.lock_owner(GROUP, q) == Some(a.id.clone())),
        "the round is under way, with its locks"
    );
    assert!(a.recorder.added().is_empty());
    a.handle.shutdown().await;
    assert!(
        a.recorder.events().is_empty(),
        "no lease is handed out (cancelled at birth) once the shutdown began: {:?}",
        a.recorder.events()
    );
    for q in &queues {
        assert_eq!(cluster.lock_owner(GROUP, q), None, "{q:?} still locked");
    }
    assert!(cluster.members(GROUP).is_empty());
}

/// A consumer of T (2 queues) whose listener, once given them, subscribes its own consumer to U
/// (3 queues) through a weak handle; 3 s later.
async fn subscribing_u(cluster: &InMemoryCluster, recorder: &Arc<Recorder>) -> ConsumerHandle {
    cluster.create_topic("T", 1, 2);
    cluster.create_topic("U", 1, 3);
    let listener = Reacting::new(recorder, OnT::SubscribeU);
    let handle = start_recording(cluster, 0, &["T"], recorder.clone(), |b| {
        b.listener(listener.clone())
    })
    .await
    .handle;
    listener.handle.set(handle.downgrade()).unwrap();
    settle(Duration::from_secs(3)).await;
    handle
}

#[tokio::test(start_paused = true)]
async fn a_callback_may_change_the_subscriptions_of_its_own_consumer() {
    let cluster = InMemoryCluster::new();
    let recorder = Recorder::new();
    let handle = subscribing_u(&cluster, &recorder).await;
    let errors = handle.rounds().borrow().callback_errors.clone();
    assert!(errors.is_empty(), "the callback did not return: {errors:?}");
    assert_eq!(handle.assignment().len(), 5, "T and U are held");
    handle.shutdown().await;
    assert!(recorder.held().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_listener_with_a_weak_handle_does_not_keep_its_consumer_running() {
    let cluster = InMemoryCluster::new();
    let recorder = Recorder::new();
    let handle = subscribing_u(&cluster, &recorder).await;
    assert_eq!(handle.assignment().len(), 5, "the callback subscribed U");
    let token = handle.token().clone();
    let weak = handle.downgrade();
    drop(handle);
    settle(Duration::from_secs(1)).await;
    assert!(
        token.is_cancelled(),
        "the listener's handle kept it running"
    );
    assert!(weak.upgrade().is_none());
    assert_eq!(recorder.removed_with(RemovalReason::Shutdown).len(), 5);
    assert!(cluster.members(GROUP).is_empty());
    assert_eq!(
        format!("{weak:?}"),
        "WeakConsumerHandle { alive: false, .. }"
    );
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
        a.handle.subscribe("U"),
        Err(rebalance_runtime::ConsumerError::ShutDown)
    ));
    assert!(matches!(
        a.handle.unsubscribe("T"),
        Err(rebalance_runtime::ConsumerError::ShutDown)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_callback_may_shut_its_own_consumer_down() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    let listener = Reacting::new(&recorder, OnT::ShutDown);
    let started = tokio::time::Instant::now();
    let handle = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.listener(listener.clone())
    })
    .await
    .handle;
    listener.handle.set(handle.downgrade()).unwrap();
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
