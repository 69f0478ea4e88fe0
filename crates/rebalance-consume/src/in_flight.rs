//! [`InFlight`]: the batches in a listener right now, to name them when a shutdown gives up
//! waiting for them.

use std::sync::atomic::{AtomicUsize, Ordering};
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

/// The batches in a push consumer's listener: slabs (a slot per batch, slots reused), up to 8,
/// each on cache lines of its own, a thread entering its batches in the slab of its number
/// (threads are numbered round-robin as they first enter a batch, in any consumer), so that
/// entering and leaving costs a short lock that the other runtime threads most often do not
/// take, and no hashing (it is on every batch's path), and two runtime threads consuming side by
/// side do not pass one lock's cache line back and forth.
///
/// A slot keeps the queue of its last batch when the batch leaves: the next batch entered in it
/// is most often of the same queue (a worker takes a pull's messages one after another), and
/// then nothing is cloned. A [`MessageQueue`] clone counts on its topic's and broker's names,
/// which every thread consuming the topic shares: cloning one per batch made the two threads
/// of a runtime pass those names' cache lines back and forth at every message.
#[derive(Debug)]
pub(crate) struct InFlight {
    shards: Box<[Shard]>,
}

/// One thread's slab, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Slots>);

#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    /// The slots without a batch, the last freed at the end.
    free: Vec<usize>,
}

/// A batch's place: its queue (kept when the batch leaves), and the batch while it is in.
#[derive(Debug)]
struct Slot {
    queue: MessageQueue,
    /// First and last offsets, and when the batch entered.
    batch: Option<(i64, i64, Instant)>,
}

/// Slabs in an [`InFlight`]: a thread enters its batches in the slab of its number (threads
/// are numbered as they first enter one), so a few runtime threads each have their own.
const SHARDS: usize = 8;

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_SHARD: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed) % SHARDS;
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// A batch's registration: removed when dropped (the call ended, or its task was aborted).
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    shard: &'a Shard,
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
        let index = THREAD_SHARD.try_with(|shard| *shard).unwrap_or(0);
        let shard = &self.shards[index % self.shards.len()];
        let mut slots = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
        let batch = Some((first, last, since));
        let slot = match slots.free.pop() {
            Some(slot) => {
                let place = &mut slots.slots[slot];
                // Equal names are one pointer comparison each when shared, as a lease's are.
                if place.queue != *queue {
                    place.queue = queue.clone();
                }
                place.batch = batch;
                slot
            }
            None => {
                slots.slots.push(Slot {
                    queue: queue.clone(),
                    batch,
                });
                slots.slots.len() - 1
            }
        };
        Entry { shard, slot }
    }

    /// The batches in the listener now, oldest first.
    pub(crate) fn list(&self) -> Vec<Batch> {
        let mut batches: Vec<Batch> = self
            .shards
            .iter()
            .flat_map(|shard| {
                let slots = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
                slots
                    .slots
                    .iter()
                    .filter_map(|slot| {
                        let (first, last, since) = slot.batch?;
                        Some(Batch {
                            queue: slot.queue.clone(),
                            first,
                            last,
                            since,
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        batches.sort_by_key(|b| b.since);
        batches
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let mut slots = self.shard.0.lock().unwrap_or_else(PoisonError::into_inner);
        let left = slots
            .slots
            .get_mut(self.slot)
            .and_then(|slot| slot.batch.take());
        if left.is_some() {
            slots.free.push(self.slot);
        }
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

    #[test]
    fn a_slot_used_again_names_its_new_batch_s_queue() {
        let in_flight = InFlight::default();
        let (q0, q1) = (
            MessageQueue::new("T", "b", 0),
            MessageQueue::new("T", "b", 1),
        );
        drop(in_flight.enter(&q0, 0, 0, Instant::now()));
        let entry = in_flight.enter(&q1, 5, 6, Instant::now());
        let listed = in_flight.list();
        assert_eq!(
            (listed.len(), &listed[0].queue, listed[0].first),
            (1, &q1, 5)
        );
        drop(entry);
        let again = in_flight.enter(&q1, 7, 7, Instant::now());
        assert_eq!(in_flight.list()[0].queue, q1);
        drop(again);
        assert!(in_flight.list().is_empty());
    }

    #[test]
    fn a_batch_entered_on_one_thread_leaves_from_another() {
        let registry = InFlight::default();
        let in_flight = &registry;
        let q = MessageQueue::new("T", "b", 0);
        let entry = in_flight.enter(&q, 1, 2, Instant::now());
        std::thread::scope(|scope| {
            scope.spawn(move || {
                // Entered here in another slab, then left; the first batch is still listed.
                drop(in_flight.enter(&q, 3, 3, Instant::now()));
                assert_eq!(in_flight.list().len(), 1);
                drop(entry);
            });
        });
        assert!(in_flight.list().is_empty());
        let again = in_flight.enter(&MessageQueue::new("T", "b", 1), 4, 4, Instant::now());
        assert_eq!(in_flight.list()[0].first, 4);
        drop(again);
    }

    #[test]
    fn the_batches_of_every_thread_are_listed_oldest_first() {
        let in_flight = InFlight::default();
        let start = Instant::now();
        let (entered, leave) = (std::sync::Barrier::new(5), std::sync::Barrier::new(5));
        std::thread::scope(|scope| {
            for i in 0..4i64 {
                let (in_flight, entered, leave) = (&in_flight, &entered, &leave);
                scope.spawn(move || {
                    let queue = MessageQueue::new("T", "b", i as i32);
                    let since = start + std::time::Duration::from_millis(10 * (4 - i) as u64);
                    let entry = in_flight.enter(&queue, i, i, since);
                    entered.wait();
                    leave.wait();
                    drop(entry);
                });
            }
            entered.wait();
            let firsts: Vec<i64> = in_flight.list().iter().map(|b| b.first).collect();
            assert_eq!(firsts, [3, 2, 1, 0]);
            leave.wait();
        });
        assert!(in_flight.list().is_empty());
    }
}
