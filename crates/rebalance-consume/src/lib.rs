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

#![warn(missing_docs)]

mod activity;
mod calls;
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
    FLOW_CONTROL_DELAY, LOCAL_RETRY_DELAY, MAX_DENIED_DELAY, MAX_SUSPEND, MIN_SUSPEND,
    PULL_ERROR_DELAY, PULL_EXPIRY, THROTTLED_DELAY,
};
pub use listener::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, OrderlyContext, OrderlyListener,
    OrderlyResult,
};
pub use message::Message;
pub use pop::{
    MAX_POP_BATCH, PopMode, PopOptions, PopOptionsError, PopRequest, PopResult, PopSource, PopStart,
};
pub use push::{PushConsumer, PushConsumerBuilder, PushConsumerError, PushConsumerHandle};
pub use source::{
    DEAD_LETTER_LEVEL, DEFAULT_PULL_BATCH_BYTES, DEFAULT_PULL_BATCH_SIZE, DEFAULT_PULL_SUSPEND,
    MessageSource, PullError, PullRequest, PullResult, SendBack,
};
pub use stream::{
    MessageStream, OrderedBatch, OrderedStream, SEEK_LOOKUP_TIMEOUT, SeekError, SeekTo,
    StreamConsumer, StreamConsumerBuilder, StreamConsumerError, StreamConsumerHandle,
    StreamMessage,
};
