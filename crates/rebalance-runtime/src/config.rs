//! How a consumer behaves: message model, consumption order, start position, intervals.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a group shares a topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MessageModel {
    /// The members divide the queues with the allocation strategy.
    #[default]
    Clustering,
    /// Every member consumes every queue; no locks.
    Broadcasting,
}

impl MessageModel {
    /// The name RocketMQ uses on the wire (`CLUSTERING`, `BROADCASTING`).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageModel::Clustering => "CLUSTERING",
            MessageModel::Broadcasting => "BROADCASTING",
        }
    }
}

/// Whether messages of a queue are consumed in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumeOrder {
    /// Any order; no locks.
    #[default]
    Concurrent,
    /// One consumer at a time per queue, enforced by broker locks (clustering only).
    Orderly,
}

/// Where a queue without a stored offset starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumeFrom {
    /// From the end: only new messages.
    #[default]
    LastOffset,
    /// From the oldest message still stored.
    FirstOffset,
    /// From the first message stored at or after this time (milliseconds since the Unix epoch).
    Timestamp(i64),
}

impl ConsumeFrom {
    /// The name RocketMQ uses on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumeFrom::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFrom::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
            ConsumeFrom::Timestamp(_) => "CONSUME_FROM_TIMESTAMP",
        }
    }
}

/// The timers of a consumer, with the Java client's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intervals {
    /// How often routes are polled (30 s).
    pub poll_name_server: Duration,
    /// The wait after a balanced round (20 s).
    pub rebalance_wait: Duration,
    /// The wait after an unbalanced round, and the least time between two rounds (1 s).
    pub rebalance_min: Duration,
    /// How soon a queue whose lock was refused is tried again (500 ms; never sooner than
    /// `rebalance_min` after the previous round).
    pub lock_retry: Duration,
    /// How often heartbeats are sent (30 s).
    pub heartbeat: Duration,
    /// How often the locks of ordered queues are renewed (20 s).
    pub lock_renew: Duration,
    /// How long a lock lives without renewal (30 s): after that the client stops trusting it.
    pub lock_lifetime: Duration,
    /// How often consumed offsets are persisted (5 s).
    pub persist_offsets: Duration,
    /// How long an ordered queue being released waits for its consumer to finish the current
    /// batch before it is unlocked anyway (20 s).
    pub force_unlock_after: Duration,
    /// How long the name server must keep saying a topic does not exist before its queues are
    /// released (90 s, three broker registrations), so a name server that restarts empty does
    /// not empty the assignment.
    pub topic_gone_after: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            poll_name_server: Duration::from_secs(30),
            rebalance_wait: Duration::from_secs(20),
            rebalance_min: Duration::from_secs(1),
            lock_retry: Duration::from_millis(500),
            heartbeat: Duration::from_secs(30),
            lock_renew: Duration::from_secs(20),
            lock_lifetime: Duration::from_secs(30),
            persist_offsets: Duration::from_secs(5),
            force_unlock_after: Duration::from_secs(20),
            topic_gone_after: Duration::from_secs(90),
        }
    }
}
