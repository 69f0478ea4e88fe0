//! [`InFlight`]: the batches in a listener right now, to name them when a shutdown gives up
//! waiting for them.

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

/// The batches in a push consumer's listener: a slab (a slot per batch, slots reused), so that
/// entering and leaving costs a short uncontended lock and no hashing (it is on every batch's
/// path).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    slots: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    batches: Vec<Option<Batch>>,
    free: Vec<usize>,
}

/// A batch's registration: removed when dropped (the call ended, or its task was aborted).
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    registry: &'a InFlight,
    slot: usize,
}

impl InFlight {
    /// Registers a batch of `queue` from `first` to `last` entering the listener at `since`.
    pub(crate) fn enter(
        &self,
        queue: &MessageQueue,
        first: i64,
        last: i64,
        since: Instant,
    ) -> Entry<'_> {
        let batch = Batch {
            queue: queue.clone(),
            first,
            last,
            since,
        };
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = match slots.free.pop() {
            Some(slot) => {
                slots.batches[slot] = Some(batch);
                slot
            }
            None => {
                slots.batches.push(Some(batch));
                slots.batches.len() - 1
            }
        };
        Entry {
            registry: self,
            slot,
        }
    }

    /// The batches in the listener now, oldest first.
    pub(crate) fn list(&self) -> Vec<Batch> {
        let mut batches: Vec<Batch> = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .batches
            .iter()
            .flatten()
            .cloned()
            .collect();
        batches.sort_by_key(|b| b.since);
        batches
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let left = {
            let mut slots = self
                .registry
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let left = slots.batches.get_mut(self.slot).and_then(Option::take);
            if left.is_some() {
                slots.free.push(self.slot);
            }
            left
        };
        // Dropped outside the lock.
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_listed_until_its_entry_is_dropped() {
        let in_flight = InFlight::default();
        let q = MessageQueue::new("T", "b", 0);
        let first = in_flight.enter(&q, 0, 3, Instant::now());
        let second = in_flight.enter(&q, 4, 4, Instant::now());
        assert_eq!(in_flight.list().len(), 2);
        drop(first);
        let left = in_flight.list();
        assert_eq!((left.len(), left[0].first, left[0].last), (1, 4, 4));
        drop(second);
        assert!(in_flight.list().is_empty());
    }
}
