//! [`QueueListener`]: the application's callbacks, with the leases of the queues it gets
//! ([`QueueLease`]) and the queues it loses ([`RemovedQueue`]).

use async_trait::async_trait;
use rebalance_core::MessageQueue;

use crate::lease::QueueLease;
use crate::lease_terms::RemovedQueue;

/// An error returned by a listener callback.
pub type ListenerError = Box<dyn std::error::Error + Send + Sync>;

/// The application's callbacks.
///
/// Callbacks are awaited: a round waits for them, so a slow callback delays its own consumer's
/// round, lock renewal and offset persistence. An error or a panic is contained: it is logged,
/// reported in the round's outcome, and never stops the runtime. A callback that has not
/// returned after [`Intervals::callback_timeout`](crate::config::Intervals::callback_timeout) (10 s) is
/// cancelled (its future dropped), logged as an error and reported, and the round goes on as if
/// it had returned. Removals are announced before the queue's last offset is persisted and its
/// lock released, so commit the final offset on the lease before returning from
/// [`queues_removed`](Self::queues_removed): when it times out, the hand-off proceeds with
/// whatever was committed by then, and the next owner may start while this client still
/// consumes.
///
/// The usual shape (`examples/quickstart.rs`): `queues_added` starts a task per lease that
/// consumes from [`QueueLease::start_position`], commits as it goes, and stops when
/// [`QueueLease::cancelled`] completes; the listener keeps those tasks by queue, and
/// `queues_removed` awaits the ones of the queues removed (taking them out of its map first:
/// no lock is held across the wait), so that their last commits are in before it returns.
///
/// An error, a panic or a timeout of [`queues_added`](Self::queues_added) does not undo the
/// addition: the queues are held and their leases live (the failure is logged and reported in
/// [`RoundReport::callback_errors`](crate::assignment::RoundReport::callback_errors)). By default
/// the runtime calls `queues_added` again for those queues (the ones still held), 1 s later, then
/// after twice as long each time up to 60 s, until it succeeds; with
/// [`AddedFailurePolicy::ReleaseAndShutdown`](crate::config::AddedFailurePolicy) it shuts the
/// consumer down instead, so that the group rebalances the queues (see
/// [`ConsumerBuilder::on_queues_added_failure`](crate::ConsumerBuilder::on_queues_added_failure)).
/// A retried call gets the same leases again: a listener that started consuming some of them
/// before failing should not start them twice.
#[async_trait]
pub trait QueueListener: Send + Sync + 'static {
    /// Queues of `topic` this client now consumes.
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError>;

    /// Queues of `topic` this client must stop consuming. Their leases are already cancelled.
    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError>;

    /// The Java client's `MessageQueueListener.messageQueueChanged`: called after a round in
    /// which this client's share of `topic` changed, with every queue of the topic and the share.
    async fn message_queue_changed(
        &self,
        _topic: &str,
        _all: &[MessageQueue],
        _mine: &[MessageQueue],
    ) -> Result<(), ListenerError> {
        Ok(())
    }
}
