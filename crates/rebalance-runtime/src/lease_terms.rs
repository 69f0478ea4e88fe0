//! What a queue's lease starts from and why it ends, as plain values: [`StartPosition`],
//! [`RemovalReason`] and [`RemovedQueue`]. At the bottom of the crate: the configuration, the
//! reports and the leases use them, and they use nothing of the crate.

use std::fmt;

use rebalance_core::MessageQueue;

/// Where consumption of a newly added queue starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartPosition {
    /// The stored offset: continue exactly there.
    Offset(i64),
    /// No stored offset, start from the end (`ConsumeFrom::LastOffset`; `Timestamp` on a retry
    /// topic). Resolve it at the broker (its max offset) and
    /// [`commit`](crate::QueueLease::commit) the result at once: the runtime stores only
    /// committed offsets, and a queue that changes owner before anything was stored starts from
    /// the end again, skipping what came between.
    Latest,
    /// No stored offset, start from the oldest message (`ConsumeFrom::FirstOffset`;
    /// `LastOffset` on a retry topic, as the Java client does).
    Earliest,
    /// No stored offset, start from this time (ms since the Unix epoch). Like `Latest`, commit
    /// the offset it resolves to at once.
    Timestamp(i64),
}

/// Why a queue was taken away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemovalReason {
    /// The allocation gave it to another member.
    Reassigned,
    /// The topic no longer exists.
    TopicGone,
    /// The application unsubscribed the topic.
    Unsubscribed,
    /// The consumer is shutting down.
    Shutdown,
    /// The client lost the queue's lock (ordered consumption): it will be added again once the
    /// lock is back.
    Lost,
    /// An operator reset the queue's offset (RocketMQ: `RESET_CONSUMER_CLIENT_OFFSET`): the
    /// new offset is persisted and the queue added again at once, starting there.
    OffsetReset,
    /// This client's membership lapsed: no heartbeat was accepted for `member_expiry` (it was
    /// frozen, or cut off from the brokers), so the other members may have split its queues.
    /// Released, without writing its offset, once a heartbeat is accepted again; the next
    /// round takes the client's share again from the stored offsets.
    MembershipLapsed,
}

impl RemovalReason {
    /// A lower-case name for logs and output.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Reassigned => "reassigned",
            RemovalReason::TopicGone => "topic_gone",
            RemovalReason::Unsubscribed => "unsubscribed",
            RemovalReason::Shutdown => "shutdown",
            RemovalReason::Lost => "lost",
            RemovalReason::OffsetReset => "offset_reset",
            RemovalReason::MembershipLapsed => "membership_lapsed",
        }
    }
}

impl fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A queue taken away, handed to
/// [`QueueListener::queues_removed`](crate::QueueListener::queues_removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedQueue {
    /// The queue.
    pub queue: MessageQueue,
    /// Why.
    pub reason: RemovalReason,
}
