//! [`PopSource`]: where a POP consumer pops messages, acknowledges them and changes their
//! invisible time (RocketMQ 5's POP_MESSAGE, ACK_MESSAGE / BATCH_ACK_MESSAGE and
//! CHANGE_MESSAGE_INVISIBLETIME; or the in-memory cluster).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_runtime::subscription::TagExpression;
use rebalance_runtime::{RemoteError, StartPosition};

use crate::{Message, PullError};

/// The most messages one pop may take (the brokers refuse more).
pub const MAX_POP_BATCH: u32 = 32;

/// Where a group without an offset in a queue starts popping it (RocketMQ's `initMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PopStart {
    /// From the queue's oldest message.
    Earliest,
    /// From its end (a Java broker starts a young queue whose first message is still in
    /// memory from offset 0, delivering everything).
    #[default]
    Latest,
}

impl PopStart {
    /// Where a lease's start position starts popping: the oldest message for
    /// [`Earliest`](StartPosition::Earliest), else the end (as the Java client sets
    /// `initMode`).
    pub fn of(start: StartPosition) -> Self {
        match start {
            StartPosition::Earliest => PopStart::Earliest,
            _ => PopStart::Latest,
        }
    }
}

/// One pop: up to `max_messages` messages of `queue` (queue id `-1`: of every queue of its
/// broker), each invisible to other pops for `invisible_time` unless acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PopRequest {
    /// The consumer group.
    pub group: Arc<str>,
    /// The queue, or every queue of its broker (queue id `-1`).
    pub queue: MessageQueue,
    /// The tags wanted (the source returns only messages whose tag it matches, and
    /// acknowledges the others itself).
    pub expression: TagExpression,
    /// At most this many messages (1 to [`MAX_POP_BATCH`]).
    pub max_messages: u32,
    /// How long the popped messages stay invisible to other pops.
    pub invisible_time: Duration,
    /// How long the source may hold the pop when there is nothing to pop (long polling).
    pub poll_time: Duration,
    /// Where a group without an offset in a queue starts.
    pub start: PopStart,
    /// Orderly POP: each queue is given to one batch at a time (blocked for other pops until
    /// the batch is acknowledged or its invisible time passes, then popped again from its
    /// first unacknowledged message).
    pub orderly: bool,
    /// Orderly POP: the attempt this pop belongs to (a pop again with the same id, after an
    /// answer was lost, gets the same batch back).
    pub attempt_id: Option<String>,
}

impl PopRequest {
    /// A pop of `queue` for `group` with the Java push consumer's defaults: 32 messages,
    /// invisible for 60 s, held up to 15 s, starting at the end, not orderly.
    pub fn new(group: impl Into<Arc<str>>, queue: MessageQueue, expression: TagExpression) -> Self {
        Self {
            group: group.into(),
            queue,
            expression,
            max_messages: MAX_POP_BATCH,
            invisible_time: Duration::from_secs(60),
            poll_time: Duration::from_secs(15),
            start: PopStart::Latest,
            orderly: false,
            attempt_id: None,
        }
    }

    /// Sets the batch size.
    pub fn with_max_messages(mut self, max_messages: u32) -> Self {
        self.max_messages = max_messages;
        self
    }

    /// Sets the invisible time.
    pub fn with_invisible_time(mut self, invisible_time: Duration) -> Self {
        self.invisible_time = invisible_time;
        self
    }

    /// Sets how long the source may hold the pop.
    pub fn with_poll_time(mut self, poll_time: Duration) -> Self {
        self.poll_time = poll_time;
        self
    }

    /// Sets where a group without an offset starts.
    pub fn with_start(mut self, start: PopStart) -> Self {
        self.start = start;
        self
    }

    /// Makes it an orderly pop of attempt `attempt_id`.
    pub fn orderly(mut self, attempt_id: Option<String>) -> Self {
        self.orderly = true;
        self.attempt_id = attempt_id;
        self
    }
}

/// What a pop found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PopResult {
    /// Messages, each with its receipt handle ([`Message::receipt_handle`]), grouped by queue,
    /// each queue's in offset order.
    Found {
        /// The messages to consume.
        messages: Vec<Message>,
        /// Messages popped that the expression does not match (a RocketMQ broker filters by the
        /// tag's hash code, so a tag whose hash collides comes too): acknowledged with the
        /// others, in their place in the queue's order, never delivered. Their bodies may be
        /// empty; their queue, offset and handle are what counts.
        filtered: Vec<Message>,
    },
    /// Nothing to pop (after the source held the pop as long as it was allowed).
    NoMessage,
}

/// A broker's refusal of an acknowledgement or a change of invisible time for a message its
/// queue no longer has (RocketMQ's `NO_MESSAGE`).
pub(crate) const NO_MESSAGE: i32 = 208;

/// Where a POP consumer pops, acknowledges and postpones messages: the RocketMQ transport's
/// broker client, or the in-memory cluster.
///
/// A receipt handle is opaque: the source gives every popped message one, as its
/// [`POP_CK`](crate::property::POP_CK) property, and reads it back in [`ack`](Self::ack) and
/// [`change_invisible_time`](Self::change_invisible_time).
///
/// Every call must end in bounded time (a pop after its poll time plus the transport's
/// timeout): the consume layer awaits each answer.
#[async_trait]
pub trait PopSource: Send + Sync + 'static {
    /// Pops messages. A busy source answers [`PullError::Throttled`]; a refusal or a failure,
    /// [`PullError::Remote`].
    async fn pop(&self, request: &PopRequest) -> Result<PopResult, PullError>;

    /// Acknowledges popped messages of `topic` (the topic popped), by their handles, all of
    /// one broker, **in the order given** (an orderly pop's messages must be acknowledged in
    /// offset order). A message that no longer exists is not an error.
    async fn ack(&self, group: &str, topic: &str, handles: &[&str]) -> Result<(), RemoteError>;

    /// Makes a popped message invisible for `invisible_time` from now (zero: visible at once)
    /// and returns its new handle; the old one is dead.
    async fn change_invisible_time(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        invisible_time: Duration,
    ) -> Result<String, RemoteError>;
}
