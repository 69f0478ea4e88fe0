//! POP consumption (RocketMQ 5): the brokers assign the queues (server-side assignment in POP
//! mode, [`PushConsumerBuilder::pop`](crate::PushConsumerBuilder::pop)), several members may
//! read one queue at once, and each message is acknowledged at the brokers once consumed.
//!
//! A lease the runtime hands over with [`ReadMode::Pop`](rebalance_runtime::ReadMode::Pop)
//! gets a POP loop ([`pop_loop`]) instead of a pull loop. It:
//! - pops with long polling ([`PopSource::pop`], [`PopOptions::poll_time`]), up to
//!   [`PopOptions::batch_size`] messages, while fewer than
//!   [`PopOptions::threshold_for_queue`] of the queue's popped messages are unacknowledged
//!   (flow control; it looks again 50 ms later, or as soon as acknowledgements bring it under);
//! - hands each queue's messages of a pop to the consumer's workers, the same workers and
//!   [`ConcurrentListener`](crate::ConcurrentListener) calls as pulled messages (batches of
//!   `consume_batch_size`, contained, `consume_timeout`);
//! - acknowledges each message once consumed ([`PopSource::ack`]), in offset order per queue
//!   for an orderly pop ([`PopMode::Orderly`]);
//! - sends a message the listener failed back to the group's retry topic
//!   (`%RETRY%{group}`, the pull consumer's way, with its delay levels and dead letters past
//!   `max_reconsume_times`), then acknowledges it; a message whose send-back failed is
//!   consumed again here 5 s later, unacknowledged meanwhile;
//! - extends the invisible time of a batch still being consumed at three quarters of it
//!   ([`PopSource::change_invisible_time`]);
//! - when the lease ends, pops no more and finishes what it popped (consumed and
//!   acknowledged, bounded by `await_in_flight` when set); a pop still in flight then has
//!   its messages made visible again when it answers.
//!
//! **Where this differs from the Java push consumer's POP, and why.**
//! - **Orderly POP by default** ([`PopMode`]): the Rust broker 1.0 never brings back a message
//!   of an ordinary POP that is not acknowledged (it schedules the pop's checkpoint with the
//!   absolute revive time where a delay is expected, and its timer refuses it:
//!   `tests/pop_real_servers.rs` `the_rust_broker_never_brings_unacknowledged_messages_back`
//!   in the transport crate), so a member killed with messages popped would lose them. An
//!   orderly POP blocks the queue instead, and the broker pops the same messages again once
//!   their invisible time passes, to whichever member pops the queue next
//!   (`tests/pop_real_servers.rs` `orderly_pop`). The Java client always pops with
//!   `order=false`; [`PopMode::Ordinary`] is that, for a Java broker. On the Rust broker 1.0
//!   an orderly batch holds its queue for its whole invisible time, acknowledged or not
//!   (`an_acknowledged_orderly_batch_holds_its_queue_for_its_invisible_time`): use a short
//!   invisible time there (see [`PopMode::Orderly`]).
//! - **A failed message is sent back** (CONSUMER_SEND_MSG_BACK) and acknowledged, where the
//!   Java client changes its invisible time to the retry delay: the Rust broker 1.0 refuses
//!   that change for an ordinary pop (code 1), and for an orderly pop it would hold the whole
//!   queue, and bring the batch's later messages back too. The retry topic is consumed as the
//!   pull consumer's is (server-side assignment gives its queues out in PULL mode). Past
//!   `max_reconsume_times` the message goes to the dead letters, where the Java POP consumer
//!   drops it.
//!
//! The loop is built on [`PopSource`], which the RocketMQ transport and the in-memory cluster
//! implement; it uses nothing of the push consumer but the workers' reports, so a stream
//! consumer can drive the same loop with its own consumption.

mod book;
mod options;
mod pop_loop;
mod source;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rebalance_runtime::QueueLease;
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use options::{MAX_INVISIBLE_TIME, PopMode, PopOptions, PopOptionsError};
#[cfg(feature = "memory")]
pub(crate) use source::NO_MESSAGE;
pub use source::{MAX_POP_BATCH, PopRequest, PopResult, PopSource, PopStart};

use crate::activity::Activity;
use crate::link::LeaseLink;
use crate::shared::Shared;

/// What every POP loop of a consumer shares: the source, the options, and the attempt ids.
pub(crate) struct PopShared {
    pub(crate) source: Arc<dyn PopSource>,
    pub(crate) options: PopOptions,
    /// Unique to this consumer: the prefix of its orderly attempt ids.
    instance: String,
    attempts: AtomicU64,
}

impl PopShared {
    pub(crate) fn new(source: Arc<dyn PopSource>, options: PopOptions) -> Self {
        static CONSUMERS: AtomicU64 = AtomicU64::new(0);
        let n = CONSUMERS.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        Self {
            source,
            options,
            instance: format!("{:x}-{nanos:x}-{n}", std::process::id()),
            attempts: AtomicU64::new(0),
        }
    }

    /// A new orderly attempt id: two pops of one attempt get the same batch, so every pop of
    /// every member needs its own (the Rust broker 1.0 counts pops without one as one attempt).
    pub(crate) fn next_attempt(&self) -> String {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.instance)
    }
}

/// Starts the POP loop of `lease` in a task of its own; returns the task and the link its
/// messages' consumers report through. Without a [`PopSource`] (a consumer not configured for
/// POP, given a popped lease), the task only says so and waits for the lease's end.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    lease: QueueLease,
    activity: Arc<Activity>,
) -> (JoinHandle<()>, Arc<LeaseLink>) {
    let queue = lease.queue().clone();
    let span = tracing::info_span!("pop_loop", queue = %queue.topic, broker = %queue.broker_name, id = queue.queue_id);
    let Some(pop) = shared.pop.clone() else {
        let link = Arc::new(LeaseLink::new(
            lease.clone(),
            shared.topic_metrics(&queue.topic),
        ));
        let task = tokio::spawn(
            async move {
                tracing::error!(queue = ?lease.queue(), "a popped queue was assigned, but this consumer has no pop source: nothing is consumed from it (configure POP on the push consumer)");
                lease.cancelled().await;
            }
            .instrument(span),
        );
        return (task, link);
    };
    let (mut pop_loop, link) = pop_loop::PopLoop::new(shared, pop, lease, activity);
    let task = tokio::spawn(async move { pop_loop.run().await }.instrument(span));
    (task, link)
}
