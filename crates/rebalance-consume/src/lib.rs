//! Consumption: the layer above the rebalance that pulls, buffers and consumes the messages of
//! the queues a [`Consumer`](rebalance_runtime::Consumer) holds.
//!
//! The rebalance decides which queues this client consumes and hands each one over as a
//! [`QueueLease`](rebalance_runtime::QueueLease); this layer is built only on that public seam, so that a
//! user who writes their own consumer has the same tools. It reads messages through a
//! [`MessageSource`] (the in-memory cluster, or the RocketMQ transport's broker client), and the
//! rebalance never depends on it.
//!
//! - [`Message`]: one message as a source delivers it, with the [`property`] names it reads;
//! - [`MessageSource`]: pull a queue from an offset ([`PullRequest`] → [`PullResult`] or
//!   [`PullError`]), send a failed message back for redelivery ([`SendBack`]), and find the
//!   offsets that a start position resolves to;
//! - [`PushConsumer`]: a group member that runs one pull loop per lease, buffers what it
//!   pulled (with the Java client's flow control), hands batches to a [`ConcurrentListener`]
//!   or an [`OrderlyListener`], sends failed messages back, commits the smallest unconsumed
//!   offset, and hands each removed queue off cleanly ([`ConsumeOptions`] has the knobs);
//! - [`StreamConsumer`]: the same member with a [`Stream`](futures_util::Stream) in the
//!   listener's place: [`MessageStream`] yields messages to acknowledge one by one,
//!   [`OrderedStream`] each queue's batches in order; subscribe or assign mode, seek, pause,
//!   commits ([`StreamConsumerHandle`]).
//! - POP consumption ([`PushConsumerBuilder::pop`], [`PopSource`], [`PopOptions`]): the
//!   brokers assign the queues (RocketMQ 5's server-side assignment), several members read
//!   each, and every message is acknowledged at the brokers once consumed (see the `pop`
//!   module's notes, in [`PopMode`], for where it differs from the Java client).
//!
//! **Where to start**: [`PushConsumer::builder`], given a cluster (the in-memory cluster's
//! client, feature `memory`, or `rebalance_rocketmq::RocketMq`), the topics, and a listener:
//! [`concurrently`](PushConsumerBuilder::concurrently) with a [`ConcurrentListener`], or
//! [`orderly`](PushConsumerBuilder::orderly) with an [`OrderlyListener`]; or
//! [`StreamConsumer::builder`] to read a stream instead of giving a listener. How the consumer is
//! a member of its group (strategy, timers, client id, exclusive hand-off) is set through
//! [`configure`](PushConsumerBuilder::configure). [`metrics`] names what it records.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::time::Duration;
//!
//! use async_trait::async_trait;
//! use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
//! use rebalance_consume::{ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer};
//! use rebalance_runtime::memory::InMemoryCluster;
//!
//! /// Fails each message's first delivery.
//! #[derive(Default)]
//! struct Orders {
//!     deliveries: AtomicUsize,
//! }
//!
//! #[async_trait]
//! impl ConcurrentListener for Orders {
//!     async fn consume(&self, messages: &[Message], context: &mut ConcurrentContext) -> ConsumeResult {
//!         self.deliveries.fetch_add(messages.len(), Ordering::Relaxed);
//!         if messages.iter().any(|m| m.reconsume_times() == 0) {
//!             context.delay_level = 1; // back through the group's retry topic after 1 s
//!             return ConsumeResult::ReconsumeLater;
//!         }
//!         ConsumeResult::Success
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = InMemoryCluster::new();
//! cluster.create_topic("Orders", 1, 2);
//! let orders = Arc::new(Orders::default());
//! let consumer = PushConsumer::builder("orders-group")
//!     .cluster(cluster.client("10.0.0.1@1"))
//!     .configure(|m| m.exclusive_hand_off(true)) // how it is a member of its group
//!     .subscribe("Orders")
//!     .concurrently(orders.clone())
//!     .start()
//!     .await?;
//! consumer.ready(Duration::from_secs(10)).await?;
//! cluster.send("Orders", OutgoingMessage::new("order 1"))?;
//! // The retry topic appears with the first send-back; the next route poll (30 s) shares it.
//! tokio::time::sleep(Duration::from_secs(90)).await;
//! assert_eq!(orders.deliveries.load(Ordering::Relaxed), 2); // failed once, then consumed
//! assert!(cluster.dead_letters("orders-group").is_empty());
//! consumer.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod activity;
mod calls;
mod commit_waits;
mod concurrent;
mod config;
mod flow;
mod in_flight;
mod leases;
mod link;
mod listener;
#[cfg(feature = "memory")]
pub mod memory;
mod message;
pub mod metrics;
mod orderly;
mod pause;
mod pop;
mod process_queue;
pub mod property;
mod pull_loop;
mod push;
mod shared;
mod source;
mod start_positions;
mod stream;
#[cfg(test)]
mod testing;
mod work;

pub use config::{
    ConsumeOptions, ConsumeOptionsError, EMPTY_PULL_SPACING, EXPIRED_DELAY_LEVEL,
    FLOW_CONTROL_DELAY, LOCAL_RETRY_DELAY, MAX_CONSUME_CONCURRENCY, MAX_DENIED_DELAY, MAX_SUSPEND,
    MIN_SUSPEND, PULL_ERROR_DELAY, PULL_EXPIRY, THROTTLED_DELAY,
};
pub use listener::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, OrderlyContext, OrderlyListener,
    OrderlyResult,
};
pub use message::Message;
pub use pop::{
    MAX_INVISIBLE_TIME, MAX_POP_BATCH, PopMode, PopOptions, PopOptionsError, PopRequest, PopResult,
    PopSource, PopStart,
};
pub use push::{PushConsumer, PushConsumerBuilder, PushConsumerError, PushConsumerHandle};
pub use source::{
    DEAD_LETTER_LEVEL, DEFAULT_PULL_BATCH_BYTES, DEFAULT_PULL_BATCH_SIZE, DEFAULT_PULL_SUSPEND,
    MessageSource, PullError, PullRequest, PullResult, SendBack,
};
pub use stream::{
    COMMIT_WAIT, MessageStream, OrderedBatch, OrderedStream, SEEK_LOOKUP_TIMEOUT, SeekError,
    SeekTo, StreamConsumer, StreamConsumerBuilder, StreamConsumerError, StreamConsumerHandle,
    StreamMessage,
};
