//! [`InFlight`]: the batches in a listener right now, to name them when a shutdown gives up
//! waiting for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rebalance_core::MessageQueue;
use tokio::time::Instant;

/// One batch in a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) queue: MessageQueue,
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) since: Instant,
}

/// The batches in a push consumer's listener.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    next: AtomicU64,
    batches: Mutex<HashMap<u64, Batch>>,
}

/// A batch's registration: removed when dropped (the call ended, or its task was aborted).
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    registry: &'a InFlight,
    id: u64,
}

impl InFlight {
    /// Registers a batch of `queue` from `first` to `last` entering the listener.
    pub(crate) fn enter(&self, queue: &MessageQueue, first: i64, last: i64) -> Entry<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let batch = Batch {
            queue: queue.clone(),
            first,
            last,
            since: Instant::now(),
        };
        self.batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, batch);
        Entry { registry: self, id }
    }

    /// The batches in the listener now, oldest first.
    pub(crate) fn list(&self) -> Vec<Batch> {
        let mut batches: Vec<Batch> = self
            .batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        batches.sort_by_key(|b| b.since);
        batches
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.registry
            .batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_listed_until_its_entry_is_dropped() {
        let in_flight = InFlight::default();
        let q = MessageQueue::new("T", "b", 0);
        let first = in_flight.enter(&q, 0, 3);
        let second = in_flight.enter(&q, 4, 4);
        assert_eq!(in_flight.list().len(), 2);
        drop(first);
        let left = in_flight.list();
        assert_eq!((left.len(), left[0].first, left[0].last), (1, 4, 4));
        drop(second);
        assert!(in_flight.list().is_empty());
    }
}
