//! A RocketMQ consumer client built around the coordinator-free consumer-group rebalance: every
//! member of a group learns the topic's queues and the group's members, runs the same
//! deterministic allocation strategy on the same sorted inputs and takes its own share, and a
//! push consumer consumes what it is given (pull loops, flow control, retries and dead letters,
//! ordered queues, clean hand-offs). This crate is the facade most applications depend on.
//!
//! It re-exports the workspace's crates:
//! - [`core`]: the queue model and the allocation strategies (pure, synchronous);
//! - [`runtime`]: the async runtime a consumer embeds (the rebalance, the lease seam, the
//!   producer's queue selection) and, with the feature `memory` (on by default), an in-memory
//!   cluster;
//! - [`consume`]: the consume layer on the runtime's lease seam (the push consumer, the message
//!   source trait), also reachable as `runtime::consume`.
//!
//! Its root holds only what the quickstart needs (a consumer, its listener and the queue
//! model); everything else is reached through the crates. The RocketMQ transport,
//! `rebalance-rocketmq`, is a dependency of its own (`rebalance_rocketmq::RocketMq`), so that a
//! user of the in-memory cluster does not build it.
//!
//! **Where to start**: [`consume::PushConsumer`] with a [`consume::ConcurrentListener`] (or an
//! [`consume::OrderlyListener`]), given a cluster: the in-memory one
//! ([`runtime::memory::InMemoryCluster`], below) or a real one (`RocketMq::connect(..)`). To
//! consume on your own, [`Consumer`] with a [`QueueListener`] gives the raw leases. The guide
//! (`docs/guide/` in the repository) has a page per question: how a rebalance works, which
//! strategy, consuming, production, the `rebalance` command, the simulator, testing.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use async_trait::async_trait;
//! use rebalance::consume::{ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer};
//! use rebalance::runtime::memory::{ClusterMessages, InMemoryCluster, OutgoingMessage};
//!
//! struct Orders;
//!
//! #[async_trait]
//! impl ConcurrentListener for Orders {
//!     async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
//!         for order in messages {
//!             println!("{} #{}: {:?}", order.topic(), order.queue_offset(), order.body());
//!         }
//!         ConsumeResult::Success // ReconsumeLater sends them back for another try
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = InMemoryCluster::new();
//! cluster.create_topic("Orders", 2, 4); // 2 brokers, 4 queues each
//! let consumer = PushConsumer::builder("orders-group")
//!     .cluster(cluster.client("10.0.0.1@4242"))
//!     .subscribe("Orders")
//!     .concurrently(Arc::new(Orders))
//!     .start()
//!     .await?;
//! consumer.ready(Duration::from_secs(10)).await?; // every topic had a balanced round
//! assert_eq!(consumer.consumer().assignment().len(), 8);
//! cluster.send("Orders", OutgoingMessage::new("order 1"))?;
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! consumer.shutdown().await; // batches finish, offsets persisted, unregistered
//! # Ok(()) }
//! ```
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

/// The guide's pages (`docs/guide/`), their examples compiled and run as doctests: one item per
/// page (`tests/guide.rs` checks that every page is here).
#[cfg(doctest)]
pub mod guide {
    macro_rules! pages {
        ($($page:ident => $file:literal,)*) => {$(
            #[doc = include_str!(concat!("../docs/guide/", $file))]
            pub struct $page;
        )*};
    }

    pages! {
        Index => "README.md",
        Rebalancing => "rebalancing.md",
        Strategies => "strategies.md",
        Consuming => "consuming.md",
        Stream => "stream.md",
        Pop => "pop.md",
        OwnConsumer => "own-consumer.md",
        RealCluster => "real-cluster.md",
        Production => "production.md",
        Producers => "producers.md",
        Cli => "cli.md",
        Simulator => "simulator.md",
        Testing => "testing.md",
        Deviations => "deviations.md",
    }
}
