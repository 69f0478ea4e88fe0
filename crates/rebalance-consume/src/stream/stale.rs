//! [`StaleLeases`]: leases a seek left behind. Their queue restarts from the sought offset under
//! a new lease (an offset reset of the runtime: the old lease is released, the queue taken again
//! from the new offset), which takes the runtime's task a moment; from the seek on, the stream
//! yields nothing more of the old lease.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use rebalance_runtime::QueueLease;

/// The leases whose messages the stream no longer yields although they are not cancelled yet.
#[derive(Debug, Default)]
pub(crate) struct StaleLeases {
    /// Each lease with how many seeks marked it and were not refused: a seek refused takes back
    /// its own mark only, never that of a seek of the same lease made before it.
    leases: Mutex<Vec<(QueueLease, usize)>>,
    /// How many are kept (read without the lock: none, almost always).
    count: AtomicUsize,
}

impl StaleLeases {
    /// Stops yielding `lease`'s messages.
    pub(crate) fn mark(&self, lease: &QueueLease) {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        leases.retain(|(l, _)| !l.is_cancelled());
        match leases.iter_mut().find(|(l, _)| l.is_same_lease(lease)) {
            Some((_, marks)) => *marks += 1,
            None => leases.push((lease.clone(), 1)),
        }
        self.count.store(leases.len(), Ordering::Release);
    }

    /// Takes back one [`mark`](Self::mark) of `lease` (its seek was refused): its messages are
    /// yielded again unless another seek marked it too.
    pub(crate) fn unmark(&self, lease: &QueueLease) {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, marks)) = leases.iter_mut().find(|(l, _)| l.is_same_lease(lease)) {
            *marks = marks.saturating_sub(1);
        }
        leases.retain(|(l, marks)| *marks > 0 && !l.is_cancelled());
        self.count.store(leases.len(), Ordering::Release);
    }

    /// Whether the messages of `lease` are no longer yielded: it is cancelled (its queue was
    /// taken away), or a seek left it behind.
    pub(crate) fn is_stale(&self, lease: &QueueLease) -> bool {
        if lease.is_cancelled() {
            return true;
        }
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        // The cancelled ones need no entry: a cancelled lease is stale anyway.
        leases.retain(|(l, _)| !l.is_cancelled());
        self.count.store(leases.len(), Ordering::Release);
        leases.iter().any(|(l, _)| l.is_same_lease(lease))
    }
}

#[cfg(test)]
mod tests {
    use rebalance_core::MessageQueue;
    use rebalance_runtime::StartPosition;
    use rebalance_runtime::testing::DetachedLease;

    use super::*;

    #[test]
    fn a_marked_lease_is_stale_until_unmarked_and_a_cancelled_one_always() {
        let q = MessageQueue::new("T", "b", 0);
        let old = DetachedLease::new(q.clone(), StartPosition::Offset(0));
        let new = DetachedLease::new(q, StartPosition::Offset(0));
        let stale = StaleLeases::default();
        assert!(!stale.is_stale(&old.lease()));
        stale.mark(&old.lease());
        stale.mark(&old.lease());
        assert!(stale.is_stale(&old.lease()));
        assert!(!stale.is_stale(&new.lease()), "another lease of the queue");
        stale.unmark(&old.lease());
        assert!(
            stale.is_stale(&old.lease()),
            "marked by two seeks, one refused: the other holds"
        );
        stale.unmark(&old.lease());
        assert!(!stale.is_stale(&old.lease()));
        stale.mark(&old.lease());
        old.cancel();
        assert!(stale.is_stale(&old.lease()));
        let other = DetachedLease::new(MessageQueue::new("T", "b", 1), StartPosition::Offset(0));
        stale.mark(&other.lease());
        assert_eq!(
            stale.count.load(Ordering::Acquire),
            1,
            "the cancelled one is forgotten"
        );
        new.cancel();
        assert!(
            stale.is_stale(&new.lease()),
            "cancelled: stale without a mark"
        );
    }
}
