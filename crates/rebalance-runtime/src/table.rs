//! The ProcessQueue table: the queues this client holds and the state of each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rebalance_core::MessageQueue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::listener::{LeaseState, QueueLease, RemovalReason, StartPosition};
use crate::running::ConsumerActivity;

/// A queue being released: announced to the listener, waiting for its consumer to finish the
/// current batch (ordered consumption) or for its offset to be persisted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release {
    pub(crate) since: Instant,
    /// Why it was announced as removed.
    pub(crate) reason: RemovalReason,
}

/// One held queue (`ProcessQueue` in the Java client).
#[derive(Debug)]
pub(crate) struct ProcessQueue {
    pub(crate) state: Arc<LeaseState>,
    token: CancellationToken,
    /// The last offset the store accepted.
    pub(crate) persisted: Option<i64>,
    /// Set once the queue is being released.
    pub(crate) release: Option<Release>,
    /// An operator's offset reset being applied: the queue is released with this offset as its
    /// final one, whatever its lease committed (an in-flight batch must not write over it).
    pub(crate) reset_to: Option<i64>,
}

impl ProcessQueue {
    /// Whether the queue is held (not being released).
    pub(crate) fn is_held(&self) -> bool {
        self.release.is_none()
    }

    /// Ordered consumption and exclusive hand-off: until when the broker lock is trusted
    /// (shared with the lease, whose consume guard checks it).
    pub(crate) fn lock_valid_until(&self) -> Option<Instant> {
        self.state.lock_valid_until()
    }

    /// Records a granted lock, trusted until `until`.
    pub(crate) fn set_lock_valid_until(&self, until: Instant) {
        self.state.set_lock_valid_until(until);
    }

    /// The offset to persist, if the application reported one the store does not have yet.
    pub(crate) fn unpersisted_offset(&self) -> Option<i64> {
        self.state
            .committed()
            .filter(|&o| Some(o) != self.persisted)
    }

    /// The final offset to persist when the queue is released: an operator's reset whatever the
    /// store holds, else what the lease committed that the store does not have yet.
    pub(crate) fn final_offset(&self) -> Option<i64> {
        self.reset_to.or_else(|| self.unpersisted_offset())
    }

    /// The lease's shared state.
    pub(crate) fn lease_state(&self) -> &Arc<LeaseState> {
        &self.state
    }
}

/// The table, by topic. Owned by the consumer's service task; nobody else mutates it.
#[derive(Debug, Default)]
pub(crate) struct ProcessQueueTable {
    topics: HashMap<Arc<str>, HashMap<MessageQueue, ProcessQueue>>,
    /// Whether the held set changed since [`take_changed`](Self::take_changed).
    changed: bool,
    /// Shared by every lease of the consumer.
    activity: Arc<ConsumerActivity>,
}

impl ProcessQueueTable {
    /// An empty table whose leases share `activity`.
    pub(crate) fn new(activity: Arc<ConsumerActivity>) -> Self {
        Self {
            activity,
            ..Self::default()
        }
    }

    /// Inserts a newly added queue and returns its lease. `lock_valid_until`: until when its
    /// broker lock is trusted without renewal, if it is locked.
    ///
    /// An `Offset` start is taken to be what the store holds, unless `unsaved` says it is
    /// progress the store does not have (a final offset it refused when the queue was released
    /// and that this client takes back): then it counts as committed and is persisted like a
    /// commit.
    pub(crate) fn insert(
        &mut self,
        queue: MessageQueue,
        start: StartPosition,
        parent: &CancellationToken,
        lock_valid_until: Option<Instant>,
        unsaved: bool,
    ) -> QueueLease {
        let state = Arc::new(LeaseState::with_activity(
            lock_valid_until,
            self.activity.clone(),
        ));
        let persisted = match start {
            StartPosition::Offset(o) if unsaved => {
                state.committed.store(o, Ordering::Release);
                None
            }
            StartPosition::Offset(o) => Some(o),
            _ => None,
        };
        let token = parent.child_token();
        let lease = QueueLease::new(queue.clone(), start, token.clone(), state.clone());
        self.changed = true;
        self.topics.entry(queue.topic.clone()).or_default().insert(
            queue,
            ProcessQueue {
                state,
                token,
                persisted,
                release: None,
                reset_to: None,
            },
        );
        lease
    }

    /// Marks a held queue as being released for `reason`: cancels its lease. Returns false when
    /// the queue is not held (absent or already being released).
    pub(crate) fn start_release(
        &mut self,
        queue: &MessageQueue,
        now: Instant,
        reason: RemovalReason,
    ) -> bool {
        match self.get_mut(queue) {
            Some(pq) if pq.is_held() => {
                pq.state.dropped.store(true, Ordering::Release);
                pq.token.cancel();
                pq.release = Some(Release { since: now, reason });
                self.changed = true;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn get(&self, queue: &MessageQueue) -> Option<&ProcessQueue> {
        self.topics.get(&queue.topic)?.get(queue)
    }

    pub(crate) fn get_mut(&mut self, queue: &MessageQueue) -> Option<&mut ProcessQueue> {
        self.topics.get_mut(&queue.topic)?.get_mut(queue)
    }

    pub(crate) fn remove(&mut self, queue: &MessageQueue) -> Option<ProcessQueue> {
        let entries = self.topics.get_mut(&queue.topic)?;
        let removed = entries.remove(queue);
        if entries.is_empty() {
            self.topics.remove(&queue.topic);
        }
        removed
    }

    /// Every entry, held or being released.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&MessageQueue, &ProcessQueue)> {
        self.topics.values().flatten()
    }

    /// Entries of `topic` (held or being released), in no particular order.
    pub(crate) fn entries_of(
        &self,
        topic: &str,
    ) -> impl Iterator<Item = (&MessageQueue, &ProcessQueue)> {
        self.topics.get(topic).into_iter().flatten()
    }

    /// Entries of `topic` (held or being released), sorted.
    pub(crate) fn queues_of(&self, topic: &str) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> =
            self.entries_of(topic).map(|(q, _)| q.clone()).collect();
        queues.sort();
        queues
    }

    /// The topics with entries.
    pub(crate) fn topics(&self) -> BTreeSet<String> {
        self.topics.keys().map(|t| t.to_string()).collect()
    }

    /// Held queues by topic, sorted: what the application sees as the assignment.
    pub(crate) fn held_leases(&self) -> Vec<crate::running::HeldLease> {
        let mut held: Vec<crate::running::HeldLease> = self
            .iter()
            .filter(|(_, pq)| pq.is_held())
            .map(|(q, pq)| crate::running::HeldLease {
                queue: q.clone(),
                state: pq.state.clone(),
                persisted: pq.persisted,
            })
            .collect();
        held.sort_by(|a, b| a.queue.cmp(&b.queue));
        held
    }

    /// The held queues, by topic, sorted.
    pub(crate) fn held(&self) -> BTreeMap<String, Vec<MessageQueue>> {
        self.topics
            .iter()
            .filter_map(|(topic, entries)| {
                let mut queues: Vec<MessageQueue> = entries
                    .iter()
                    .filter(|(_, pq)| pq.is_held())
                    .map(|(q, _)| q.clone())
                    .collect();
                queues.sort();
                (!queues.is_empty()).then(|| (topic.to_string(), queues))
            })
            .collect()
    }

    /// Whether the held set changed since the last call.
    pub(crate) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.topics.values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn release_cancels_the_lease_once() {
        let mut table = ProcessQueueTable::default();
        let root = CancellationToken::new();
        let q = MessageQueue::new("T", "b", 0);
        let lease = table.insert(q.clone(), StartPosition::Offset(5), &root, None, false);
        assert!(!lease.is_cancelled());
        assert_eq!(table.held()["T"], vec![q.clone()]);
        assert!(table.start_release(&q, Instant::now(), RemovalReason::Lost));
        assert!(lease.is_cancelled());
        assert!(lease.consume_guard().await.is_none());
        assert!(!table.start_release(&q, Instant::now(), RemovalReason::Shutdown));
        assert!(table.held().is_empty());
        // The first reason stays: it is the one the listener was told.
        let release = table.get(&q).and_then(|pq| pq.release).expect("releasing");
        assert_eq!(release.reason, RemovalReason::Lost);
    }

    #[test]
    fn a_lease_is_the_same_as_its_clones_only() {
        let mut table = ProcessQueueTable::default();
        let root = CancellationToken::new();
        let q = MessageQueue::new("T", "b", 0);
        let first = table.insert(q.clone(), StartPosition::Latest, &root, None, false);
        assert!(first.is_same_lease(&first.clone()));
        table.remove(&q);
        let again = table.insert(q, StartPosition::Latest, &root, None, false);
        assert!(!again.is_same_lease(&first));
    }

    #[test]
    fn unpersisted_offset_tracks_commits() {
        let mut table = ProcessQueueTable::default();
        let root = CancellationToken::new();
        let q = MessageQueue::new("T", "b", 0);
        let lease = table.insert(q.clone(), StartPosition::Offset(5), &root, None, false);
        assert_eq!(table.get(&q).unwrap().unpersisted_offset(), None);
        // The start offset came from the store: committing it again (nothing consumed yet)
        // writes nothing.
        lease.commit(5);
        assert_eq!(table.get(&q).unwrap().unpersisted_offset(), None);
        lease.commit(9);
        lease.commit(7);
        assert_eq!(table.get(&q).unwrap().unpersisted_offset(), Some(9));
    }

    #[test]
    fn an_unsaved_start_is_persisted_like_a_commit() {
        let mut table = ProcessQueueTable::default();
        let root = CancellationToken::new();
        let q = MessageQueue::new("T", "b", 0);
        let lease = table.insert(q.clone(), StartPosition::Offset(5), &root, None, true);
        assert_eq!(lease.start_position(), StartPosition::Offset(5));
        assert_eq!(lease.committed(), Some(5));
        assert_eq!(table.get(&q).unwrap().unpersisted_offset(), Some(5));
        lease.commit(3);
        assert_eq!(table.get(&q).unwrap().unpersisted_offset(), Some(5));
        lease.commit(8);
        assert_eq!(table.get(&q).unwrap().unpersisted_offset(), Some(8));
    }
}
