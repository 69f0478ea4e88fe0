//! POP consumption (RocketMQ 5): several consumers read one queue at once, and the broker keeps
//! track of what each took.
//!
//! - [`BrokerClient::pop`](crate::BrokerClient::pop) (POP_MESSAGE, 200050, with long polling): up to 32 messages, each
//!   invisible to other POPs for the invisible time; see [`pop_message`] for every answer.
//! - [`BrokerClient::ack`](crate::BrokerClient::ack) (ACK_MESSAGE, 200051) and [`BrokerClient::batch_ack`](crate::BrokerClient::batch_ack)
//!   (BATCH_ACK_MESSAGE, 200151): a message consumed.
//! - [`BrokerClient::change_invisible_time`](crate::BrokerClient::change_invisible_time) (CHANGE_MESSAGE_INVISIBLETIME, 200053): its
//!   redelivery postponed (or brought forward); the answer is a new [`ReceiptHandle`], and the
//!   old one is dead.
//! - [`BrokerClient::notification`](crate::BrokerClient::notification) (NOTIFICATION, 200054): whether there is anything to pop,
//!   held up to a poll time.
//!
//! An unacknowledged message comes back after its invisible time: the broker copies it into the
//! group's POP retry topic `%RETRY%{group}_{topic}` (not the push consumer's `%RETRY%{group}`)
//! with its reconsume count plus one, and a later POP of the topic returns it, under the
//! topic, with a handle whose [`RetryFlag`] says so. Acknowledgements name that real topic:
//! the calls here derive it from the handle, so callers only ever name the popped topic.
//!
//! Names are wrapped in the [`NameServerClient`](crate::NameServerClient)'s namespace on the
//! way out and the messages' queues come back plain, as for pulls. A refusal of the
//! credentials or permissions is a [`RemoteError::Denied`] naming the operation (`pop`, `ack`,
//! `batch ack`, `change invisible time`, `notification`) and the group and topic as the
//! servers know them, logged once per resource. A request the brokers would refuse or misread
//! fails before anything is sent ([`PopError::InvalidRequest`]).
//!
//! **What the Rust broker 1.0 does differently from the Java broker** (observed on a real broker
//! by `tests/pop_real_servers.rs`, and traced in its source):
//! - **Unacknowledged messages of a concurrent POP never come back.** It writes each pop's
//!   checkpoint (and each acknowledgement) to its revive log as a timer message whose delay is
//!   the *absolute* revive time, which its timer refuses (`WheelTimerMsgIllegal`): nothing is
//!   ever revived, no POP retry topic is created, and as the group's offset moved at the pop, a
//!   message popped and not consumed is lost to the group. ACK_MESSAGE answers 0 all the same.
//! - For the same reason CHANGE_MESSAGE_INVISIBLETIME of a concurrent POP's message answers 1
//!   (`append check point error, status: WheelTimerMsgIllegal`).
//! - Orderly POP does redeliver (the queue is blocked for other attempts until the batch's
//!   invisible time passes, and its unacknowledged messages come again), but its
//!   acknowledgements never reach the batch's record: `AckMessageOrderCapability::commit_and_next`
//!   (`rocketmq-broker-1.0.0/src/processor/ack_message_processor.rs:143`) passes the group and
//!   the topic to `ConsumerOrderInfoManager::commit_and_next(topic, group, ..)` the other way
//!   round, so an acknowledgement only sets the group's offset past the message acknowledged.
//!   Hence **a batch acknowledged in full may still block its queue until its invisible time
//!   has passed** (one batch per queue per invisible time), and acknowledging a later message
//!   of the batch before an earlier one moves the group past the earlier one, which never
//!   comes back; two orderly POPs without attempt id count as one attempt; the first orderly
//!   POP of a queue without offset may return one message.
//! - No custom header on 209 and 210 answers (only a 0 answer's header is read here).
//! - `msgOffsetInfo` joins one queue's offsets with `;` instead of `,` (both are read, see
//!   [`offset_info`]).
//! - A ninth handle field (the retry-policy generation) on messages of a retry topic (kept and
//!   echoed).
//! - BATCH_ACK's bit set must be a JSON array of bytes whose length is a multiple of 8 (what
//!   [`batch_ack_request`] writes); a base64 string (fastjson's form of Java's `byte[]`) is
//!   answered 1 `Serialization failed`. Whether a Java broker reads the array form is not
//!   verified, and the Java push consumer never batch-acknowledges.
//! - `maxMsgNums` above 32 and a queue id past the topic's are answered 1 `Internal error`, not
//!   29 (refused here before sending).

pub mod ack;
pub mod handle;
pub mod notification;
pub mod offset_info;
pub mod pop_message;

use std::time::Duration;

use rebalance_runtime::RemoteError;

pub use ack::{
    AckOutcome, AckRequest, BatchAckRequest, ChangeInvisibleTimeRequest, ChangeOutcome,
    MAX_BATCH_ACK_SPAN, ack_message_request, batch_ack_request, change_invisible_time_request,
};
pub use handle::{
    HandleFields, MAX_HANDLE_LEN, ORDERLY_REVIVE_QUEUE_ID, ReceiptHandle, ReceiptHandleError,
    RetryFlag,
};
pub use notification::{NotificationOutcome, NotificationRequest, notification_request};
pub use pop_message::{
    DEFAULT_INVISIBLE_TIME, DEFAULT_POLL_TIME, MAX_POP_MESSAGES, POP_TIMEOUT_MARGIN, PopBatch,
    PopFilter, PopInitMode, PopOutcome, PopRequest, PoppedMessage, pop_message_request,
    pop_timeout,
};

/// The message property holding a popped message's receipt handle (`MessageConst.PROPERTY_POP_CK`).
pub const POP_CK: &str = "POP_CK";

/// The message property holding the time of a message's first pop (ms since the Unix epoch).
pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";

/// Why a POP-family or server-side assignment call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PopError {
    /// The request cannot be sent as it is; nothing was sent.
    #[error("invalid {request} request: {reason}")]
    InvalidRequest {
        /// Which request.
        request: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The broker could not be reached, refused the request, denied it
    /// ([`RemoteError::Denied`]) or answered something unreadable.
    #[error(transparent)]
    Remote(#[from] RemoteError),
}

/// A [`PopError::InvalidRequest`].
pub(crate) fn invalid(request: &'static str, reason: impl Into<String>) -> PopError {
    PopError::InvalidRequest {
        request,
        reason: reason.into(),
    }
}

/// `duration` in whole milliseconds, as the brokers read times (an `i64`).
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
