//! [`LeaseLink`]: what the consumers of a lease's messages share with its pull loop: where to
//! report what they consumed, and whether the lease is being handed off.

use std::sync::atomic::{AtomicU64, Ordering};

use rebalance_core::MessageQueue;
use tokio::sync::{OwnedMutexGuard, mpsc};

use super::Message;
use crate::QueueLease;

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
    /// The lease's consume guard the batch ran under (when the consumer locks its queues): the
    /// pull loop commits, then drops it, so the queue is never unlocked between the two.
    pub(crate) guard: Option<OwnedMutexGuard<()>>,
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
    /// How many batches reported that they left the listener.
    finished: AtomicU64,
    /// The lease whose consume guard each batch holds, when the consumer locks its queues.
    guarded: Option<QueueLease>,
    /// The lease consumption is recorded on, for the running info.
    recorded: Option<QueueLease>,
}

/// Whether a batch may run, for [`LeaseLink::consume_guard`].
#[derive(Debug)]
pub(crate) enum Guard {
    /// Its queue is not locked: nothing to hold.
    Unneeded,
    /// Held: the runtime does not unlock the queue until it is dropped.
    Held(OwnedMutexGuard<()>),
    /// Refused: the queue is released, or its lock is stale; the batch must not run now.
    Refused,
}

impl LeaseLink {
    pub(crate) fn new(queue: MessageQueue) -> (Self, mpsc::UnboundedReceiver<Ack>) {
        let (acks, receiver) = mpsc::unbounded_channel();
        let link = Self {
            queue,
            acks,
            state: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            guarded: None,
            recorded: None,
        };
        (link, receiver)
    }

    /// Makes each batch hold `lease`'s consume guard (the consumer locks its queues).
    /// Records each batch's outcome on `lease` (see [`QueueLease::record_consumed`]).
    pub(crate) fn recorded_on(mut self, lease: QueueLease) -> Self {
        self.recorded = Some(lease);
        self
    }

    /// Records a batch that left the listener: `ok` consumed, `failed` not, in `spent`.
    pub(crate) fn record_consumed(&self, ok: usize, failed: usize, spent: std::time::Duration) {
        if let Some(lease) = &self.recorded {
            lease.record_consumed(ok as u64, failed as u64, spent);
        }
    }

    pub(crate) fn guarded_by(mut self, lease: QueueLease) -> Self {
        self.guarded = Some(lease);
        self
    }

    /// Waits for the right to run one batch: the lease's consume guard when the consumer locks
    /// its queues; refused once the lease is handed off (before or while waiting), or while its
    /// lock is stale.
    pub(crate) async fn consume_guard(&self) -> Guard {
        let Some(lease) = &self.guarded else {
            return Guard::Unneeded;
        };
        match lease.consume_guard().await {
            Some(guard) if !self.is_dropped() => Guard::Held(guard),
            _ => Guard::Refused,
        }
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
        if ack.finished {
            self.finished.fetch_add(1, Ordering::AcqRel);
        }
        let _ = self.acks.send(ack);
    }

    /// How many batches are in the listener (started and not finished).
    pub(crate) fn in_flight(&self) -> u64 {
        let started = self.state.load(Ordering::Acquire) & !DROPPED;
        started.saturating_sub(self.finished.load(Ordering::Acquire))
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
