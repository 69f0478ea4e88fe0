//! Consumption: the layer above the rebalance that pulls, buffers and consumes the messages of
//! the queues a [`Consumer`](crate::Consumer) holds.
//!
//! The rebalance decides which queues this client consumes and hands each one over as a
//! [`QueueLease`](crate::QueueLease); this layer is built only on that public seam, so that a
//! user who writes their own consumer has the same tools. It reads messages through a
//! [`MessageSource`] (the in-memory cluster, or the RocketMQ transport's broker client), and the
//! rebalance never depends on it.
//!
//! - [`Message`]: one message as a source delivers it, with the [`property`] names it reads;
//! - [`MessageSource`]: pull a queue from an offset ([`PullRequest`] → [`PullResult`] or
//!   [`PullError`]), send a failed message back for redelivery ([`SendBack`]), and find the
//!   offsets that a start position resolves to.

mod message;
pub mod property;
mod source;

pub use message::Message;
pub use source::{
    DEFAULT_PULL_BATCH_BYTES, DEFAULT_PULL_BATCH_SIZE, DEFAULT_PULL_SUSPEND, MessageSource,
    PullError, PullRequest, PullResult, SendBack,
};
