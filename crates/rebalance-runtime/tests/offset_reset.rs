//! An operator's offset reset (`ConsumerHandle::reset_offsets`, RocketMQ's
//! RESET_CONSUMER_CLIENT_OFFSET): held queues restart from the new offset, and nothing their old
//! lease still commits is persisted over it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{GROUP, Recorder, settle, start_recording};
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    ListenerError, QueueLease, QueueListener, RemovalReason, RemovedQueue, StartPosition,
};

/// Commits `late` on a queue's old lease when it is removed for a reset, as a batch that was
/// in the listener when the reset came and finishes during the hand-off would.
struct InFlightCommits {
    inner: Arc<Recorder>,
    late: i64,
}

#[async_trait]
impl QueueListener for InFlightCommits {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.inner.queues_added(topic, queues).await
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        let leases = self.inner.leases.lock().unwrap().clone();
        for removed in queues {
            if removed.reason == RemovalReason::OffsetReset
                && let Some(lease) = leases.get(&removed.queue)
            {
                lease.commit(self.late);
            }
        }
        self.inner.queues_removed(topic, queues).await
    }
}

fn queue(id: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", id)
}

#[tokio::test(start_paused = true)]
async fn a_reset_restarts_held_queues_from_the_new_offset_and_ignores_the_others() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(50);
    let member = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.consume_retry_topic(false)
    })
    .await;
    settle(Duration::from_secs(6)).await;
    assert_eq!(recorder.held().len(), 2);
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(50));
    *recorder.commit_on_add.lock().unwrap() = None;

    let stranger = MessageQueue::new("T", "elsewhere", 0);
    member
        .handle
        .reset_offsets([(queue(0), 7), (stranger.clone(), 3)])
        .unwrap();
    settle(Duration::from_secs(2)).await;

    assert_eq!(
        recorder.removed_with(RemovalReason::OffsetReset),
        vec![queue(0)]
    );
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(7));
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(50), "not reset");
    assert_eq!(cluster.offset(GROUP, &stranger), None, "not ours: ignored");
    let added = recorder.added();
    assert_eq!(
        added.last(),
        Some(&(queue(0), StartPosition::Offset(7))),
        "taken again from the new offset: {added:?}"
    );
    assert_eq!(recorder.held().len(), 2);
    assert!(recorder.violations.lock().unwrap().is_empty());
    let report = member.handle.rounds().borrow().clone();
    assert!(
        report
            .reasons
            .contains(rebalance_runtime::wake::WakeReasons::OFFSET_RESET)
    );
    member.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_in_flight_commit_never_overwrites_the_reset() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(40);
    let listener = Arc::new(InFlightCommits {
        inner: recorder.clone(),
        late: 99,
    });
    let member = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.consume_retry_topic(false).listener(listener)
    })
    .await;
    settle(Duration::from_secs(6)).await;
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(40));
    *recorder.commit_on_add.lock().unwrap() = None;
    let old = recorder.held_leases().pop().unwrap();

    member.handle.reset_offsets([(queue(0), 7)]).unwrap();
    settle(Duration::from_millis(100)).await;
    // The old lease commits again after the reset took effect: a batch still finishing.
    old.commit(120);
    settle(Duration::from_secs(12)).await;

    assert_eq!(
        cluster.offset(GROUP, &queue(0)),
        Some(7),
        "the reset stands: the old lease's commits (99 during the hand-off, 120 after) are never persisted"
    );
    let new = recorder.held_leases().pop().unwrap();
    assert!(!new.is_same_lease(&old));
    assert_eq!(new.start_position(), StartPosition::Offset(7));
    assert!(old.is_cancelled());
    member.handle.shutdown().await;
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(7));
}

/// Queue 1 of member 0 (exclusive hand-off) is being handed to member 1 and waits for a batch
/// that holds its consume guard: the reset that comes meanwhile is the offset member 1 starts
/// from (member 1 does not hold the queue yet, so it ignores the reset).
#[tokio::test(start_paused = true)]
async fn a_reset_during_a_hand_off_is_the_queues_final_offset() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let exclusive = |b: rebalance_runtime::ConsumerBuilder| b.exclusive_hand_off(true);
    let a = common::start_with(&cluster, 0, &["T"], exclusive).await;
    settle(Duration::from_secs(1)).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(1)].clone();
    let batch = lease.consume_guard().await.expect("held");
    let b = common::start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_secs(1)).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    a.handle.reset_offsets([(queue(1), 5)]).unwrap();
    b.handle.reset_offsets([(queue(1), 5)]).unwrap();
    settle(Duration::from_millis(100)).await;
    // The batch from before the reset ends.
    lease.commit(77);
    drop(batch);
    settle(Duration::from_secs(3)).await;
    let started = b.recorder.added().into_iter().find(|(q, _)| *q == queue(1));
    assert_eq!(
        started,
        Some((queue(1), StartPosition::Offset(5))),
        "the reset stands over the commit of a batch from before it"
    );
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(5));
}

/// Queue 1 of member 0 (exclusive hand-off) was released to member 1, but the store refused
/// its final offset, 77: member 0 keeps the lock and retries it. A reset that comes meanwhile
/// is what the retry writes, and what member 1 starts from.
#[tokio::test(start_paused = true)]
async fn a_reset_while_a_refused_final_offset_is_retried_replaces_it() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let exclusive = |b: rebalance_runtime::ConsumerBuilder| b.exclusive_hand_off(true);
    let a = common::start_with(&cluster, 0, &["T"], exclusive).await;
    settle(Duration::from_secs(1)).await;
    a.recorder.leases.lock().unwrap()[&queue(1)].commit(77);
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::PersistOffset, 1);
    let b = common::start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_millis(500)).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    assert!(b.handle.assignment().is_empty(), "a keeps the lock");
    a.handle.reset_offsets([(queue(1), 5)]).unwrap();
    b.handle.reset_offsets([(queue(1), 5)]).unwrap();
    settle(Duration::from_secs(6)).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(5));
    let started = b.recorder.added().into_iter().find(|(q, _)| *q == queue(1));
    assert_eq!(started, Some((queue(1), StartPosition::Offset(5))));
}

#[tokio::test(start_paused = true)]
async fn a_reset_after_shutdown_is_refused() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let member = start_recording(&cluster, 0, &["T"], Recorder::new(), |b| b).await;
    member.handle.shutdown().await;
    assert!(matches!(
        member.handle.reset_offsets([(queue(0), 1)]),
        Err(rebalance_runtime::ConsumerError::ShutDown)
    ));
}

/// An offset store that ignores a commit below the stored offset, as a Rust broker 1.0 does.
struct ForwardOnly(rebalance_runtime::memory::ClusterClient);

#[async_trait]
impl rebalance_runtime::OffsetStore for ForwardOnly {
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
        match self.0.read(group, queue).await? {
            Some(stored) if offset < stored => Ok(()),
            _ => self.0.persist(group, queue, offset).await,
        }
    }

    async fn remove(
        &self,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<(), rebalance_runtime::RemoteError> {
        self.0.remove(group, queue).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_reset_the_store_ignores_still_restarts_the_queue_from_the_new_offset() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(30);
    let store = Arc::new(ForwardOnly(cluster.client(common::client_id(0))));
    let member = start_recording(&cluster, 0, &["T"], recorder.clone(), |b| {
        b.consume_retry_topic(false).offset_store(store)
    })
    .await;
    settle(Duration::from_secs(6)).await;
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(30));
    *recorder.commit_on_add.lock().unwrap() = None;
    member.handle.reset_offsets([(queue(0), 4)]).unwrap();
    settle(Duration::from_secs(2)).await;
    assert_eq!(
        cluster.offset(GROUP, &queue(0)),
        Some(30),
        "the store kept its offset"
    );
    assert_eq!(
        recorder.added().last(),
        Some(&(queue(0), StartPosition::Offset(4))),
        "restarted from the reset, not from the store"
    );
    member.handle.shutdown().await;
}
