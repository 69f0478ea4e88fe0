//! [`OffsetStore`]: where consumption progress is kept, and [`LocalOffsetStore`], a per-client
//! store for broadcasting.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use rebalance_core::MessageQueue;

use crate::RemoteError;

/// How many calls the default [`OffsetStore::read_many`] and [`OffsetStore::persist_many`]
/// have in flight.
const MANY_CONCURRENCY: usize = 16;

/// Runs `call` on each item with up to [`MANY_CONCURRENCY`] in flight, answering in order.
async fn in_order<'a, I, T, F, Fut>(items: &'a [I], call: F) -> Vec<T>
where
    F: Fn(&'a I) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    use futures_util::StreamExt;
    use futures_util::stream::FuturesOrdered;
    let mut answers = Vec::with_capacity(items.len());
    let mut in_flight = FuturesOrdered::new();
    let mut next = items.iter();
    loop {
        while in_flight.len() < MANY_CONCURRENCY {
            let Some(item) = next.next() else { break };
            in_flight.push_back(call(item));
        }
        match in_flight.next().await {
            Some(answer) => answers.push(answer),
            None => return answers,
        }
    }
}

/// Whose progress an [`OffsetStore`] keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OffsetScope {
    /// One offset per group and queue, shared by every client of the group (RocketMQ: the
    /// broker's consumer offsets). What clustering needs: the next owner of a queue continues
    /// where the previous one stopped.
    #[default]
    Group,
    /// One offset per group and queue for this client alone (RocketMQ: the local file store).
    /// What broadcasting needs: every client consumes every queue, so each keeps its own
    /// progress.
    Client,
}

/// Consumption progress per group and queue (in RocketMQ clustering mode: the broker).
///
/// A store says whose progress it keeps with [`scope`](Self::scope). A broadcasting consumer
/// refuses to start with a [`Group`](OffsetScope::Group) store, since every client would write
/// its own progress over the others' on the same shared offset: give it a per-client store such
/// as [`LocalOffsetStore`] (after [`cluster`](crate::ConsumerBuilder::cluster), which sets the
/// cluster's shared store).
///
/// Every call must end in bounded time (the RocketMQ transport's requests time out after 3 s):
/// the runtime awaits each answer, and a call that never returns stalls the rounds and the
/// hand-off of the queues.
#[async_trait]
pub trait OffsetStore: Send + Sync + 'static {
    /// The stored offset of `queue`, or `None` when nothing is stored yet.
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError>;

    /// The stored offsets of `queues`, in their order: for each, what [`read`](Self::read)
    /// answers. The runtime reads the start offsets of a round's new queues with one call.
    ///
    /// The default calls `read` for up to 16 queues at a time, so that
    /// a consumer taking thousands of queues from a broker waits for a few hundred round trips,
    /// not thousands (the Java client reads them one by one). Override it where the store can
    /// answer many at once; the answer must have one entry per queue.
    async fn read_many(
        &self,
        group: &str,
        queues: &[MessageQueue],
    ) -> Vec<Result<Option<i64>, RemoteError>> {
        in_order(queues, |queue| self.read(group, queue)).await
    }

    /// Stores the next offset to consume for `queue`.
    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError>;

    /// Stores the next offsets of many queues: for each `(queue, offset)`, in their order, what
    /// [`persist`](Self::persist) answers. The runtime persists the committed offsets of a
    /// persistence tick, and the final offsets of a round's released queues, with one call.
    ///
    /// The default calls `persist` for up to 16 queues at a time, so that a consumer releasing
    /// or persisting thousands of queues at a broker waits for a few hundred round trips, not
    /// thousands. Override it where the store can take many at once; the answer must have one
    /// entry per queue, and an `Ok` must mean that queue's offset is stored.
    async fn persist_many(
        &self,
        group: &str,
        offsets: &[(MessageQueue, i64)],
    ) -> Vec<Result<(), RemoteError>> {
        in_order(offsets, |(queue, offset)| {
            self.persist(group, queue, *offset)
        })
        .await
    }

    /// Forgets whatever the store keeps locally about `queue`, after the runtime released it and
    /// persisted its last offset. Stores without local state do nothing (the default).
    async fn remove(&self, _group: &str, _queue: &MessageQueue) -> Result<(), RemoteError> {
        Ok(())
    }

    /// Whose progress this store keeps: the group's shared offsets (the default, right for a
    /// broker or any store every client of the group reads and writes) or this client's own.
    /// Override it to return [`OffsetScope::Client`] only when each client has its own copy.
    fn scope(&self) -> OffsetScope {
        OffsetScope::Group
    }
}

/// A per-client offset store in memory: each consumer built with its own instance keeps its
/// own progress, as broadcasting needs ([`OffsetScope::Client`]).
///
/// The offsets live as long as the value: a restarted process starts each queue from the
/// consumer's [`ConsumeFrom`](crate::config::ConsumeFrom) position again. To keep them across
/// restarts, use the RocketMQ transport's `FileOffsetStore` (`rebalance_rocketmq`: the Java
/// client's local offset file), or implement [`OffsetStore`] with [`OffsetScope::Client`] over
/// a database. Offsets survive a queue's release and re-addition within the process, so a queue
/// that comes back (a topic that reappears) continues where it stopped. Never share one
/// instance between consumers of the same group: they would share one offset again.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use rebalance_runtime::memory::InMemoryCluster;
/// use rebalance_runtime::{Consumer, LocalOffsetStore, config::MessageModel};
/// # use rebalance_runtime::{ListenerError, QueueLease, QueueListener, RemovedQueue};
/// # struct Quiet;
/// # #[async_trait::async_trait]
/// # impl QueueListener for Quiet {
/// #     async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> { Ok(()) }
/// #     async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> { Ok(()) }
/// # }
///
/// let cluster = InMemoryCluster::new();
/// cluster.create_topic("Prices", 1, 4);
/// let consumer = Consumer::builder("price-watchers")
///     .client_id("10.0.0.1@1")
///     .subscribe("Prices")
///     .message_model(MessageModel::Broadcasting)
///     .cluster(cluster.client("10.0.0.1@1"))
///     // After `cluster`, which sets the cluster's shared (group) store.
///     .offset_store(Arc::new(LocalOffsetStore::new()))
///     .listener(Arc::new(Quiet))
///     .start()
///     .await?;
/// consumer.wait_for_assignment(|a| a.len() == 4, std::time::Duration::from_secs(60)).await?;
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct LocalOffsetStore {
    offsets: Mutex<HashMap<(String, MessageQueue), i64>>,
}

impl LocalOffsetStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stored offset of `queue` for `group`.
    pub fn offset(&self, group: &str, queue: &MessageQueue) -> Option<i64> {
        self.offsets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&(group.to_string(), queue.clone()))
            .copied()
    }
}

#[async_trait]
impl OffsetStore for LocalOffsetStore {
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError> {
        Ok(self.offset(group, queue))
    }

    /// One look at the map for all of them.
    async fn read_many(
        &self,
        group: &str,
        queues: &[MessageQueue],
    ) -> Vec<Result<Option<i64>, RemoteError>> {
        let offsets = self
            .offsets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        queues
            .iter()
            .map(|queue| Ok(offsets.get(&(group.to_string(), queue.clone())).copied()))
            .collect()
    }

    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError> {
        self.offsets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((group.to_string(), queue.clone()), offset);
        Ok(())
    }

    /// All of them under one lock.
    async fn persist_many(
        &self,
        group: &str,
        offsets: &[(MessageQueue, i64)],
    ) -> Vec<Result<(), RemoteError>> {
        let mut stored = self
            .offsets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        offsets
            .iter()
            .map(|(queue, offset)| {
                stored.insert((group.to_string(), queue.clone()), *offset);
                Ok(())
            })
            .collect()
    }

    // `remove` keeps the offset (the default does nothing): this store is the only copy.

    fn scope(&self) -> OffsetScope {
        OffsetScope::Client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_each_groups_offsets_across_removal() {
        let store = LocalOffsetStore::new();
        let q = MessageQueue::new("T", "b", 1);
        assert_eq!(store.read("G", &q).await, Ok(None));
        store.persist("G", &q, 7).await.unwrap();
        store.persist("H", &q, 3).await.unwrap();
        store.remove("G", &q).await.unwrap();
        assert_eq!(store.read("G", &q).await, Ok(Some(7)));
        assert_eq!(store.read("H", &q).await, Ok(Some(3)));
        assert_eq!(
            store.read("G", &MessageQueue::new("T", "b", 2)).await,
            Ok(None)
        );
        assert_eq!(store.scope(), OffsetScope::Client);
    }

    #[tokio::test]
    async fn local_read_many_answers_each_queue_in_order() {
        let store = LocalOffsetStore::new();
        let queues: Vec<_> = (0..3).map(|i| MessageQueue::new("T", "b", i)).collect();
        store.persist("G", &queues[2], 9).await.unwrap();
        store.persist("H", &queues[0], 4).await.unwrap();
        assert_eq!(
            store.read_many("G", &queues).await,
            vec![Ok(None), Ok(None), Ok(Some(9))]
        );
    }

    /// Answers each read after a delay that shrinks with the queue id, so later queues answer
    /// first, and records how many reads were in flight at most.
    #[derive(Default)]
    struct SlowStore {
        in_flight: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl OffsetStore for SlowStore {
        async fn read(&self, _: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            let id = u64::try_from(queue.queue_id).unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(100 - id % 100)).await;
            self.in_flight.fetch_sub(1, SeqCst);
            if queue.queue_id == 7 {
                return Err(RemoteError::Unreachable("broker down".into()));
            }
            Ok(Some(i64::from(queue.queue_id) * 10))
        }

        async fn persist(&self, _: &str, queue: &MessageQueue, _: i64) -> Result<(), RemoteError> {
            self.read("G", queue).await.map(|_| ())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_read_many_reads_sixteen_at_a_time_and_answers_in_order() {
        let store = SlowStore::default();
        let queues: Vec<_> = (0..50).map(|i| MessageQueue::new("T", "b", i)).collect();
        let started = tokio::time::Instant::now();
        let answers = store.read_many("G", &queues).await;
        assert_eq!(answers.len(), 50);
        for (i, answer) in (0..50).zip(&answers) {
            if i == 7 {
                assert!(answer.is_err(), "queue 7's failure is its own");
            } else {
                assert_eq!(answer, &Ok(Some(i64::from(i) * 10)));
            }
        }
        assert_eq!(
            store.most.load(std::sync::atomic::Ordering::SeqCst),
            MANY_CONCURRENCY
        );
        // 50 reads of 51 to 100 ms each, one by one, would take about 3.8 s.
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_persist_many_writes_sixteen_at_a_time_and_answers_in_order() {
        let store = SlowStore::default();
        let offsets: Vec<_> = (0..50)
            .map(|i| (MessageQueue::new("T", "b", i), i64::from(i)))
            .collect();
        let started = tokio::time::Instant::now();
        let answers = store.persist_many("G", &offsets).await;
        assert_eq!(answers.len(), 50);
        for (i, answer) in (0..50).zip(&answers) {
            assert_eq!(answer.is_err(), i == 7, "queue {i}: {answer:?}");
        }
        assert_eq!(
            store.most.load(std::sync::atomic::Ordering::SeqCst),
            MANY_CONCURRENCY
        );
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }

    #[tokio::test]
    async fn local_persist_many_stores_each_offset() {
        let store = LocalOffsetStore::new();
        let queues: Vec<_> = (0..3).map(|i| MessageQueue::new("T", "b", i)).collect();
        let offsets: Vec<_> = queues.iter().cloned().zip([5, 6, 7]).collect();
        assert_eq!(store.persist_many("G", &offsets).await, vec![Ok(()); 3]);
        assert_eq!(
            store.read_many("G", &queues).await,
            vec![Ok(Some(5)), Ok(Some(6)), Ok(Some(7))]
        );
        assert_eq!(store.read("H", &queues[0]).await, Ok(None));
    }
}
