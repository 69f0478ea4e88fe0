//! Messages in the in-memory cluster: a log per queue, sends, pulls with long polling, the
//! retry and dead-letter topics, retention; and [`MessageSource`] for [`ClusterClient`].
//!
//! Lock order: the cluster's `inner` lock may be held while taking the message store's lock,
//! never the other way round.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rebalance_core::route::perm;
use rebalance_core::{BrokerData, MessageQueue, QueueData, TopicRoute};
use tokio::time::Instant;

use super::faults::Fault;
use super::log::QueueLog;
use super::{ClusterCall, ClusterClient, InMemoryCluster, Inner, State};
use crate::RemoteError;
use crate::consume::{
    Message, MessageSource, PullError, PullRequest, PullResult, SendBack, property,
};
use crate::producer::{ProducerHandle, RoundRobin, SelectError};
use crate::subscription::retry_topic;

/// The delay of each delay level, level 1 first (RocketMQ's default `messageDelayLevel`:
/// `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`).
pub const DELAY_LEVELS: [Duration; 18] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(2 * 60),
    Duration::from_secs(3 * 60),
    Duration::from_secs(4 * 60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(6 * 60),
    Duration::from_secs(7 * 60),
    Duration::from_secs(8 * 60),
    Duration::from_secs(9 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(20 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(2 * 60 * 60),
];

/// The delay of a delay level: levels above the last are the last (as the broker's schedule
/// service does), levels below 1 are level 1 (a broker turns level 0 into 3 + the
/// redeliveries so far before it gets here).
///
/// ```
/// use std::time::Duration;
/// use rebalance_runtime::memory::delay_of_level;
///
/// assert_eq!(delay_of_level(3), Duration::from_secs(10));
/// assert_eq!(delay_of_level(18), Duration::from_secs(2 * 3600));
/// assert_eq!(delay_of_level(99), Duration::from_secs(2 * 3600));
/// ```
pub fn delay_of_level(level: i32) -> Duration {
    let index = (level.max(1) as usize).min(DELAY_LEVELS.len()) - 1;
    DELAY_LEVELS[index]
}

/// The prefix of a group's dead-letter topic (RocketMQ's `MixAll.DLQ_GROUP_TOPIC_PREFIX`).
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// The dead-letter topic of `group`, `%DLQ%{group}`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_TOPIC_PREFIX}{group}")
}

/// What the cluster's clock shows at its creation, in ms since the Unix epoch
/// (2026-01-01T00:00:00Z). Timestamps are this plus the time elapsed on tokio's clock, so a
/// simulation on paused time gives the same timestamps on every run.
pub const CLUSTER_EPOCH_MS: i64 = 1_767_225_600_000;

/// A message to send: a body, and the tag, keys and other properties it carries.
///
/// ```
/// use rebalance_runtime::memory::OutgoingMessage;
///
/// let message = OutgoingMessage::new("hello").with_tags("TagA").with_keys(["order-1"]);
/// assert_eq!(&message.body()[..], b"hello");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    body: Bytes,
    properties: HashMap<String, String>,
}

impl OutgoingMessage {
    /// A message with `body` and no property.
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self {
            body: body.into(),
            properties: HashMap::new(),
        }
    }

    /// Sets the tag ([`TAGS`](property::TAGS)).
    pub fn with_tags(self, tag: impl Into<String>) -> Self {
        self.with_property(property::TAGS, tag)
    }

    /// Sets the keys ([`KEYS`](property::KEYS), joined by spaces).
    pub fn with_keys<K: AsRef<str>>(self, keys: impl IntoIterator<Item = K>) -> Self {
        let keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_string()).collect();
        self.with_property(property::KEYS, keys.join(property::KEY_SEPARATOR))
    }

    /// Sets one property.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

/// Where a sent message went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// The queue.
    pub queue: MessageQueue,
    /// The message's offset in the queue.
    pub offset: i64,
    /// The message's id.
    pub msg_id: String,
}

/// Why the in-memory cluster refused a send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The topic has no route: create it first (`InMemoryCluster::create_topic`).
    #[error("topic `{0}` does not exist in the in-memory cluster; create it first")]
    TopicNotFound(String),
    /// The topic's route has no writable queue.
    #[error("topic `{0}` has no writable queue")]
    NoWritableQueue(String),
    /// The chosen queue is not a writable queue of its topic's route.
    #[error("{0:?} is not a writable queue of its topic's route")]
    NotWritable(MessageQueue),
    /// The producer could not choose a queue.
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// The messages of the cluster.
#[derive(Debug)]
pub(super) struct Messages {
    logs: HashMap<MessageQueue, QueueLog>,
    /// The position of the next message in the cluster's log (one per message: the
    /// commit-log offset a broker looks a sent-back message up by).
    commit_log: i64,
    /// The round robin of [`InMemoryCluster::send`], per topic.
    turns: HashMap<String, RoundRobin>,
    /// Messages sent back and waiting for their delay, per group.
    scheduled: HashMap<String, usize>,
    /// When the cluster was created, on tokio's clock.
    start: Instant,
}

impl Messages {
    pub(super) fn new() -> Self {
        Self {
            logs: HashMap::new(),
            commit_log: 0,
            turns: HashMap::new(),
            scheduled: HashMap::new(),
            start: Instant::now(),
        }
    }

    fn now_ms(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        CLUSTER_EPOCH_MS.saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }

    fn log(&self, queue: &MessageQueue) -> Option<&QueueLog> {
        self.logs.get(queue)
    }

    /// The message stored at `offset` of `queue` with the commit-log position
    /// `commit_log_offset` (how a broker finds a message sent back), if it is still retained.
    fn stored(&self, queue: &MessageQueue, offset: i64, commit_log_offset: i64) -> Option<Message> {
        self.log(queue)?
            .at(offset)
            .filter(|m| m.commit_log_offset() == commit_log_offset)
            .cloned()
    }

    /// Stores a message at the end of `queue` and wakes the pulls held on it; `msg_id` is the
    /// id it keeps (a redelivery keeps the original's), or a new one.
    fn append(
        &mut self,
        queue: &MessageQueue,
        body: Bytes,
        properties: HashMap<String, String>,
        msg_id: Option<&str>,
        born_ms: Option<i64>,
        reconsume_times: i32,
    ) -> SendReceipt {
        let now = self.now_ms();
        let commit_log = self.commit_log;
        self.commit_log += 1;
        let log = self.logs.entry(queue.clone()).or_default();
        let offset = log.next_offset();
        // The shape of RocketMQ's offset message id: the storing broker's address and the
        // commit-log offset, in hex.
        let msg_id = msg_id.map_or_else(
            || format!("7F00000100002A9F{commit_log:016X}"),
            String::from,
        );
        let message = Message::new(queue.clone(), offset, body)
            .with_msg_id(msg_id.as_str())
            .with_commit_log_offset(commit_log)
            .with_properties(properties)
            .with_timestamps(born_ms.unwrap_or(now), now)
            .with_reconsume_times(reconsume_times);
        log.append(message);
        tracing::trace!(?queue, offset, %msg_id, "in-memory cluster stored a message");
        SendReceipt {
            queue: queue.clone(),
            offset,
            msg_id,
        }
    }
}

impl State {
    pub(super) fn messages(&self) -> MutexGuard<'_, Messages> {
        // A panic while holding this lock can only come from a bug in this module; keep serving.
        self.messages
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whether `route` lets consumers read `queue`.
fn readable(route: &TopicRoute, queue: &MessageQueue) -> bool {
    route.queue_datas.iter().any(|q| {
        *q.broker_name == *queue.broker_name
            && perm::is_readable(q.perm)
            && (0..q.read_queue_nums).contains(&queue.queue_id)
    })
}

/// Whether `route` lets producers write to `queue`.
fn writable(route: &TopicRoute, queue: &MessageQueue) -> bool {
    route.queue_datas.iter().any(|q| {
        *q.broker_name == *queue.broker_name
            && q.perm & perm::WRITE == perm::WRITE
            && (0..q.write_queue_nums).contains(&queue.queue_id)
    })
}

/// Gives `topic` one readable and writable queue on `broker` unless its route has the broker
/// (a broker creates a group's retry and dead-letter topics on demand, with one queue).
fn ensure_broker_queue(inner: &mut Inner, topic: &str, broker: &str) {
    if inner
        .routes
        .get(topic)
        .is_some_and(|r| r.queue_datas.iter().any(|q| q.broker_name == broker))
    {
        return;
    }
    let broker_data = inner
        .routes
        .values()
        .flat_map(|r| r.broker_datas.iter())
        .find(|b| b.broker_name == broker)
        .cloned()
        .unwrap_or_else(|| BrokerData {
            cluster: "InMemoryCluster".into(),
            broker_name: broker.to_string(),
            broker_addrs: [(0, "memory:10911".to_string())].into(),
        });
    let route = inner
        .routes
        .entry(topic.to_string())
        .or_insert_with(|| TopicRoute {
            queue_datas: Vec::new(),
            broker_datas: Vec::new(),
            order_topic_conf: None,
        });
    route.queue_datas.push(QueueData {
        broker_name: broker.to_string(),
        read_queue_nums: 1,
        write_queue_nums: 1,
        perm: perm::READ | perm::WRITE,
        topic_sys_flag: 0,
    });
    if !route.broker_datas.iter().any(|b| b.broker_name == broker) {
        route.broker_datas.push(broker_data);
    }
    tracing::info!(topic, broker, "in-memory cluster created a queue on demand");
}

impl InMemoryCluster {
    /// Sends a message to `topic`, to the queue its round robin picks (the producer's
    /// [`RoundRobin`], one per topic, starting at the topic's first queue).
    pub fn send(&self, topic: &str, message: OutgoingMessage) -> Result<SendReceipt, SendError> {
        let route = self
            .route(topic)
            .ok_or_else(|| SendError::TopicNotFound(topic.to_string()))?;
        let info = route
            .publish_info(topic)
            .map_err(|_| SendError::NoWritableQueue(topic.to_string()))?;
        let queue = {
            let mut messages = self.state.messages();
            let turn = messages.turns.entry(topic.to_string()).or_default();
            turn.select(&info, None, None).0
        };
        self.send_to(&queue, message)
    }

    /// Sends a message to a queue chosen by the caller, which must be a writable queue of its
    /// topic's route.
    pub fn send_to(
        &self,
        queue: &MessageQueue,
        message: OutgoingMessage,
    ) -> Result<SendReceipt, SendError> {
        let route = self
            .route(&queue.topic)
            .ok_or_else(|| SendError::TopicNotFound(queue.topic.to_string()))?;
        if !writable(&route, queue) {
            return Err(SendError::NotWritable(queue.clone()));
        }
        let OutgoingMessage { body, properties } = message;
        Ok(self
            .state
            .messages()
            .append(queue, body, properties, None, None, 0))
    }

    /// Sends a message to `topic`, to the queue `producer` selects (its round robin, with its
    /// fault avoidance).
    pub async fn send_with(
        &self,
        producer: &ProducerHandle,
        topic: &str,
        message: OutgoingMessage,
    ) -> Result<SendReceipt, SendError> {
        let queue = producer.select(topic, None).await?;
        self.send_to(&queue, message)
    }

    /// The retained messages of `queue`, in offset order.
    pub fn messages(&self, queue: &MessageQueue) -> Vec<Message> {
        let messages = self.state.messages();
        messages
            .log(queue)
            .map(|log| log.messages().cloned().collect())
            .unwrap_or_default()
    }

    /// The messages `group`'s consumers gave up on: those in its dead-letter topic
    /// (`%DLQ%{group}`), broker by broker.
    pub fn dead_letters(&self, group: &str) -> Vec<Message> {
        let topic = dlq_topic(group);
        let messages = self.state.messages();
        let mut queues: Vec<&MessageQueue> = messages
            .logs
            .keys()
            .filter(|q| *q.topic == *topic)
            .collect();
        queues.sort();
        queues
            .into_iter()
            .filter_map(|q| messages.log(q))
            .flat_map(|log| log.messages().cloned())
            .collect()
    }

    /// How many messages sent back by `group`'s consumers wait for their delay before they go
    /// to the retry topic.
    pub fn pending_redeliveries(&self, group: &str) -> usize {
        self.state
            .messages()
            .scheduled
            .get(group)
            .copied()
            .unwrap_or(0)
    }

    /// The smallest offset of `queue` (the first retained message; 0 for a queue never
    /// written).
    pub fn min_offset(&self, queue: &MessageQueue) -> i64 {
        self.state
            .messages()
            .log(queue)
            .map_or(0, QueueLog::min_offset)
    }

    /// The largest offset of `queue`, one past its last message.
    pub fn max_offset(&self, queue: &MessageQueue) -> i64 {
        self.state
            .messages()
            .log(queue)
            .map_or(0, QueueLog::max_offset)
    }

    /// The offset of the first retained message of `queue` stored at or after `timestamp_ms`,
    /// or the largest offset when there is none.
    pub fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> i64 {
        self.state
            .messages()
            .log(queue)
            .map_or(0, |log| log.offset_at(timestamp_ms))
    }

    /// Deletes the messages of `queue` below offset `before` (retention): a pull from one of
    /// those offsets is answered [`PullResult::OffsetMoved`] to the smallest offset left.
    pub fn truncate(&self, queue: &MessageQueue, before: i64) {
        let mut messages = self.state.messages();
        let log = messages.logs.entry(queue.clone()).or_default();
        log.truncate(before);
        tracing::info!(
            ?queue,
            min_offset = log.min_offset(),
            "in-memory cluster truncated a queue"
        );
    }

    /// The cluster's clock in ms since the Unix epoch: [`CLUSTER_EPOCH_MS`] plus the time
    /// elapsed on tokio's clock since the cluster was created (what born and store timestamps
    /// show).
    pub fn now_ms(&self) -> i64 {
        self.state.messages().now_ms()
    }
}

impl ClusterClient {
    /// Admits one call of `operation` as [`call`](ClusterClient::call) does, and checks the
    /// cluster's state with `check` under the same lock: the fault to apply to the answer.
    fn admit<T>(
        &self,
        operation: ClusterCall,
        check: impl FnOnce(&mut Inner) -> T,
    ) -> Result<(Option<Fault>, T), RemoteError> {
        let mut inner = self.state.lock();
        self.reachable(&inner, operation)?;
        let fault = inner.faults.take(operation);
        if fault == Some(Fault::Fail) {
            return Err(injected(operation));
        }
        Ok((fault, check(&mut inner)))
    }

    /// Applies an admitted call's fault to its answer: a delay holds the answer back, a lost
    /// reply turns it into an error.
    async fn answer<T>(
        operation: ClusterCall,
        fault: Option<Fault>,
        answer: T,
    ) -> Result<T, RemoteError> {
        match fault {
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                Ok(answer)
            }
            Some(Fault::LoseReply | Fault::Fail) => Err(injected(operation)),
            None => Ok(answer),
        }
    }

    /// What a client does when the broker cannot find the message it sends back: it sends its
    /// own copy to `%RETRY%{group}` as a new message (the Java client's
    /// `sendMessageBackAsNormalMessage`, which the RocketMQ transport does too), carrying the
    /// copy's reconsume count plus one, delivered after level 3 + the copy's count. A Java
    /// broker dead-letters such a message on arrival when that count reaches the maximum (the
    /// transport sends at least the maximum when the send-back asked for the dead letters), or
    /// when the group holds an unexpired queue lock (it takes the group for an orderly one:
    /// `SendMessageProcessor.handleRetryAndDLQ`). The Rust broker 1.0 inverts that last test:
    /// it dead-letters when the group holds no lock (a deviation the contract suite records).
    fn fall_back(&self, request: &SendBack<'_>, broker: &Arc<str>) {
        let asked = request.message;
        let mut count = asked.reconsume_times().saturating_add(1);
        if request.delay_level < 0 {
            count = count.max(request.max_reconsume_times);
        }
        let ordered = self.state.lock().holds_locks(request.group, Instant::now());
        let dead = count >= request.max_reconsume_times || ordered;
        let topic = if dead {
            dlq_topic(request.group)
        } else {
            retry_topic(request.group)
        };
        ensure_broker_queue(&mut self.state.lock(), &topic, broker);
        let mut properties = asked.properties().clone();
        for own in [
            property::MIN_OFFSET,
            property::MAX_OFFSET,
            property::CONSUME_START_TIME,
        ] {
            properties.remove(own);
        }
        properties
            .entry(property::ORIGIN_MESSAGE_ID.to_string())
            .or_insert_with(|| asked.msg_id().to_string());
        properties.insert(property::RETRY_TOPIC.to_string(), asked.topic().to_string());
        let copy = Redelivery {
            queue: MessageQueue::new(topic.as_str(), broker.clone(), 0),
            body: asked.body().clone(),
            properties,
            msg_id: asked.msg_id().to_string(),
            born_ms: asked.born_timestamp(),
            reconsume_times: count,
        };
        if dead {
            copy.store(&mut self.state.messages());
        } else {
            let level = asked.reconsume_times().saturating_add(3);
            schedule(&self.state, request.group, copy, delay_of_level(level));
        }
    }

    /// Serves a pull: reads, and holds the pull up to its suspend time when the queue has no
    /// message at the offset yet, answering once one arrives.
    async fn serve_pull(&self, request: &PullRequest) -> PullResult {
        let read = |messages: &mut Messages| {
            let log = messages.logs.entry(request.queue.clone()).or_default();
            let result = log.read(
                request.offset,
                &request.expression,
                request.max_messages,
                request.max_bytes,
            );
            (result, log.arrivals())
        };
        let (result, mut arrivals) = read(&mut self.state.messages());
        let at_the_end = matches!(result, PullResult::NoNewMessage { next_offset } if next_offset == request.offset);
        if !at_the_end || request.suspend.is_zero() {
            return result;
        }
        let offset = request.offset;
        let arrived =
            tokio::time::timeout(request.suspend, arrivals.wait_for(|max| *max > offset)).await;
        tracing::trace!(queue = ?request.queue, offset, arrived = arrived.is_ok(), "held pull resumed");
        // Resumed on arrival or at the end of the hold: read once more without holding, as a
        // broker re-runs a held pull.
        read(&mut self.state.messages()).0
    }
}

pub(super) fn injected(operation: ClusterCall) -> RemoteError {
    RemoteError::Unreachable(format!("injected failure of {operation:?}"))
}

#[async_trait]
impl MessageSource for ClusterClient {
    /// Pulls from the queue's log; held (long polling) up to the request's `suspend` when the
    /// queue has nothing at the offset. A queue that is not a readable queue of its topic's
    /// route is refused (code 17, as a broker answers for a topic it does not have).
    /// Faults: [`ClusterCall::Pull`].
    ///
    /// As a broker does, a pull that carries a commit offset ([`PullRequest::commit_offset`],
    /// which a clustering consumer sends and a broadcasting one must not) stores it as the
    /// group's offset of the queue when the pull arrives, overwriting what was there (a broker
    /// stores the commit of a pull it holds once, not again when it resumes it). As the Java
    /// client, only a positive offset is sent as a commit.
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError> {
        let (fault, routed) = self.admit(ClusterCall::Pull, |inner| {
            inner
                .routes
                .get(&*request.queue.topic)
                .is_some_and(|route| readable(route, &request.queue))
        })?;
        if !routed {
            return Err(PullError::Remote(RemoteError::Refused {
                code: 17,
                remark: format!(
                    "{:?} is not a readable queue of the in-memory cluster",
                    request.queue
                ),
            }));
        }
        if let Some(commit) = request.commit_offset.filter(|&o| o > 0) {
            self.state
                .offsets
                .insert((request.group.clone(), request.queue.clone()), commit);
        }
        let result = self.serve_pull(request).await;
        Ok(Self::answer(ClusterCall::Pull, fault, result).await?)
    }

    /// Sends the message back as a broker does, deciding with the message *it stored*, which
    /// it finds by the request's commit-log offset (the client's copy of the message is not
    /// trusted: its reconsume count may be the client's own). For a message the cluster does not
    /// hold (never stored, or truncated since), which a broker refuses ("look message by
    /// offset failed"), it does what the client transport then does: it sends the client's copy
    /// to the retry topic as a new message ([`fall_back`](Self::fall_back)). With the stored
    /// reconsume count: at
    /// `max_reconsume_times` or more, or with a negative delay level, the message goes to
    /// `%DLQ%{group}` at once; else to `%RETRY%{group}` after its delay level's delay (level
    /// 0: 3 + the stored count). Either copy counts one more delivery than the stored message. Both
    /// topics get a queue on the message's broker on demand, with a route, so that a
    /// rebalance sees them. The copy keeps the message's id and body, and carries
    /// [`RETRY_TOPIC`](property::RETRY_TOPIC) (the topic it came from) and
    /// [`ORIGIN_MESSAGE_ID`](property::ORIGIN_MESSAGE_ID).
    /// Faults: [`ClusterCall::SendBack`] (a lost reply still sends the message back).
    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RemoteError::Unreachable(
                "the in-memory cluster schedules redeliveries on tokio's clock: call send_back inside a tokio runtime".into(),
            ));
        }
        let asked = request.message;
        let broker = asked.queue().broker_name.clone();
        let (fault, stored) = self.admit(ClusterCall::SendBack, |_| {
            self.state.messages().stored(
                asked.queue(),
                asked.queue_offset(),
                asked.commit_log_offset(),
            )
        })?;
        let Some(message) = stored else {
            // The broker refuses ("look message by offset failed"); the client then sends its
            // copy to the retry topic as a new message, as the RocketMQ transport does.
            tracing::debug!(
                group = request.group,
                msg_id = asked.msg_id(),
                commit_log_offset = asked.commit_log_offset(),
                "in-memory cluster: no such stored message; the client falls back to a send"
            );
            self.fall_back(&request, &broker);
            return Self::answer(ClusterCall::SendBack, fault, ()).await;
        };
        let dead =
            message.reconsume_times() >= request.max_reconsume_times || request.delay_level < 0;
        let topic = if dead {
            dlq_topic(request.group)
        } else {
            retry_topic(request.group)
        };
        ensure_broker_queue(&mut self.state.lock(), &topic, &broker);
        let queue = MessageQueue::new(topic.as_str(), broker, 0);
        let mut properties = message.properties().clone();
        properties
            .entry(property::RETRY_TOPIC.to_string())
            .or_insert_with(|| message.topic().to_string());
        properties
            .entry(property::ORIGIN_MESSAGE_ID.to_string())
            .or_insert_with(|| message.msg_id().to_string());
        let copy = Redelivery {
            queue,
            body: message.body().clone(),
            properties,
            msg_id: message.msg_id().to_string(),
            born_ms: message.born_timestamp(),
            reconsume_times: message.reconsume_times().saturating_add(1),
        };
        if dead {
            tracing::info!(
                group = request.group,
                msg_id = message.msg_id(),
                reconsume_times = message.reconsume_times(),
                delay_level = request.delay_level,
                "in-memory cluster dead-lettered a message"
            );
            copy.store(&mut self.state.messages());
        } else {
            let level = match request.delay_level {
                0 => message.reconsume_times().saturating_add(3),
                level => level,
            };
            let delay = delay_of_level(level);
            tracing::debug!(
                group = request.group,
                msg_id = message.msg_id(),
                level,
                ?delay,
                "in-memory cluster scheduled a redelivery"
            );
            schedule(&self.state, request.group, copy, delay);
        }
        Self::answer(ClusterCall::SendBack, fault, ()).await
    }

    /// The queue's smallest offset. Faults: [`ClusterCall::QueryOffset`].
    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        let (fault, offset) = self.admit(ClusterCall::QueryOffset, |_| {
            self.state
                .messages()
                .log(queue)
                .map_or(0, QueueLog::min_offset)
        })?;
        Self::answer(ClusterCall::QueryOffset, fault, offset).await
    }

    /// The queue's largest offset. Faults: [`ClusterCall::QueryOffset`].
    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        let (fault, offset) = self.admit(ClusterCall::QueryOffset, |_| {
            self.state
                .messages()
                .log(queue)
                .map_or(0, QueueLog::max_offset)
        })?;
        Self::answer(ClusterCall::QueryOffset, fault, offset).await
    }

    /// The offset at a timestamp. Faults: [`ClusterCall::QueryOffset`].
    async fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64, RemoteError> {
        let (fault, offset) = self.admit(ClusterCall::QueryOffset, |_| {
            self.state
                .messages()
                .log(queue)
                .map_or(0, |log| log.offset_at(timestamp_ms))
        })?;
        Self::answer(ClusterCall::QueryOffset, fault, offset).await
    }
}

/// A message sent back, to store in the retry or dead-letter topic.
struct Redelivery {
    queue: MessageQueue,
    body: Bytes,
    properties: HashMap<String, String>,
    msg_id: String,
    born_ms: i64,
    reconsume_times: i32,
}

impl Redelivery {
    fn store(self, messages: &mut Messages) -> SendReceipt {
        messages.append(
            &self.queue,
            self.body,
            self.properties,
            Some(&self.msg_id),
            Some(self.born_ms),
            self.reconsume_times,
        )
    }
}

/// Stores `copy` after `delay` on tokio's clock, in a task of its own that holds the cluster
/// only weakly (a cluster dropped meanwhile drops the message).
fn schedule(state: &Arc<State>, group: &str, copy: Redelivery, delay: Duration) {
    *state
        .messages()
        .scheduled
        .entry(group.to_string())
        .or_default() += 1;
    let weak: Weak<State> = Arc::downgrade(state);
    let group = group.to_string();
    let due = Instant::now() + delay;
    tokio::spawn(async move {
        tokio::time::sleep_until(due).await;
        if let Some(state) = weak.upgrade() {
            let mut messages = state.messages();
            let receipt = copy.store(&mut messages);
            if let Some(n) = messages.scheduled.get_mut(&group) {
                *n = n.saturating_sub(1);
            }
            tracing::trace!(queue = ?receipt.queue, offset = receipt.offset, "in-memory cluster redelivered a message");
        }
    });
}
