//! [`AssignmentSource`]: server-side assignment (RocketMQ 5), the brokers deciding which queues
//! a client reads, and how ([`ReadMode`]: pulled by one member, or popped by several).
//!
//! With [`Allocation::Server`](crate::allocation::Allocation::Server) a consumer's rounds ask
//! the source for the client's share of each subscribed topic instead of running a strategy;
//! everything else (leases, callbacks, round reports, the hand-off and its order) stays as it
//! is. The brokers allocate among the clients their heartbeats registered, with one of the few
//! strategies they can run ([`AssignmentSource::strategies`]), and answer per queue whether it
//! is read by PULL (one member at a time, offsets committed as always) or by POP (several
//! members at once; in RocketMQ, queue id `-1` stands for every queue of a broker).

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};

use crate::RemoteError;

/// How a queue assigned by the brokers is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ReadMode {
    /// Pulled from a committed offset by this member alone (client-side rebalance's way).
    #[default]
    Pull,
    /// Popped: several members may read the queue at once, each message invisible to the
    /// others until acknowledged or until its invisible time passes; no offset is committed by
    /// the client. In RocketMQ a popped queue with id `-1` is every queue of its broker.
    Pop,
}

impl ReadMode {
    /// A lower-case name for logs and output (`pull`, `pop`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::Pull => "pull",
            ReadMode::Pop => "pop",
        }
    }
}

/// One queue the brokers assigned, and how to read it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AssignedQueue {
    /// The queue (of the topic asked about).
    pub queue: MessageQueue,
    /// Pulled or popped.
    pub mode: ReadMode,
}

impl AssignedQueue {
    /// `queue`, read by `mode`.
    pub fn new(queue: MessageQueue, mode: ReadMode) -> Self {
        Self { queue, mode }
    }
}

/// What the brokers answered about a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAnswer {
    /// These queues are the client's (possibly none).
    Queues(Vec<AssignedQueue>),
    /// The brokers could not allocate (the Java broker's answer for an unknown strategy, topic
    /// or client): the consumer keeps what it holds, and the round is unbalanced.
    Unbalanced,
}

/// A client's question: which queues of `topic` are mine?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignmentRequest<'a> {
    /// The consumer group.
    pub group: &'a str,
    /// This client's id, as its heartbeats register it (the brokers allocate among those).
    pub client_id: &'a ClientId,
    /// The topic.
    pub topic: &'a str,
    /// The strategy, one of [`AssignmentSource::strategies`].
    pub strategy: &'a str,
}

/// Where server-side assignments come from: the RocketMQ transport (QUERY_ASSIGNMENT and
/// SET_MESSAGE_REQUEST_MODE at the brokers), or the in-memory cluster.
///
/// Every call must end in bounded time: the rounds await each answer.
#[async_trait]
pub trait AssignmentSource: Send + Sync + 'static {
    /// The strategy names the brokers can run (RocketMQ: `AVG`, `AVG_BY_CIRCLE`): a consumer
    /// configured with another is refused at start, since the brokers would answer it with
    /// nothing (the Rust broker 1.0) or with no assignment at all (Java's).
    fn strategies(&self) -> Vec<String>;

    /// The client's share of a topic (clustering).
    async fn query_assignment(
        &self,
        request: &AssignmentRequest<'_>,
    ) -> Result<ServerAnswer, RemoteError>;

    /// Sets how `group` reads `topic` at every broker of the topic: by PULL, or by POP with each
    /// client also reading the shares of `pop_share` other clients (0: every client reads every
    /// queue). The setting is the group's, at the brokers: it changes what every member is
    /// assigned.
    async fn set_read_mode(
        &self,
        group: &str,
        topic: &str,
        mode: ReadMode,
        pop_share: i32,
    ) -> Result<(), RemoteError>;
}
