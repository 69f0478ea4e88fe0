//! Coordinator-free consumer-group rebalancing for RocketMQ-style message queues.
//!
//! This facade re-exports the workspace's crates:
//! - [`core`]: the queue model and the allocation strategies (pure, synchronous);
//! - [`runtime`]: the async runtime a consumer embeds, with an in-memory cluster.
//!
//! Its root holds only what the quickstart needs (a consumer, its listener and the queue
//! model); everything else is reached through [`core`] and [`runtime`].
#![warn(missing_docs)]

pub use rebalance_core as core;
pub use rebalance_core::{ClientId, MessageQueue};
pub use rebalance_runtime as runtime;
pub use rebalance_runtime::{
    Consumer, ConsumerBuilder, ConsumerError, ConsumerHandle, ListenerError, QueueLease,
    QueueListener, RemovalReason, RemovedQueue, StartPosition, WeakConsumerHandle,
};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
