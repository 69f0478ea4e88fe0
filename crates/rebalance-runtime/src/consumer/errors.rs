//! [`ConsumerError`]: why a consumer could not be started or a request could not be served.

use std::sync::Arc;
use std::time::Duration;

use rebalance_core::assignor::AssignorConfigError;
use rebalance_core::strategy::StrategyConfigError;
use rebalance_core::{ClientId, MessageQueue};

use crate::assignment::Assignment;
use crate::config::IntervalsError;
use crate::directory::ResetRefused;
use crate::error::RemoteError;
use crate::subscription::TagExpressionError;

/// Why a consumer could not be started or a request could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// A required part was not configured.
    #[error("the consumer needs {0}; set it on the builder")]
    Missing(&'static str),
    /// The group name is empty.
    #[error("the consumer group name is empty")]
    EmptyGroup,
    /// The consumer subscribes to no topic, so it would start, report balanced rounds and never
    /// get a queue. The group's retry topic, which a clustering consumer subscribes to by itself,
    /// does not count.
    #[error(
        "the consumer subscribes to no topic, so it would never get a queue; call `subscribe(topic)` or `subscribe_tags(topic, expression)` on the builder (the group's retry topic, subscribed to automatically, does not count)"
    )]
    NoSubscription,
    /// The client id is empty.
    #[error("the client id is empty")]
    EmptyClientId,
    /// The directory is bound to another client id than the one the builder was given (an
    /// in-memory cluster client made for another id, say).
    #[error(
        "the client id is `{configured}`, but the directory registers `{bound}`; give both the same id, or leave `client_id` out"
    )]
    ClientIdMismatch {
        /// The id given to the builder.
        configured: ClientId,
        /// The id the directory registers.
        bound: ClientId,
    },
    /// The strategy could not be built, or would allocate nothing to anybody (its message names
    /// the strategy).
    #[error(transparent)]
    Strategy(#[from] StrategyConfigError),
    /// The assignor could not be built (its message names the assignor).
    #[error(transparent)]
    Assignor(#[from] AssignorConfigError),
    /// An interval cannot be used (zero, or absurdly long).
    #[error(transparent)]
    Intervals(#[from] IntervalsError),
    /// A subscription's tag expression is malformed.
    #[error("subscription to `{topic}`: {source}")]
    TagExpression {
        /// The topic subscribed to.
        topic: String,
        /// What is wrong with the expression.
        source: TagExpressionError,
    },
    /// Broadcasting was configured with an offset store shared by the group (such as the
    /// broker's, which [`ConsumerBuilder::cluster`](super::ConsumerBuilder::cluster) sets): every client would overwrite the
    /// others' progress. Give the consumer a per-client store with
    /// [`ConsumerBuilder::offset_store`](super::ConsumerBuilder::offset_store) (after `cluster`), e.g. [`LocalOffsetStore`](crate::LocalOffsetStore)
    /// (in memory) or the RocketMQ transport's `FileOffsetStore` (in a local file).
    #[error(
        "broadcasting needs a per-client offset store, but the configured one is shared by the group \
         (every client would overwrite the others' progress); set one with `offset_store` after \
         `cluster`, e.g. `LocalOffsetStore` (in memory) or `FileOffsetStore` (in a local file)"
    )]
    SharedOffsetStore,
    /// A task of the consumer panicked (a panic in a transport or another component the runtime
    /// calls without containing it). The consumer has stopped, and `task` says how far it got:
    /// - `"heartbeat"` or `"route sync"`: the service stopped the consumer the ordinary way
    ///   (queues announced as removed, last offsets persisted, locks released, client
    ///   unregistered when the directory could be reached);
    /// - `"rebalance service"`, the service itself: every lease was cancelled and the client
    ///   unregistered (when the directory could be reached), but queues were not announced as
    ///   removed, their last offsets not persisted and their locks not released (they expire).
    ///
    /// [`ConsumerBuilder::start`](super::ConsumerBuilder::start) returns it when the first route poll or the first heartbeat,
    /// which it runs itself, panics: then nothing was started and no queue was taken (a
    /// heartbeat that panicked half-way may have registered the client, which the directory
    /// expires).
    #[error("the consumer's {task} task panicked: {message}")]
    TaskPanicked {
        /// Which task.
        task: &'static str,
        /// The panic's message.
        message: String,
    },
    /// The directory refused the first heartbeat: another live consumer instance already
    /// registered this client id in the group (the in-memory cluster checks this). Two
    /// consumers with one id would each take the same queues. Nothing was started.
    #[error(
        "client id `{client_id}` is already used by another running consumer of group `{group}`; give every consumer its own id with `ConsumerBuilder::client_id`"
    )]
    ClientIdInUse {
        /// The client id.
        client_id: ClientId,
        /// The group.
        group: String,
    },
    /// Server-side assignment with a strategy the brokers cannot run: they would answer it
    /// with no queue at all (the Rust broker 1.0) or with no assignment (Java's).
    #[error(
        "the brokers cannot run the strategy `{strategy}` for server-side assignment; they accept {}",
        accepted.join(", ")
    )]
    ServerStrategy {
        /// The strategy configured.
        strategy: String,
        /// The strategies the brokers accept ([`AssignmentSource::strategies`](crate::AssignmentSource::strategies)).
        accepted: Vec<String>,
    },
    /// Server-side assignment asked of a consumer that rebalances on the client in RocketMQ
    /// (orderly or broadcasting consumers, as in the Java client), or combined with an option it
    /// cannot honour (an exclusive hand-off of popped queues, which several members share).
    #[error(
        "server-side assignment is not for {0}; use a client-side strategy (such consumers rebalance on the client, as in the Java client)"
    )]
    ServerSideRefused(&'static str),
    /// `start` was called outside a tokio runtime.
    #[error("the consumer must be started inside a tokio runtime")]
    NoRuntime,
    /// The consumer has shut down.
    #[error("the consumer has shut down")]
    ShutDown,
    /// [`ConsumerHandle::ready`](super::ConsumerHandle::ready) gave up: some subscribed topics
    /// had no balanced round in time, each with the reason.
    #[error(transparent)]
    NotReady(#[from] super::NotReady),
    /// [`ConsumerHandle::wait_for_assignment`](super::ConsumerHandle::wait_for_assignment)
    /// saw no matching assignment in time.
    #[error(
        "no assignment matched within {after:?}; the last one holds {} queue(s) (round {}, {}); the round reports (`rounds()`) say why a topic is not balanced",
        last.len(),
        last.round,
        if last.balanced { "balanced" } else { "not balanced" }
    )]
    AssignmentTimedOut {
        /// How long it waited.
        after: Duration,
        /// The assignment when it gave up.
        last: Arc<Assignment>,
    },
    /// [`ConsumerHandle::persist_offsets`](super::ConsumerHandle::persist_offsets): the offset
    /// store refused these queues' offsets (the persistence tick tries them again).
    #[error(
        "the offset store refused the committed offsets of {} queue(s) (the persistence tick tries them again): {}",
        refused.len(),
        refused.iter().map(|(q, e)| format!("{q}: {e}")).collect::<Vec<_>>().join("; ")
    )]
    OffsetsNotPersisted {
        /// Each queue whose offset was refused, with the store's answer.
        refused: Vec<(MessageQueue, RemoteError)>,
    },
    /// [`ConsumerHandle::reset_offsets`](super::ConsumerHandle::reset_offsets) found too many
    /// resets still waiting for the consumer's task (it is stuck in a long round or callback):
    /// try again later.
    #[error(
        "{pending} offset resets are already waiting for the consumer's task; try again once it has applied them"
    )]
    ResetsPending {
        /// How many wait.
        pending: usize,
    },
}

impl From<ResetRefused> for ConsumerError {
    fn from(refused: ResetRefused) -> Self {
        match refused {
            ResetRefused::ShutDown => ConsumerError::ShutDown,
            ResetRefused::Pending { pending } => ConsumerError::ResetsPending { pending },
        }
    }
}
