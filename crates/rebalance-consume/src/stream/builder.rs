//! [`StreamConsumer`] and its builder: a push consumer whose messages go to a stream instead of
//! a listener, in subscribe mode (the group rebalances) or assign mode (the queues named).

use std::collections::BTreeSet;
use std::sync::Arc;

use rebalance_core::MessageQueue;
use rebalance_runtime::config::MessageModel;
use rebalance_runtime::{AssignmentSource, ClusterServices, ConsumerError, MemberOptions};

use super::assign::Assigned;
use super::handle::StreamConsumerHandle;
use super::messages::MessageStream;
use super::ordered::{BatchFeed, OrderedStream};
use crate::pop::{PopOptions, PopSource};
use crate::push::ListenerKind;
use crate::work::WorkQueue;
use crate::{ConsumeOptions, MessageSource, PushConsumer, PushConsumerBuilder, PushConsumerError};

/// Entry point: `StreamConsumer::builder("group")`.
#[derive(Debug, Clone, Copy)]
pub struct StreamConsumer;

impl StreamConsumer {
    /// A builder for a member of `group` whose messages come as a stream.
    pub fn builder(group: impl Into<String>) -> StreamConsumerBuilder {
        StreamConsumerBuilder {
            push: PushConsumer::builder(group),
            subscribed: BTreeSet::new(),
            assigned: None,
        }
    }
}

/// Why a stream consumer could not start (or, for [`SubscribeAndAssign`](Self::SubscribeAndAssign),
/// an assign-mode consumer could not subscribe).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamConsumerError {
    /// Both `subscribe` and `assign` were called.
    #[error(
        "subscribe and assign are mutually exclusive: subscribe to topics (the group shares their queues) or assign queues (this consumer takes those), not both"
    )]
    SubscribeAndAssign,
    /// `assign` was given no queue.
    #[error("assign was given no queue; name one or more")]
    EmptyAssignment,
    /// Assign mode with broadcasting.
    #[error(
        "assign mode cannot broadcast (a broadcasting consumer takes every queue of its topics); subscribe instead, or assign in clustering mode"
    )]
    AssignBroadcasting,
    /// Assign mode with POP.
    #[error(
        "assign mode cannot pop (with POP the brokers assign the queues); subscribe instead, or assign without POP"
    )]
    AssignPop,
    /// An ordered stream with POP.
    #[error(
        "an ordered stream cannot pop (ordered consumers lock their queues and rebalance on the client, as in the Java client); use start() with POP, or an ordered stream without it"
    )]
    OrderedPop,
    /// The consumer underneath could not start.
    #[error(transparent)]
    Push(#[from] PushConsumerError),
}

impl From<ConsumerError> for StreamConsumerError {
    fn from(e: ConsumerError) -> Self {
        Self::Push(PushConsumerError::Consumer(e))
    }
}

/// Configures a stream consumer: its cluster, how it is a member of its group, subscriptions
/// (subscribe mode) or queues (assign mode), the message model and [`ConsumeOptions`]; then
/// [`start`](Self::start) (a [`MessageStream`]) or [`start_ordered`](Self::start_ordered) (an
/// [`OrderedStream`]).
#[must_use]
#[derive(Debug)]
pub struct StreamConsumerBuilder {
    push: PushConsumerBuilder,
    subscribed: BTreeSet<String>,
    assigned: Option<Vec<MessageQueue>>,
}

impl StreamConsumerBuilder {
    /// The cluster: the group's services and the [`MessageSource`] in one value (see
    /// [`PushConsumerBuilder::cluster`]).
    pub fn cluster<C>(mut self, cluster: C) -> Self
    where
        C: ClusterServices + MessageSource + Clone,
    {
        self.push = self.push.cluster(cluster);
        self
    }

    /// How the consumer is a member of its group ([`MemberOptions`]). In assign mode the
    /// strategy is ignored: the consumer takes the queues assigned.
    pub fn configure(mut self, configure: impl FnOnce(MemberOptions) -> MemberOptions) -> Self {
        self.push = self.push.configure(configure);
        self
    }

    /// [`configure`](Self::configure) with a function that may fail.
    pub fn try_configure(
        mut self,
        configure: impl FnOnce(MemberOptions) -> Result<MemberOptions, ConsumerError>,
    ) -> Result<Self, ConsumerError> {
        self.push = self.push.try_configure(configure)?;
        Ok(self)
    }

    /// Subscribe mode: consumes this member's share of every tag of `topic`; the group
    /// rebalances the topic's queues among its members.
    pub fn subscribe(mut self, topic: impl Into<String>) -> Self {
        let topic = topic.into();
        self.subscribed.insert(topic.clone());
        self.push = self.push.subscribe(topic);
        self
    }

    /// Subscribe mode, for the tags of `topic` named by `expression` (`TagA || TagB`).
    pub fn subscribe_tags(
        mut self,
        topic: impl Into<String>,
        expression: &str,
    ) -> Result<Self, ConsumerError> {
        let topic = topic.into();
        self.subscribed.insert(topic.clone());
        self.push = self.push.subscribe_tags(topic, expression)?;
        Ok(self)
    }

    /// Assign mode: consumes exactly these queues (every tag), whatever the other members of
    /// the group; no rebalance moves them. The consumer still registers in its group, whose
    /// retry topic it shares with the other members (a message handed back comes again
    /// through it), so give an assign-mode consumer a group that has no subscribe-mode
    /// member. A queue missing from its topic's route is taken once it appears; until then it
    /// is logged at WARN (once, and at INFO when it appears).
    pub fn assign(mut self, queues: impl IntoIterator<Item = MessageQueue>) -> Self {
        self.assigned.get_or_insert_with(Vec::new).extend(queues);
        self
    }

    /// Clustering (default) or broadcasting (subscribe mode only).
    pub fn message_model(mut self, model: MessageModel) -> Self {
        self.push = self.push.message_model(model);
        self
    }

    /// How messages are pulled and buffered (and, ordered, how many per batch:
    /// `consume_batch_size`; how many batches out at once: `consume_concurrency`).
    pub fn options(mut self, options: ConsumeOptions) -> Self {
        self.push = self.push.options(options);
        self
    }

    /// POP consumption (RocketMQ 5; see [`PushConsumerBuilder::pop`]): the brokers assign the
    /// queues and several members pop each; [`ack`](crate::StreamMessage::ack) acknowledges a
    /// message at its broker, [`nack`](crate::StreamMessage::nack) sends it back through the
    /// group's retry topic and acknowledges it, and a message dropped unacknowledged is
    /// consumed again here later (or, once the member is gone, by another after its invisible
    /// time). Subscribe mode and [`start`](Self::start) only: [`start`](Self::start) refuses
    /// assign mode, and [`start_ordered`](Self::start_ordered) refuses POP (ordered consumers
    /// rebalance on the client).
    pub fn pop<C>(mut self, cluster: C, options: PopOptions) -> Self
    where
        C: PopSource + AssignmentSource + Clone,
    {
        self.push = self.push.pop(cluster, options);
        self
    }

    /// Where messages are pulled from and sent back to.
    pub fn source(mut self, source: Arc<dyn MessageSource>) -> Self {
        self.push = self.push.source(source);
        self
    }

    /// Starts the consumer: its messages, in any order across queues, as a [`MessageStream`].
    pub async fn start(self) -> Result<MessageStream, StreamConsumerError> {
        let assigned = self.assigned_topics();
        let work = Arc::new(WorkQueue::default());
        let push = self
            .prepared()?
            .consumed_by(ListenerKind::Stream(work.clone()))
            .start()
            .await?;
        Ok(MessageStream::new(
            StreamConsumerHandle::new(push, assigned),
            work,
        ))
    }

    /// Starts the consumer with ordered consumption (the queues are locked at the brokers):
    /// each queue's messages in order, a batch of a queue at a time, as an [`OrderedStream`].
    pub async fn start_ordered(self) -> Result<OrderedStream, StreamConsumerError> {
        if self.push.is_popping() {
            return Err(StreamConsumerError::OrderedPop);
        }
        let assigned = self.assigned_topics();
        let (feed, batches) = BatchFeed::new();
        let push = self
            .prepared()?
            .consumed_by(ListenerKind::Orderly(Arc::new(feed)))
            .start()
            .await?;
        Ok(OrderedStream::new(
            StreamConsumerHandle::new(push, assigned),
            batches,
        ))
    }

    /// Assign mode: the topics of the queues named.
    fn assigned_topics(&self) -> Option<std::collections::BTreeSet<String>> {
        self.assigned
            .as_ref()
            .map(|queues| queues.iter().map(|q| q.topic.to_string()).collect())
    }

    /// The push consumer's builder, with the assignment of assign mode.
    fn prepared(self) -> Result<PushConsumerBuilder, StreamConsumerError> {
        let Some(queues) = self.assigned else {
            return Ok(self.push);
        };
        if !self.subscribed.is_empty() {
            return Err(StreamConsumerError::SubscribeAndAssign);
        }
        if queues.is_empty() {
            return Err(StreamConsumerError::EmptyAssignment);
        }
        if self.push.is_broadcasting() {
            return Err(StreamConsumerError::AssignBroadcasting);
        }
        if self.push.is_popping() {
            return Err(StreamConsumerError::AssignPop);
        }
        let topics: BTreeSet<String> = queues.iter().map(|q| q.topic.to_string()).collect();
        let mut push = self.push;
        for topic in topics {
            push = push.subscribe(topic);
        }
        let strategy = Arc::new(Assigned::new(queues));
        Ok(push.edit_consumer(|consumer| consumer.strategy(strategy)))
    }
}
