//! The cluster's messages as a test or a simulation sees them: sends, what a queue holds, the
//! dead letters, retention ([`ClusterMessages`], implemented for [`InMemoryCluster`]).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::producer::{ProducerHandle, SelectError};

use super::log::QueueLog;
use super::store::MessageStore;
use crate::{Message, property};

/// The delay of each delay level, level 1 first (RocketMQ's default `messageDelayLevel`:
/// `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`).
pub const DELAY_LEVELS: [Duration; 18] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(2 * 60),
    Duration::from_secs(3 * 60),
    Duration::from_secs(4 * 60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(6 * 60),
    Duration::from_secs(7 * 60),
    Duration::from_secs(8 * 60),
    Duration::from_secs(9 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(20 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(2 * 60 * 60),
];

/// The delay of a delay level: levels above the last are the last (as the broker's schedule
/// service does), levels below 1 are level 1 (a broker turns level 0 into 3 + the
/// redeliveries so far before it gets here).
///
/// ```
/// use std::time::Duration;
/// use rebalance_consume::memory::delay_of_level;
///
/// assert_eq!(delay_of_level(3), Duration::from_secs(10));
/// assert_eq!(delay_of_level(18), Duration::from_secs(2 * 3600));
/// assert_eq!(delay_of_level(99), Duration::from_secs(2 * 3600));
/// ```
pub fn delay_of_level(level: i32) -> Duration {
    let index = (level.max(1) as usize).min(DELAY_LEVELS.len()) - 1;
    DELAY_LEVELS[index]
}

/// The prefix of a group's dead-letter topic (RocketMQ's `MixAll.DLQ_GROUP_TOPIC_PREFIX`).
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// The dead-letter topic of `group`, `%DLQ%{group}`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_TOPIC_PREFIX}{group}")
}

/// A message to send: a body, and the tag, keys and other properties it carries.
///
/// ```
/// use rebalance_consume::memory::OutgoingMessage;
///
/// let message = OutgoingMessage::new("hello").with_tags("TagA").with_keys(["order-1"]);
/// assert_eq!(&message.body()[..], b"hello");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    body: Bytes,
    properties: HashMap<String, String>,
}

impl OutgoingMessage {
    /// A message with `body` and no property.
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self {
            body: body.into(),
            properties: HashMap::new(),
        }
    }

    /// Sets the tag ([`TAGS`](property::TAGS)).
    pub fn with_tags(self, tag: impl Into<String>) -> Self {
        self.with_property(property::TAGS, tag)
    }

    /// Sets the keys ([`KEYS`](property::KEYS), joined by spaces).
    pub fn with_keys<K: AsRef<str>>(self, keys: impl IntoIterator<Item = K>) -> Self {
        let keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_string()).collect();
        self.with_property(property::KEYS, keys.join(property::KEY_SEPARATOR))
    }

    /// Sets one property.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

/// Where a sent message went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// The queue.
    pub queue: MessageQueue,
    /// The message's offset in the queue.
    pub offset: i64,
    /// The message's id.
    pub msg_id: String,
}

/// Why the in-memory cluster refused a send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The topic has no route: create it first (`InMemoryCluster::create_topic`).
    #[error("topic `{0}` does not exist in the in-memory cluster; create it first")]
    TopicNotFound(String),
    /// The topic's route has no writable queue.
    #[error("topic `{0}` has no writable queue")]
    NoWritableQueue(String),
    /// The chosen queue is not a writable queue of its topic's route.
    #[error("{0:?} is not a writable queue of its topic's route")]
    NotWritable(MessageQueue),
    /// The producer could not choose a queue.
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// The in-memory cluster's messages (implemented for [`InMemoryCluster`]): bring it into scope
/// to send and look at messages.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
/// use rebalance_runtime::memory::InMemoryCluster;
///
/// let cluster = InMemoryCluster::new();
/// cluster.create_topic("Orders", 1, 2);
/// let sent = cluster.send("Orders", OutgoingMessage::new("o-1")).unwrap();
/// assert_eq!(cluster.messages(&sent.queue).len(), 1);
/// # }
/// ```
#[async_trait::async_trait]
pub trait ClusterMessages: private::Sealed {
    /// Sends a message to `topic`, to the queue its round robin picks (the producer's
    /// [`RoundRobin`](rebalance_runtime::producer::RoundRobin), one per topic, starting at the
    /// topic's first queue).
    fn send(&self, topic: &str, message: OutgoingMessage) -> Result<SendReceipt, SendError>;

    /// Sends a message to a queue chosen by the caller, which must be a writable queue of its
    /// topic's route.
    fn send_to(
        &self,
        queue: &MessageQueue,
        message: OutgoingMessage,
    ) -> Result<SendReceipt, SendError>;

    /// Sends a message to `topic`, to the queue `producer` selects (its round robin, with its
    /// fault avoidance).
    async fn send_with(
        &self,
        producer: &ProducerHandle,
        topic: &str,
        message: OutgoingMessage,
    ) -> Result<SendReceipt, SendError>;

    /// The retained messages of `queue`, in offset order.
    fn messages(&self, queue: &MessageQueue) -> Vec<Message>;

    /// The messages `group`'s consumers gave up on: those in its dead-letter topic
    /// (`%DLQ%{group}`), broker by broker.
    fn dead_letters(&self, group: &str) -> Vec<Message>;

    /// How many messages sent back by `group`'s consumers wait for their delay before they go
    /// to the retry topic.
    fn pending_redeliveries(&self, group: &str) -> usize;

    /// The smallest offset of `queue` (the first retained message; 0 for a queue never
    /// written).
    fn min_offset(&self, queue: &MessageQueue) -> i64;

    /// The largest offset of `queue`, one past its last message.
    fn max_offset(&self, queue: &MessageQueue) -> i64;

    /// The offset of the first retained message of `queue` stored at or after `timestamp_ms`,
    /// or the largest offset when there is none.
    fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> i64;

    /// Deletes the messages of `queue` below offset `before` (retention): a pull from one of
    /// those offsets is answered [`PullResult::OffsetMoved`](crate::PullResult::OffsetMoved) to
    /// the smallest offset left.
    fn truncate(&self, queue: &MessageQueue, before: i64);
}

mod private {
    pub trait Sealed {}
    impl Sealed for rebalance_runtime::memory::InMemoryCluster {}
}

#[async_trait::async_trait]
impl ClusterMessages for InMemoryCluster {
    fn send(&self, topic: &str, message: OutgoingMessage) -> Result<SendReceipt, SendError> {
        let route = self
            .route(topic)
            .ok_or_else(|| SendError::TopicNotFound(topic.to_string()))?;
        let info = route
            .publish_info(topic)
            .map_err(|_| SendError::NoWritableQueue(topic.to_string()))?;
        let queue = {
            let store = MessageStore::of(self);
            let mut messages = store.lock();
            let turn = messages.turns.entry(topic.to_string()).or_default();
            turn.select(&info, None, None).0
        };
        self.send_to(&queue, message)
    }

    fn send_to(
        &self,
        queue: &MessageQueue,
        message: OutgoingMessage,
    ) -> Result<SendReceipt, SendError> {
        if !self.is_writable(queue) {
            return Err(match self.route(&queue.topic) {
                None => SendError::TopicNotFound(queue.topic.to_string()),
                Some(_) => SendError::NotWritable(queue.clone()),
            });
        }
        let OutgoingMessage { body, properties } = message;
        let now_ms = self.now_ms();
        Ok(MessageStore::of(self)
            .lock()
            .append(queue, body, properties, None, None, 0, now_ms))
    }

    async fn send_with(
        &self,
        producer: &ProducerHandle,
        topic: &str,
        message: OutgoingMessage,
    ) -> Result<SendReceipt, SendError> {
        let queue = producer.select(topic, None).await?;
        self.send_to(&queue, message)
    }

    fn messages(&self, queue: &MessageQueue) -> Vec<Message> {
        let store = MessageStore::of(self);
        let messages = store.lock();
        messages
            .log(queue)
            .map(|log| log.messages().cloned().collect())
            .unwrap_or_default()
    }

    fn dead_letters(&self, group: &str) -> Vec<Message> {
        let topic = dlq_topic(group);
        let store = MessageStore::of(self);
        let messages = store.lock();
        let mut queues: Vec<&MessageQueue> = messages
            .logs
            .keys()
            .filter(|q| *q.topic == *topic)
            .collect();
        queues.sort();
        queues
            .into_iter()
            .filter_map(|q| messages.log(q))
            .flat_map(|log| log.messages().cloned())
            .collect()
    }

    fn pending_redeliveries(&self, group: &str) -> usize {
        MessageStore::of(self)
            .lock()
            .scheduled
            .get(group)
            .copied()
            .unwrap_or(0)
    }

    fn min_offset(&self, queue: &MessageQueue) -> i64 {
        MessageStore::of(self)
            .lock()
            .log(queue)
            .map_or(0, QueueLog::min_offset)
    }

    fn max_offset(&self, queue: &MessageQueue) -> i64 {
        MessageStore::of(self)
            .lock()
            .log(queue)
            .map_or(0, QueueLog::max_offset)
    }

    fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> i64 {
        MessageStore::of(self)
            .lock()
            .log(queue)
            .map_or(0, |log| log.offset_at(timestamp_ms))
    }

    fn truncate(&self, queue: &MessageQueue, before: i64) {
        let store = MessageStore::of(self);
        let mut messages = store.lock();
        let log = messages.logs.entry(queue.clone()).or_default();
        log.truncate(before);
        tracing::info!(
            ?queue,
            min_offset = log.min_offset(),
            "in-memory cluster truncated a queue"
        );
    }
}
