//! Ordered consumption of one queue: one batch at a time, under the lease's consume guard.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::calls;
use super::concurrent::restore_topics;
use super::shared::Shared;
use super::{Message, OrderlyContext, OrderlyListener, OrderlyResult, SendBack};
use crate::link::LeaseLink;
use rebalance_runtime::QueueLease;
use rebalance_runtime::containment::caught;

/// How long a queue whose consume guard is refused (its lock is stale) waits before it asks
/// again.
pub(crate) const NO_GUARD_RETRY: Duration = Duration::from_millis(500);

/// A batch after its listener call. The guard (when there is one) is still held: the pull loop
/// commits, then drops it, so the queue is never unlocked between the two.
pub(crate) struct Done {
    pub(crate) epoch: u64,
    pub(crate) first: i64,
    pub(crate) last: i64,
    /// The messages to consume again (in order), and after how long; empty when the batch is
    /// consumed (or dead-lettered).
    pub(crate) retry: Vec<Message>,
    pub(crate) suspend: Duration,
    pub(crate) guard: Option<rebalance_runtime::ConsumeGuard>,
    pub(crate) _permit: Option<OwnedSemaphorePermit>,
}

/// Consumes one batch in order: a permit of the consumer's concurrency, the lease's guard,
/// then the listener. A batch whose lease ends before it has a permit is not consumed.
pub(crate) async fn consume(
    shared: Arc<Shared>,
    listener: Arc<dyn OrderlyListener>,
    permits: Arc<Semaphore>,
    link: Arc<LeaseLink>,
    epoch: u64,
    messages: Vec<Message>,
) -> Done {
    let lease = link.lease();
    let first = messages.first().map_or(0, Message::queue_offset);
    let last = messages.last().map_or(0, Message::queue_offset);
    let not_now = |messages, permit| Done {
        epoch,
        first,
        last,
        retry: messages,
        suspend: NO_GUARD_RETRY,
        guard: None,
        _permit: permit,
    };
    // A lease that ends while its batch waits for a permit gives the batch up, unprocessed:
    // its hand-off waits for batches in the listener, not for other queues' listener calls.
    let permit = tokio::select! {
        biased;
        _ = lease.cancelled() => {
            tracing::debug!(queue = ?lease.queue(), first, "the lease ended while its batch waited for a permit; the batch is given up");
            return not_now(messages, None);
        }
        permit = permits.acquire_owned() => permit,
    };
    let Ok(permit) = permit else {
        return not_now(messages, None);
    };
    let Some(guard) = lease.consume_guard().await else {
        return not_now(messages, Some(permit));
    };
    let mut messages = messages;
    restore_topics(&mut messages);
    let mut context = OrderlyContext::of_link(&link);
    let started = tokio::time::Instant::now();
    let in_flight = shared.in_flight.enter(lease.queue(), first, last, started);
    let call = lease.processing(listener.consume(&messages, &mut context));
    let result = match caught(call).await {
        Ok(result) => result,
        Err(panic) => {
            tracing::error!(queue = ?lease.queue(), first, panic = %panic, "the orderly listener panicked; suspending the queue");
            OrderlyResult::Suspend
        }
    };
    drop(in_flight);
    if context.undelivered {
        // The batch never reached the application (the stream consumer's feed): the same
        // messages again after the suspension, none of them counted as redelivered; a batch
        // nobody saw must never count towards the dead letters.
        return Done {
            epoch,
            first,
            last,
            retry: messages,
            suspend: shared.options.suspend(None),
            guard: Some(guard),
            _permit: Some(permit),
        };
    }
    let (consumed, failed) = match result {
        OrderlyResult::Success => (messages.len(), 0),
        OrderlyResult::Suspend => (0, messages.len()),
    };
    let took = started.elapsed();
    link.metrics().consumed(consumed, failed, took);
    lease.record_consumed(consumed as u64, failed as u64, took);
    let retry = match result {
        OrderlyResult::Success => Vec::new(),
        OrderlyResult::Suspend => past_the_limit(&shared, lease, messages).await,
    };
    Done {
        epoch,
        first,
        last,
        retry,
        suspend: shared.options.suspend(context.suspend_time),
        guard: Some(guard),
        _permit: Some(permit),
    }
}

/// A suspended batch: each message suspended `max_reconsume_times` times already goes
/// straight to the dead-letter topic (dropped when broadcasting); the others are consumed
/// again, counted once more. Returns the messages to consume again.
///
/// Straight to the dead letters, never through the retry topic: a broker decides with the
/// reconsume count of the message it stored (0 for a message never sent back), not with the
/// suspensions counted here, so a plain send-back would put the message in `%RETRY%{group}`,
/// the queue would commit past it, and it would come back after its successors. The Java
/// client sends it to the retry topic as a new message whose count is the client's, which a
/// broker dead-letters on arrival; [`DEAD_LETTER_LEVEL`](super::DEAD_LETTER_LEVEL) says the
/// same with a send-back, and the RocketMQ transport's fallback send carries the count.
async fn past_the_limit(
    shared: &Shared,
    lease: &QueueLease,
    messages: Vec<Message>,
) -> Vec<Message> {
    let max = shared.options.max_reconsume_times;
    let mut retry = Vec::with_capacity(messages.len());
    // Once a message could not be dead-lettered, none after it is: they would reach the
    // dead letters before it, and it would be consumed again after them (found by review).
    let mut blocked = false;
    for message in messages {
        if message.reconsume_times() < max {
            let times = message.reconsume_times() + 1;
            retry.push(message.with_reconsume_times(times));
            continue;
        }
        if blocked {
            retry.push(message);
            continue;
        }
        if shared.broadcasting {
            tracing::warn!(queue = ?lease.queue(), offset = message.queue_offset(), "broadcasting: a message past the reconsume limit is dropped");
            continue;
        }
        let request = SendBack::new(&shared.group, &message)
            .with_max_reconsume_times(max)
            .to_dead_letters();
        match calls::send_back(&*shared.source, request).await {
            Ok(()) => {
                tracing::warn!(queue = ?lease.queue(), offset = message.queue_offset(), times = message.reconsume_times(), "past the reconsume limit: sent to the dead-letter topic")
            }
            Err(e) => {
                tracing::warn!(queue = ?lease.queue(), offset = message.queue_offset(), error = %e, "could not send a message past the reconsume limit to the dead-letter topic; suspending the queue");
                blocked = true;
                retry.push(message);
            }
        }
    }
    retry
}
