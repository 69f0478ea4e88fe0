//! The data a rebalance works on: queues, client ids and topic routes.

mod client_id;
mod message_queue;
pub mod publish;
pub mod route;

pub use client_id::ClientId;
pub use message_queue::MessageQueue;
pub use publish::{PublishError, PublishInfo};
pub use route::{BrokerData, QueueData, RouteDefect, TopicRoute};
