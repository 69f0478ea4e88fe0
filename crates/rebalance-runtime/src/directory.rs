//! [`GroupDirectory`]: who is in the group; and [`StartedConsumer`], how a directory reaches a
//! consumer that registered through it.

use std::sync::Weak;

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};
use tokio::sync::watch;

use crate::RemoteError;
use crate::config::{ConsumeFrom, ConsumeOrder, MessageModel};
use crate::running::RunningInfo;
use crate::subscription::Subscription;

/// What a client tells the directory about itself in every heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// This client.
    pub client_id: ClientId,
    /// The consumer group.
    pub group: String,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Concurrent or orderly consumption.
    pub consume_order: ConsumeOrder,
    /// Where a queue without a stored offset starts.
    pub consume_from: ConsumeFrom,
    /// The subscriptions, sorted by topic, one per topic. For a clustering consumer this
    /// includes the group's retry topic unless it was opted out of (see
    /// [`ConsumerBuilder::consume_retry_topic`](crate::ConsumerBuilder::consume_retry_topic)).
    pub subscriptions: Vec<Subscription>,
}

impl Registration {
    /// The subscribed topics, sorted.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.subscriptions.iter().map(|s| s.topic.as_str())
    }
}

/// The membership of consumer groups (in RocketMQ: the brokers, maintained by heartbeats).
///
/// Every call must end in bounded time (the RocketMQ transport's requests time out after 3 s):
/// the runtime awaits each answer, and a call that never returns stalls the rounds or the
/// heartbeats.
#[async_trait]
pub trait GroupDirectory: Send + Sync + 'static {
    /// Registers this client, or refreshes its registration (a heartbeat). Registrations expire
    /// when heartbeats stop.
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError>;

    /// Removes this client from its group at once.
    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError>;

    /// The ids of the group's members that consume `topic`, in any order.
    ///
    /// A directory may not know who consumes what: RocketMQ brokers list a group's members per
    /// group, so over that transport this is every member of the group, and every member must
    /// subscribe to the same topics (as with the Java client).
    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError>;

    /// A receiver whose value changes whenever the directory learns that the group's
    /// membership changed (RocketMQ: `NOTIFY_CONSUMER_IDS_CHANGED`), or `None` when the
    /// directory cannot tell. Only the fact of a change matters, so changes coalesce and none
    /// is lost. The runtime never relies on it alone: it also rebalances periodically.
    fn membership_changes(&self, _group: &str) -> Option<watch::Receiver<u64>> {
        None
    }

    /// The one client id this directory registers, when it is bound to one (the in-memory
    /// cluster's clients are); `None` when it registers whatever id it is given. A consumer
    /// built without [`client_id`](crate::ConsumerBuilder::client_id) takes this one, and one
    /// built with another id fails to start.
    fn bound_client_id(&self) -> Option<ClientId> {
        None
    }

    /// Called once a consumer registering through this directory has started, with a reference
    /// that does not keep it running (it no longer upgrades once every
    /// [`ConsumerHandle`](crate::ConsumerHandle) of the consumer was dropped). A transport whose
    /// servers ask clients questions (RocketMQ brokers ask for a consumer's running info and
    /// push offset resets) keeps it to answer them (see [`StartedConsumer`]). Must not block.
    fn consumer_started(&self, _consumer: Weak<dyn StartedConsumer>) {}
}

/// A started consumer, as the directory it registered through reaches it afterwards (see
/// [`GroupDirectory::consumer_started`]): what a transport's servers may ask a client about its
/// consumers. The runtime's consumer implements it, with the answers of its
/// [`ConsumerHandle`](crate::ConsumerHandle) (the methods of the same names).
///
/// A trait, not the handle itself, so that the directory, which the consumer is built on,
/// names nothing of the consumer.
pub trait StartedConsumer: Send + Sync {
    /// The consumer group.
    fn group(&self) -> &str;

    /// The client id the consumer registers.
    fn client_id(&self) -> &ClientId;

    /// Whether the consumer has stopped.
    fn is_stopped(&self) -> bool;

    /// A snapshot of what the consumer is doing (see
    /// [`ConsumerHandle::running_info`](crate::ConsumerHandle::running_info)).
    fn running_info(&self) -> RunningInfo;

    /// Applies an operator's offset reset to the queues the consumer holds (see
    /// [`ConsumerHandle::reset_offsets`](crate::ConsumerHandle::reset_offsets)); returns at
    /// once.
    fn reset_offsets(&self, offsets: Vec<(MessageQueue, i64)>) -> Result<(), ResetRefused>;
}

/// Why a consumer did not take an operator's offset reset
/// ([`StartedConsumer::reset_offsets`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResetRefused {
    /// The consumer is shutting down, or has stopped.
    #[error("the consumer has shut down")]
    ShutDown,
    /// Too many resets still wait for the consumer's task (it is stuck in a long round or
    /// callback): try again later.
    #[error(
        "{pending} offset resets are already waiting for the consumer's task; try again once it has applied them"
    )]
    Pending {
        /// How many wait.
        pending: usize,
    },
}
