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
    queues: Mutex<HashSet<MessageQueue>>,
    /// How many queues are paused (read without the lock).
    count: AtomicUsize,
}

impl PausedQueues {
    /// Pauses `queue`; false when it was paused already.
    pub(crate) fn pause(&self, queue: &MessageQueue) -> bool {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let added = queues.insert(queue.clone());
        self.count.store(queues.len(), Ordering::Release);
        added
    }

    /// Resumes `queue`; false when it was not paused.
    pub(crate) fn resume(&self, queue: &MessageQueue) -> bool {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let removed = queues.remove(queue);
        self.count.store(queues.len(), Ordering::Release);
        removed
    }

    /// Whether `queue` is paused.
    pub(crate) fn contains(&self, queue: &MessageQueue) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(queue)
    }

    /// The paused queues, sorted.
    pub(crate) fn list(&self) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> = self
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
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
}
