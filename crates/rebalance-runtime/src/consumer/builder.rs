//! [`ConsumerBuilder`]: a consumer's configuration, set piece by piece.

use std::fmt;
use std::sync::Arc;

use rebalance_core::ClientId;
use rebalance_core::StrategyRef;
use rebalance_core::assignor::{AssignorRef, AssignorRegistry};
use rebalance_core::strategy::{Params, StrategyRegistry, UnknownParams};
use tokio_util::sync::CancellationToken;

use super::{ClusterServices, ConsumerError, MemberOptions};
use crate::AssignmentSource;
use crate::allocation::{Allocation, ServerAllocation};
use crate::config::{AddedFailurePolicy, ConsumeFrom, ConsumeOrder, Intervals, MessageModel};
use crate::context::Subscriptions;
use crate::subscription::TagExpression;
use crate::{GroupDirectory, NameServer, OffsetStore, QueueListener, QueueLocker};

/// Entry point: `Consumer::builder("group")`.
#[derive(Debug, Clone, Copy)]
pub struct Consumer;

impl Consumer {
    /// A builder for a member of `group`.
    pub fn builder(group: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder {
            group: group.into(),
            client_id: None,
            subscriptions: Subscriptions::new(),
            consume_retry_topic: true,
            message_model: MessageModel::default(),
            consume_order: ConsumeOrder::default(),
            consume_from: ConsumeFrom::default(),
            exclusive_hand_off: false,
            added_failure: AddedFailurePolicy::default(),
            intervals: Intervals::default(),
            allocation: None,
            unknown_params: UnknownParams::Refuse,
            name_server: None,
            directory: None,
            offsets: None,
            locker: None,
            listener: None,
            shutdown: None,
        }
    }
}

/// Configures a consumer; [`start`](Self::start) runs it.
///
/// ```no_run
/// # async fn demo(cluster: rebalance_runtime::memory::InMemoryCluster,
/// #               listener: std::sync::Arc<dyn rebalance_runtime::QueueListener>) -> Result<(), Box<dyn std::error::Error>> {
/// use rebalance_runtime::Consumer;
///
/// let client = cluster.client("10.0.0.1@1");
/// let consumer = Consumer::builder("orders")
///     .client_id("10.0.0.1@1")
///     .subscribe("Orders")
///     .strategy_named("consistent_hash", &Default::default())?
///     .cluster(client)
///     .listener(listener)
///     .start()
///     .await?;
/// println!("holding {:?}", consumer.assignment().queues);
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
#[must_use = "a ConsumerBuilder does nothing until `start().await` runs the consumer"]
pub struct ConsumerBuilder {
    pub(super) group: String,
    pub(super) client_id: Option<ClientId>,
    pub(super) subscriptions: Subscriptions,
    pub(super) consume_retry_topic: bool,
    pub(super) message_model: MessageModel,
    pub(super) consume_order: ConsumeOrder,
    pub(super) consume_from: ConsumeFrom,
    pub(super) exclusive_hand_off: bool,
    pub(super) added_failure: AddedFailurePolicy,
    pub(super) intervals: Intervals,
    pub(super) allocation: Option<Allocation>,
    pub(super) unknown_params: UnknownParams,
    pub(super) name_server: Option<Arc<dyn NameServer>>,
    pub(super) directory: Option<Arc<dyn GroupDirectory>>,
    pub(super) offsets: Option<Arc<dyn OffsetStore>>,
    pub(super) locker: Option<Arc<dyn QueueLocker>>,
    pub(super) listener: Option<Arc<dyn QueueListener>>,
    pub(super) shutdown: Option<CancellationToken>,
}

impl fmt::Debug for ConsumerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("group", &self.group)
            .field("client_id", &self.client_id)
            .field("subscriptions", &self.subscriptions)
            .field("consume_retry_topic", &self.consume_retry_topic)
            .field("message_model", &self.message_model)
            .field("consume_order", &self.consume_order)
            .field("allocation", &self.allocation)
            .finish_non_exhaustive()
    }
}

impl ConsumerBuilder {
    /// This client's id (default: the directory's, when it is bound to one, as the in-memory
    /// cluster's clients are; else `ip@pid@nanos`). Must be unique in the group.
    pub fn client_id(mut self, id: impl Into<ClientId>) -> Self {
        self.client_id = Some(id.into());
        self
    }

    /// Subscribes every tag of a topic (`*`; more topics can be added at run time with
    /// [`ConsumerHandle::subscribe`](super::ConsumerHandle::subscribe)). Subscribing a topic again replaces its tag expression.
    pub fn subscribe(mut self, topic: impl Into<String>) -> Self {
        self.subscriptions
            .insert(topic.into(), TagExpression::all());
        self
    }

    /// Subscribes the tags of a topic named by `expression`: `*` (or empty) for every tag, or
    /// tags separated by `||` such as `"TagA || TagB"` (see [`subscription`](crate::subscription)
    /// for the syntax). The broker delivers only matching messages to the application's
    /// consumer; the queues are balanced the same way whatever the expression. Subscribing a
    /// topic again replaces its expression.
    ///
    /// Fails with [`ConsumerError::TagExpression`] when the expression is malformed (such as an
    /// empty tag in `"TagA || || TagB"`).
    ///
    /// ```
    /// use rebalance_runtime::{Consumer, ConsumerError};
    ///
    /// let builder = Consumer::builder("orders").subscribe_tags("Orders", "Created || Paid")?;
    /// assert!(matches!(
    ///     builder.subscribe_tags("Refunds", "Refunded ||"),
    ///     Err(ConsumerError::TagExpression { .. })
    /// ));
    /// # Ok::<(), ConsumerError>(())
    /// ```
    pub fn subscribe_tags(
        mut self,
        topic: impl Into<String>,
        expression: &str,
    ) -> Result<Self, ConsumerError> {
        let topic = topic.into();
        match TagExpression::parse(expression) {
            Ok(expression) => {
                self.subscriptions.insert(topic, expression);
                Ok(self)
            }
            Err(source) => Err(ConsumerError::TagExpression { topic, source }),
        }
    }

    /// Whether a clustering consumer also subscribes to the group's retry topic
    /// (`%RETRY%{group}`, see [`retry_topic`](crate::subscription::retry_topic)) with `*` and
    /// balances its queues like any other topic's, as the Java push consumer does: that is where
    /// RocketMQ puts the messages a consumer sent back for redelivery. On by default; turn it
    /// off when the application never sends messages back (or consumes the retry topic
    /// elsewhere). Broadcasting consumers never subscribe to it.
    /// Choose the same for every member of a group: a directory that lists members per group
    /// (RocketMQ's) gives an opted-out member a share of the retry queues too, which it then
    /// does not consume.
    ///
    /// The broker creates the retry topic when it handles the group's first heartbeat; until
    /// its route reaches the name server the topic is quietly left out of the rounds (no
    /// warning, no faster rounds), and its queues are shared out once the route appears.
    pub fn consume_retry_topic(mut self, consume: bool) -> Self {
        self.consume_retry_topic = consume;
        self
    }

    /// Clustering (default) or broadcasting.
    pub fn message_model(mut self, model: MessageModel) -> Self {
        self.message_model = model;
        self
    }

    /// Concurrent (default) or orderly consumption.
    pub fn consume_order(mut self, order: ConsumeOrder) -> Self {
        self.consume_order = order;
        self
    }

    /// Where a queue without a stored offset starts (default: the last offset).
    pub fn consume_from(mut self, from: ConsumeFrom) -> Self {
        self.consume_from = from;
        self
    }

    /// Locks queues at the broker for concurrent consumption too (clustering), so that a queue
    /// moves to its next owner only after the previous one announced the removal, persisted the
    /// last offset and unlocked it: no duplicate consumption at hand-off, for the price of the
    /// lock requests (and a hand-off that waits for the previous owner's next round). Needs a
    /// [`locker`](Self::locker): [`start`](Self::start) fails with [`ConsumerError::Missing`]
    /// without one (in clustering mode; broadcasting never locks). Off by default, as in the
    /// Java client.
    ///
    /// The release waits for the batches being processed under the queue's
    /// [`consume_guard`](crate::QueueLease::consume_guard) for `force_unlock_after` (20 s) at
    /// most: a batch that runs longer may be processed again by the next owner. The push
    /// consumer holds a guard for each concurrent batch (guards do not exclude each other: a
    /// queue's batches still run side by side, and a hung one holds up only its own queue's
    /// hand-off).
    ///
    /// "No duplicate" holds only while send-backs succeed and their answers arrive: a message
    /// whose send-back failed is consumed again locally (and, once the queue is handed off,
    /// by its next owner), and a send-back the broker took whose answer was lost is both
    /// redelivered through the retry topic and consumed again locally. It also needs the
    /// hand-off to be clean: a member killed or cut off has its queues taken over once its
    /// locks expire, and what it had not committed is consumed again.
    pub fn exclusive_hand_off(mut self, exclusive: bool) -> Self {
        self.exclusive_hand_off = exclusive;
        self
    }

    /// What to do when [`QueueListener::queues_added`] fails (default: call it again with
    /// backoff, see [`AddedFailurePolicy`]).
    pub fn on_queues_added_failure(mut self, policy: AddedFailurePolicy) -> Self {
        self.added_failure = policy;
        self
    }

    /// The timers and the listener's callback timeout; [`start`](Self::start) checks them
    /// ([`Intervals::validate`]).
    pub fn intervals(mut self, intervals: Intervals) -> Self {
        self.intervals = intervals;
        self
    }

    /// The timers set so far (the defaults unless [`intervals`](Self::intervals) was called):
    /// what a listener built around this builder bounds its callbacks by.
    pub fn configured_intervals(&self) -> &Intervals {
        &self.intervals
    }

    /// The allocation strategy (default: averagely). [`start`](Self::start) refuses one that
    /// would allocate nothing to anybody, as [`strategy_named`](Self::strategy_named) does
    /// (see [`AllocateStrategy::allocates_nothing`](rebalance_core::strategy::AllocateStrategy::allocates_nothing)).
    pub fn strategy(mut self, strategy: StrategyRef) -> Self {
        self.allocation = Some(Allocation::Strategy(strategy));
        self
    }

    /// The allocation set so far (`None`: the default, averagely): what a consumer built
    /// around this builder checks its own reading against (a POP consumer needs a server
    /// allocation that accepts popped queues, and only it may have one).
    pub fn configured_allocation(&self) -> Option<&Allocation> {
        self.allocation.as_ref()
    }

    /// The allocation: a per-topic strategy or a group assignor.
    pub fn allocation(mut self, allocation: Allocation) -> Self {
        self.allocation = Some(allocation);
        self
    }

    /// Server-side assignment: each round asks `source` (the brokers) for this client's share,
    /// computed there by `strategy` (RocketMQ: `AVG` or `AVG_BY_CIRCLE`), instead of running a
    /// strategy here; pulled queues only (see [`ServerAllocation`] for POP and for mixing
    /// client-side and server-side members). [`start`](Self::start) refuses a strategy the
    /// source cannot run, naming the ones it can, and orderly or broadcasting consumers.
    pub fn server_assignment(
        self,
        source: Arc<dyn AssignmentSource>,
        strategy: impl Into<String>,
    ) -> Self {
        self.allocation(Allocation::Server(ServerAllocation::new(source, strategy)))
    }

    /// A Kafka-style group assignor instead of a per-topic strategy, run leaderlessly (see
    /// [`Allocation::Assignor`] for which assignors make sense that way).
    pub fn assignor(mut self, assignor: AssignorRef) -> Self {
        self.allocation = Some(Allocation::Assignor(assignor));
        self
    }

    /// Whether [`strategy_named`](Self::strategy_named) and
    /// [`assignor_named`](Self::assignor_named) accept parameters they do not read (default:
    /// no, they fail with [`ConsumerError::Strategy`] / [`ConsumerError::Assignor`], since a
    /// misspelled key leaves the default in place in silence). Allow them for configuration
    /// written for a newer version of the strategies; a tracing warning still names them. Set
    /// it before naming the strategy.
    ///
    /// ```
    /// use rebalance_core::strategy::Params;
    /// use rebalance_runtime::Consumer;
    ///
    /// let mut params = Params::new();
    /// params.insert("virtual_node_count".into(), 20.into());
    /// params.insert("added_in_v2".into(), true.into());
    /// assert!(Consumer::builder("G").strategy_named("consistent_hash", &params).is_err());
    /// let builder = Consumer::builder("G")
    ///     .allow_unknown_params(true)
    ///     .strategy_named("consistent_hash", &params)?;
    /// # drop(builder);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allow_unknown_params(mut self, allow: bool) -> Self {
        self.unknown_params = if allow {
            UnknownParams::Allow
        } else {
            UnknownParams::Refuse
        };
        self
    }

    /// A group assignor by name (`range`, `roundrobin`, `sticky`, `cooperative_sticky`,
    /// `broadcast`). The built-in assignors take no parameters: any is refused unless
    /// [`allow_unknown_params`](Self::allow_unknown_params).
    pub fn assignor_named(self, name: &str, params: &Params) -> Result<Self, ConsumerError> {
        let assignor =
            AssignorRegistry::default().build_for_runtime(name, params, self.unknown_params)?;
        Ok(self.assignor(assignor))
    }

    /// The allocation strategy by name (see [`StrategyRegistry`]). Refuses, besides what the
    /// registry refuses, parameters the strategy does not read (unless
    /// [`allow_unknown_params`](Self::allow_unknown_params)) and values with which nobody
    /// would get a queue, such as `consistent_hash` with `virtual_node_count` 0 (see
    /// [`StrategyRegistry::build_for_runtime`]).
    ///
    /// ```
    /// use rebalance_core::strategy::Params;
    /// use rebalance_runtime::{Consumer, ConsumerError};
    ///
    /// let mut params = Params::new();
    /// params.insert("virtual_node_count".into(), 0.into());
    /// let err = Consumer::builder("G").strategy_named("consistent_hash", &params).unwrap_err();
    /// assert!(matches!(err, ConsumerError::Strategy(_)));
    /// assert!(err.to_string().contains("would allocate nothing"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn strategy_named(self, name: &str, params: &Params) -> Result<Self, ConsumerError> {
        let strategy =
            StrategyRegistry::default().build_for_runtime(name, params, self.unknown_params)?;
        Ok(self.strategy(strategy))
    }

    /// Where routes come from.
    pub fn name_server(mut self, name_server: Arc<dyn NameServer>) -> Self {
        self.name_server = Some(name_server);
        self
    }

    /// Where the group's membership comes from.
    pub fn directory(mut self, directory: Arc<dyn GroupDirectory>) -> Self {
        self.directory = Some(directory);
        self
    }

    /// Where offsets are stored. Broadcasting needs a per-client store
    /// ([`OffsetScope::Client`](crate::offset_store::OffsetScope::Client), e.g. [`LocalOffsetStore`](crate::LocalOffsetStore)); set it after
    /// [`cluster`](Self::cluster), which sets the cluster's shared store.
    pub fn offset_store(mut self, offsets: Arc<dyn OffsetStore>) -> Self {
        self.offsets = Some(offsets);
        self
    }

    /// Who locks queues (required for orderly clustering).
    pub fn locker(mut self, locker: Arc<dyn QueueLocker>) -> Self {
        self.locker = Some(locker);
        self
    }

    /// Sets name server, directory, offset store and locker from one value that implements all.
    /// Its offset store is the group's shared one: for broadcasting, call
    /// [`offset_store`](Self::offset_store) afterwards with a per-client store.
    pub fn cluster<C: ClusterServices>(self, cluster: C) -> Self {
        let cluster = Arc::new(cluster);
        self.name_server(cluster.clone())
            .directory(cluster.clone())
            .offset_store(cluster.clone())
            .locker(cluster)
    }

    /// The application's callbacks.
    pub fn listener(mut self, listener: Arc<dyn QueueListener>) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Sets how the consumer is a member of its group through [`MemberOptions`] (cluster
    /// access, allocation, timers, identity): the same setters as this builder's, for a
    /// configuration shared with a consume layer's builder (`PushConsumerBuilder::configure`
    /// takes the same function).
    pub fn configure(self, configure: impl FnOnce(MemberOptions) -> MemberOptions) -> Self {
        configure(MemberOptions::new(self)).into_builder()
    }

    /// [`configure`](Self::configure) with a function that may fail (a strategy named with
    /// [`MemberOptions::strategy_named`], say).
    pub fn try_configure(
        self,
        configure: impl FnOnce(MemberOptions) -> Result<MemberOptions, ConsumerError>,
    ) -> Result<Self, ConsumerError> {
        configure(MemberOptions::new(self)).map(MemberOptions::into_builder)
    }

    /// Shuts the consumer down when `token` is cancelled (it becomes the parent of the
    /// consumer's own token).
    pub fn shutdown_on(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }
}
