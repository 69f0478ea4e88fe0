//! [`Message`]: one message as a [`MessageSource`](super::MessageSource) delivers it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use rebalance_core::MessageQueue;

use super::property;

/// One message of a queue: where it is stored, its id, properties and body.
///
/// A [`MessageSource`](super::MessageSource) builds it with [`Message::new`] and the `with_*`
/// setters; the application reads it. Cloning is cheap: the body (a [`Bytes`]), the id, the
/// topic names and the properties are shared, not copied (setting a property on a clone copies
/// its properties then).
///
/// ```
/// use rebalance_core::MessageQueue;
/// use rebalance_consume::{Message, property};
///
/// let queue = MessageQueue::new("Orders", "broker-a", 3);
/// let message = Message::new(queue, 42, "hello")
///     .with_msg_id("7F0000010000")
///     .with_property(property::TAGS, "TagA")
///     .with_property(property::KEYS, "order-1 order-2");
/// assert_eq!(message.topic(), "Orders");
/// assert_eq!(message.queue_offset(), 42);
/// assert_eq!(message.tags(), Some("TagA"));
/// assert_eq!(message.keys().collect::<Vec<_>>(), ["order-1", "order-2"]);
/// assert_eq!(&message.body()[..], b"hello");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    /// Shared by the messages of one pull (or one queue's log): a clone counts on the handle
    /// only, not on the queue's topic and broker names, which every queue of the topic shares.
    queue: Arc<MessageQueue>,
    /// The topic shown to the application when it is not the queue's (a retry topic's message,
    /// shown under the topic it came from).
    topic: Option<Box<str>>,
    queue_offset: i64,
    commit_log_offset: i64,
    msg_id: Arc<str>,
    properties: Arc<HashMap<String, String>>,
    body: Bytes,
    born_timestamp: i64,
    store_timestamp: i64,
    reconsume_times: i32,
}

impl Message {
    /// A message of `queue` stored at `queue_offset`, with `body`, no properties, an empty id
    /// and zero timestamps, commit-log offset and reconsume count. A source making many
    /// messages of one queue gives them one `Arc<MessageQueue>`.
    pub fn new(
        queue: impl Into<Arc<MessageQueue>>,
        queue_offset: i64,
        body: impl Into<Bytes>,
    ) -> Self {
        Self {
            queue: queue.into(),
            topic: None,
            queue_offset,
            commit_log_offset: 0,
            msg_id: Arc::from(""),
            properties: Arc::default(),
            body: body.into(),
            born_timestamp: 0,
            store_timestamp: 0,
            reconsume_times: 0,
        }
    }

    /// Sets the message id. A RocketMQ source gives the producer's id (property
    /// [`UNIQ_KEY`](property::UNIQ_KEY)) when the message has one, else the id made of the
    /// storing broker's address and the commit-log offset.
    pub fn with_msg_id(mut self, msg_id: impl Into<Arc<str>>) -> Self {
        self.msg_id = msg_id.into();
        self
    }

    /// Sets the offset of the message in the broker's log (RocketMQ's commit-log offset), which
    /// is how a broker finds a message sent back.
    pub fn with_commit_log_offset(mut self, offset: i64) -> Self {
        self.commit_log_offset = offset;
        self
    }

    /// Sets one property.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.properties).insert(name.into(), value.into());
        self
    }

    /// Replaces the properties.
    pub fn with_properties(mut self, properties: HashMap<String, String>) -> Self {
        self.properties = Arc::new(properties);
        self
    }

    /// Sets when the producer made the message and when the broker stored it (ms since the
    /// Unix epoch).
    pub fn with_timestamps(mut self, born: i64, stored: i64) -> Self {
        self.born_timestamp = born;
        self.store_timestamp = stored;
        self
    }

    /// Sets how many times the message was consumed before and failed.
    pub fn with_reconsume_times(mut self, times: i32) -> Self {
        self.reconsume_times = times;
        self
    }

    /// Shows the message under `topic` instead of its queue's topic (the consume layer does it
    /// for a retry topic's messages, shown under the topic they came from).
    pub fn with_topic(mut self, topic: impl Into<Box<str>>) -> Self {
        let topic = topic.into();
        self.topic = (*topic != *self.queue.topic).then_some(topic);
        self
    }

    /// The topic: the queue's, or the one a retry topic's message came from once the consume
    /// layer restored it.
    pub fn topic(&self) -> &str {
        self.topic.as_deref().unwrap_or(&self.queue.topic)
    }

    /// The queue the message was pulled from (for a redelivered message: a queue of the retry
    /// topic).
    pub fn queue(&self) -> &MessageQueue {
        &self.queue
    }

    /// The message's position in its queue.
    pub fn queue_offset(&self) -> i64 {
        self.queue_offset
    }

    /// The message's position in the broker's log (RocketMQ's commit-log offset).
    pub fn commit_log_offset(&self) -> i64 {
        self.commit_log_offset
    }

    /// The message id.
    pub fn msg_id(&self) -> &str {
        &self.msg_id
    }

    /// The tag ([`TAGS`](property::TAGS) property), if any.
    pub fn tags(&self) -> Option<&str> {
        self.property(property::TAGS)
    }

    /// The keys ([`KEYS`](property::KEYS) property, split on spaces).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.property(property::KEYS)
            .unwrap_or("")
            .split(property::KEY_SEPARATOR)
            .filter(|key| !key.is_empty())
    }

    /// One property.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name).map(String::as_str)
    }

    /// The receipt handle of a popped message (its [`POP_CK`](property::POP_CK) property),
    /// which acknowledges it; `None` for a pulled message.
    pub fn receipt_handle(&self) -> Option<&str> {
        self.property(property::POP_CK)
    }

    /// Every property.
    pub fn properties(&self) -> &HashMap<String, String> {
        &self.properties
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// When the producer made the message (ms since the Unix epoch).
    pub fn born_timestamp(&self) -> i64 {
        self.born_timestamp
    }

    /// When the broker stored it (ms since the Unix epoch).
    pub fn store_timestamp(&self) -> i64 {
        self.store_timestamp
    }

    /// How many times the message was consumed before and failed (0 on a first delivery).
    pub fn reconsume_times(&self) -> i32 {
        self.reconsume_times
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("topic", &self.topic())
            .field("queue", &self.queue)
            .field("queue_offset", &self.queue_offset)
            .field("msg_id", &self.msg_id)
            .field("tags", &self.tags())
            .field("body_len", &self.body.len())
            .field("reconsume_times", &self.reconsume_times)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> MessageQueue {
        MessageQueue::new("%RETRY%G", "b", 0)
    }

    #[test]
    fn a_restored_topic_is_shown_and_the_queue_keeps_its_own() {
        let message = Message::new(queue(), 1, "x").with_topic("Orders");
        assert_eq!(message.topic(), "Orders");
        assert_eq!(&*message.queue().topic, "%RETRY%G");
        let same = Message::new(queue(), 1, "x").with_topic("%RETRY%G");
        assert_eq!(
            same.topic, None,
            "the queue's own topic is not stored twice"
        );
    }

    #[test]
    fn keys_skip_empty_segments() {
        let message = Message::new(queue(), 1, "x").with_property(property::KEYS, " a  b ");
        assert_eq!(message.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(Message::new(queue(), 1, "x").keys().count(), 0);
    }
}
