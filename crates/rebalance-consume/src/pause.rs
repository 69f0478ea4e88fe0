//! [`PausedQueues`]: the queues whose pull loops do not pull for now (the stream consumer's
//! `pause`), as the Java lite pull consumer's `pause`: a paused queue's loop does not pull and
//! checks again every [`PAUSED_RECHECK`] (Java: every second); what it buffered already is
//! still consumed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rebalance_core::MessageQueue;

/// How often the loop of a paused queue checks whether it was resumed.
pub(crate) const PAUSED_RECHECK: Duration = Duration::from_millis(100);

/// The paused queues of one consumer. Asking costs one atomic load while nothing is paused.
#[derive(Debug, Default)]
pub(crate) struct PausedQueues {
    inner: Mutex<Inner>,
    /// How many queues are paused (read without the lock).
    count: AtomicUsize,
}

#[derive(Debug, Default)]
struct Inner {
    paused: HashSet<MessageQueue>,
    /// Paused queues released for an offset reset (a seek), not taken back yet: paused again
    /// if the lease that takes them back is the reset's own
    /// ([`after_reset`](rebalance_runtime::QueueLease::after_reset)), forgotten if the queue
    /// comes back any other way (it was someone else's meanwhile).
    carried: HashSet<MessageQueue>,
}

impl PausedQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn counted(&self, inner: &Inner) {
        self.count.store(inner.paused.len(), Ordering::Release);
    }

    /// Pauses `queue`; false when it was paused already.
    pub(crate) fn pause(&self, queue: &MessageQueue) -> bool {
        let mut inner = self.lock();
        let added = inner.paused.insert(queue.clone());
        self.counted(&inner);
        added
    }

    /// Resumes `queue` (paused, or carried across a reset); false when it was neither.
    pub(crate) fn resume(&self, queue: &MessageQueue) -> bool {
        let mut inner = self.lock();
        let removed = inner.paused.remove(queue) | inner.carried.remove(queue);
        self.counted(&inner);
        removed
    }

    /// `queue` was released for an offset reset: a pause it has is carried until the queue is
    /// added again ([`added`](Self::added)).
    pub(crate) fn carry(&self, queue: &MessageQueue) {
        let mut inner = self.lock();
        if inner.paused.remove(queue) {
            inner.carried.insert(queue.clone());
            self.counted(&inner);
        }
    }

    /// Pauses `queue`, released for an offset reset and not taken back yet, from its
    /// take-back on (as [`carry`](Self::carry) would have, had it been paused before); false
    /// when it was paused (or carried) already.
    pub(crate) fn pause_carried(&self, queue: &MessageQueue) -> bool {
        let mut inner = self.lock();
        !inner.paused.contains(queue) && inner.carried.insert(queue.clone())
    }

    /// `queue` was added with a new lease: a pause carried across its reset holds again when
    /// `after_reset` (the reset's own take-back), and is forgotten otherwise.
    pub(crate) fn added(&self, queue: &MessageQueue, after_reset: bool) {
        let mut inner = self.lock();
        if inner.carried.remove(queue) && after_reset {
            inner.paused.insert(queue.clone());
            self.counted(&inner);
        }
    }

    /// Whether `queue` is paused.
    pub(crate) fn contains(&self, queue: &MessageQueue) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.lock().paused.contains(queue)
    }

    /// The paused queues, sorted (a queue between its release for a reset and its take-back
    /// is not held, so not listed).
    pub(crate) fn list(&self) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> = self.lock().paused.iter().cloned().collect();
        queues.sort();
        queues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_and_resume_one_queue_at_a_time() {
        let paused = PausedQueues::default();
        let (q0, q1) = (
            MessageQueue::new("T", "b", 0),
            MessageQueue::new("T", "b", 1),
        );
        assert!(!paused.contains(&q0));
        assert!(paused.pause(&q0));
        assert!(!paused.pause(&q0), "paused already");
        assert!(paused.contains(&q0) && !paused.contains(&q1));
        assert_eq!(paused.list(), vec![q0.clone()]);
        assert!(!paused.resume(&q1));
        assert!(paused.resume(&q0));
        assert!(!paused.contains(&q0));
        assert!(paused.list().is_empty());
    }

    #[test]
    fn a_pause_carried_across_a_reset_holds_only_for_the_resets_own_take_back() {
        let paused = PausedQueues::default();
        let q0 = MessageQueue::new("T", "b", 0);
        // Taken back by the reset's own lease: paused again.
        assert!(paused.pause(&q0));
        paused.carry(&q0);
        assert!(!paused.contains(&q0), "not held meanwhile");
        assert!(paused.list().is_empty());
        paused.added(&q0, true);
        assert!(paused.contains(&q0));
        // Not taken back (another member had it): forgotten when it comes back.
        paused.carry(&q0);
        paused.added(&q0, false);
        assert!(!paused.contains(&q0));
        paused.added(&q0, true);
        assert!(!paused.contains(&q0), "forgotten for good");
        // A resume between the release and the take-back wins.
        assert!(paused.pause(&q0));
        paused.carry(&q0);
        assert!(paused.resume(&q0));
        paused.added(&q0, true);
        assert!(!paused.contains(&q0));
        // A queue never paused is not paused by a reset.
        paused.carry(&q0);
        paused.added(&q0, true);
        assert!(!paused.contains(&q0));
    }
}
