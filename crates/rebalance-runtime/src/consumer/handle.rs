//! [`ConsumerHandle`]: observe, steer and stop a running consumer.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use rebalance_core::{ClientId, MessageQueue};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ConsumerError;
use crate::assignment::{Assignment, RoundReport};
use crate::context::{Context, Subscriptions};
use crate::directory::{ResetRefused, StartedConsumer};
use crate::lease::HeldLeases;
use crate::running::{QueueRunningInfo, RunningInfo};
use crate::service::{OffsetReset, PENDING_RESETS, ServiceRequest};
use crate::subscription::{Subscription, TagExpression};
use crate::wake::{Trigger, WakeReasons};

/// How a task of the consumer ended abnormally.
#[derive(Debug, Clone)]
pub(super) struct TaskFailure {
    pub(super) task: &'static str,
    pub(super) message: String,
}

pub(super) struct HandleInner {
    pub(super) ctx: Arc<Context>,
    pub(super) token: CancellationToken,
    pub(super) trigger: Arc<Trigger>,
    /// The subscriptions the application asked for, edited here and followed by the service
    /// (so that a listener callback can change them without waiting for its own round).
    pub(super) requested: watch::Sender<Subscriptions>,
    pub(super) assignment: watch::Receiver<Arc<Assignment>>,
    pub(super) rounds: watch::Receiver<Arc<RoundReport>>,
    pub(super) tasks: TaskTracker,
    /// The helper tasks (route sync, heartbeat), for [`ConsumerHandle::abort`].
    pub(super) aborts: Vec<tokio::task::AbortHandle>,
    /// Cancelled by [`ConsumerHandle::abort`]: the service's task drops the service where it
    /// stands and says so.
    pub(super) killed: CancellationToken,
    /// The first task that panicked.
    pub(super) failure: Arc<OnceLock<TaskFailure>>,
    /// Which consumer of the process this is (see `app_code::as_callback_of`).
    pub(super) serial: u64,
    /// The held queues' leases as the service last published them.
    pub(super) leases: watch::Receiver<Arc<HeldLeases>>,
    /// Operators' offset resets and requests to persist now, to the service.
    pub(super) resets: tokio::sync::mpsc::Sender<ServiceRequest>,
    /// The registration the service last published (what the heartbeats announce).
    pub(super) registration: watch::Receiver<Arc<crate::Registration>>,
}

/// A running consumer. Cheap to clone; the consumer stops when [`shutdown`](Self::shutdown) is
/// called, when the token given to [`ConsumerBuilder::shutdown_on`](super::ConsumerBuilder::shutdown_on) is cancelled, or when every
/// handle is dropped.
///
/// Stop it on purpose with `shutdown().await` (or the token), which returns once every queue
/// is released. Dropping the last handle is the safety net, not the way to stop: the shutdown
/// it starts runs on its own (nobody waits for the offsets to be persisted), and it is logged
/// as a warning, since it is most often a mistake: `builder.start().await?;` written as a
/// statement drops the handle at once, and the consumer never gets a queue. The compiler warns
/// about that statement (the type is `#[must_use]`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn demo(cluster: rebalance_runtime::memory::InMemoryCluster,
/// #               listener: std::sync::Arc<dyn rebalance_runtime::QueueListener>) -> Result<(), rebalance_runtime::ConsumerError> {
/// rebalance_runtime::Consumer::builder("orders")
///     .subscribe("Orders")
///     .cluster(cluster.client("10.0.0.1@1"))
///     .listener(listener)
///     .start()
///     .await?; // error: unused `ConsumerHandle` that must be used
/// # Ok(()) }
/// ```
///
/// Keep the handle for as long as the consumer should run:
///
/// ```no_run
/// #![deny(unused_must_use)]
/// # async fn demo(cluster: rebalance_runtime::memory::InMemoryCluster,
/// #               listener: std::sync::Arc<dyn rebalance_runtime::QueueListener>) -> Result<(), rebalance_runtime::ConsumerError> {
/// let _consumer = rebalance_runtime::Consumer::builder("orders")
///     .subscribe("Orders")
///     .cluster(cluster.client("10.0.0.1@1"))
///     .listener(listener)
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
///
/// A listener that keeps a handle of its own consumer keeps that consumer alive after the
/// application dropped its handles: keep a [`WeakConsumerHandle`] there instead
/// ([`downgrade`](Self::downgrade)).
#[derive(Clone)]
#[must_use = "dropping the last ConsumerHandle shuts the consumer down at once (it never gets a queue): keep the handle for as long as the consumer should run, and call `shutdown().await` to stop it"]
pub struct ConsumerHandle {
    pub(super) inner: Arc<HandleInner>,
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

    /// This consumer as a directory reaches it, a reference that does not keep it running: what
    /// [`GroupDirectory::consumer_started`](crate::GroupDirectory::consumer_started) is given.
    /// For a transport's tests, or to attach a consumer to a transport by hand.
    pub fn started(&self) -> Weak<dyn StartedConsumer> {
        // Only the reference's type changes: the same allocation as `downgrade`'s.
        let weak: Weak<HandleInner> = Arc::downgrade(&self.inner);
        weak
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
    /// [`ConsumerBuilder::subscribe_tags`](super::ConsumerBuilder::subscribe_tags)); returns whether that changed anything. Fails with
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
    /// [`ConsumerBuilder::consume_retry_topic`](super::ConsumerBuilder::consume_retry_topic)). Fails with [`ConsumerError::ShutDown`] once
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
    /// first round still waits for the group to settle: [`Intervals::adaptive_settle`](crate::config::Intervals::adaptive_settle)
    /// or [`Intervals::membership_settle`](crate::config::Intervals::membership_settle)).
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
    ///
    /// **Never hold its borrow across an `.await`.** What `borrow()`, `borrow_and_update()` and
    /// `wait_for()` return is a guard over the consumer's own copy: while it lives, the
    /// consumer cannot publish the next assignment and blocks its thread waiting for it. Held
    /// across `shutdown().await` (say, `let a = rx.wait_for(..).await?;` followed by the
    /// shutdown), the shutdown never finishes, and on a current-thread runtime the whole
    /// process freezes at 0 % CPU without a log line. Clone what you need out of the guard
    /// (`let a = Arc::clone(&*rx.borrow());`), or use
    /// [`wait_for_assignment`](Self::wait_for_assignment), which returns an owned snapshot.
    pub fn watch(&self) -> watch::Receiver<Arc<Assignment>> {
        self.inner.assignment.clone()
    }

    /// A receiver of round reports (the last round's).
    ///
    /// **Never hold its borrow across an `.await`**: the guard that `borrow()` or `wait_for()`
    /// returns keeps the consumer from publishing the next report, blocking its thread (see
    /// [`watch`](Self::watch)). Clone the report out of the guard
    /// (`let report = Arc::clone(&*rx.borrow());`) before awaiting anything.
    pub fn rounds(&self) -> watch::Receiver<Arc<RoundReport>> {
        self.inner.rounds.clone()
    }

    /// Waits until the assignment satisfies `predicate` (checked on the current one first,
    /// then on each new one) and returns that assignment, an owned snapshot that may be kept
    /// across `.await`s, unlike a [`watch`](Self::watch) borrow.
    ///
    /// Fails with [`ConsumerError::AssignmentTimedOut`], carrying the last assignment, when
    /// none matched within `timeout` (a misspelled topic, an unreachable name server: the
    /// [`rounds`](Self::rounds) reports say why), and with [`ConsumerError::ShutDown`] when
    /// the consumer stopped first.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use async_trait::async_trait;
    /// # use rebalance_runtime::memory::InMemoryCluster;
    /// # use rebalance_runtime::{Consumer, ConsumerError, ListenerError, QueueLease, QueueListener, RemovedQueue};
    /// # struct Quiet;
    /// # #[async_trait]
    /// # impl QueueListener for Quiet {
    /// #     async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> { Ok(()) }
    /// #     async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cluster = InMemoryCluster::new();
    /// cluster.create_topic("Orders", 2, 4);
    /// let consumer = Consumer::builder("orders-group")
    ///     .subscribe("Orders")
    ///     .cluster(cluster.client("10.0.0.1@1"))
    ///     .listener(Arc::new(Quiet))
    ///     .start()
    ///     .await?;
    /// let held = consumer.wait_for_assignment(|a| a.len() == 8, Duration::from_secs(60)).await?;
    /// consumer.shutdown().await; // fine: `held` is no borrow
    /// assert_eq!(held.len(), 8);
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_assignment(
        &self,
        mut predicate: impl FnMut(&Assignment) -> bool,
        timeout: Duration,
    ) -> Result<Arc<Assignment>, ConsumerError> {
        let mut assignments = self.inner.assignment.clone();
        let wait = async move {
            // The guard is dropped in this statement: nothing is borrowed across an await.
            let matched = assignments
                .wait_for(|assignment| predicate(assignment))
                .await
                .map(|guard| Arc::clone(&guard));
            matched.map_err(|_| ConsumerError::ShutDown)
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => Err(ConsumerError::AssignmentTimedOut {
                after: timeout,
                last: self.assignment(),
            }),
        }
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
    /// Called from one of this consumer's listener callbacks, or from a batch processed through
    /// [`QueueLease::processing`](crate::QueueLease::processing) (every listener call of the
    /// push consumer is), it only starts the shutdown and returns at once: the shutdown goes on
    /// when the callback or the batch has returned (the shutdown waits for them, so waiting
    /// there would wait for itself). [`join`](Self::join), from elsewhere, waits for the end.
    pub async fn shutdown(&self) {
        self.inner.token.cancel();
        if self.in_own_callback() {
            tracing::debug!(
                "shutdown asked for from a listener callback or a batch; it goes on once that returns"
            );
            return;
        }
        self.inner.tasks.wait().await;
    }

    /// Whether the current task runs this consumer's application code: one of its listener
    /// callbacks, or a batch processed through
    /// [`QueueLease::processing`](crate::QueueLease::processing). A shutdown asked for from
    /// there cannot wait for its own end.
    pub fn in_own_callback(&self) -> bool {
        crate::app_code::in_callback_of(self.inner.serial)
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
    ///
    /// The consumer then says so: [`assignment`](Self::assignment) is empty and unbalanced, and
    /// the last report on [`rounds`](Self::rounds) is [`ReportKind::Aborted`](crate::assignment::ReportKind::Aborted)
    /// (the leases are not cancelled, as nothing would cancel them in a dead process).
    pub fn abort(&self) {
        for task in &self.inner.aborts {
            task.abort();
        }
        self.inner.killed.cancel();
    }

    /// A snapshot of what this consumer is doing: its identity and configuration, its
    /// subscriptions, each held queue's committed offset, lock and (when a consume layer
    /// reports them through the leases) buffer and last pull and consume times, and each
    /// topic's consume rates. What a RocketMQ transport answers when a broker asks for the
    /// consumer's running info (`mqadmin consumerStatus`, the dashboard); see
    /// [`running`](crate::running).
    pub fn running_info(&self) -> RunningInfo {
        StartedConsumer::running_info(&*self.inner)
    }

    /// Persists the committed offsets of the held queues now, instead of at the next
    /// persistence tick (`persist_offsets`, 5 s), and returns once the offset store has
    /// answered: the offsets committed before the call are stored when it returns `Ok` (those
    /// of queues released meanwhile were stored by their release). Committed offsets the store
    /// already has are not written again.
    ///
    /// Fails with [`ConsumerError::OffsetsNotPersisted`] naming the queues whose offset the
    /// store refused (the persistence tick tries them again), or that were not written because
    /// this client's membership is not vouched for (no heartbeat accepted within
    /// [`member_expiry`](crate::config::Intervals::member_expiry): another member may hold
    /// them; they are released once a heartbeat is accepted), and with
    /// [`ConsumerError::ShutDown`] once the consumer is shutting down (its shutdown persists
    /// the final offsets).
    ///
    /// The consumer's task answers it between rounds: awaited from inside a listener call
    /// while that call's queue is being released (the release waits for the call), it returns
    /// only once the release gives up on the call (`callback_timeout`), and the release is
    /// made without the call's batch meanwhile. Await it from another task, or not while a
    /// release may wait for the call.
    pub async fn persist_offsets(&self) -> Result<(), ConsumerError> {
        if self.inner.token.is_cancelled() {
            return Err(ConsumerError::ShutDown);
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.inner
            .resets
            .send(ServiceRequest::Persist(answer))
            .await
            .map_err(|_| ConsumerError::ShutDown)?;
        let refused = answered.await.map_err(|_| ConsumerError::ShutDown)?;
        if refused.is_empty() {
            Ok(())
        } else {
            Err(ConsumerError::OffsetsNotPersisted { refused })
        }
    }

    /// Applies an operator's offset reset (RocketMQ: `RESET_CONSUMER_CLIENT_OFFSET`, pushed by
    /// the broker after `mqadmin resetOffsetByTime`): each named queue this client holds is
    /// released (reason [`OffsetReset`](crate::RemovalReason::OffsetReset): its lease is
    /// cancelled, so its consumer drops what it buffered), its new offset is persisted as its
    /// final offset whatever the lease still commits, and a round takes it again at once,
    /// starting from that offset. Queues this client does not hold are ignored: their owners
    /// get the same reset.
    ///
    /// Returns at once; the consumer's task applies the reset. Fails with
    /// [`ConsumerError::ShutDown`] once the consumer is shutting down, and with
    /// [`ConsumerError::ResetsPending`] while too many resets wait already.
    pub fn reset_offsets(
        &self,
        offsets: impl IntoIterator<Item = (rebalance_core::MessageQueue, i64)>,
    ) -> Result<(), ConsumerError> {
        StartedConsumer::reset_offsets(&*self.inner, offsets.into_iter().collect())
            .map_err(ConsumerError::from)
    }

    /// Whether `queue` was released for an offset reset ([`reset_offsets`](Self::reset_offsets))
    /// and this client has not taken it back yet: between the release (once the consumer's
    /// task applied the reset) and the round after it, which takes the queue back from the
    /// reset offset, or finds it someone else's now. A further reset of such a queue applies
    /// to its take-back (the later one wins); it is held by no lease meanwhile.
    pub fn awaits_take_back(&self, queue: &rebalance_core::MessageQueue) -> bool {
        self.inner.ctx.take_backs.contains(queue)
    }
}

/// What the directory the consumer registered through may ask it
/// ([`GroupDirectory::consumer_started`](crate::GroupDirectory::consumer_started)); the handle's
/// methods of the same names answer the same.
impl StartedConsumer for HandleInner {
    fn group(&self) -> &str {
        &self.ctx.group
    }

    fn client_id(&self) -> &ClientId {
        &self.ctx.client_id
    }

    fn is_stopped(&self) -> bool {
        self.tasks.is_empty()
    }

    fn running_info(&self) -> RunningInfo {
        let ctx = &self.ctx;
        let activity = &ctx.activity;
        let now = tokio::time::Instant::now();
        let clocks = activity.clocks;
        let lock_lifetime = ctx.intervals.lock_lifetime;
        let leases = self.leases.borrow().clone();
        let mut queues: Vec<QueueRunningInfo> = leases
            .iter()
            .map(|(queue, state)| {
                let figures = state.reported_figures();
                let lock_until = state.lock_valid_until();
                QueueRunningInfo {
                    queue: queue.clone(),
                    commit_offset: state.committed().or(state.persisted()).unwrap_or(-1),
                    buffer: figures.buffer,
                    locked: lock_until.is_some_and(|until| now < until),
                    last_lock: lock_until.map(|until| {
                        clocks.wall(until.checked_sub(lock_lifetime).unwrap_or(until))
                    }),
                    last_pull: figures.last_pull.map(|at| clocks.wall(at)),
                    last_consume: figures.last_consume.map(|at| clocks.wall(at)),
                    popped: state.read_mode == crate::ReadMode::Pop,
                }
            })
            .collect();
        // The published order is the assignment's (per topic, the table's); operators' tools
        // and the documentation promise queue order.
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        // What the heartbeats announce: the service's subscriptions (the retry topic, and the
        // POP retry topic of a topic the brokers answer only PULL for), which follow the
        // application's as the service takes them (found by review: built from the
        // application's alone, a POP retry topic's queues were listed, itself not).
        let subscriptions: Vec<crate::subscription::Subscription> =
            self.registration.borrow().subscriptions.clone();
        let status = subscriptions
            .iter()
            .map(|s| (s.topic.clone(), activity.meter.status(&s.topic, now)))
            .collect();
        let report = self.rounds.borrow().clone();
        let mut diagnostics = std::collections::BTreeMap::new();
        diagnostics.insert("allocation".to_string(), ctx.allocation.name().to_string());
        diagnostics.insert("round".to_string(), report.round.to_string());
        diagnostics.insert("balanced".to_string(), report.balanced.to_string());
        for topic in &report.topics {
            if let Some(fingerprint) = topic.fingerprint {
                diagnostics.insert(
                    format!("fingerprint:{}", topic.topic),
                    format!("{fingerprint:016x}"),
                );
            }
        }
        RunningInfo {
            group: ctx.group.clone(),
            client_id: ctx.client_id.clone(),
            started_at: clocks.wall,
            message_model: ctx.message_model,
            consume_order: ctx.consume_order,
            consume_from: ctx.consume_from,
            consuming: activity.meter.is_used(),
            subscriptions,
            queues,
            status,
            diagnostics,
        }
    }

    fn reset_offsets(&self, offsets: Vec<(MessageQueue, i64)>) -> Result<(), ResetRefused> {
        if self.token.is_cancelled() {
            return Err(ResetRefused::ShutDown);
        }
        let reset = ServiceRequest::Reset(OffsetReset { offsets });
        self.resets.try_send(reset).map_err(|e| match e {
            tokio::sync::mpsc::error::TrySendError::Full(_) => ResetRefused::Pending {
                pending: PENDING_RESETS,
            },
            tokio::sync::mpsc::error::TrySendError::Closed(_) => ResetRefused::ShutDown,
        })
    }
}
