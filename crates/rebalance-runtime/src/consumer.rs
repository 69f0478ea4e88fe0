//! [`Consumer`]: build, start, observe and stop a member of a consumer group.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use rebalance_core::assignor::{AssignorConfigError, AssignorRef, AssignorRegistry};
use rebalance_core::strategy::{Averagely, Params, StrategyConfigError, StrategyRegistry};
use rebalance_core::{ClientId, StrategyRef};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::allocation::Allocation;
use crate::assignment::{Assignment, RoundReport};
use crate::callbacks::caught;
use crate::config::{ConsumeFrom, ConsumeOrder, Intervals, IntervalsError, MessageModel};
use crate::context::{Context, Subscriptions, retry_subscription, uses_locks};
use crate::directory::Registration;
use crate::offset_store::OffsetScope;
use crate::route_sync::{RouteSync, RouteTable};
use crate::service::{Outputs, Service};
use crate::subscription::{Subscription, TagExpression, TagExpressionError};
use crate::wake::{Trigger, WakeReasons};
use crate::{GroupDirectory, NameServer, OffsetStore, QueueListener, QueueLocker, heartbeat};

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
    /// The strategy could not be built.
    #[error("strategy: {0}")]
    Strategy(#[from] StrategyConfigError),
    /// The assignor could not be built.
    #[error("assignor: {0}")]
    Assignor(#[from] AssignorConfigError),
    /// An interval cannot be used (zero, or absurdly long).
    #[error("intervals: {0}")]
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
    /// broker's, which [`ConsumerBuilder::cluster`] sets): every client would overwrite the
    /// others' progress. Give the consumer a per-client store with
    /// [`ConsumerBuilder::offset_store`] (after `cluster`), e.g. [`LocalOffsetStore`](crate::LocalOffsetStore).
    #[error(
        "broadcasting needs a per-client offset store, but the configured one is shared by the group \
         (every client would overwrite the others' progress); set one with `offset_store` after \
         `cluster`, e.g. `LocalOffsetStore`"
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
    /// [`ConsumerBuilder::start`] returns it when the first route poll or the first heartbeat,
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
    /// `start` was called outside a tokio runtime.
    #[error("the consumer must be started inside a tokio runtime")]
    NoRuntime,
    /// The consumer has shut down.
    #[error("the consumer has shut down")]
    ShutDown,
}

tokio::task_local! {
    /// The consumer whose service task runs this code: listener callbacks run in it.
    static SERVICE_OF: u64;
}

/// Numbers the consumers of the process, for [`SERVICE_OF`].
static NEXT_CONSUMER: AtomicU64 = AtomicU64::new(0);

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
            intervals: Intervals::default(),
            allocation: None,
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
#[must_use]
pub struct ConsumerBuilder {
    group: String,
    client_id: Option<ClientId>,
    subscriptions: Subscriptions,
    consume_retry_topic: bool,
    message_model: MessageModel,
    consume_order: ConsumeOrder,
    consume_from: ConsumeFrom,
    exclusive_hand_off: bool,
    intervals: Intervals,
    allocation: Option<Allocation>,
    name_server: Option<Arc<dyn NameServer>>,
    directory: Option<Arc<dyn GroupDirectory>>,
    offsets: Option<Arc<dyn OffsetStore>>,
    locker: Option<Arc<dyn QueueLocker>>,
    listener: Option<Arc<dyn QueueListener>>,
    shutdown: Option<CancellationToken>,
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

/// Something that implements every outside-world trait (the in-memory cluster's client, or a
/// transport's client), to configure them all at once with [`ConsumerBuilder::cluster`].
pub trait ClusterAccess: NameServer + GroupDirectory + OffsetStore + QueueLocker {}
impl<T: NameServer + GroupDirectory + OffsetStore + QueueLocker> ClusterAccess for T {}

impl ConsumerBuilder {
    /// This client's id (default: the directory's, when it is bound to one, as the in-memory
    /// cluster's clients are; else `ip@pid@nanos`). Must be unique in the group.
    pub fn client_id(mut self, id: impl Into<ClientId>) -> Self {
        self.client_id = Some(id.into());
        self
    }

    /// Subscribes every tag of a topic (`*`; more topics can be added at run time with
    /// [`ConsumerHandle::subscribe`]). Subscribing a topic again replaces its tag expression.
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
    /// The release waits for the batch being processed under the queue's
    /// [`consume_guard`](crate::QueueLease::consume_guard) for `force_unlock_after` (20 s) at
    /// most: a batch that runs longer may be processed again by the next owner. The push
    /// consumer holds that guard for each concurrent batch, so one queue's batches then run
    /// one at a time.
    pub fn exclusive_hand_off(mut self, exclusive: bool) -> Self {
        self.exclusive_hand_off = exclusive;
        self
    }

    /// `Some(force_unlock_after)` when a consumer so configured locks its queues at the broker
    /// (ordered consumption, or an exclusive hand-off, in clustering mode): its release then
    /// waits for the batch under a lease's consume guard, for that long at most.
    pub(crate) fn guarded_release(&self) -> Option<std::time::Duration> {
        uses_locks(
            self.message_model,
            self.consume_order,
            self.exclusive_hand_off,
        )
        .then_some(self.intervals.force_unlock_after)
    }

    /// The timers and the listener's callback timeout; [`start`](Self::start) checks them
    /// ([`Intervals::validate`]).
    pub fn intervals(mut self, intervals: Intervals) -> Self {
        self.intervals = intervals;
        self
    }

    /// The allocation strategy (default: averagely).
    pub fn strategy(mut self, strategy: StrategyRef) -> Self {
        self.allocation = Some(Allocation::Strategy(strategy));
        self
    }

    /// The allocation: a per-topic strategy or a group assignor.
    pub fn allocation(mut self, allocation: Allocation) -> Self {
        self.allocation = Some(allocation);
        self
    }

    /// A Kafka-style group assignor instead of a per-topic strategy, run leaderlessly (see
    /// [`Allocation::Assignor`] for which assignors make sense that way).
    pub fn assignor(mut self, assignor: AssignorRef) -> Self {
        self.allocation = Some(Allocation::Assignor(assignor));
        self
    }

    /// A group assignor by name (`range`, `roundrobin`, `sticky`, `cooperative_sticky`,
    /// `broadcast`).
    pub fn assignor_named(self, name: &str, params: &Params) -> Result<Self, ConsumerError> {
        let assignor = AssignorRegistry::default().build(name, params)?;
        Ok(self.assignor(assignor))
    }

    /// The allocation strategy by name (see [`StrategyRegistry`]).
    pub fn strategy_named(self, name: &str, params: &Params) -> Result<Self, ConsumerError> {
        let strategy = StrategyRegistry::default().build(name, params)?;
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
    /// ([`OffsetScope::Client`], e.g. [`LocalOffsetStore`](crate::LocalOffsetStore)); set it after
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
    pub fn cluster<C: ClusterAccess>(self, cluster: C) -> Self {
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

    /// Shuts the consumer down when `token` is cancelled (it becomes the parent of the
    /// consumer's own token).
    pub fn shutdown_on(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// Starts the consumer: fetches the routes and sends a first heartbeat, then spawns its
    /// tasks and runs a first round at once (after [`Intervals::membership_settle`], when
    /// set). Must be called inside a tokio runtime.
    ///
    /// Fails without starting anything when the configuration cannot work: a missing part
    /// (including the locker that orderly consumption or an exclusive hand-off needs in
    /// clustering mode), an invalid interval, or broadcasting with a group-shared offset store;
    /// and with [`ConsumerError::TaskPanicked`] when the name server or the directory panics in
    /// the first route poll or heartbeat (the failures they report are not errors here: the
    /// consumer starts and its tasks try again).
    pub async fn start(self) -> Result<ConsumerHandle, ConsumerError> {
        tokio::runtime::Handle::try_current().map_err(|_| ConsumerError::NoRuntime)?;
        if self.group.is_empty() {
            return Err(ConsumerError::EmptyGroup);
        }
        let bound = self.directory.as_ref().and_then(|d| d.bound_client_id());
        let client_id = match (self.client_id, bound) {
            (Some(configured), Some(bound)) if configured != bound => {
                return Err(ConsumerError::ClientIdMismatch { configured, bound });
            }
            (Some(id), _) | (None, Some(id)) => id,
            (None, None) => default_client_id(),
        };
        if client_id.is_empty() {
            return Err(ConsumerError::EmptyClientId);
        }
        self.intervals.validate()?;
        let locker = self.locker;
        if uses_locks(
            self.message_model,
            self.consume_order,
            self.exclusive_hand_off,
        ) && locker.is_none()
        {
            return Err(ConsumerError::Missing(
                if self.consume_order == ConsumeOrder::Orderly {
                    "a queue locker (orderly clustering consumption)"
                } else {
                    "a queue locker (exclusive hand-off)"
                },
            ));
        }
        let offsets = self
            .offsets
            .ok_or(ConsumerError::Missing("an offset store"))?;
        match (self.message_model, offsets.scope()) {
            (MessageModel::Broadcasting, OffsetScope::Group) => {
                return Err(ConsumerError::SharedOffsetStore);
            }
            (MessageModel::Clustering, OffsetScope::Client) => tracing::warn!(
                group = %self.group,
                "clustering with a per-client offset store: a queue's next owner will not see this client's progress"
            ),
            _ => {}
        }
        let listener = self
            .listener
            .ok_or(ConsumerError::Missing("a queue listener"))?;
        let retry_topic =
            retry_subscription(&self.group, self.message_model, self.consume_retry_topic);
        let ctx = Arc::new(Context {
            group: self.group,
            client_id,
            message_model: self.message_model,
            consume_order: self.consume_order,
            consume_from: self.consume_from,
            exclusive_hand_off: self.exclusive_hand_off,
            intervals: self.intervals,
            allocation: self
                .allocation
                .unwrap_or_else(|| Allocation::Strategy(Arc::new(Averagely))),
            name_server: self
                .name_server
                .ok_or(ConsumerError::Missing("a name server"))?,
            directory: self
                .directory
                .ok_or(ConsumerError::Missing("a group directory"))?,
            offsets,
            locker,
            listener,
            retry_topic,
        });
        let token = self
            .shutdown
            .map_or_else(CancellationToken::new, |t| t.child_token());
        let trigger = Arc::new(Trigger::new());
        let subscriptions = ctx.effective(&self.subscriptions);
        let topics: BTreeSet<String> = subscriptions.keys().cloned().collect();
        let (subscriptions_tx, subscriptions_rx) = watch::channel(Arc::new(topics));
        let registration = Arc::new(ctx.registration(&subscriptions));
        let (registration_tx, registration_rx) = watch::channel(registration.clone());
        let last_registration = registration_rx.clone();
        let (routes_tx, routes_rx) = watch::channel(Arc::new(RouteTable::default()));
        let (assignment_tx, assignment_rx) = watch::channel(Arc::new(Assignment::default()));
        let (rounds_tx, rounds_rx) = watch::channel(Arc::new(RoundReport::default()));
        // What the application subscribes to: its handles edit it, the service follows.
        let (requested_tx, requested_rx) = watch::channel(self.subscriptions.clone());

        let span = tracing::info_span!("consumer", group = %ctx.group, client = %ctx.client_id);
        let mut route_sync = RouteSync::new(
            ctx.name_server.clone(),
            ctx.intervals.poll_name_server,
            ctx.intervals.topic_gone_after,
            subscriptions_rx,
            routes_tx,
            trigger.clone(),
        );
        // The first poll and heartbeat run here, in the caller's task: a panic in them is
        // contained as it is in the tasks that repeat them later, and reported the same way.
        let first_contact = async {
            let subscriptions: Vec<String> = subscriptions
                .iter()
                .map(|(topic, tags)| format!("{topic}: {tags}"))
                .collect();
            tracing::info!(?subscriptions, retry_topic = ?ctx.retry_topic, allocation = ctx.allocation.name(), model = ?ctx.message_model, order = ?ctx.consume_order, "starting consumer");
            caught(route_sync.poll_all())
                .await
                .map_err(|message| ("route sync", message))?;
            caught(heartbeat::beat(&*ctx.directory, &registration))
                .await
                .map_err(|message| ("heartbeat", message))?;
            Ok(())
        }
        .instrument(span.clone())
        .await;
        if let Err((task, message)) = first_contact {
            span.in_scope(|| tracing::error!(task, panic = %message, "a consumer task panicked while starting; the consumer does not start"));
            return Err(ConsumerError::TaskPanicked { task, message });
        }
        trigger.wake(WakeReasons::START);

        let heartbeat_now = Arc::new(tokio::sync::Notify::new());
        let helpers = TaskTracker::new();
        let tasks = TaskTracker::new();
        let failure = Arc::new(OnceLock::new());
        let mut aborts = Vec::new();
        aborts.push(
            helpers
                .spawn(
                    helper(
                        "route sync",
                        route_sync.run(token.clone()),
                        failure.clone(),
                        token.clone(),
                    )
                    .instrument(span.clone()),
                )
                .abort_handle(),
        );
        aborts.push(
            helpers
                .spawn(
                    helper(
                        "heartbeat",
                        heartbeat::run(
                            ctx.directory.clone(),
                            registration_rx,
                            ctx.intervals.heartbeat,
                            heartbeat_now.clone(),
                            token.clone(),
                        ),
                        failure.clone(),
                        token.clone(),
                    )
                    .instrument(span.clone()),
                )
                .abort_handle(),
        );
        let service = Service::new(
            ctx.clone(),
            self.subscriptions,
            routes_rx,
            trigger.clone(),
            Outputs {
                subscriptions: subscriptions_tx,
                registration: registration_tx,
                assignment: assignment_tx,
                rounds: rounds_tx,
                heartbeat_now,
            },
            token.child_token(),
        );
        let service = {
            let ctx = ctx.clone();
            let token = token.clone();
            let failure = failure.clone();
            async move {
                let run = service.run(requested_rx, token.clone(), helpers.clone());
                if let Err(message) = caught(run).await {
                    record_failure(&failure, "rebalance service", message);
                    after_service_panic(&ctx, &token, &helpers, &last_registration).await;
                }
            }
        };
        let serial = NEXT_CONSUMER.fetch_add(1, Ordering::Relaxed);
        let service = SERVICE_OF.scope(serial, service.instrument(span.clone()));
        aborts.push(tasks.spawn(service).abort_handle());
        tasks.close();
        Ok(ConsumerHandle {
            inner: Arc::new(HandleInner {
                ctx,
                token,
                trigger,
                requested: requested_tx,
                assignment: assignment_rx,
                rounds: rounds_rx,
                tasks,
                aborts,
                failure,
                serial,
            }),
        })
    }
}

/// Runs a helper task (route sync, heartbeat). One that panics stops the consumer the ordinary
/// way, through its token: the service, still alive, releases everything.
async fn helper(
    task: &'static str,
    future: impl Future<Output = ()>,
    failure: Arc<OnceLock<TaskFailure>>,
    token: CancellationToken,
) {
    if let Err(message) = caught(future).await {
        record_failure(&failure, task, message);
        token.cancel();
    }
}

/// Logs a task's panic and keeps the first one for [`ConsumerHandle::join`].
fn record_failure(failure: &OnceLock<TaskFailure>, task: &'static str, message: String) {
    tracing::error!(task, panic = %message, "a consumer task panicked; the consumer stops");
    let _ = failure.set(TaskFailure { task, message });
}

/// What can still be done once the service task (the owner of the queue table) has panicked:
/// stop the other tasks and cancel every lease (both through the consumer's token), and
/// unregister so that the group rebalances without waiting for the heartbeat to expire. The
/// table is gone with the task, so nothing is announced, persisted or unlocked.
async fn after_service_panic(
    ctx: &Context,
    token: &CancellationToken,
    helpers: &TaskTracker,
    registration: &watch::Receiver<Arc<Registration>>,
) {
    token.cancel();
    helpers.close();
    helpers.wait().await;
    let registration = registration.borrow().clone();
    match ctx.directory.unregister(&registration).await {
        Ok(()) => tracing::warn!("unregistered from the group after the service panicked"),
        Err(e) => {
            tracing::warn!(error = %e, "could not unregister after the service panicked; the directory will expire this client")
        }
    }
}

/// How a task of the consumer ended abnormally.
#[derive(Debug, Clone)]
struct TaskFailure {
    task: &'static str,
    message: String,
}

/// The default client id: `ip@pid@nanos`, as unique as the Java client's `ip@pid#nanos`.
pub fn default_client_id() -> ClientId {
    let ip = local_ip().unwrap_or_else(|| "127.0.0.1".to_string());
    // An identifier, not a clock reading used for timing: wall time only makes it unique.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    ClientId::from(format!("{ip}@{}@{nanos}", std::process::id()))
}

/// The address this host would use to reach the outside (no packet is sent).
fn local_ip() -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then(|| ip.to_string())
}

struct HandleInner {
    ctx: Arc<Context>,
    token: CancellationToken,
    trigger: Arc<Trigger>,
    /// The subscriptions the application asked for, edited here and followed by the service
    /// (so that a listener callback can change them without waiting for its own round).
    requested: watch::Sender<Subscriptions>,
    assignment: watch::Receiver<Arc<Assignment>>,
    rounds: watch::Receiver<Arc<RoundReport>>,
    tasks: TaskTracker,
    aborts: Vec<tokio::task::AbortHandle>,
    /// The first task that panicked.
    failure: Arc<OnceLock<TaskFailure>>,
    /// Which consumer of the process this is (see [`SERVICE_OF`]).
    serial: u64,
}

/// A running consumer. Cheap to clone; the consumer stops when [`shutdown`](Self::shutdown) is
/// called, when the token given to [`ConsumerBuilder::shutdown_on`] is cancelled, or when every
/// handle is dropped.
///
/// A listener that keeps a handle of its own consumer keeps that consumer alive after the
/// application dropped its handles: keep a [`WeakConsumerHandle`] there instead
/// ([`downgrade`](Self::downgrade)).
#[derive(Clone)]
pub struct ConsumerHandle {
    inner: Arc<HandleInner>,
}

/// A handle that does not keep the consumer running: what a listener keeps to reach its own
/// consumer (to change subscriptions from a callback, say) without preventing the shutdown
/// that dropping the application's last [`ConsumerHandle`] starts.
#[derive(Clone, Default)]
pub struct WeakConsumerHandle {
    inner: Weak<HandleInner>,
}

impl WeakConsumerHandle {
    /// A handle to the consumer, or `None` once every [`ConsumerHandle`] was dropped (the
    /// consumer is then shutting down, or stopped). A handle obtained here keeps the consumer
    /// running while it lives: drop it when done.
    pub fn upgrade(&self) -> Option<ConsumerHandle> {
        self.inner.upgrade().map(|inner| ConsumerHandle { inner })
    }
}

impl fmt::Debug for WeakConsumerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakConsumerHandle")
            .field("alive", &(self.inner.strong_count() > 0))
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ConsumerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHandle")
            .field("group", &self.inner.ctx.group)
            .field("client_id", &self.inner.ctx.client_id)
            .finish_non_exhaustive()
    }
}

impl ConsumerHandle {
    /// A handle that does not keep the consumer running (see [`WeakConsumerHandle`]).
    pub fn downgrade(&self) -> WeakConsumerHandle {
        WeakConsumerHandle {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// This client's id.
    pub fn client_id(&self) -> &ClientId {
        &self.inner.ctx.client_id
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.ctx.group
    }

    /// Subscribes every tag of a topic (`*`); returns whether that changed anything (a new
    /// topic, or one subscribed with other tags before). A round follows at once when the topic
    /// is new; the next heartbeat carries the subscription either way. It does not wait for the
    /// consumer's task, so a listener callback may call it (through a [`WeakConsumerHandle`],
    /// so as not to keep its consumer running). Fails with
    /// [`ConsumerError::ShutDown`] once the consumer is shutting down.
    pub fn subscribe(&self, topic: impl Into<String>) -> Result<bool, ConsumerError> {
        let Subscription { topic, expression } = Subscription::all(topic);
        self.set_subscription(topic, expression)
    }

    /// Subscribes the tags of a topic named by `expression` (see
    /// [`ConsumerBuilder::subscribe_tags`]); returns whether that changed anything. Fails with
    /// [`ConsumerError::TagExpression`], changing nothing, when the expression is malformed,
    /// and with [`ConsumerError::ShutDown`] once the consumer is shutting down.
    pub fn subscribe_tags(
        &self,
        topic: impl Into<String>,
        expression: &str,
    ) -> Result<bool, ConsumerError> {
        let topic = topic.into();
        let expression =
            TagExpression::parse(expression).map_err(|source| ConsumerError::TagExpression {
                topic: topic.clone(),
                source,
            })?;
        self.set_subscription(topic, expression)
    }

    /// Subscribes `topic` with `expression`; whether that changed anything.
    fn set_subscription(
        &self,
        topic: String,
        expression: TagExpression,
    ) -> Result<bool, ConsumerError> {
        self.edit_subscriptions(|requested| {
            if requested.get(&topic) == Some(&expression) {
                return false;
            }
            requested.insert(topic, expression);
            true
        })
    }

    /// Unsubscribes a topic (its queues are released); returns whether it was subscribed. The
    /// group's retry topic, which the consumer subscribes to by itself, stays subscribed (see
    /// [`ConsumerBuilder::consume_retry_topic`]). Fails with [`ConsumerError::ShutDown`] once
    /// the consumer is shutting down.
    pub fn unsubscribe(&self, topic: impl Into<String>) -> Result<bool, ConsumerError> {
        let topic = topic.into();
        self.edit_subscriptions(|requested| requested.remove(&topic).is_some())
    }

    /// Edits the requested subscriptions; the service follows when `edit` says it changed them.
    fn edit_subscriptions(
        &self,
        edit: impl FnOnce(&mut Subscriptions) -> bool,
    ) -> Result<bool, ConsumerError> {
        if self.inner.token.is_cancelled() || self.inner.requested.is_closed() {
            return Err(ConsumerError::ShutDown);
        }
        Ok(self.inner.requested.send_if_modified(edit))
    }

    /// Asks for a round now (it runs as soon as `rebalance_min` allows; a starting consumer's
    /// first round still waits for [`Intervals::membership_settle`] when set).
    pub fn rebalance_now(&self) {
        self.inner.trigger.wake(WakeReasons::MANUAL);
    }

    /// The assignment as of the end of the last round (or lock renewal) that changed it. It is
    /// published once the round's callbacks have run, so during a `queues_added` or
    /// `queues_removed` callback it does not show that callback's queues yet: a listener keeps
    /// its own view from the callbacks' arguments.
    pub fn assignment(&self) -> Arc<Assignment> {
        self.inner.assignment.borrow().clone()
    }

    /// A receiver of assignment snapshots (one per change).
    pub fn watch(&self) -> watch::Receiver<Arc<Assignment>> {
        self.inner.assignment.clone()
    }

    /// A receiver of round reports (the last round's).
    pub fn rounds(&self) -> watch::Receiver<Arc<RoundReport>> {
        self.inner.rounds.clone()
    }

    /// The consumer's cancellation token: cancelling it starts the shutdown.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Stops the timers, releases every queue (removed callbacks with reason `shutdown`, last
    /// offsets persisted, locks released), unregisters, and returns when all of that is done.
    /// Calling it again (or concurrently) waits for the same shutdown. If a task of the consumer
    /// panicked, an error event was logged and [`join`](Self::join) returns it.
    ///
    /// Called from one of this consumer's listener callbacks, it only starts the shutdown and
    /// returns at once: the shutdown goes on when the callback has returned (the round that
    /// called it waits for it, so waiting there would wait for itself).
    pub async fn shutdown(&self) {
        self.inner.token.cancel();
        if self.in_own_callback() {
            tracing::debug!(
                "shutdown asked for by a listener callback; it goes on once the callback returns"
            );
            return;
        }
        self.inner.tasks.wait().await;
    }

    /// Whether this runs in the consumer's own service task: in one of its listener callbacks.
    fn in_own_callback(&self) -> bool {
        SERVICE_OF
            .try_with(|serial| *serial == self.inner.serial)
            .unwrap_or(false)
    }

    /// Waits until the consumer has stopped (after [`shutdown`](Self::shutdown), the
    /// cancellation of its token, or a crash) without asking it to, and says how it ended:
    /// `Err(`[`ConsumerError::TaskPanicked`]`)` when one of its tasks panicked. An application
    /// can await it next to its own work to notice a consumer that died.
    ///
    /// After [`abort`](Self::abort) it returns `Ok(())` once the aborted tasks are gone.
    ///
    /// Do not await it in one of this consumer's own listener callbacks: the consumer cannot
    /// stop before the callback returns, so it would wait until `callback_timeout` cut the
    /// callback short.
    pub async fn join(&self) -> Result<(), ConsumerError> {
        self.inner.tasks.wait().await;
        match self.inner.failure.get() {
            Some(failure) => Err(ConsumerError::TaskPanicked {
                task: failure.task,
                message: failure.message.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether the consumer has stopped.
    pub fn is_stopped(&self) -> bool {
        self.inner.tasks.is_empty()
    }

    /// Stops every task at once, releasing nothing and without unregistering, as if the process
    /// had died. For tests and simulations of crashes.
    pub fn abort(&self) {
        for task in &self.inner.aborts {
            task.abort();
        }
    }
}
