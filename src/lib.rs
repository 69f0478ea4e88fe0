//! Coordinator-free consumer-group rebalancing for RocketMQ-style message queues.
//!
//! This facade re-exports the workspace's crates:
//! - [`core`]: the queue model and the allocation strategies (pure, synchronous);
//! - [`runtime`]: the async runtime a consumer embeds (the rebalance, the lease seam, the
//!   producer's queue selection) and, with the feature `memory` (on by default), an in-memory
//!   cluster;
//! - [`consume`]: the consume layer on the runtime's lease seam (the push consumer, the message
//!   source trait), also reachable as `runtime::consume`.
//!
//! Its root holds only what the quickstart needs (a consumer, its listener and the queue
//! model); everything else is reached through the crates.
#![warn(missing_docs)]

pub use rebalance_consume as consume;
pub use rebalance_core as core;
pub use rebalance_core::{ClientId, MessageQueue};
pub use rebalance_runtime::{
    Consumer, ConsumerBuilder, ConsumerError, ConsumerHandle, ListenerError, QueueLease,
    QueueListener, RemovalReason, RemovedQueue, StartPosition, WeakConsumerHandle,
};

/// The runtime (`rebalance-runtime`), with the consume layer at `runtime::consume` and, under
/// `runtime::memory`, the in-memory cluster together with its messages.
pub mod runtime {
    #[doc(inline)]
    pub use rebalance_runtime::*;

    #[doc(inline)]
    pub use rebalance_consume as consume;

    /// The in-memory cluster (`rebalance_runtime::memory`) and its messages
    /// (`rebalance_consume::memory`: bring [`ClusterMessages`](rebalance_consume::memory::ClusterMessages) into scope to send).
    #[cfg(feature = "memory")]
    pub mod memory {
        #[doc(inline)]
        pub use rebalance_consume::memory::*;
        #[doc(inline)]
        pub use rebalance_runtime::memory::*;
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
