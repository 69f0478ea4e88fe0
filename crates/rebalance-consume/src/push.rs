//! [`PushConsumer`]: a consumer group member that pulls, buffers and consumes its queues'
//! messages with a [`ConcurrentListener`] or an [`OrderlyListener`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::concurrent::run_worker;
use super::config::{ConsumeOptions, ConsumeOptionsError};
use super::leases::Leases;
use super::pop::{PopOptions, PopOptionsError, PopShared, PopSource};
use super::shared::{Mode, Shared};
use super::work::WorkQueue;
use super::{ConcurrentListener, MessageSource, OrderlyListener};
use rebalance_runtime::allocation::{Allocation, ServerAllocation};
use rebalance_runtime::config::{ConsumeOrder, MessageModel};
use rebalance_runtime::subscription::TagExpression;
use rebalance_runtime::{AssignmentSource, ReadMode};
use rebalance_runtime::{
    ClusterServices, Consumer, ConsumerBuilder, ConsumerError, ConsumerHandle, MemberOptions,
};

/// How often a shutdown without `await_in_flight` says which batches it still waits for.
const STILL_WAITING_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Entry point: `PushConsumer::builder("group")`.
#[derive(Debug, Clone, Copy)]
pub struct PushConsumer;

impl PushConsumer {
    /// A builder for a member of `group` that consumes messages.
    pub fn builder(group: impl Into<String>) -> PushConsumerBuilder {
        let group = group.into();
        PushConsumerBuilder {
            consumer: Consumer::builder(group.clone()),
            group,
            subscriptions: HashMap::new(),
            message_model: MessageModel::default(),
            options: ConsumeOptions::default(),
            source: None,
            listener: None,
            pop: None,
        }
    }
}

/// Why a push consumer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushConsumerError {
    /// A required part was not configured.
    #[error("the push consumer needs {0}; set it on the builder")]
    Missing(&'static str),
    /// The consume options cannot be used.
    #[error("consume options: {0}")]
    Options(#[from] ConsumeOptionsError),
    /// The POP options cannot be used.
    #[error("pop options: {0}")]
    PopOptions(#[from] PopOptionsError),
    /// The consumer under it could not start.
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    /// POP and the allocation disagree: a consumer set to pop whose allocation was replaced
    /// (it would pull with that allocation and ignore its POP settings), or an allocation
    /// that accepts popped queues on a consumer with no POP source (it would hold them and
    /// consume nothing).
    #[error("{0}")]
    PopAllocation(&'static str),
}

/// Who consumes the pulled messages.
pub(crate) enum ListenerKind {
    Concurrent(Arc<dyn ConcurrentListener>),
    Orderly(Arc<dyn OrderlyListener>),
    /// The stream consumer's: pulled batches wait in this work queue for the stream, which
    /// takes them as the workers would (no worker runs).
    Stream(Arc<WorkQueue>),
}

/// Configures a push consumer: its cluster ([`cluster`](Self::cluster): the group's services
/// and the [`MessageSource`] in one value), how it is a member of its group
/// ([`configure`](Self::configure)), its subscriptions, a listener, and [`ConsumeOptions`].
#[must_use]
pub struct PushConsumerBuilder {
    consumer: ConsumerBuilder,
    group: String,
    subscriptions: HashMap<String, TagExpression>,
    message_model: MessageModel,
    options: ConsumeOptions,
    source: Option<Arc<dyn MessageSource>>,
    listener: Option<ListenerKind>,
    pop: Option<(Arc<dyn PopSource>, PopOptions)>,
}

impl std::fmt::Debug for PushConsumerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushConsumerBuilder")
            .field("consumer", &self.consumer)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PushConsumerBuilder {
    /// The cluster: everything the group member and the consume layer need from outside, in
    /// one value (`rebalance_rocketmq::RocketMq`, or the in-memory cluster's `ClusterClient`):
    /// its name server, directory, offset store and locker, and its [`MessageSource`]. Call
    /// [`source`](Self::source) or [`configure`](Self::configure) afterwards to replace a part
    /// (a broadcasting consumer's own offset store, say).
    pub fn cluster<C>(mut self, cluster: C) -> Self
    where
        C: ClusterServices + MessageSource + Clone,
    {
        self.source = Some(Arc::new(cluster.clone()));
        self.consumer = self.consumer.cluster(cluster);
        self
    }

    /// How the consumer is a member of its group ([`MemberOptions`]: cluster access, strategy,
    /// intervals, client id, `exclusive_hand_off`...). What it consumes (topics, tags, listener,
    /// order, message model) is this builder's.
    pub fn configure(mut self, configure: impl FnOnce(MemberOptions) -> MemberOptions) -> Self {
        self.consumer = self.consumer.configure(configure);
        self
    }

    /// [`configure`](Self::configure) with a function that may fail (a strategy named with
    /// [`MemberOptions::strategy_named`], say).
    pub fn try_configure(
        mut self,
        configure: impl FnOnce(MemberOptions) -> Result<MemberOptions, ConsumerError>,
    ) -> Result<Self, ConsumerError> {
        self.consumer = self.consumer.try_configure(configure)?;
        Ok(self)
    }

    /// POP consumption (RocketMQ 5): the brokers assign the queues (server-side assignment with
    /// `options.strategy`, the group's mode set to POP at the brokers of each topic), several
    /// members pop each queue, and every message is acknowledged once consumed. `cluster`
    /// answers the assignments and pops (`rebalance_rocketmq::RocketMq`, or the in-memory
    /// cluster's `ClusterClient`); give it [`cluster`](Self::cluster) too. It sets the
    /// member's allocation: an allocation set through [`configure`](Self::configure) after it
    /// replaces it, and `start()` refuses the consumer then
    /// ([`PushConsumerError::PopAllocation`]); a `configure` before it is fine.
    ///
    /// Concurrent consumption only (`start()` refuses an orderly listener or broadcasting, as
    /// the Java client keeps those client-side). Every member of the group should pop: a
    /// member pulling with a strategy of its own would read the same queues. Read
    /// [`PopMode`](crate::PopMode) before choosing the mode: the Rust broker 1.0 brings back
    /// only an orderly pop's unacknowledged messages. The group's retry topic is still pulled
    /// (the brokers assign its queues in PULL mode).
    pub fn pop<C>(mut self, cluster: C, options: PopOptions) -> Self
    where
        C: PopSource + AssignmentSource + Clone,
    {
        let assignments: Arc<dyn AssignmentSource> = Arc::new(cluster.clone());
        let allocation = ServerAllocation::new(assignments, options.strategy.clone())
            .with_read_mode(ReadMode::Pop, options.share);
        self.consumer = self.consumer.allocation(Allocation::Server(allocation));
        self.pop = Some((Arc::new(cluster), options));
        self
    }

    /// Subscribes every tag of a topic.
    pub fn subscribe(mut self, topic: impl Into<String>) -> Self {
        let topic = topic.into();
        self.consumer = self.consumer.subscribe(topic.clone());
        self.subscriptions.insert(topic, TagExpression::all());
        self
    }

    /// Subscribes the tags of a topic named by `expression` (see
    /// [`ConsumerBuilder::subscribe_tags`]).
    pub fn subscribe_tags(
        mut self,
        topic: impl Into<String>,
        expression: &str,
    ) -> Result<Self, ConsumerError> {
        let topic = topic.into();
        self.consumer = self.consumer.subscribe_tags(topic.clone(), expression)?;
        if let Ok(expression) = TagExpression::parse(expression) {
            self.subscriptions.insert(topic, expression);
        }
        Ok(self)
    }

    /// Clustering (default) or broadcasting. Broadcasting drops the messages its listener
    /// fails (they are not sent back), as the Java client does.
    pub fn message_model(mut self, model: MessageModel) -> Self {
        self.consumer = self.consumer.message_model(model);
        self.message_model = model;
        self
    }

    /// How messages are pulled, buffered and consumed.
    pub fn options(mut self, options: ConsumeOptions) -> Self {
        self.options = options;
        self
    }

    /// Where messages are pulled from and sent back to.
    pub fn source(mut self, source: Arc<dyn MessageSource>) -> Self {
        self.source = Some(source);
        self
    }

    /// Consumes with `listener`, several batches at once in any order.
    pub fn concurrently(mut self, listener: Arc<dyn ConcurrentListener>) -> Self {
        self.listener = Some(ListenerKind::Concurrent(listener));
        self
    }

    /// Consumes with `listener`, each queue in order (the consumer locks its queues).
    pub fn orderly(mut self, listener: Arc<dyn OrderlyListener>) -> Self {
        self.listener = Some(ListenerKind::Orderly(listener));
        self
    }

    /// Consumes with `kind` (the stream consumer's builder).
    pub(crate) fn consumed_by(mut self, kind: ListenerKind) -> Self {
        self.listener = Some(kind);
        self
    }

    /// Edits the consumer underneath (the stream consumer's assignment).
    pub(crate) fn edit_consumer(
        mut self,
        edit: impl FnOnce(ConsumerBuilder) -> ConsumerBuilder,
    ) -> Self {
        self.consumer = edit(self.consumer);
        self
    }

    /// Whether the consumer broadcasts.
    pub(crate) fn is_broadcasting(&self) -> bool {
        self.message_model == MessageModel::Broadcasting
    }

    /// Whether the consumer pops ([`pop`](Self::pop) was called).
    pub(crate) fn is_popping(&self) -> bool {
        self.pop.is_some()
    }

    /// Starts the consumer and its workers.
    pub async fn start(self) -> Result<PushConsumerHandle, PushConsumerError> {
        self.options.validate()?;
        check_pop_allocation(self.is_popping(), self.consumer.configured_allocation())?;
        let pop = match self.pop {
            Some((source, options)) => {
                options.validate()?;
                Some(PopShared::new(source, options))
            }
            None => None,
        };
        let source = self
            .source
            .ok_or(PushConsumerError::Missing("a message source"))?;
        let listener = self.listener.ok_or(PushConsumerError::Missing(
            "a listener (concurrently or orderly)",
        ))?;
        let (mode, order, workers) = match listener {
            ListenerKind::Concurrent(listener) => {
                let work = Arc::new(WorkQueue::default());
                let workers = Some((listener, work.clone()));
                (Mode::Concurrent { work }, ConsumeOrder::Concurrent, workers)
            }
            ListenerKind::Orderly(listener) => (
                Mode::Orderly {
                    listener,
                    permits: Arc::new(Semaphore::new(self.options.consume_concurrency)),
                },
                ConsumeOrder::Orderly,
                None,
            ),
            ListenerKind::Stream(work) => {
                (Mode::Concurrent { work }, ConsumeOrder::Concurrent, None)
            }
        };
        let consumer = self.consumer.consume_order(order);
        let callback_timeout = consumer.configured_intervals().callback_timeout;
        let shared = Arc::new(
            Shared::new(
                Arc::from(self.group.as_str()),
                source,
                self.options,
                self.message_model == MessageModel::Broadcasting,
                mode,
                self.subscriptions,
            )
            .with_pop(pop)
            .with_callback_timeout(callback_timeout),
        );
        let leases = Arc::new(Leases::new(shared.clone()));
        let consumer = consumer.listener(leases.clone()).start().await?;
        let stop = consumer.token().child_token();
        let tasks = TaskTracker::new();
        let mut aborts = Vec::new();
        if let Some((listener, work)) = workers {
            for _ in 0..self.options.consume_concurrency {
                let worker =
                    run_worker(shared.clone(), listener.clone(), work.clone(), stop.clone());
                aborts.push(tasks.spawn(worker).abort_handle());
            }
        }
        aborts.push(
            tasks
                .spawn(leases.clone().watch(stop.clone()))
                .abort_handle(),
        );
        let workers_stopped = CancellationToken::new();
        let abandon = Arc::new(Abandon {
            shared: shared.clone(),
            aborts,
            stop_began: OnceLock::new(),
        });
        if let Some(limit) = self.options.await_in_flight {
            let due = abandon_when_due(
                abandon.clone(),
                stop.clone(),
                workers_stopped.clone(),
                limit,
            );
            tasks.spawn(due);
        }
        tasks.close();
        let inner = Arc::new(Inner {
            consumer,
            shared,
            leases,
            stop,
            workers_stopped,
            tasks,
            abandon,
        });
        Ok(PushConsumerHandle { inner })
    }
}

/// What abandoning the batches still in the listener takes: the consume layer's shared state
/// (its `abandon` token, the batches in flight) and the workers' tasks. Not the handle's
/// `Inner`, so that the task abandoning them at the deadline does it also once every handle
/// was dropped.
struct Abandon {
    shared: Arc<Shared>,
    aborts: Vec<tokio::task::AbortHandle>,
    /// When the consumer began to stop (its token cancelled), as `abandon_when_due` saw it.
    stop_began: OnceLock<Instant>,
}

impl Abandon {
    /// Abandons the batches still in the listener (`await_in_flight` is up): the workers are
    /// aborted, and the ordered batches that outlived their hand-offs dropped, with their
    /// consume guards. Said once, when there is something to abandon.
    fn now(&self) {
        if self.shared.abandon.is_cancelled() {
            return;
        }
        let batches = self.shared.in_flight.list();
        if !batches.is_empty() {
            let await_in_flight = self.shared.options.await_in_flight;
            tracing::error!(
                count = batches.len(),
                ?batches,
                ?await_in_flight,
                "shutdown abandons the batches still in the listener: they are not committed, and the queues' next owners consume them again"
            );
        }
        for task in &self.aborts {
            task.abort();
        }
        self.shared.abandon.cancel();
    }
}

/// Abandons the batches still in the listener `limit` after the consumer began to stop (its
/// token cancelled, whichever way: `shutdown`, the token, every handle dropped), unless the
/// workers were stopped before. The hand-offs give up on them then; abandoned, the consume
/// guards those batches hold (ordered queues, an exclusive hand-off) no longer keep the
/// runtime's release waiting until `force_unlock_after` (found by review: 20 s, where
/// `await_in_flight` said 1 s).
async fn abandon_when_due(
    abandon: Arc<Abandon>,
    stop: CancellationToken,
    workers_stopped: CancellationToken,
    limit: std::time::Duration,
) {
    tokio::select! {
        _ = workers_stopped.cancelled() => return,
        _ = stop.cancelled() => {}
    }
    let _ = abandon.stop_began.set(Instant::now());
    tokio::select! {
        _ = workers_stopped.cancelled() => {}
        _ = tokio::time::sleep(limit) => abandon.now(),
    }
}

/// Refuses a consumer whose POP settings and allocation disagree (found by review: a
/// `configure` after `pop` replaced the allocation without a word, and an allocation that
/// accepts popped queues without a POP source held them and consumed nothing).
fn check_pop_allocation(
    pops: bool,
    allocation: Option<&Allocation>,
) -> Result<(), PushConsumerError> {
    let accepts_pop = matches!(allocation, Some(Allocation::Server(s)) if s.accepts_pop());
    match (pops, accepts_pop) {
        (true, false) => Err(PushConsumerError::PopAllocation(
            "the consumer is set to pop, but its allocation was replaced after `pop` (by `configure`): it would pull with that allocation and ignore the POP settings; set the allocation through `pop` only",
        )),
        (false, true) => Err(PushConsumerError::PopAllocation(
            "the allocation accepts popped queues, but the consumer has no POP source: it would hold them and consume nothing; configure POP with the push consumer's `pop`",
        )),
        _ => Ok(()),
    }
}

struct Inner {
    consumer: ConsumerHandle,
    shared: Arc<Shared>,
    leases: Arc<Leases>,
    stop: CancellationToken,
    /// Cancelled when the workers are being stopped (see [`abandon_when_due`]).
    workers_stopped: CancellationToken,
    tasks: TaskTracker,
    abandon: Arc<Abandon>,
}

/// A running push consumer. Cheap to clone; dropping every handle shuts it down.
///
/// `PushConsumer::builder(..)...start().await?;` written as a statement would drop the handle
/// at once, so the compiler warns about it (the type is `#[must_use]`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # use std::sync::Arc;
/// # use rebalance_consume::{ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer};
/// # use rebalance_runtime::memory::InMemoryCluster;
/// # struct Noop;
/// # #[async_trait::async_trait]
/// # impl ConcurrentListener for Noop {
/// #     async fn consume(&self, _: &[Message], _: &mut ConcurrentContext) -> ConsumeResult { ConsumeResult::Success }
/// # }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # let cluster = InMemoryCluster::new();
/// # let client = cluster.client("c1@1");
/// PushConsumer::builder("G")
///     .subscribe("T")
///     .configure(|c| c.cluster(client.clone()))
///     .source(Arc::new(client))
///     .concurrently(Arc::new(Noop))
///     .start()
///     .await?; // error: unused `PushConsumerHandle` that must be used
/// # Ok(()) }
/// ```
///
/// Keep it instead:
///
/// ```no_run
/// #![deny(unused_must_use)]
/// # use std::sync::Arc;
/// # use rebalance_consume::{ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer};
/// # use rebalance_runtime::memory::InMemoryCluster;
/// # struct Noop;
/// # #[async_trait::async_trait]
/// # impl ConcurrentListener for Noop {
/// #     async fn consume(&self, _: &[Message], _: &mut ConcurrentContext) -> ConsumeResult { ConsumeResult::Success }
/// # }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # let cluster = InMemoryCluster::new();
/// # let client = cluster.client("c1@1");
/// let _consumer = PushConsumer::builder("G")
///     .subscribe("T")
///     .configure(|c| c.cluster(client.clone()))
///     .source(Arc::new(client))
///     .concurrently(Arc::new(Noop))
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "dropping the last PushConsumerHandle shuts the push consumer down at once (it consumes nothing): keep the handle for as long as it should consume, and call `shutdown().await` to stop it"]
pub struct PushConsumerHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PushConsumerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushConsumerHandle")
            .field("consumer", &self.inner.consumer)
            .finish_non_exhaustive()
    }
}

impl PushConsumerHandle {
    /// What its loops share (the stream consumer's source, options and paused queues).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// Its pull loops, by queue (the stream consumer's leases).
    pub(crate) fn leases(&self) -> &Leases {
        &self.inner.leases
    }

    /// Cancelled once the consumer stops (the stream's end).
    pub(crate) fn stopped(&self) -> &CancellationToken {
        &self.inner.stop
    }

    /// The consumer group member underneath: its assignment, watches, round reports.
    pub fn consumer(&self) -> &ConsumerHandle {
        &self.inner.consumer
    }

    /// Waits until every subscribed topic had a balanced round, for at most `timeout` (see
    /// [`ConsumerHandle::ready`]): a service that would consume nothing (a misspelled topic, a
    /// name server it cannot reach) fails at start instead of in silence.
    pub async fn ready(&self, timeout: std::time::Duration) -> Result<(), ConsumerError> {
        self.inner.consumer.ready(timeout).await
    }

    /// Subscribes every tag of a topic at run time (see [`ConsumerHandle::subscribe`]).
    pub fn subscribe(&self, topic: impl Into<String>) -> Result<bool, ConsumerError> {
        let topic = topic.into();
        self.inner
            .shared
            .set_expression(topic.clone(), TagExpression::all());
        self.inner.consumer.subscribe(topic)
    }

    /// Subscribes the tags of a topic named by `expression` at run time (see
    /// [`ConsumerHandle::subscribe_tags`]); the next pulls of its queues use it.
    pub fn subscribe_tags(
        &self,
        topic: impl Into<String>,
        expression: &str,
    ) -> Result<bool, ConsumerError> {
        let topic = topic.into();
        let changed = self
            .inner
            .consumer
            .subscribe_tags(topic.clone(), expression)?;
        if let Ok(expression) = TagExpression::parse(expression) {
            self.inner.shared.set_expression(topic, expression);
        }
        Ok(changed)
    }

    /// Unsubscribes a topic (its queues are handed off).
    pub fn unsubscribe(&self, topic: impl Into<String>) -> Result<bool, ConsumerError> {
        self.inner.consumer.unsubscribe(topic)
    }

    /// Hands every queue off (batches in the listener finish and are committed, buffered
    /// messages are dropped), persists offsets, unregisters, stops the workers, and returns
    /// when all of that is done.
    ///
    /// With [`ConsumeOptions::await_in_flight`] set, the workers (and the ordered batches a
    /// hand-off left running) get that long from the start of the stop (this call, or the
    /// consumer's token cancelled, then [`join`](Self::join)) to finish their batches; those
    /// still in the listener then are abandoned, even while their queues' hand-offs run (their
    /// tasks aborted, the listener's futures dropped, their consume guards freed) and named in
    /// an error event: their messages are not committed, so the queues' next owners consume
    /// them again. Without it,
    /// shutdown waits for every batch, warning every 30 s about those still running.
    ///
    /// Called from inside a listener call (a service that stops itself on a fatal error), it
    /// starts the shutdown and returns at once: the shutdown waits for the batches in the
    /// listener, this one included, so it cannot wait for its own end there. The batch is
    /// committed like any other when it returns; [`join`](Self::join), from elsewhere, waits
    /// for the end.
    pub async fn shutdown(&self) {
        if self.inner.consumer.in_own_callback() {
            tracing::info!(
                "shutdown asked for from a listener call: it goes on once the call returns"
            );
            let this = self.clone();
            tokio::spawn(async move { this.shut_down().await });
            return;
        }
        self.shut_down().await;
    }

    async fn shut_down(&self) {
        // One bound for the whole shutdown: the batches the hand-offs waited for are those the
        // workers are in (found by review: each waited `await_in_flight`, twice it in all).
        // What is still in the listener at the deadline is abandoned then, while the
        // consumer stops (see `abandon_when_due`).
        let deadline = self.await_in_flight_from_now();
        self.inner.consumer.shutdown().await;
        self.stop_workers(deadline).await;
    }

    /// When a wait bounded by `await_in_flight` that starts now ends (`None`: unbounded, or a
    /// bound too long for the clock).
    fn await_in_flight_from_now(&self) -> Option<Instant> {
        let limit = self.inner.shared.options.await_in_flight?;
        Instant::now().checked_add(limit)
    }

    /// Waits until the consumer has stopped (see [`ConsumerHandle::join`]), then stops the
    /// workers as [`shutdown`](Self::shutdown) does.
    pub async fn join(&self) -> Result<(), ConsumerError> {
        let result = self.inner.consumer.join().await;
        // The bound runs from when the consumer began to stop, not from now.
        let deadline = match self.inner.abandon.stop_began.get() {
            Some(began) => self
                .inner
                .shared
                .options
                .await_in_flight
                .and_then(|limit| began.checked_add(limit)),
            None => self.await_in_flight_from_now(),
        };
        self.stop_workers(deadline).await;
        result
    }

    /// Stops the workers: each finishes its batch, until `deadline` (`await_in_flight` from
    /// the start of the shutdown) if there is one.
    async fn stop_workers(&self, deadline: Option<Instant>) {
        let inner = &self.inner;
        inner.stop.cancel();
        inner.workers_stopped.cancel();
        inner.shared.outliving.close();
        let all = || async {
            inner.tasks.wait().await;
            inner.shared.outliving.wait().await;
        };
        let Some(deadline) = deadline else {
            while tokio::time::timeout(STILL_WAITING_EVERY, all())
                .await
                .is_err()
            {
                let batches = inner.shared.in_flight.list();
                tracing::warn!(
                    count = batches.len(),
                    ?batches,
                    "shutdown is waiting for batches still in the listener (set await_in_flight to bound the wait)"
                );
            }
            return;
        };
        if tokio::time::timeout_at(deadline, all()).await.is_ok() {
            return;
        }
        inner.abandon.now();
        all().await;
    }

    /// Stops everything at once, handing nothing off and without unregistering, as if the
    /// process had died (for tests and simulations).
    pub fn abort(&self) {
        self.inner.consumer.abort();
        self.inner.leases.abort_all();
        for task in &self.inner.abandon.aborts {
            task.abort();
        }
        // Nothing is left to abandon later: the task waiting to do it ends too (found by
        // review: it waited for a stop that an abort never sends).
        self.inner.workers_stopped.cancel();
    }
}
