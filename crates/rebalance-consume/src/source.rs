//! [`MessageSource`]: where the consume layer reads messages from and sends failed ones back.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::MessageQueue;

use super::Message;
use rebalance_runtime::RemoteError;
use rebalance_runtime::subscription::TagExpression;

/// How many messages one pull asks for at most (the Java push consumer's `pullBatchSize`).
pub const DEFAULT_PULL_BATCH_SIZE: u32 = 32;
/// How many body bytes one pull asks for at most (`pullBatchSizeInBytes`, 256 KiB).
pub const DEFAULT_PULL_BATCH_BYTES: u32 = 256 * 1024;
/// How long a source may hold a pull while the queue has no new message (long polling; the
/// Java client's `BROKER_SUSPEND_MAX_TIME_MILLIS`).
pub const DEFAULT_PULL_SUSPEND: Duration = Duration::from_secs(15);

/// One pull: the messages of `queue` from `offset` on, for `group`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PullRequest {
    /// The consumer group.
    pub group: Arc<str>,
    /// The queue.
    pub queue: MessageQueue,
    /// The first offset wanted.
    pub offset: i64,
    /// The tags wanted: a source returns only messages whose tag the expression
    /// [matches](TagExpression::matches) (a RocketMQ source re-filters what the broker sent,
    /// since the broker filters by the tag's hash code).
    pub expression: TagExpression,
    /// At most this many messages.
    pub max_messages: u32,
    /// At most about this many body bytes (a source may return one message that is larger).
    pub max_bytes: u32,
    /// How long the source may hold the pull when the queue has no message at `offset` yet,
    /// answering as soon as one arrives (long polling). Zero: answer at once.
    pub suspend: Duration,
    /// This client's progress on the queue (the next offset to consume), which a RocketMQ
    /// broker stores with the pull; `None` when there is none to report.
    pub commit_offset: Option<i64>,
}

impl PullRequest {
    /// A pull of `queue` from `offset` with the Java push consumer's defaults: 32 messages,
    /// 256 KiB, held up to 15 s, no commit offset.
    pub fn new(
        group: impl Into<Arc<str>>,
        queue: MessageQueue,
        offset: i64,
        expression: TagExpression,
    ) -> Self {
        Self {
            group: group.into(),
            queue,
            offset,
            expression,
            max_messages: DEFAULT_PULL_BATCH_SIZE,
            max_bytes: DEFAULT_PULL_BATCH_BYTES,
            suspend: DEFAULT_PULL_SUSPEND,
            commit_offset: None,
        }
    }

    /// Sets the batch limits.
    pub fn with_limits(mut self, max_messages: u32, max_bytes: u32) -> Self {
        self.max_messages = max_messages;
        self.max_bytes = max_bytes;
        self
    }

    /// Sets how long the source may hold the pull.
    pub fn with_suspend(mut self, suspend: Duration) -> Self {
        self.suspend = suspend;
        self
    }

    /// Sets the progress reported with the pull.
    pub fn with_commit_offset(mut self, offset: Option<i64>) -> Self {
        self.commit_offset = offset;
        self
    }
}

/// What a pull found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PullResult {
    /// Messages from the requested offset on (possibly none left once filtered by tag: pull
    /// again from `next_offset`).
    Found {
        /// The messages, in offset order.
        messages: Vec<Message>,
        /// Where the next pull starts.
        next_offset: i64,
        /// The queue's smallest offset.
        min_offset: i64,
        /// The queue's largest offset (one past its last message).
        max_offset: i64,
    },
    /// No new message (after the source held the pull as long as it was allowed), or none
    /// matching the expression: pull again from `next_offset`.
    NoNewMessage {
        /// Where the next pull starts.
        next_offset: i64,
    },
    /// The requested offset is out of the queue's range (its messages were deleted, or it was
    /// never valid): continue from `next_offset`.
    OffsetMoved {
        /// Where consumption continues.
        next_offset: i64,
    },
}

/// Why a pull failed. Every kind is transient for the consume layer: it pulls again later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The source asks the client to slow down (RocketMQ: `FLOW_CONTROL`):
    /// pull again after a short pause.
    #[error("flow control: {0}")]
    Throttled(RemoteError),
    /// Any other failure: pull again after the error delay (3 s). A
    /// [`RemoteError::Denied`] (the credentials or permissions refused) backs off instead,
    /// from 3 s doubling up to [`MAX_DENIED_DELAY`](super::MAX_DENIED_DELAY) (60 s) while the
    /// denial lasts, and is logged once per resource, not once per queue.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The source answered with an offset that cannot be: a message offset or a next offset
    /// that is negative, at `i64::MAX` (no offset can follow it), or a message below the
    /// requested offset that would move the queue back. Counted as a failed pull: the loop
    /// pulls again from where it was after the error delay, and never takes a message past
    /// the end of the offsets.
    #[error("impossible answer to a pull of {queue:?} from offset {offset}: {detail}")]
    ImpossibleOffset {
        /// The queue pulled.
        queue: MessageQueue,
        /// The offset the pull asked for.
        offset: i64,
        /// What is impossible.
        detail: String,
    },
}

/// The delay level of a [`SendBack`] that sends the message straight to the group's
/// dead-letter topic (`%DLQ%{group}`), whatever its reconsume count: a broker dead-letters a
/// message sent back with a negative level.
pub const DEAD_LETTER_LEVEL: i32 = -1;

/// A message the application failed to consume, to be delivered again later
/// (RocketMQ: `CONSUMER_SEND_MSG_BACK`).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct SendBack<'a> {
    /// The consumer group, whose retry topic (`%RETRY%{group}`) receives the message.
    pub group: &'a str,
    /// The message as it was pulled.
    pub message: &'a Message,
    /// When to deliver it again: 0 lets the source decide (RocketMQ: level 3 + the number of
    /// earlier redeliveries, 10 s for the first), a positive level picks one of the delay
    /// levels (`1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`), a negative one
    /// ([`DEAD_LETTER_LEVEL`]) sends the message straight to the dead-letter topic.
    pub delay_level: i32,
    /// After this many redeliveries the message goes to the group's dead-letter topic
    /// (`%DLQ%{group}`) instead. A broker counts the redeliveries of the message *it stored*
    /// (found by its commit-log offset), not the [`Message::reconsume_times`] of the copy
    /// sent back: a message consumed again locally (an ordered one suspended, or one whose
    /// send-back failed) counts only its deliveries through the retry topic there. To
    /// dead-letter a message the client gave up on, use [`DEAD_LETTER_LEVEL`].
    pub max_reconsume_times: i32,
}

impl<'a> SendBack<'a> {
    /// Sends `message` back for `group`, with the delay chosen by the source and the Java
    /// default of 16 redeliveries.
    pub fn new(group: &'a str, message: &'a Message) -> Self {
        Self {
            group,
            message,
            delay_level: 0,
            max_reconsume_times: 16,
        }
    }

    /// Sets the delay level.
    pub fn with_delay_level(mut self, level: i32) -> Self {
        self.delay_level = level;
        self
    }

    /// Sends the message straight to the dead-letter topic ([`DEAD_LETTER_LEVEL`]).
    pub fn to_dead_letters(self) -> Self {
        self.with_delay_level(DEAD_LETTER_LEVEL)
    }

    /// Sets the number of redeliveries before the dead-letter topic.
    pub fn with_max_reconsume_times(mut self, times: i32) -> Self {
        self.max_reconsume_times = times;
        self
    }
}

/// Where a consumer reads messages: the in-memory cluster, or a RocketMQ broker client.
///
/// Every call must end in bounded time (a pull after its `suspend` plus the transport's
/// timeout), since the consume layer awaits each answer.
#[async_trait]
pub trait MessageSource: Send + Sync + 'static {
    /// Pulls messages of a queue.
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError>;

    /// Sends a message that failed back for redelivery through the group's retry topic, or to
    /// its dead-letter topic past `max_reconsume_times`.
    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError>;

    /// The queue's smallest offset (where [`Earliest`](rebalance_runtime::StartPosition::Earliest) starts).
    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError>;

    /// The queue's largest offset, one past its last message (where
    /// [`Latest`](rebalance_runtime::StartPosition::Latest) starts).
    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError>;

    /// The offset of the first message stored at or after `timestamp_ms` (ms since the Unix
    /// epoch), or the largest offset when there is none (where
    /// [`Timestamp`](rebalance_runtime::StartPosition::Timestamp) starts).
    async fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64, RemoteError>;
}
