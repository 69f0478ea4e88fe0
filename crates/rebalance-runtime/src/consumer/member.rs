//! [`MemberOptions`]: the part of a consumer's configuration that says how it is a member of
//! its group (cluster access, allocation, timers, identity), without what it consumes
//! (subscriptions, listener, order, message model). A consume layer built on the runtime (the
//! push consumer) hands it to the application, so that nothing set there can contradict what
//! the consume layer set: a topic subscribed there would be consumed without the consume
//! layer's knowledge of its tag expression, for one.

use std::sync::Arc;

use rebalance_core::ClientId;
use rebalance_core::StrategyRef;
use rebalance_core::assignor::AssignorRef;
use rebalance_core::strategy::Params;
use tokio_util::sync::CancellationToken;

use super::{ClusterServices, ConsumerBuilder, ConsumerError};
use crate::allocation::Allocation;
use crate::config::{AddedFailurePolicy, ConsumeFrom, Intervals};
use crate::{GroupDirectory, NameServer, OffsetStore, QueueLocker};

/// How a consumer is a member of its group: given by [`ConsumerBuilder::configure`] (and by a
/// consume layer's builder, such as the push consumer's `configure`), each setter the
/// [`ConsumerBuilder`]'s of the same name.
///
/// ```
/// # use std::sync::Arc;
/// # use rebalance_runtime::{Consumer, ListenerError, QueueLease, QueueListener, RemovedQueue};
/// # use rebalance_runtime::memory::InMemoryCluster;
/// # struct Print;
/// # #[async_trait::async_trait]
/// # impl QueueListener for Print {
/// #     async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> { Ok(()) }
/// #     async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> { Ok(()) }
/// # }
/// use rebalance_runtime::MemberOptions;
///
/// /// What every member of the service's groups shares.
/// fn member(cluster: InMemoryCluster) -> impl FnOnce(MemberOptions) -> MemberOptions {
///     move |m| m.cluster(cluster.client("10.0.0.1@1")).consume_retry_topic(false)
/// }
///
/// let cluster = InMemoryCluster::new();
/// let builder = Consumer::builder("G")
///     .subscribe("T")
///     .configure(member(cluster))
///     .listener(Arc::new(Print));
/// ```
#[must_use]
#[derive(Debug)]
pub struct MemberOptions(ConsumerBuilder);

impl MemberOptions {
    pub(super) fn new(builder: ConsumerBuilder) -> Self {
        Self(builder)
    }

    pub(super) fn into_builder(self) -> ConsumerBuilder {
        self.0
    }

    /// See [`ConsumerBuilder::client_id`].
    pub fn client_id(self, id: impl Into<ClientId>) -> Self {
        Self(self.0.client_id(id))
    }

    /// See [`ConsumerBuilder::consume_retry_topic`].
    pub fn consume_retry_topic(self, consume: bool) -> Self {
        Self(self.0.consume_retry_topic(consume))
    }

    /// See [`ConsumerBuilder::consume_from`].
    pub fn consume_from(self, from: ConsumeFrom) -> Self {
        Self(self.0.consume_from(from))
    }

    /// See [`ConsumerBuilder::exclusive_hand_off`].
    pub fn exclusive_hand_off(self, exclusive: bool) -> Self {
        Self(self.0.exclusive_hand_off(exclusive))
    }

    /// See [`ConsumerBuilder::on_queues_added_failure`].
    pub fn on_queues_added_failure(self, policy: AddedFailurePolicy) -> Self {
        Self(self.0.on_queues_added_failure(policy))
    }

    /// See [`ConsumerBuilder::intervals`].
    pub fn intervals(self, intervals: Intervals) -> Self {
        Self(self.0.intervals(intervals))
    }

    /// See [`ConsumerBuilder::strategy`].
    pub fn strategy(self, strategy: StrategyRef) -> Self {
        Self(self.0.strategy(strategy))
    }

    /// See [`ConsumerBuilder::allocation`].
    pub fn allocation(self, allocation: Allocation) -> Self {
        Self(self.0.allocation(allocation))
    }

    /// See [`ConsumerBuilder::server_assignment`].
    pub fn server_assignment(
        self,
        source: Arc<dyn crate::AssignmentSource>,
        strategy: impl Into<String>,
    ) -> Self {
        Self(self.0.server_assignment(source, strategy))
    }

    /// See [`ConsumerBuilder::assignor`].
    pub fn assignor(self, assignor: AssignorRef) -> Self {
        Self(self.0.assignor(assignor))
    }

    /// See [`ConsumerBuilder::allow_unknown_params`].
    pub fn allow_unknown_params(self, allow: bool) -> Self {
        Self(self.0.allow_unknown_params(allow))
    }

    /// See [`ConsumerBuilder::strategy_named`].
    pub fn strategy_named(self, name: &str, params: &Params) -> Result<Self, ConsumerError> {
        self.0.strategy_named(name, params).map(Self)
    }

    /// See [`ConsumerBuilder::assignor_named`].
    pub fn assignor_named(self, name: &str, params: &Params) -> Result<Self, ConsumerError> {
        self.0.assignor_named(name, params).map(Self)
    }

    /// See [`ConsumerBuilder::name_server`].
    pub fn name_server(self, name_server: Arc<dyn NameServer>) -> Self {
        Self(self.0.name_server(name_server))
    }

    /// See [`ConsumerBuilder::directory`].
    pub fn directory(self, directory: Arc<dyn GroupDirectory>) -> Self {
        Self(self.0.directory(directory))
    }

    /// See [`ConsumerBuilder::offset_store`].
    pub fn offset_store(self, offsets: Arc<dyn OffsetStore>) -> Self {
        Self(self.0.offset_store(offsets))
    }

    /// See [`ConsumerBuilder::locker`].
    pub fn locker(self, locker: Arc<dyn QueueLocker>) -> Self {
        Self(self.0.locker(locker))
    }

    /// See [`ConsumerBuilder::cluster`].
    pub fn cluster<C: ClusterServices>(self, cluster: C) -> Self {
        Self(self.0.cluster(cluster))
    }

    /// See [`ConsumerBuilder::shutdown_on`].
    pub fn shutdown_on(self, token: CancellationToken) -> Self {
        Self(self.0.shutdown_on(token))
    }
}
