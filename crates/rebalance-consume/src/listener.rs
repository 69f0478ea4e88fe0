//! The application's message listeners: [`ConcurrentListener`] and [`OrderlyListener`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_runtime::QueueLease;

use super::Message;
use crate::link::LeaseLink;

/// What a [`ConcurrentListener`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumeResult {
    /// Consumed (up to the context's [`ack_index`](ConcurrentContext::ack_index), when set).
    Success,
    /// Not consumed: every message of the batch is sent back for redelivery.
    ReconsumeLater,
}

/// What an [`OrderlyListener`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderlyResult {
    /// Consumed: the queue goes on with the next batch.
    Success,
    /// Not consumed: the same batch is tried again after the suspend time (the context's, or
    /// the consumer's [`suspend_time`](super::ConsumeOptions::suspend_time)). A message
    /// suspended more than `max_reconsume_times` times goes to the dead-letter topic instead.
    Suspend,
}

/// Per-call settings of a [`ConcurrentListener`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrentContext {
    queue: MessageQueue,
    /// On [`Success`](ConsumeResult::Success): only the messages up to this index (included)
    /// are consumed, the others are sent back. `None` (default): all of them.
    pub ack_index: Option<usize>,
    /// The delay level of the messages sent back: 0 (default) lets the source decide
    /// (RocketMQ: 10 s for a first redelivery, longer after each), a positive level picks one
    /// of `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`, a negative one sends
    /// them straight to the dead-letter topic.
    pub delay_level: i32,
}

impl ConcurrentContext {
    pub(crate) fn new(queue: MessageQueue) -> Self {
        Self {
            queue,
            ack_index: None,
            delay_level: 0,
        }
    }

    /// The queue the batch was pulled from.
    pub fn queue(&self) -> &MessageQueue {
        &self.queue
    }

    /// The context of a worker's next batch, of `queue`: the settings as new, and the queue
    /// cloned only if it is another one (a clone counts on the names every worker shares).
    pub(crate) fn renew(&mut self, queue: &MessageQueue) {
        // Every field named: a field added later must be renewed too, or it would carry a
        // setting of one listener call into the next.
        let Self {
            queue: mine,
            ack_index,
            delay_level,
        } = self;
        if *mine != *queue {
            *mine = queue.clone();
        }
        *ack_index = None;
        *delay_level = 0;
    }

    /// How many messages of a batch of `len` are consumed, given `result`.
    pub(crate) fn consumed(&self, result: ConsumeResult, len: usize) -> usize {
        match result {
            ConsumeResult::Success => self.ack_index.map_or(len, |i| i.saturating_add(1).min(len)),
            ConsumeResult::ReconsumeLater => 0,
        }
    }
}

/// Per-call settings of an [`OrderlyListener`].
#[derive(Clone)]
pub struct OrderlyContext {
    queue: MessageQueue,
    /// On [`Suspend`](OrderlyResult::Suspend): how long to wait before trying the batch again;
    /// `None` (default): the consumer's `suspend_time`. Clamped to 10 ms – 30 s.
    pub suspend_time: Option<Duration>,
    /// The link of the lease the batch was pulled under (the stream consumer's ordered
    /// batches give up waiting for the application when the lease is cancelled, and count
    /// their settling on it for an explicit commit).
    link: Arc<LeaseLink>,
    /// Set by the stream consumer's feed when the batch never reached the application (the
    /// stream is gone, or the batch was withdrawn): it is consumed again unchanged, not
    /// counted as a suspension.
    pub(crate) undelivered: bool,
}

impl fmt::Debug for OrderlyContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrderlyContext")
            .field("queue", &self.queue)
            .field("suspend_time", &self.suspend_time)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OrderlyContext {
    fn eq(&self, other: &Self) -> bool {
        self.queue == other.queue && self.suspend_time == other.suspend_time
    }
}

impl Eq for OrderlyContext {}

impl OrderlyContext {
    /// The context of a batch pulled under `link`'s lease.
    pub(crate) fn of_link(link: &Arc<LeaseLink>) -> Self {
        Self {
            queue: link.queue().clone(),
            suspend_time: None,
            link: link.clone(),
            undelivered: false,
        }
    }

    /// The lease the batch was pulled under.
    pub(crate) fn lease(&self) -> &QueueLease {
        self.link.lease()
    }

    /// Its loop's link.
    pub(crate) fn link(&self) -> &Arc<LeaseLink> {
        &self.link
    }

    /// The queue the batch was pulled from.
    pub fn queue(&self) -> &MessageQueue {
        &self.queue
    }
}

/// Consumes messages in any order, several batches at once.
///
/// A panic is contained and counts as [`ConsumeResult::ReconsumeLater`]. A message of the
/// group's retry topic is shown under the topic it came from ([`Message::topic`]); its
/// [`queue`](Message::queue) is still the retry topic's.
///
/// It is called on the runtime's threads: it must not block one (a synchronous client,
/// `std::thread::sleep`), or every task of that thread waits with it; move blocking work to
/// `tokio::task::spawn_blocking` and await it.
#[async_trait]
pub trait ConcurrentListener: Send + Sync + 'static {
    /// Consumes a batch (at most `consume_batch_size` messages of one queue, in offset order).
    async fn consume(&self, messages: &[Message], context: &mut ConcurrentContext)
    -> ConsumeResult;
}

/// Consumes the messages of each queue in order, one batch of a queue at a time.
///
/// A panic is contained and counts as [`OrderlyResult::Suspend`]. Like a
/// [`ConcurrentListener`], it must not block the runtime's thread it is called on.
#[async_trait]
pub trait OrderlyListener: Send + Sync + 'static {
    /// Consumes a batch (at most `consume_batch_size` messages of one queue, in offset order).
    async fn consume(&self, messages: &[Message], context: &mut OrderlyContext) -> OrderlyResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ack_index_limits_a_success() {
        let mut context = ConcurrentContext::new(MessageQueue::new("T", "b", 0));
        assert_eq!(context.consumed(ConsumeResult::Success, 4), 4);
        assert_eq!(context.consumed(ConsumeResult::ReconsumeLater, 4), 0);
        context.ack_index = Some(1);
        assert_eq!(context.consumed(ConsumeResult::Success, 4), 2);
        context.ack_index = Some(usize::MAX);
        assert_eq!(context.consumed(ConsumeResult::Success, 4), 4);
        assert_eq!(context.consumed(ConsumeResult::ReconsumeLater, 4), 0);
    }

    #[test]
    fn a_renewed_context_is_a_new_one_for_its_queue() {
        let mut context = ConcurrentContext::new(MessageQueue::new("T", "b", 0));
        context.ack_index = Some(1);
        context.delay_level = 3;
        let other = MessageQueue::new("T", "b", 1);
        context.renew(&other);
        assert_eq!(context, ConcurrentContext::new(other.clone()));
        context.delay_level = -1;
        context.renew(&other);
        assert_eq!(context, ConcurrentContext::new(other));
    }
}
