//! Why a producer could not start or could not choose a queue.

use std::time::Duration;

use rebalance_core::PublishError;

use crate::{RemoteError, RouteError};

/// Why a producer could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// A required part was not configured.
    #[error("the producer needs {0}; set it on the builder")]
    Missing(&'static str),
    /// The group name is empty.
    #[error("the producer group name is empty")]
    EmptyGroup,
    /// `start` was called outside a tokio runtime.
    #[error("the producer must be started inside a tokio runtime")]
    NoRuntime,
    /// An interval is zero or absurdly long (`poll_interval`, `route_timeout`,
    /// `topic_gone_after`).
    #[error(transparent)]
    Interval(#[from] crate::config::IntervalsError),
    /// The producer's route sync panicked (a bug, typically in the name server's
    /// implementation): in its first poll, so the producer did not start, or later, so it
    /// stopped (see [`ProducerHandle::join`](super::ProducerHandle::join)).
    #[error("the producer's route sync panicked: {0}")]
    TaskPanicked(String),
}

/// Why no queue could be chosen for a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// The name server does not know the topic.
    #[error("topic `{0}` not found on the name server")]
    TopicNotFound(String),
    /// The name server failed (or sent garbage) and no route of the topic is known yet.
    #[error("no route of topic `{topic}` yet: name server {error}")]
    NameServer {
        /// The topic.
        topic: String,
        /// The failure.
        error: RemoteError,
    },
    /// The route was not fetched within the producer's route timeout.
    #[error("no route of topic `{topic}` within {after:?}")]
    RouteTimeout {
        /// The topic.
        topic: String,
        /// The timeout.
        after: Duration,
    },
    /// [`try_select`](super::ProducerHandle::try_select) on a topic whose route has not been
    /// fetched yet (use the async `select`, or register the topic first).
    #[error("no route of topic `{0}` yet")]
    RouteUnknown(String),
    /// The name server has said for a while that the topic does not exist any more.
    #[error("topic `{0}` is gone")]
    TopicGone(String),
    /// The route gives nothing to send to.
    #[error("cannot send to topic `{topic}`: {error}")]
    NoPublishQueue {
        /// The topic.
        topic: String,
        /// Why.
        error: PublishError,
    },
    /// A [`QueueSelector`](super::QueueSelector) refused or answered an index out of range.
    #[error("the queue selector chose no queue of topic `{topic}` ({queues} queues)")]
    SelectorRefused {
        /// The topic.
        topic: String,
        /// How many queues it was offered.
        queues: usize,
    },
    /// The producer has shut down.
    #[error("the producer has shut down")]
    ShutDown,
    /// The producer stopped because its route sync panicked (see
    /// [`ProducerError::TaskPanicked`]).
    #[error("the producer stopped: its route sync panicked: {0}")]
    TaskPanicked(String),
}

impl SelectError {
    pub(crate) fn from_route(topic: &str, error: RouteError) -> Self {
        match error {
            RouteError::TopicNotFound(_) => SelectError::TopicNotFound(topic.to_string()),
            RouteError::NameServer(error) => SelectError::NameServer {
                topic: topic.to_string(),
                error,
            },
        }
    }
}
