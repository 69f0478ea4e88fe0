//! The pure core of the rebalance: the queue model and the allocation strategies.
//!
//! No async, no I/O: inputs in, allocation out. Every client of a consumer group runs the same
//! strategy on the same sorted inputs and takes its own share; the RocketMQ strategies give
//! exactly the Java client's results, so a Rust consumer can join a group of Java consumers.
//! The runtime (`rebalance-runtime`) calls it every round; the `rebalance` command and the
//! benchmarks call it directly.
//!
//! **Where to start**:
//! - [`MessageQueue`] and [`ClientId`], the inputs, sorted in the Java order ([`java`] has the
//!   few pieces of Java semantics that decide results);
//! - [`strategy`]: the per-topic [`AllocateStrategy`] (`allocate` one member's share, `plan`
//!   the whole group's), the RocketMQ strategies and ours, built by name with
//!   [`strategy::build_strategy`] or a [`strategy::StrategyRegistry`] (where your own is
//!   registered);
//! - [`assignor`]: Kafka's group assignors ([`assignor::GroupAssignor`], built by an
//!   [`assignor::AssignorRegistry`]);
//! - [`TopicRoute`]: what a name server says about a topic, and the queues consumers balance
//!   ([`TopicRoute::subscribable_queues`]) or producers send to ([`PublishInfo`]).
//!
//! ```
//! use rebalance_core::{ClientId, MessageQueue, strategy::build_strategy};
//!
//! let mut queues: Vec<MessageQueue> = (0..8).map(|i| MessageQueue::new("T", "broker-a", i)).collect();
//! let mut members: Vec<ClientId> = ["10.0.0.2@1", "10.0.0.1@1"].into_iter().map(ClientId::from).collect();
//! queues.sort();
//! members.sort(); // the Java order: every client sorts the same way
//!
//! let strategy = build_strategy("averagely", &Default::default()).unwrap();
//! let plan = strategy.plan("my-group", &queues, &members).unwrap();
//! for (member, share) in plan.iter() {
//!     assert_eq!(share.len(), 4, "{member} gets half");
//! }
//! ```
#![warn(missing_docs)]

pub mod assignor;
pub mod java;
pub mod model;
pub mod strategy;

pub use model::{
    BrokerData, ClientId, MessageQueue, PublishError, PublishInfo, QueueData, TopicRoute, route,
};
pub use strategy::{AllocateError, AllocateStrategy, Plan, StrategyRef};
