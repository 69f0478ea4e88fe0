//! What every consumer's no-op listener does: note each message it is given (one bit per queue
//! offset, so a loss or a duplicate shows), and say when every preloaded message was seen.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::Notify;

/// The messages seen by one consumer run.
pub struct Tally {
    per_queue: u64,
    body_size: usize,
    /// One bit per (queue, offset).
    bits: Vec<Vec<AtomicU64>>,
    unique: AtomicU64,
    deliveries: AtomicU64,
    /// Messages of an unexpected queue or offset, or with a body of the wrong size.
    unexpected: AtomicU64,
    /// Redeliveries after a failed consumption (from the group's retry topic, under its queue
    /// and offset, which do not name the original message).
    redelivered: AtomicU64,
    expected: u64,
    first: OnceLock<Instant>,
    done: Notify,
}

impl Tally {
    /// Expects `per_queue` messages (offsets `0..per_queue`) in each of `queues` queues, each
    /// with a body of `body_size` bytes.
    pub fn new(queues: u32, per_queue: u64, body_size: usize) -> Self {
        let words = per_queue.div_ceil(64) as usize;
        Self {
            per_queue,
            body_size,
            bits: (0..queues)
                .map(|_| (0..words).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            unique: AtomicU64::new(0),
            deliveries: AtomicU64::new(0),
            unexpected: AtomicU64::new(0),
            redelivered: AtomicU64::new(0),
            expected: u64::from(queues) * per_queue,
            first: OnceLock::new(),
            done: Notify::new(),
        }
    }

    /// Notes one delivered message.
    pub fn record(&self, queue_id: i32, offset: i64, body_len: usize) {
        self.first.get_or_init(Instant::now);
        self.deliveries.fetch_add(1, Ordering::Relaxed);
        let (Ok(queue), Ok(offset)) = (usize::try_from(queue_id), u64::try_from(offset)) else {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if body_len != self.body_size || offset >= self.per_queue || queue >= self.bits.len() {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let bit = 1u64 << (offset % 64);
        let word = &self.bits[queue][(offset / 64) as usize];
        if word.fetch_or(bit, Ordering::Relaxed) & bit == 0
            && self.unique.fetch_add(1, Ordering::AcqRel) + 1 == self.expected
        {
            self.done.notify_one();
        }
    }

    /// Notes a redelivery from the group's retry topic: counted apart, as its queue and offset
    /// are the retry topic's. (Only the peer's listener can tell a redelivery apart.)
    #[cfg_attr(not(feature = "peer"), allow(dead_code))]
    pub fn record_redelivery(&self) {
        self.redelivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Redeliveries from the retry topic.
    pub fn redelivered(&self) -> u64 {
        self.redelivered.load(Ordering::Acquire)
    }

    /// Waits until every expected message was seen.
    pub async fn complete(&self) {
        let notified = self.done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.unique.load(Ordering::Acquire) >= self.expected {
            return;
        }
        notified.await;
    }

    /// Distinct expected messages seen.
    pub fn unique(&self) -> u64 {
        self.unique.load(Ordering::Acquire)
    }

    /// Every delivery, duplicates included.
    pub fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::Acquire)
    }

    /// Deliveries that were not one of the expected messages.
    pub fn unexpected(&self) -> u64 {
        self.unexpected.load(Ordering::Acquire)
    }

    /// How many messages are expected.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// When the first message was seen.
    pub fn first(&self) -> Option<Instant> {
        self.first.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn completes_when_every_message_was_seen_once_and_counts_the_rest() {
        let tally = Tally::new(2, 3, 4);
        for (queue, offset) in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 1)] {
            tally.record(queue, offset, 4);
        }
        tally.record(1, 3, 4); // beyond the preload
        tally.record(2, 0, 4); // no such queue
        tally.record(1, 2, 5); // wrong body
        assert_eq!((tally.unique(), tally.unexpected()), (5, 3));
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(10), tally.complete());
        assert!(waiting.await.is_err(), "one message is still missing");
        tally.record(1, 2, 4);
        tally.complete().await;
        assert_eq!((tally.unique(), tally.deliveries()), (6, 10));
    }
}
