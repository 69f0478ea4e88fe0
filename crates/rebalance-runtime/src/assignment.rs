//! What the application can observe: the current assignment and the outcome of each round.

use std::collections::BTreeMap;
use std::time::Duration;

use rebalance_core::assignor::AssignError;
use rebalance_core::{AllocateError, ClientId, MessageQueue};

use crate::error::RemoteError;
use crate::lease_terms::RemovedQueue;
use crate::wake::WakeReasons;

/// The queues this client holds, by topic (sorted), after a round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The round that produced it (0 before the first round).
    pub round: u64,
    /// Whether that round reached the strategy's share for every topic.
    pub balanced: bool,
    /// Held queues by topic.
    pub queues: BTreeMap<String, Vec<MessageQueue>>,
    /// The held queues that are popped (server-side assignment in POP mode, see
    /// [`ReadMode::Pop`](crate::ReadMode::Pop)), sorted: other members may read them at the
    /// same time. Each is in [`queues`](Self::queues) too; empty with client-side allocation.
    pub shared: Vec<MessageQueue>,
}

impl Assignment {
    /// Every held queue.
    pub fn iter(&self) -> impl Iterator<Item = &MessageQueue> {
        self.queues.values().flatten()
    }

    /// The number of held queues.
    pub fn len(&self) -> usize {
        self.queues.values().map(Vec::len).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `queue` is held and popped, possibly by other members too (see
    /// [`shared`](Self::shared)).
    pub fn is_shared(&self, queue: &MessageQueue) -> bool {
        self.shared.binary_search(queue).is_ok()
    }

    /// Whether `queue` is held.
    pub fn contains(&self, queue: &MessageQueue) -> bool {
        self.queues
            .get(&*queue.topic)
            .is_some_and(|qs| qs.binary_search(queue).is_ok())
    }
}

/// Why a topic's share could not be reached in a round; the last good assignment stands.
///
/// Its `Display` is one line for logs, and its `source` the underlying error when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unbalanced {
    /// No route is known for the topic yet: the name server has not answered a poll of it.
    #[error("no route is known for the topic yet")]
    RouteUnknown,
    /// The name server says the topic does not exist (misspelled, or not created yet), and no
    /// route was known before.
    #[error("the name server does not know the topic (misspelled, or not created yet)")]
    TopicNotFound,
    /// The name server failed (unreachable, timed out, refused) and no route was known before.
    #[error("the name server failed, and no route is known for the topic")]
    NameServerFailed(#[source] RemoteError),
    /// The directory failed to list the group's consumers.
    #[error("the directory could not list the group's consumers")]
    DirectoryFailed(#[source] RemoteError),
    /// The directory does not list this client (not registered yet, or expired).
    #[error("the directory does not list this client")]
    NotInConsumerList,
    /// The directory lists no consumer at all.
    #[error("the directory lists no consumer")]
    NoConsumers,
    /// The strategy or the assignor refused, or panicked.
    #[error("the allocation failed")]
    StrategyFailed(#[source] AllocationFailure),
    /// A group assignor needs every topic's view and one of them is incomplete.
    #[error("the group assignor waits for every subscribed topic's view")]
    GroupViewIncomplete,
    /// Server-side assignment: the brokers could not be asked (or their read mode could not
    /// be set).
    #[error("could not ask the brokers for the assignment")]
    AssignmentFailed(#[source] RemoteError),
    /// Server-side assignment: the brokers answered that they could not allocate the topic
    /// (the Java broker's answer to an unknown topic, strategy or client).
    #[error("the brokers could not allocate the topic")]
    ServerUnbalanced,
    /// Server-side assignment: the brokers assign the topic's queues by POP, and this consumer
    /// reads none by POP (see
    /// [`ServerAllocation::accepting_pop`](crate::allocation::ServerAllocation::accepting_pop)).
    #[error(
        "the brokers assign the topic by POP, which this consumer does not read (configure POP on the consumer, or set the group's mode back to PULL)"
    )]
    PopNotAccepted,
    /// Some queues could not be added (lock refused, offset unreadable) or released (still
    /// consuming, offset not persisted) yet.
    #[error(
        "{not_added} queue(s) of the share not added and {not_released} outside it not released yet"
    )]
    Pending {
        /// Queues of the share not added yet.
        not_added: usize,
        /// Queues outside the share not released yet.
        not_released: usize,
    },
}

/// How a round's allocation (the strategy, or the group assignor) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocationFailure {
    /// The strategy returned this error.
    #[error(transparent)]
    Strategy(#[from] AllocateError),
    /// The assignor returned this error.
    #[error(transparent)]
    Assignor(#[from] AssignError),
    /// The strategy or assignor panicked.
    #[error("{name} panicked: {message}")]
    Panicked {
        /// Its name.
        name: String,
        /// The panic's message.
        message: String,
    },
}

/// What one round did to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicReport {
    /// The topic.
    pub topic: String,
    /// A stable hash of the inputs (sorted queue set and consumer ids): two clients with the
    /// same fingerprint computed from the same view.
    pub fingerprint: Option<u64>,
    /// `None` when the share was reached.
    pub unbalanced: Option<Unbalanced>,
    /// Queues added in this round.
    pub added: Vec<MessageQueue>,
    /// Queues removed (announced to the listener) in this round, after those lost with their
    /// lock at a renewal since the previous report (reason
    /// [`Lost`](crate::RemovalReason::Lost)).
    pub removed: Vec<RemovedQueue>,
    /// The topic's queues held after the round that are popped (server-side assignment in
    /// POP mode): other members may read them at the same time. Sorted; empty with client-side
    /// allocation.
    pub shared: Vec<MessageQueue>,
}

/// A [`QueueListener`](crate::QueueListener) callback of a round that did not return `Ok`.
/// The round went on as if it had: see [`QueueListener`](crate::QueueListener) for what each
/// callback's failure means for its queues.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{callback}({topic}) {failure}")]
pub struct ListenerCallbackError {
    /// The callback.
    pub callback: ListenerCallback,
    /// The topic it was called for.
    pub topic: String,
    /// How it failed.
    pub failure: CallbackFailureKind,
}

/// A [`QueueListener`](crate::QueueListener) callback, named as the trait's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerCallback {
    /// [`QueueListener::queues_added`](crate::QueueListener::queues_added).
    QueuesAdded,
    /// [`QueueListener::queues_removed`](crate::QueueListener::queues_removed).
    QueuesRemoved,
    /// [`QueueListener::message_queue_changed`](crate::QueueListener::message_queue_changed).
    MessageQueueChanged,
}

impl ListenerCallback {
    /// The trait method's name.
    pub fn name(self) -> &'static str {
        match self {
            ListenerCallback::QueuesAdded => "queues_added",
            ListenerCallback::QueuesRemoved => "queues_removed",
            ListenerCallback::MessageQueueChanged => "message_queue_changed",
        }
    }
}

impl std::fmt::Display for ListenerCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a listener callback failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallbackFailureKind {
    /// It returned an error: its message, followed by those of its sources (`: `-separated).
    #[error("failed: {0}")]
    Returned(String),
    /// It panicked, with this message.
    #[error("panicked: {0}")]
    Panicked(String),
    /// It did not return within `callback_timeout` (this long); its future was dropped.
    #[error("failed: did not return within {0:?} (callback_timeout); it was cancelled")]
    TimedOut(Duration),
}

/// What a [`RoundReport`] is about. Every queue the listener is told to remove appears in
/// exactly one report, whatever released it; a consumer that stopped without releasing says
/// so in its last report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReportKind {
    /// A rebalance round. Its removals include the queues lost with their lock at a renewal
    /// since the previous report (reason [`Lost`](crate::RemovalReason::Lost)); the renewal
    /// wakes the round at once ([`LOCK_LOST`](WakeReasons::LOCK_LOST)).
    #[default]
    Round,
    /// The shutdown: every queue was released (reason
    /// [`Shutdown`](crate::RemovalReason::Shutdown)). The consumer's last report; `round` is the
    /// number of the last round.
    Shutdown,
    /// [`ConsumerHandle::abort`](crate::ConsumerHandle::abort) stopped every task, as if the
    /// process had died: nothing was released or announced, the client was not unregistered
    /// (the directory expires it), and the leases were not cancelled. The consumer's last
    /// report; the assignment is published empty and unbalanced at the same time.
    Aborted,
    /// The task named `task` panicked and the consumer stopped without releasing its queues:
    /// their leases were cancelled, but nothing was announced, persisted or unlocked (see
    /// [`ConsumerError::TaskPanicked`](crate::ConsumerError::TaskPanicked)). The consumer's last
    /// report; the assignment is published empty and unbalanced at the same time.
    TaskPanicked {
        /// The task.
        task: &'static str,
    },
}

impl ReportKind {
    /// A lower-case name for logs and output.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::Round => "round",
            ReportKind::Shutdown => "shutdown",
            ReportKind::Aborted => "aborted",
            ReportKind::TaskPanicked { .. } => "task_panicked",
        }
    }
}

impl std::fmt::Display for ReportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one rebalance round, or of releases outside a round (see [`ReportKind`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// The client.
    pub client_id: Option<ClientId>,
    /// What the report is about: a round, the shutdown, or a consumer that died.
    pub kind: ReportKind,
    /// The round's number (from 1); for the last report of a consumer that stopped, the last
    /// round's.
    pub round: u64,
    /// Why it ran.
    pub reasons: WakeReasons,
    /// Whether every topic reached its share.
    pub balanced: bool,
    /// Per subscribed (or just unsubscribed) topic.
    pub topics: Vec<TopicReport>,
    /// Listener callbacks that failed, panicked or timed out, in the order they were called.
    pub callback_errors: Vec<ListenerCallbackError>,
    /// How long the round took.
    pub duration: Duration,
}

impl RoundReport {
    /// Every queue added in the round.
    pub fn added(&self) -> impl Iterator<Item = &MessageQueue> {
        self.topics.iter().flat_map(|t| &t.added)
    }

    /// Every queue removed in the round.
    pub fn removed(&self) -> impl Iterator<Item = &RemovedQueue> {
        self.topics.iter().flat_map(|t| &t.removed)
    }
}

/// A stable 64-bit FNV-1a hash of a topic's inputs: the sorted queues and the sorted ids.
pub(crate) fn fingerprint(queues: &[MessageQueue], ids: &[ClientId]) -> u64 {
    fingerprint_ids(fingerprint_queues(queues), ids)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Feeds one field to an FNV-1a state, followed by a separator that cannot occur in UTF-8, so
/// that ["ab","c"] and ["a","bc"] differ.
fn feed(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h ^= 0xff;
    h.wrapping_mul(FNV_PRIME)
}

/// The first part of [`fingerprint`]: the state after the queues, which a round remembers
/// while the queue list stays the same.
pub(crate) fn fingerprint_queues(queues: &[MessageQueue]) -> u64 {
    queues.iter().fold(FNV_OFFSET, |h, q| {
        let h = feed(h, q.topic.as_bytes());
        let h = feed(h, q.broker_name.as_bytes());
        feed(h, &q.queue_id.to_be_bytes())
    })
}

/// The rest of [`fingerprint`], from the state [`fingerprint_queues`] left.
pub(crate) fn fingerprint_ids(after_queues: u64, ids: &[ClientId]) -> u64 {
    let h = feed(after_queues, b"|ids");
    ids.iter().fold(h, |h, id| feed(h, id.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_and_sensitive() {
        let q = |i| MessageQueue::new("T", "b", i);
        let ids: Vec<ClientId> = vec!["a".into(), "b".into()];
        let f = fingerprint(&[q(0), q(1)], &ids);
        assert_eq!(f, fingerprint(&[q(0), q(1)], &ids));
        assert_ne!(f, fingerprint(&[q(0)], &ids));
        assert_ne!(f, fingerprint(&[q(0), q(1)], &ids[..1]));
        let split: Vec<ClientId> = vec!["ab".into(), "c".into()];
        let joined: Vec<ClientId> = vec!["a".into(), "bc".into()];
        assert_ne!(fingerprint(&[], &split), fingerprint(&[], &joined));
    }

    #[test]
    fn fingerprint_is_fnv1a_of_the_documented_layout() {
        // Computed independently: FNV-1a 64 over the topic, the broker name and the big-endian
        // queue id of each queue, then `|ids` and each id, every field followed by 0xff. Members
        // (perhaps of different versions) compare these values in their logs.
        let q = |i| MessageQueue::new("T", "b", i);
        let ids: Vec<ClientId> = vec!["a".into(), "b".into()];
        assert_eq!(fingerprint(&[q(0), q(1)], &ids), 0xffe8_c96c_4a66_7a1a);
        assert_eq!(fingerprint(&[], &[]), 0x9e71_9839_a639_b000);
    }

    #[test]
    fn an_unbalanced_reason_reads_as_one_line_with_its_cause_as_source() {
        use std::error::Error as _;
        let why = Unbalanced::DirectoryFailed(RemoteError::Unreachable("reset".into()));
        assert_eq!(
            why.to_string(),
            "the directory could not list the group's consumers"
        );
        assert_eq!(
            why.source().map(ToString::to_string).as_deref(),
            Some("unreachable: reset")
        );
        let panicked = Unbalanced::StrategyFailed(AllocationFailure::Panicked {
            name: "mine".into(),
            message: "bad".into(),
        });
        assert_eq!(
            panicked.source().map(ToString::to_string).as_deref(),
            Some("mine panicked: bad")
        );
        let refused =
            Unbalanced::StrategyFailed(AllocationFailure::Strategy(AllocateError::EmptyConsumers));
        assert_eq!(
            refused.source().map(ToString::to_string).as_deref(),
            Some("cidAll is null or cidAll empty")
        );
        let pending = Unbalanced::Pending {
            not_added: 2,
            not_released: 1,
        };
        assert_eq!(
            pending.to_string(),
            "2 queue(s) of the share not added and 1 outside it not released yet"
        );
        assert!(pending.source().is_none());
    }

    #[test]
    fn assignment_lookup() {
        let q = |i| MessageQueue::new("T", "b", i);
        let a = Assignment {
            round: 1,
            balanced: true,
            queues: [("T".to_string(), vec![q(0), q(2)])].into(),
            shared: vec![q(2)],
        };
        assert!(a.contains(&q(2)) && !a.contains(&q(1)));
        assert!(a.is_shared(&q(2)) && !a.is_shared(&q(0)));
        assert_eq!(a.len(), 2);
        assert!(!a.is_empty());
        assert_eq!(a.iter().cloned().collect::<Vec<_>>(), [q(0), q(2)]);
        assert!(Assignment::default().is_empty());
    }

    #[test]
    fn a_round_report_lists_every_topics_changes() {
        let q = |t, i| MessageQueue::new(t, "b", i);
        let topic = |t, added, removed| TopicReport {
            topic: String::from(t),
            fingerprint: None,
            unbalanced: None,
            added,
            removed,
            shared: Vec::new(),
        };
        let gone = |queue| RemovedQueue {
            queue,
            reason: crate::RemovalReason::Reassigned,
        };
        let report = RoundReport {
            topics: vec![
                topic("A", vec![q("A", 0)], vec![gone(q("A", 1))]),
                topic("B", vec![q("B", 2), q("B", 3)], vec![]),
            ],
            ..RoundReport::default()
        };
        let added: Vec<_> = report.added().cloned().collect();
        assert_eq!(added, [q("A", 0), q("B", 2), q("B", 3)]);
        let removed: Vec<_> = report.removed().map(|r| r.queue.clone()).collect();
        assert_eq!(removed, [q("A", 1)]);
    }
}
