//! The order of a hand-off: the removed callback runs while this client still holds the queue's
//! lock and before the offset is persisted; the offset it commits is what gets persisted; then
//! the lock is released, and only then does the next owner lock the queue and start from that
//! offset.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::memory::{ClusterClient, InMemoryCluster};
use rebalance_runtime::{
    ConsumerBuilder, ConsumerHandle, ListenerError, OffsetStore, QueueLease, QueueListener,
    RemoteError, RemovalReason, RemovedQueue, StartPosition,
};

/// What `queues_removed` saw: the queue, its lock owner and its persisted offset.
type Seen = (MessageQueue, Option<ClientId>, Option<i64>);

/// Commits `final_offset` from inside `queues_removed`, after checking there what the cluster
/// shows at that moment.
struct Committer {
    id: ClientId,
    cluster: InMemoryCluster,
    final_offset: i64,
    leases: Mutex<BTreeMap<MessageQueue, QueueLease>>,
    seen_in_callback: Mutex<Vec<Seen>>,
}

#[async_trait]
impl QueueListener for Committer {
    async fn queues_added(&self, _: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        let mut leases = self.leases.lock().unwrap();
        for lease in queues {
            lease.commit(1);
            leases.insert(lease.queue().clone(), lease.clone());
        }
        Ok(())
    }

    async fn queues_removed(&self, _: &str, queues: &[RemovedQueue]) -> Result<(), ListenerError> {
        // Take a little (simulated) time, as a consumer finishing its batch would.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for removed in queues {
            let q = &removed.queue;
            self.seen_in_callback.lock().unwrap().push((
                q.clone(),
                self.cluster.lock_owner(GROUP, q),
                self.cluster.offset(GROUP, q),
            ));
            if let Some(lease) = self.leases.lock().unwrap().remove(q) {
                lease.commit(self.final_offset);
            }
        }
        Ok(())
    }
}

fn exclusive(b: ConsumerBuilder) -> ConsumerBuilder {
    b.exclusive_hand_off(true)
}

/// Member `a` (client 0) holding both queues of topic T (1 broker, 2 queues) with a
/// [`Committer`] of 77, exclusive hand-off.
async fn a_holding_both(cluster: &InMemoryCluster) -> (Arc<Committer>, ConsumerHandle) {
    cluster.create_topic("T", 1, 2);
    let a_id = client_id(0);
    let committer = Arc::new(Committer {
        id: a_id.clone(),
        cluster: cluster.clone(),
        final_offset: 77,
        leases: Mutex::default(),
        seen_in_callback: Mutex::default(),
    });
    let a = exclusive(
        rebalance_runtime::Consumer::builder(GROUP)
            .intervals(java_intervals())
            .client_id(a_id.clone())
            .cluster(cluster.client(a_id.clone()))
            .listener(committer.clone())
            .subscribe("T"),
    )
    .start()
    .await
    .unwrap();
    settle(Duration::from_secs(1)).await;
    assert_eq!(a.assignment().len(), 2);
    (committer, a)
}

/// The unlock waits for the persist's answer, not only for its sending: with every persist
/// answered 3 s late (the offset stored at once), the lock is still ours 1.5 s after the
/// callback, and the next owner starts from the final offset after. Swapping persist and
/// unlock, or not awaiting the persist, frees the lock at once (found by a test audit: no
/// test could tell the order apart on paused time).
#[tokio::test(start_paused = true)]
async fn the_unlock_waits_for_the_persist_to_answer() {
    let cluster = InMemoryCluster::new();
    let (committer, a) = a_holding_both(&cluster).await;
    cluster.delay_next(
        rebalance_runtime::memory::ClusterCall::PersistOffset,
        1_000,
        Duration::from_secs(3),
    );
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    let mut waited = Duration::ZERO;
    while committer.seen_in_callback.lock().unwrap().is_empty() {
        assert!(waited < Duration::from_secs(30), "a never released a queue");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    let moved = committer.seen_in_callback.lock().unwrap()[0].0.clone();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        cluster.lock_owner(GROUP, &moved),
        Some(committer.id.clone()),
        "still ours while the persist has not answered"
    );
    settle(Duration::from_secs(10)).await;
    assert_eq!(cluster.lock_owner(GROUP, &moved), Some(b.id.clone()));
    assert_eq!(
        b.recorder.added(),
        vec![(moved.clone(), StartPosition::Offset(77))],
        "the next owner starts where the callback left off"
    );
    a.shutdown().await;
    b.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn removed_callback_then_persist_then_unlock_then_next_owner() {
    let cluster = InMemoryCluster::new();
    let (committer, a) = a_holding_both(&cluster).await;
    let all = all_queues(&cluster, &["T"]);

    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_secs(5)).await;

    let seen = committer.seen_in_callback.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one queue moved to b: {seen:?}");
    let (moved, lock_owner, persisted) = &seen[0];
    assert_eq!(
        lock_owner.as_ref(),
        Some(&committer.id),
        "the lock is still ours while the callback runs"
    );
    assert_ne!(
        *persisted,
        Some(77),
        "the final offset is not persisted before the callback commits it"
    );
    assert_eq!(
        cluster.offset(GROUP, moved),
        Some(77),
        "the offset committed in the callback is persisted"
    );
    assert_eq!(cluster.lock_owner(GROUP, moved), Some(b.id.clone()));
    assert_eq!(
        b.recorder.added(),
        vec![(moved.clone(), StartPosition::Offset(77))],
        "the next owner starts where the callback left off"
    );
    let held: std::collections::BTreeSet<MessageQueue> = a.assignment().iter().cloned().collect();
    assert!(!held.contains(moved));
    assert_eq!(held.len() + b.handle.assignment().len(), all.len());
    a.shutdown().await;
    b.handle.shutdown().await;
}

/// The cluster's offset store, recording the order of the writes and forgets it is asked for.
struct RecordingOffsets {
    inner: ClusterClient,
    calls: Mutex<Vec<(&'static str, MessageQueue)>>,
}

impl RecordingOffsets {
    fn calls_for(&self, queue: &MessageQueue) -> Vec<&'static str> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(_, q)| q == queue)
            .map(|(call, _)| *call)
            .collect()
    }
}

#[async_trait]
impl OffsetStore for RecordingOffsets {
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError> {
        self.inner.read(group, queue).await
    }

    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError> {
        self.calls.lock().unwrap().push(("persist", queue.clone()));
        self.inner.persist(group, queue, offset).await
    }

    async fn remove(&self, group: &str, queue: &MessageQueue) -> Result<(), RemoteError> {
        self.calls.lock().unwrap().push(("remove", queue.clone()));
        self.inner.remove(group, queue).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_released_queue_is_forgotten_by_the_offset_store_after_its_final_persist() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let store = Arc::new(RecordingOffsets {
        inner: cluster.client(client_id(0)),
        calls: Mutex::default(),
    });
    let offsets = store.clone();
    let a = start_with(&cluster, 0, &["T"], move |b| b.offset_store(offsets)).await;
    settle(Duration::from_secs(1)).await;
    for lease in a.recorder.leases.lock().unwrap().values() {
        lease.commit(5);
    }
    let b = start(&cluster, 1, &["T"]).await;
    settle(Duration::from_secs(1)).await;
    let moved = a.recorder.removed_with(RemovalReason::Reassigned);
    assert_eq!(moved.len(), 1);
    // A store that caches offsets must drop the queue once its last offset is stored, or it
    // would go on writing that old offset over the next owner's progress.
    assert_eq!(store.calls_for(&moved[0]), ["persist", "remove"]);
    let kept: Vec<MessageQueue> = a.handle.assignment().iter().cloned().collect();
    assert_eq!(kept.len(), 1);
    a.handle.shutdown().await;
    assert_eq!(
        store.calls_for(&kept[0]),
        ["persist", "remove"],
        "released at shutdown too"
    );
    b.handle.shutdown().await;
}
