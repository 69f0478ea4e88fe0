//! The producer half of client load balancing: which queue each message goes to.
//!
//! A [`Producer`] keeps the publish queues of the topics it sends to with the same RouteSync task
//! as a consumer (polled every 30 s; a topic's first selection fetches its route at once), and
//! answers "which queue for this message?". Sending stays with the application: it sends to
//! the chosen queue's broker and reports the outcome, which feeds latency fault avoidance.
//!
//! - [`ProducerHandle::select`]: round robin over the publish queues ([`RoundRobin`]); on a
//!   retry, skip the broker that just failed; with fault avoidance, skip slow or failing
//!   brokers for a while ([`LatencyFaultTracker`], [`AvoidPolicy`]).
//! - [`ProducerHandle::select_by`]: ordered and keyed messages through a [`QueueSelector`]
//!   ([`SelectByHash`], [`SelectByRandom`], [`SelectByMachineRoom`]).
//! - [`ProducerHandle::report`]: each send's broker, latency and outcome.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use rebalance_runtime::memory::InMemoryCluster;
//! use rebalance_runtime::producer::{Producer, SelectByHash};
//!
//! let cluster = InMemoryCluster::new();
//! cluster.create_topic("Orders", 2, 4); // broker-0 and broker-1, 4 queues each
//! let producer = Producer::builder("orders-producer")
//!     .name_server(Arc::new(cluster.client("producer-1")))
//!     .latency_fault_avoidance(true)
//!     .round_robin_start(0) // a random position by default, as in Java
//!     .start()
//!     .await?;
//!
//! // Unordered: round robin, with retries that avoid the broker that just failed.
//! let mut last_failed: Option<String> = None;
//! for _attempt in 0..3 {
//!     let queue = producer.select("Orders", last_failed.as_deref()).await?;
//!     let ok = queue.broker_name.as_ref() != "broker-0"; // pretend broker-0 is down
//!     producer.report(&queue.broker_name, Duration::from_millis(3), ok);
//!     if ok {
//!         break;
//!     }
//!     last_failed = Some(queue.broker_name.to_string());
//! }
//! // broker-0 failed, so it is avoided for 600 s.
//! assert_eq!(&*producer.select("Orders", None).await?.broker_name, "broker-1");
//!
//! // Ordered: every message of a key goes to the key's queue.
//! let a = producer.select_by("Orders", &SelectByHash, "order-42").await?;
//! assert_eq!(producer.select_by("Orders", &SelectByHash, "order-42").await?, a);
//! producer.shutdown().await;
//! # Ok(()) }
//! ```

mod error;
mod faults;
mod keyed;
mod selector;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use rebalance_core::{MessageQueue, PublishInfo};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::check_interval;

pub use self::error::{ProducerError, SelectError};
pub use self::faults::{AvoidPolicy, FaultItem, LatencyFaultTracker};
pub use self::keyed::{QueueSelector, SelectByHash, SelectByMachineRoom, SelectByRandom};
pub use self::selector::{ChosenBy, RoundRobin};
use crate::NameServer;
use crate::callbacks::caught;
use crate::route_sync::{Fetch, RouteSync};
use crate::routes::{RouteTable, TopicState};

/// A random position to start a round robin at (each call another), below 2^32 so that the
/// counter never wraps in practice.
fn random_start() -> usize {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random >> 32) as usize
}

/// Entry point: `Producer::builder("group")`.
#[derive(Debug, Clone, Copy)]
pub struct Producer;

impl Producer {
    /// A builder for a producer of `group`.
    pub fn builder(group: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder {
            group: group.into(),
            name_server: None,
            topics: BTreeSet::new(),
            fault_avoidance: false,
            policy: AvoidPolicy::default(),
            poll_interval: Duration::from_secs(30),
            route_timeout: Duration::from_secs(3),
            topic_gone_after: Duration::from_secs(90),
            round_robin_start: None,
            shutdown: None,
        }
    }
}

/// Configures a producer; [`start`](Self::start) runs it.
#[must_use = "a ProducerBuilder does nothing until `start().await` runs the producer"]
pub struct ProducerBuilder {
    group: String,
    name_server: Option<Arc<dyn NameServer>>,
    topics: BTreeSet<String>,
    fault_avoidance: bool,
    policy: AvoidPolicy,
    poll_interval: Duration,
    route_timeout: Duration,
    topic_gone_after: Duration,
    round_robin_start: Option<usize>,
    shutdown: Option<CancellationToken>,
}

impl fmt::Debug for ProducerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerBuilder")
            .field("group", &self.group)
            .field("topics", &self.topics)
            .field("fault_avoidance", &self.fault_avoidance)
            .finish_non_exhaustive()
    }
}

impl ProducerBuilder {
    /// Where routes come from.
    pub fn name_server(mut self, name_server: Arc<dyn NameServer>) -> Self {
        self.name_server = Some(name_server);
        self
    }

    /// Registers a topic this producer sends to: its route is fetched at start and polled from
    /// then on. (A topic first named in a selection is registered then.)
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topics.insert(topic.into());
        self
    }

    /// Avoids brokers that answer slowly or fail (the Java client's `sendLatencyFaultEnable`;
    /// off by default, as there). Without it, [`ProducerHandle::report`] does nothing.
    pub fn latency_fault_avoidance(mut self, enabled: bool) -> Self {
        self.fault_avoidance = enabled;
        self
    }

    /// How long a latency or a failure avoids a broker (default: the Java client's steps).
    pub fn avoid_policy(mut self, policy: AvoidPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How often routes are polled (30 s).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a selection waits for the first route of a topic (3 s, the Java client's
    /// `mqClientApiTimeout`).
    pub fn route_timeout(mut self, timeout: Duration) -> Self {
        self.route_timeout = timeout;
        self
    }

    /// How long the name server must keep saying a topic does not exist before the producer
    /// gives it up (90 s).
    pub fn topic_gone_after(mut self, after: Duration) -> Self {
        self.topic_gone_after = after;
        self
    }

    /// Starts every topic's round robin at position `start` (modulo its publish queues), for
    /// reproducible tests and simulations. By default each topic starts at a random position,
    /// as in the Java producer, so that producers started together do not all send their first
    /// messages to the same queue and go on in step.
    pub fn round_robin_start(mut self, start: usize) -> Self {
        self.round_robin_start = Some(start);
        self
    }

    /// Shuts the producer down when `token` is cancelled (it becomes the parent of the
    /// producer's own token).
    pub fn shutdown_on(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// Starts the producer: fetches the registered topics' routes, then spawns its route sync.
    /// Must be called inside a tokio runtime.
    pub async fn start(self) -> Result<ProducerHandle, ProducerError> {
        tokio::runtime::Handle::try_current().map_err(|_| ProducerError::NoRuntime)?;
        if self.group.is_empty() {
            return Err(ProducerError::EmptyGroup);
        }
        check_interval("poll_interval", self.poll_interval)?;
        check_interval("route_timeout", self.route_timeout)?;
        check_interval("topic_gone_after", self.topic_gone_after)?;
        let name_server = self
            .name_server
            .ok_or(ProducerError::Missing("a name server"))?;
        let token = self
            .shutdown
            .map_or_else(CancellationToken::new, |t| t.child_token());
        let (routes_tx, routes_rx) = watch::channel(Arc::new(RouteTable::default()));
        let (fetches_tx, fetches_rx) = mpsc::channel(64);
        let span = tracing::info_span!("producer", group = %self.group);
        let mut route_sync = RouteSync::for_producer(
            name_server,
            self.poll_interval,
            self.topic_gone_after,
            self.topics.clone(),
            fetches_rx,
            routes_tx,
        );
        // The first poll runs in the caller's task; a panic in it (or later, in the route sync
        // task) is contained and reported as in a consumer.
        let first_poll = async {
            tracing::info!(topics = ?self.topics, fault_avoidance = self.fault_avoidance, "starting producer");
            caught(route_sync.poll_all()).await
        }
        .instrument(span.clone())
        .await;
        if let Err(message) = first_poll {
            span.in_scope(|| tracing::error!(panic = %message, "the producer's route sync panicked while starting; the producer does not start"));
            return Err(ProducerError::TaskPanicked(message));
        }
        let failure = Arc::new(OnceLock::new());
        let tasks = TaskTracker::new();
        let run = {
            let token = token.clone();
            let failure = Arc::clone(&failure);
            async move {
                if let Err(message) = caught(route_sync.run(token.clone())).await {
                    tracing::error!(panic = %message, "the producer's route sync panicked; the producer stops");
                    let _ = failure.set(message);
                    token.cancel();
                }
            }
        };
        tasks.spawn(run.instrument(span));
        tasks.close();
        Ok(ProducerHandle {
            inner: Arc::new(Inner {
                group: self.group,
                fault_avoidance: self.fault_avoidance,
                faults: LatencyFaultTracker::new(self.policy),
                routes: routes_rx,
                fetches: fetches_tx,
                turns: DashMap::new(),
                round_robin_start: self.round_robin_start,
                route_timeout: self.route_timeout,
                token,
                tasks,
                failure,
            }),
        })
    }
}

struct Inner {
    group: String,
    fault_avoidance: bool,
    faults: LatencyFaultTracker,
    routes: watch::Receiver<Arc<RouteTable>>,
    fetches: mpsc::Sender<Fetch>,
    /// One round-robin counter per topic; it survives route changes.
    turns: DashMap<String, RoundRobin>,
    /// Where each topic's counter starts (`None`: a random position per topic).
    round_robin_start: Option<usize>,
    route_timeout: Duration,
    token: CancellationToken,
    tasks: TaskTracker,
    /// Set when the route sync panicked: the message.
    failure: Arc<OnceLock<String>>,
}

/// A running producer. Cheap to clone; it stops when [`shutdown`](Self::shutdown) is called,
/// when the token given to [`ProducerBuilder::shutdown_on`] is cancelled, or when every handle
/// is dropped.
///
/// `builder.start().await?;` written as a statement drops the handle at once; the compiler
/// warns about it (the type is `#[must_use]`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn demo(cluster: rebalance_runtime::memory::InMemoryCluster) -> Result<(), rebalance_runtime::producer::ProducerError> {
/// rebalance_runtime::producer::Producer::builder("orders-producer")
///     .name_server(std::sync::Arc::new(cluster.client("producer-1")))
///     .start()
///     .await?; // error: unused `ProducerHandle` that must be used
/// # Ok(()) }
/// ```
///
/// Keep the handle for as long as messages are sent:
///
/// ```no_run
/// #![deny(unused_must_use)]
/// # async fn demo(cluster: rebalance_runtime::memory::InMemoryCluster) -> Result<(), rebalance_runtime::producer::ProducerError> {
/// let _producer = rebalance_runtime::producer::Producer::builder("orders-producer")
///     .name_server(std::sync::Arc::new(cluster.client("producer-1")))
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "dropping the last ProducerHandle shuts the producer down at once (its routes stop being refreshed): keep the handle for as long as messages are sent, and call `shutdown().await` to stop it"]
pub struct ProducerHandle {
    inner: Arc<Inner>,
}

impl fmt::Debug for ProducerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerHandle")
            .field("group", &self.inner.group)
            .field("fault_avoidance", &self.inner.fault_avoidance)
            .finish_non_exhaustive()
    }
}

impl ProducerHandle {
    /// The producer group.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// Whether latency fault avoidance is on.
    pub fn fault_avoidance(&self) -> bool {
        self.inner.fault_avoidance
    }

    /// The queue for the next unordered message of `topic`. Pass the broker of the previous
    /// attempt as `last_failed` when retrying a failed send: its queues are skipped when the
    /// topic has another broker that is not avoided. A topic whose route is not known yet is registered and its
    /// route fetched at once (waiting at most the route timeout); one without publish queues,
    /// or gone, is fetched again when its last poll is a second old, as the Java producer asks
    /// the name server again on every send to such a topic.
    pub async fn select(
        &self,
        topic: &str,
        last_failed: Option<&str>,
    ) -> Result<MessageQueue, SelectError> {
        self.fetch_unless_known(topic).await?;
        self.try_select(topic, last_failed)
    }

    /// Like [`select`](Self::select), without waiting: a topic whose route is not known yet is
    /// [`SelectError::RouteUnknown`]. Register topics on the builder (or select once) first.
    pub fn try_select(
        &self,
        topic: &str,
        last_failed: Option<&str>,
    ) -> Result<MessageQueue, SelectError> {
        self.with_publish_info(topic, |info| self.round_robin(topic, info, last_failed))
    }

    /// The queue for a message with `key`, chosen by `selector` among the publish queues (for
    /// ordered and keyed messages; fault avoidance does not apply). Fetches a new topic's route
    /// like [`select`](Self::select).
    pub async fn select_by(
        &self,
        topic: &str,
        selector: &dyn QueueSelector,
        key: &str,
    ) -> Result<MessageQueue, SelectError> {
        self.fetch_unless_known(topic).await?;
        self.with_publish_info(topic, |info| {
            let queues = info.queues();
            selector
                .select(queues, key)
                .and_then(|i| queues.get(i))
                .cloned()
                .ok_or_else(|| SelectError::SelectorRefused {
                    topic: topic.to_string(),
                    queues: queues.len(),
                })
        })?
    }

    /// Reports a send to `broker` that took `latency` and succeeded (`ok`) or failed: with
    /// fault avoidance on, a slow or failed broker is avoided for a while (see
    /// [`AvoidPolicy`]). Does nothing when fault avoidance is off.
    pub fn report(&self, broker: &str, latency: Duration, ok: bool) {
        if self.inner.fault_avoidance {
            self.inner.faults.report(broker, latency, ok);
        }
    }

    /// The fault tracker (which brokers are avoided, and why).
    pub fn faults(&self) -> &LatencyFaultTracker {
        &self.inner.faults
    }

    /// Registers `topic` and fetches its route now unless it is known.
    pub async fn register(&self, topic: &str) -> Result<(), SelectError> {
        self.fetch_unless_known(topic).await?;
        self.with_publish_info(topic, |_| ())
    }

    /// The publish queues of `topic`, if its route is known and has some.
    pub fn publish_info(&self, topic: &str) -> Option<Arc<PublishInfo>> {
        self.inner.routes.borrow().publish_info(topic).cloned()
    }

    /// A receiver of the route table (every registered topic's state, publish queues included).
    pub fn routes(&self) -> watch::Receiver<Arc<RouteTable>> {
        self.inner.routes.clone()
    }

    /// The producer's cancellation token: cancelling it stops the producer.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Stops the route sync and returns when it has stopped. Selections fail with
    /// [`SelectError::ShutDown`] from then on.
    pub async fn shutdown(&self) {
        self.inner.token.cancel();
        self.inner.tasks.wait().await;
    }

    /// Waits until the producer has stopped (after [`shutdown`](Self::shutdown) or the
    /// cancellation of its token) without asking it to, and says how it ended:
    /// `Err(`[`ProducerError::TaskPanicked`]`)` when its route sync panicked.
    pub async fn join(&self) -> Result<(), ProducerError> {
        self.inner.tasks.wait().await;
        match self.inner.failure.get() {
            Some(message) => Err(ProducerError::TaskPanicked(message.clone())),
            None => Ok(()),
        }
    }

    /// Why selections fail once the producer has stopped.
    fn stopped(&self) -> SelectError {
        match self.inner.failure.get() {
            Some(message) => SelectError::TaskPanicked(message.clone()),
            None => SelectError::ShutDown,
        }
    }

    fn round_robin(
        &self,
        topic: &str,
        info: &PublishInfo,
        last_failed: Option<&str>,
    ) -> MessageQueue {
        let faults = self.inner.fault_avoidance.then_some(&self.inner.faults);
        if let Some(turn) = self.inner.turns.get(topic) {
            return turn.select(info, last_failed, faults).0;
        }
        let start = self.inner.round_robin_start.unwrap_or_else(random_start);
        let turn = self
            .inner
            .turns
            .entry(topic.to_string())
            .or_insert_with(|| RoundRobin::starting_at(start));
        turn.select(info, last_failed, faults).0
    }

    /// Runs `f` on the publish queues of a topic whose route is known, or says why there are
    /// none. The route table's lock is not held while `f` runs: a user's selector may call back
    /// into the producer.
    fn with_publish_info<T>(
        &self,
        topic: &str,
        f: impl FnOnce(&PublishInfo) -> T,
    ) -> Result<T, SelectError> {
        if self.inner.token.is_cancelled() {
            return Err(self.stopped());
        }
        let table = Arc::clone(&self.inner.routes.borrow());
        match table.topic(topic) {
            TopicState::Known {
                publish: Ok(info), ..
            } => Ok(f(info)),
            TopicState::Known {
                publish: Err(error),
                ..
            } => Err(SelectError::NoPublishQueue {
                topic: topic.to_string(),
                error: error.clone(),
            }),
            TopicState::Gone => Err(SelectError::TopicGone(topic.to_string())),
            TopicState::Unknown(_) => Err(SelectError::RouteUnknown(topic.to_string())),
        }
    }

    /// Fetches the route of `topic` at once when none is known (registering the topic), and
    /// again (at most every second) when the known route has no publish queue or the topic is
    /// gone, so that sends resume as soon as the topic is fixed rather than at the next poll.
    async fn fetch_unless_known(&self, topic: &str) -> Result<(), SelectError> {
        match self.with_publish_info(topic, |_| ()) {
            Err(SelectError::RouteUnknown(_)) => self.fetch(topic).await,
            Err(SelectError::NoPublishQueue { .. } | SelectError::TopicGone(_)) => {
                // The table already says why the topic cannot be used; a failed refresh does
                // not change that answer.
                if let Err(error) = self.fetch(topic).await {
                    tracing::debug!(topic, %error, "refreshing an unusable topic failed");
                }
                Ok(())
            }
            // Usable, or shut down: the caller's next look at the table gives the answer.
            _ => Ok(()),
        }
    }

    /// Asks the route sync to register and poll `topic` now, and waits for its answer.
    async fn fetch(&self, topic: &str) -> Result<(), SelectError> {
        let after = self.inner.route_timeout;
        let ask = async {
            let (reply, answer) = oneshot::channel();
            let fetch = Fetch {
                topic: topic.to_string(),
                reply,
            };
            self.inner
                .fetches
                .send(fetch)
                .await
                .map_err(|_| self.stopped())?;
            answer.await.map_err(|_| self.stopped())
        };
        let answer = tokio::select! {
            _ = self.inner.token.cancelled() => return Err(self.stopped()),
            answer = tokio::time::timeout(after, ask) => answer,
        };
        match answer {
            Err(_) => {
                tracing::warn!(topic, ?after, "no route of the topic in time");
                Err(SelectError::RouteTimeout {
                    topic: topic.to_string(),
                    after,
                })
            }
            Ok(Err(e)) => Err(e),
            Ok(Ok(None)) => Ok(()),
            Ok(Ok(Some(error))) => Err(SelectError::from_route(topic, error)),
        }
    }
}
