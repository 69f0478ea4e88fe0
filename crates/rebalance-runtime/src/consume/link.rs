//! [`LeaseLink`]: what the consumers of a lease's messages share with its pull loop: where to
//! report what they consumed, and whether the lease is being handed off.

use std::sync::atomic::{AtomicU64, Ordering};

use rebalance_core::MessageQueue;
use tokio::sync::mpsc;

use super::Message;

/// Set in [`LeaseLink::state`] once the lease is handed off: no new batch starts.
const DROPPED: u64 = 1 << 63;

/// What a consumer of a batch reports to the lease's pull loop.
#[derive(Debug)]
pub(crate) struct Ack {
    /// The buffer's epoch the batch was taken in.
    pub(crate) epoch: u64,
    /// The batch's first and last offsets: every buffered message between them belongs to it.
    pub(crate) first: i64,
    pub(crate) last: i64,
    /// Messages of the batch that are not consumed and stay buffered: to be consumed again
    /// locally later (their send-back failed), unless the lease is handed off meanwhile.
    pub(crate) retry: Vec<Message>,
    /// Whether the batch has left the listener (false for a batch sent back because it timed
    /// out while the listener still runs).
    pub(crate) finished: bool,
}

impl Ack {
    /// Whether `offset` stays buffered.
    pub(crate) fn keeps(&self, offset: i64) -> bool {
        self.retry.iter().any(|m| m.queue_offset() == offset)
    }
}

/// Shared by a lease's pull loop and the tasks consuming its messages. A new loop (a new
/// lease, or a restart) gets a new link, so an old consumer can never report into it.
#[derive(Debug)]
pub(crate) struct LeaseLink {
    queue: MessageQueue,
    acks: mpsc::UnboundedSender<Ack>,
    /// [`DROPPED`] | the number of batches that started consumption.
    state: AtomicU64,
}

impl LeaseLink {
    pub(crate) fn new(queue: MessageQueue) -> (Self, mpsc::UnboundedReceiver<Ack>) {
        let (acks, receiver) = mpsc::unbounded_channel();
        let link = Self {
            queue,
            acks,
            state: AtomicU64::new(0),
        };
        (link, receiver)
    }

    pub(crate) fn queue(&self) -> &MessageQueue {
        &self.queue
    }

    /// Registers a batch starting consumption; false once the lease is handed off (the batch
    /// is then dropped unprocessed).
    pub(crate) fn begin(&self) -> bool {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                (state & DROPPED == 0).then_some(state + 1)
            })
            .is_ok()
    }

    /// Stops new batches from starting; returns how many started before.
    pub(crate) fn drop_lease(&self) -> u64 {
        self.state.fetch_or(DROPPED, Ordering::AcqRel) & !DROPPED
    }

    /// Whether the lease is handed off.
    pub(crate) fn is_dropped(&self) -> bool {
        self.state.load(Ordering::Acquire) & DROPPED != 0
    }

    /// Reports a batch to the pull loop (ignored when the loop is gone).
    pub(crate) fn report(&self, ack: Ack) {
        let _ = self.acks.send(ack);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_batch_begins_after_the_drop() {
        let (link, _acks) = LeaseLink::new(MessageQueue::new("T", "b", 0));
        assert!(link.begin());
        assert!(link.begin());
        assert_eq!(link.drop_lease(), 2);
        assert!(link.is_dropped());
        assert!(!link.begin());
        assert_eq!(link.drop_lease(), 2);
    }
}
