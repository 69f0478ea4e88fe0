//! The ProcessQueue table: the queues this client holds and the state of each.
//!
//! Compact, since a consumer may hold tens of thousands of queues: per topic, one sorted vector
//! of entries (the queue and its shared [`LeaseState`], 48 bytes), and the few queues being
//! released in a map of their own. Lookups are binary searches; the round adds and removes in
//! batches ([`insert_all`](ProcessQueueTable::insert_all),
//! [`remove_all`](ProcessQueueTable::remove_all)), each one merge of the topic's vector.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;

use rebalance_core::MessageQueue;
use rebalance_core::java::compare_str;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::assignment_source::ReadMode;
use crate::lease::{LeaseState, QueueLease};
use crate::lease_terms::{RemovalReason, StartPosition};
use crate::running::ConsumerActivity;

/// A queue being released: announced to the listener, waiting for its consumer to finish the
/// current batch (ordered consumption) or for its offset to be persisted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release {
    pub(crate) since: Instant,
    /// Why it was announced as removed.
    pub(crate) reason: RemovalReason,
}

/// One held queue (`ProcessQueue` in the Java client): the state it shares with its lease.
#[derive(Debug)]
pub(crate) struct ProcessQueue {
    queue: MessageQueue,
    pub(crate) state: Arc<LeaseState>,
}

impl ProcessQueue {
    /// How the queue is read (pulled, or popped).
    pub(crate) fn read_mode(&self) -> ReadMode {
        self.state.read_mode
    }

    /// Whether the queue is held (not being released).
    pub(crate) fn is_held(&self) -> bool {
        !self.state.is_dropped()
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

    /// Records that the store accepted `offset`.
    pub(crate) fn set_persisted(&self, offset: i64) {
        self.state.set_persisted(offset);
    }

    /// The offset to persist, if the application reported one the store does not have yet.
    pub(crate) fn unpersisted_offset(&self) -> Option<i64> {
        unpersisted_offset(&self.state)
    }

    /// The lease's shared state.
    pub(crate) fn lease_state(&self) -> &Arc<LeaseState> {
        &self.state
    }
}

/// The offset of a lease to persist, if its application reported one the store does not have,
/// or the store took a new one at the last persistence and it is to be written once more
/// ([`LeaseState::set_persisted`]).
fn unpersisted_offset(state: &LeaseState) -> Option<i64> {
    state
        .committed()
        .filter(|&o| Some(o) != state.persisted() || state.unconfirmed())
}

/// A queue being released, as [`ProcessQueueTable::begin_release`] finds it.
#[derive(Debug)]
pub(crate) struct Releasing {
    /// Why and since when.
    pub(crate) release: Release,
    /// Whether its release began with this call (it is to be announced).
    pub(crate) started: bool,
    /// The state it shared with its lease.
    pub(crate) state: Arc<LeaseState>,
}

/// A queue to insert: where its consumption starts, and whether that start is progress the
/// store does not have (see [`ProcessQueueTable::insert_all`]).
#[derive(Debug, Clone)]
pub(crate) struct NewQueue {
    pub(crate) queue: MessageQueue,
    pub(crate) start: StartPosition,
    pub(crate) unsaved: bool,
    pub(crate) read_mode: ReadMode,
    /// Taken back after a release for an offset reset ([`QueueLease::after_reset`]).
    pub(crate) after_reset: bool,
}

/// The order of two queues of one topic: [`MessageQueue`]'s (broker name, then queue id),
/// without comparing the topic again.
pub(crate) fn within_topic(a: &MessageQueue, b: &MessageQueue) -> Ordering {
    let broker = if Arc::ptr_eq(&a.broker_name, &b.broker_name) {
        Ordering::Equal
    } else {
        compare_str(&a.broker_name, &b.broker_name)
    };
    broker.then_with(|| a.queue_id.cmp(&b.queue_id))
}

/// The table, by topic. Owned by the consumer's service task; nobody else mutates it.
#[derive(Debug, Default)]
pub(crate) struct ProcessQueueTable {
    /// Per topic, its entries sorted by queue; never an empty vector.
    topics: HashMap<Arc<str>, Vec<ProcessQueue>>,
    /// The entries being released.
    releasing: HashMap<MessageQueue, Release>,
    /// Whether the held set changed since [`take_changed`](Self::take_changed).
    changed: bool,
    /// Counts the changes to the table.
    clock: u64,
    /// Per topic ever held, the value of `clock` at its last change.
    stamps: HashMap<Arc<str>, u64>,
    /// Operators' offset resets being applied: each queue is released with its reset offset
    /// as its final one, whatever its lease committed (an in-flight batch must not write over
    /// it). Kept beside the entries since resets are rare.
    resets: HashMap<MessageQueue, i64>,
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

    /// Makes `offset` the final offset of `queue` when it is released (an operator's reset).
    pub(crate) fn set_reset(&mut self, queue: &MessageQueue, offset: i64) {
        self.resets.insert(queue.clone(), offset);
    }

    /// The final offset to persist when `queue` is released (`state`: the one it shares with
    /// its lease): an operator's reset whatever the store holds, else what its lease committed
    /// that the store does not have yet.
    pub(crate) fn final_offset_of(&self, queue: &MessageQueue, state: &LeaseState) -> Option<i64> {
        if let Some(&offset) = self.resets.get(queue) {
            return Some(offset);
        }
        unpersisted_offset(state)
    }

    /// Inserts a newly added queue and returns its lease (see [`insert_all`](Self::insert_all)).
    #[cfg(test)]
    pub(crate) fn insert(
        &mut self,
        queue: MessageQueue,
        start: StartPosition,
        parent: &Arc<CancellationToken>,
        lock_valid_until: Option<Instant>,
        unsaved: bool,
    ) -> QueueLease {
        let new = NewQueue {
            queue,
            start,
            unsaved,
            read_mode: ReadMode::Pull,
            after_reset: false,
        };
        let mut leases = self.insert_all(vec![new], parent, lock_valid_until);
        leases.remove(0)
    }

    /// Inserts newly added queues and returns their leases, in the order given; a queue
    /// already in the table is replaced. `lock_valid_until`: until when their broker locks are
    /// trusted without renewal, if they are locked; `parent`: the consumer's token, which the
    /// leases' own tokens are children of.
    ///
    /// An `Offset` start is taken to be what the store holds, unless `unsaved` says it is
    /// progress the store does not have (a final offset it refused when the queue was released
    /// and that this client takes back): then it counts as committed and is persisted like a
    /// commit.
    pub(crate) fn insert_all(
        &mut self,
        queues: Vec<NewQueue>,
        parent: &Arc<CancellationToken>,
        lock_valid_until: Option<Instant>,
    ) -> Vec<QueueLease> {
        let mut leases = Vec::with_capacity(queues.len());
        // Usually one topic: a short list, not a map.
        let mut by_topic: Vec<(Arc<str>, Vec<ProcessQueue>)> = Vec::new();
        for NewQueue {
            queue,
            start,
            unsaved,
            read_mode,
            after_reset,
        } in queues
        {
            let state = Arc::new(
                LeaseState::with_activity(lock_valid_until, self.activity.clone())
                    .with_read_mode(read_mode)
                    .with_after_reset(after_reset),
            );
            match start {
                StartPosition::Offset(o) if unsaved => {
                    state.committed.store(o, AtomicOrdering::Release);
                }
                StartPosition::Offset(o) => state.set_read_from_store(o),
                _ => {}
            }
            leases.push(QueueLease::new(
                queue.clone(),
                start,
                parent.clone(),
                state.clone(),
            ));
            if !self.releasing.is_empty() {
                self.releasing.remove(&queue);
            }
            if !self.resets.is_empty() {
                self.resets.remove(&queue);
            }
            let at = match by_topic.iter().rposition(|(t, _)| *t == queue.topic) {
                Some(at) => at,
                None => {
                    by_topic.push((queue.topic.clone(), Vec::new()));
                    by_topic.len() - 1
                }
            };
            by_topic[at].1.push(ProcessQueue { queue, state });
        }
        for (topic, mut new) in by_topic {
            // Stable: of two entries of one queue, the later one given is kept.
            new.sort_by(|a, b| within_topic(&a.queue, &b.queue));
            let old = self.topics.remove(&topic).unwrap_or_default();
            self.topics.insert(topic.clone(), merge(old, new));
            self.touch(&topic);
        }
        leases
    }

    /// Marks a held queue as being released for `reason`: cancels its lease. Returns false when
    /// the queue is not held (absent or already being released).
    #[cfg(test)]
    pub(crate) fn start_release(
        &mut self,
        queue: &MessageQueue,
        now: Instant,
        reason: RemovalReason,
    ) -> bool {
        self.begin_release(queue, now, reason)
            .is_some_and(|r| r.started)
    }

    /// Like `start_release` (a test helper), returning the queue's release (begun now
    /// or earlier); `None` when the table has no such queue, or it is not held and not being
    /// released.
    pub(crate) fn begin_release(
        &mut self,
        queue: &MessageQueue,
        now: Instant,
        reason: RemovalReason,
    ) -> Option<Releasing> {
        let state = self.get(queue)?.state.clone();
        if state.is_dropped() {
            let release = self.release_of(queue)?;
            return Some(Releasing {
                release,
                started: false,
                state,
            });
        }
        state.drop_lease();
        let release = Release { since: now, reason };
        self.releasing.insert(queue.clone(), release);
        self.touch(&queue.topic);
        Some(Releasing {
            release,
            started: true,
            state,
        })
    }

    /// Why and since when `queue` is being released, if it is.
    pub(crate) fn release_of(&self, queue: &MessageQueue) -> Option<Release> {
        self.releasing.get(queue).copied()
    }

    pub(crate) fn get(&self, queue: &MessageQueue) -> Option<&ProcessQueue> {
        let entries = self.topics.get(&queue.topic)?;
        let at = entries
            .binary_search_by(|e| within_topic(&e.queue, queue))
            .ok()?;
        entries.get(at)
    }

    /// Removes `queue`'s entry (see [`remove_all`](Self::remove_all) for many).
    #[cfg(test)]
    pub(crate) fn remove(&mut self, queue: &MessageQueue) -> bool {
        self.remove_all(std::slice::from_ref(queue)) == 1
    }

    /// Removes the entries of `queues`; returns how many there were. One walk over each topic's
    /// entries (the queues are sorted first, unless they are already).
    pub(crate) fn remove_all(&mut self, queues: &[MessageQueue]) -> usize {
        let mut by_topic: Vec<(&str, Vec<&MessageQueue>)> = Vec::new();
        for q in queues {
            match by_topic.iter_mut().rev().find(|(t, _)| *t == &*q.topic) {
                Some((_, list)) => list.push(q),
                None => by_topic.push((&*q.topic, vec![q])),
            }
        }
        let mut removed = 0;
        for (topic, mut gone) in by_topic {
            let Some(entries) = self.topics.get_mut(topic) else {
                continue;
            };
            if !gone.is_sorted_by(|a, b| within_topic(a, b).is_le()) {
                gone.sort_by(|a, b| within_topic(a, b));
            }
            let before = entries.len();
            let mut next = gone.iter().peekable();
            entries.retain(|e| {
                while next
                    .peek()
                    .is_some_and(|q| within_topic(q, &e.queue).is_lt())
                {
                    next.next();
                }
                !next
                    .peek()
                    .is_some_and(|q| within_topic(q, &e.queue).is_eq())
            });
            let count = before - entries.len();
            if count == 0 {
                continue;
            }
            removed += count;
            if !self.releasing.is_empty() {
                for q in &gone {
                    self.releasing.remove(*q);
                }
            }
            if !self.resets.is_empty() {
                for q in &gone {
                    self.resets.remove(*q);
                }
            }
            if entries.is_empty() {
                self.topics.remove(topic);
            } else if entries.capacity() > entries.len() + entries.len() / 8 {
                entries.shrink_to_fit();
            }
            self.touch(topic);
        }
        removed
    }

    /// Records a change of `topic`'s entries.
    fn touch(&mut self, topic: &str) {
        self.clock += 1;
        self.changed = true;
        match self.stamps.get_mut(topic) {
            Some(stamp) => *stamp = self.clock,
            None => {
                self.stamps.insert(Arc::from(topic), self.clock);
            }
        }
    }

    /// A value that changes whenever `topic`'s entries change (an entry added, released or
    /// removed), and never comes back: equal stamps mean an unchanged topic.
    pub(crate) fn stamp(&self, topic: &str) -> u64 {
        self.stamps.get(topic).copied().unwrap_or(0)
    }

    /// Every entry, held or being released.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&MessageQueue, &ProcessQueue)> {
        self.topics.values().flatten().map(|e| (&e.queue, e))
    }

    /// Entries of `topic` (held or being released), sorted.
    pub(crate) fn entries_of(
        &self,
        topic: &str,
    ) -> impl Iterator<Item = (&MessageQueue, &ProcessQueue)> {
        self.topics
            .get(topic)
            .into_iter()
            .flatten()
            .map(|e| (&e.queue, e))
    }

    /// Entries of `topic` (held or being released), sorted.
    pub(crate) fn queues_of(&self, topic: &str) -> Vec<MessageQueue> {
        self.entries_of(topic).map(|(q, _)| q.clone()).collect()
    }

    /// The topics with entries.
    pub(crate) fn topics(&self) -> BTreeSet<String> {
        self.topics.keys().map(|t| t.to_string()).collect()
    }

    /// Held queues by topic, sorted: what the application sees as the assignment.
    pub(crate) fn held(&self) -> BTreeMap<String, Vec<MessageQueue>> {
        self.topics
            .iter()
            .filter_map(|(topic, entries)| {
                let mut queues = Vec::with_capacity(entries.len());
                queues.extend(
                    entries
                        .iter()
                        .filter(|e| e.is_held())
                        .map(|e| e.queue.clone()),
                );
                queues.shrink_to_fit();
                (!queues.is_empty()).then(|| (topic.to_string(), queues))
            })
            .collect()
    }

    /// The held queues of `topic` (every topic when `None`) that are popped, sorted.
    pub(crate) fn shared(&self, topic: Option<&str>) -> Vec<MessageQueue> {
        let mut shared: Vec<MessageQueue> = self
            .topics
            .iter()
            .filter(|(t, _)| topic.is_none_or(|topic| ***t == *topic))
            .flat_map(|(_, entries)| entries)
            .filter(|e| e.is_held() && e.read_mode() == ReadMode::Pop)
            .map(|e| e.queue.clone())
            .collect();
        shared.sort();
        shared
    }

    /// The lease states of the queues of `held` (what [`held`](Self::held) returned since the
    /// last change), in its order, for the running info.
    pub(crate) fn held_states(
        &self,
        held: &BTreeMap<String, Vec<MessageQueue>>,
    ) -> Vec<Arc<LeaseState>> {
        let mut states = Vec::with_capacity(held.values().map(Vec::len).sum());
        for topic in held.keys() {
            if let Some(entries) = self.topics.get(topic.as_str()) {
                states.extend(
                    entries
                        .iter()
                        .filter(|e| e.is_held())
                        .map(|e| e.state.clone()),
                );
            }
        }
        states
    }

    /// Whether the held set changed since the last call.
    pub(crate) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.topics.values().map(Vec::len).sum()
    }
}

/// Merges `new` (sorted, maybe with repeated queues) into `old` (sorted, no repeats): one
/// entry per queue, the last of `new` where a queue is in both or repeated.
fn merge(old: Vec<ProcessQueue>, new: Vec<ProcessQueue>) -> Vec<ProcessQueue> {
    let mut merged: Vec<ProcessQueue> = Vec::with_capacity(old.len() + new.len());
    let mut old = old.into_iter().peekable();
    let mut new = new.into_iter().peekable();
    loop {
        let next = match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(_), None) => old.next(),
            (None, Some(_)) => new.next(),
            (Some(o), Some(n)) => match within_topic(&o.queue, &n.queue) {
                Ordering::Less => old.next(),
                Ordering::Greater => new.next(),
                Ordering::Equal => {
                    old.next();
                    new.next()
                }
            },
        };
        let Some(entry) = next else { break };
        match merged.last_mut() {
            Some(last) if within_topic(&last.queue, &entry.queue) == Ordering::Equal => {
                *last = entry;
            }
            _ => merged.push(entry),
        }
    }
    merged.shrink_to_fit();
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn release_cancels_the_lease_once() {
        let mut table = ProcessQueueTable::default();
        let root = Arc::new(CancellationToken::new());
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
        let release = table.release_of(&q).expect("releasing");
        assert_eq!(release.reason, RemovalReason::Lost);
    }

    #[test]
    fn a_lease_is_the_same_as_its_clones_only() {
        let mut table = ProcessQueueTable::default();
        let root = Arc::new(CancellationToken::new());
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
        let root = Arc::new(CancellationToken::new());
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

    /// A new offset the store took is written once more at the next persistence (a pull's
    /// older commit the broker handled in between is overwritten), then not again until it
    /// changes.
    #[test]
    fn a_new_offset_is_persisted_twice_then_no_more() {
        let mut table = ProcessQueueTable::default();
        let root = Arc::new(CancellationToken::new());
        let q = MessageQueue::new("T", "b", 0);
        let lease = table.insert(q.clone(), StartPosition::Offset(5), &root, None, false);
        let pq = |table: &ProcessQueueTable| table.get(&q).unwrap().unpersisted_offset();
        lease.commit(9);
        assert_eq!(pq(&table), Some(9));
        table.get(&q).unwrap().set_persisted(9);
        assert_eq!(pq(&table), Some(9), "written once more");
        table.get(&q).unwrap().set_persisted(9);
        assert_eq!(pq(&table), None, "then left alone");
        lease.commit(12);
        assert_eq!(pq(&table), Some(12));
    }

    #[test]
    fn an_unsaved_start_is_persisted_like_a_commit() {
        let mut table = ProcessQueueTable::default();
        let root = Arc::new(CancellationToken::new());
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

    fn new(queue: &MessageQueue) -> NewQueue {
        NewQueue {
            queue: queue.clone(),
            start: StartPosition::Latest,
            unsaved: false,
            read_mode: ReadMode::Pull,
            after_reset: false,
        }
    }

    #[test]
    fn batches_keep_each_topic_sorted_and_change_its_stamp_only() {
        let mut table = ProcessQueueTable::default();
        let root = Arc::new(CancellationToken::new());
        let q = |t: &str, b: &str, i| MessageQueue::new(t, b, i);
        let first = [
            q("T", "b", 5),
            q("T", "a", 9),
            q("U", "a", 0),
            q("T", "b", 1),
        ];
        let leases = table.insert_all(first.iter().map(new).collect(), &root, None);
        let order: Vec<&MessageQueue> = leases.iter().map(|l| l.queue()).collect();
        assert_eq!(
            order,
            first.iter().collect::<Vec<_>>(),
            "leases in the order given"
        );
        let (t, u) = (table.stamp("T"), table.stamp("U"));
        assert!(t > 0 && u > 0 && table.stamp("V") == 0);
        // Merged into the sorted entries; a queue given again replaces its entry.
        let again = table.insert_all(
            vec![new(&q("T", "a", 2)), new(&q("T", "b", 1))],
            &root,
            None,
        );
        assert_eq!(
            table.queues_of("T"),
            [
                q("T", "a", 2),
                q("T", "a", 9),
                q("T", "b", 1),
                q("T", "b", 5)
            ]
        );
        assert_eq!(table.len(), 5);
        assert!(table.stamp("T") > t && table.stamp("U") == u);
        assert!(!again[1].is_same_lease(&leases[3]));
        // The entry is the new lease's: its commit is what the table sees.
        again[1].commit(7);
        assert_eq!(
            table
                .get(&q("T", "b", 1))
                .and_then(|pq| pq.unpersisted_offset()),
            Some(7)
        );
        // Removed in any order; absent queues are ignored.
        let t = table.stamp("T");
        assert_eq!(
            table.remove_all(&[q("T", "b", 5), q("T", "a", 2), q("T", "c", 0)]),
            2
        );
        assert_eq!(table.queues_of("T"), [q("T", "a", 9), q("T", "b", 1)]);
        assert!(table.stamp("T") > t);
        assert_eq!(table.remove_all(&[q("U", "a", 0)]), 1);
        assert!(table.topics().iter().eq(["T"]));
        // A topic emptied and filled again never gets an old stamp back.
        let u = table.stamp("U");
        let _lease = table.insert(q("U", "a", 0), StartPosition::Latest, &root, None, false);
        assert!(table.stamp("U") > u);
        assert_eq!(table.held()["T"], [q("T", "a", 9), q("T", "b", 1)]);
    }
}
