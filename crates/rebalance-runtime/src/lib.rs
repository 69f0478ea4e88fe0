//! The async rebalance runtime: what a consumer application embeds.
//!
//! A [`Consumer`] joins a consumer group and keeps its share of the subscribed topics' queues
//! right while brokers, routes and members come and go, with no coordinator. Everything
//! outside the process is a trait ([`NameServer`], [`GroupDirectory`], [`OffsetStore`],
//! [`QueueLocker`], [`QueueListener`]); transports implement them, and [`memory`] has an
//! in-memory cluster for tests, examples and simulations.
//!
//! **Where to start**: most applications consume messages with the push consumer of the
//! consume layer (`rebalance_consume::PushConsumer`, built on this crate's lease seam), or
//! through the `rebalance` facade. This crate is where to start to take part in the rebalance
//! and consume on your own: [`Consumer::builder`] with a [`QueueListener`], whose callbacks get
//! a [`QueueLease`] per queue taken (its start position, its cancellation, its commits) and the
//! [`RemovedQueue`]s given up; the [`ConsumerHandle`] it returns says when the consumer is
//! [`ready`](ConsumerHandle::ready), what it holds, and each round's report. A transport
//! implements the traits below (`rebalance-rocketmq` does, for RocketMQ), and a producer picks
//! queues with [`producer::Producer`]. The example below is the rebalance alone, on the
//! in-memory cluster.
//!
//! A consumer subscribes to topics, each with a tag expression ([`TagExpression`](subscription::TagExpression): `*` or
//! `TagA || TagB`, see [`subscription`]) that the [`Registration`] carries to the directory.
//! A clustering consumer also subscribes to its group's retry topic (`%RETRY%{group}`) and
//! shares its queues, as the Java push consumer does, unless
//! [`ConsumerBuilder::consume_retry_topic`] turns that off; while that topic has no route yet it
//! is quietly left out of the rounds.
//!
//! Tasks, one owner per piece of state:
//! - **RouteSync** polls routes (every 30 s, first at start), keeps the last good route on
//!   failures, publishes each topic's queue set and wakes a round when it really changed;
//! - **RebalanceService** owns the ProcessQueue table: it runs rounds (20 s after a balanced
//!   round, 1 s after an unbalanced one, at once on a wake-up, never two at once and never
//!   closer than 1 s, except the retry of a refused lock 500 ms after the refusal), renews
//!   locks, persists offsets, and releases everything at shutdown;
//! - **Heartbeat** keeps the client registered (every 30 s).
//!
//! A [`Producer`](producer::Producer) reads the same routes with its own RouteSync (each topic's publish queues) and
//! picks a queue per message: round robin, skipping the broker that just failed and, with
//! latency fault avoidance, slow brokers; by key for ordered messages (see [`producer`]).
//!
//! Every item has one path. The root holds what the quickstart uses (the consumer, its handle
//! and error, the listener and its leases) and the traits a transport implements with the
//! types in their signatures; the rest is in its module: [`config`] (message model, order,
//! start position, [`Intervals`](config::Intervals)), [`subscription`] (tag expressions, the
//! retry topic), [`allocation`] (strategy or group assignor), [`assignment`] (what a handle
//! shows: assignments and round reports), [`wake`] (why a round ran), [`routes`] (the route
//! table a route sync publishes), [`running`] (the running info), [`memory`] (the in-memory
//! cluster) and [`producer`].
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use async_trait::async_trait;
//! use rebalance_runtime::memory::InMemoryCluster;
//! use rebalance_runtime::{Consumer, ListenerError, QueueLease, QueueListener, RemovedQueue};
//!
//! struct Print;
//!
//! #[async_trait]
//! impl QueueListener for Print {
//!     async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
//!         println!("{topic}: +{}", queues.len());
//!         Ok(())
//!     }
//!     async fn queues_removed(&self, topic: &str, queues: &[RemovedQueue]) -> Result<(), ListenerError> {
//!         println!("{topic}: -{}", queues.len());
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = InMemoryCluster::new();
//! cluster.create_topic("Orders", 2, 4);
//! let consumer = Consumer::builder("orders-group")
//!     .client_id("10.0.0.1@1")
//!     .subscribe("Orders")
//!     .cluster(cluster.client("10.0.0.1@1"))
//!     .listener(Arc::new(Print))
//!     .start()
//!     .await?;
//! let held = consumer.wait_for_assignment(|a| a.len() == 8, Duration::from_secs(60)).await?;
//! consumer.shutdown().await; // `held` is an owned snapshot, not a borrow of the consumer's
//! assert_eq!(held.len(), 8);
//! assert!(cluster.members("orders-group").is_empty());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod allocation;
mod app_code;
pub mod assignment;
mod assignment_source;
mod callbacks;
pub mod config;
mod consumer;
mod context;
mod directory;
mod error;
mod heartbeat;
mod lease;
mod lease_terms;
mod listener;
mod locker;
mod membership;
#[cfg(feature = "memory")]
pub mod memory;
pub mod metrics;
mod name_server;
mod offset_store;
pub mod producer;
mod route_share;
mod route_sync;
pub mod routes;
pub mod running;
mod service;
pub mod subscription;
mod table;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod wake;

/// Calling code you do not own (a listener, a message source, a strategy) so that its panic
/// becomes an error of that call, never of the calling task: what the runtime does for its own
/// callbacks, for a consume layer built on the lease seam to do the same.
pub mod containment {
    pub use crate::callbacks::{caught, panic_message};
}

// What the quickstart and the README use.
pub use consumer::{
    ClusterServices, Consumer, ConsumerBuilder, ConsumerError, ConsumerHandle, MemberOptions,
    NotReady, TopicNotReady, WeakConsumerHandle, default_client_id,
};
pub use lease::{ConsumeGuard, QueueLease};
pub use lease_terms::{RemovalReason, RemovedQueue, StartPosition};
pub use listener::{ListenerError, QueueListener};
// The traits a transport implements, and the types in their signatures.
pub use assignment_source::{
    AssignedQueue, AssignmentRequest, AssignmentSource, ReadMode, ServerAnswer,
};
pub use directory::{GroupDirectory, Registration, ResetRefused, StartedConsumer};
pub use error::{RemoteError, RouteError};
pub use locker::{LockLosses, LockOutcome, QueueLocker};
pub use name_server::NameServer;
pub use offset_store::{LocalOffsetStore, OffsetScope, OffsetStore};
pub use route_share::RouteShare;
