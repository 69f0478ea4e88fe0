//! Why a strategy refused to allocate.

use crate::{ClientId, MessageQueue};

/// An allocation the strategy refused, with the Java client's message.
///
/// The Java client throws `IllegalArgumentException` for all of these; [`AllocateError::java_name`]
/// gives the exception name, so `format!("{}: {}", e.java_name(), e)` is exactly Java's
/// `"<Exception>: <message>"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocateError {
    /// The calling client's id is empty.
    #[error("currentCID is empty")]
    EmptyCurrentCid,
    /// There are no queues to divide.
    #[error("mqAll is null or mqAll empty")]
    EmptyQueues,
    /// There are no consumers to divide among.
    #[error("cidAll is null or cidAll empty")]
    EmptyConsumers,
    /// A consistent-hash ring was configured with a negative number of virtual nodes.
    #[error("illegal virtualNodeCnt :{0}")]
    IllegalVirtualNodeCount(i64),
    /// A consistent-hash ring was configured with more than
    /// [`ConsistentHash::MAX_VIRTUAL_NODES`](crate::strategy::ConsistentHash::MAX_VIRTUAL_NODES)
    /// virtual nodes per member: this library's limit (the Java client accepts any
    /// non-negative `int`).
    #[error(
        "virtualNodeCnt {0} is over this library's limit of 65536 (the Java client accepts it)"
    )]
    TooManyVirtualNodes(i64),
    /// A consistent-hash ring of this many members (an id listed twice counting twice, as
    /// Java's ring adds its points again) would hold more than
    /// [`ConsistentHash::MAX_RING_POINTS`](crate::strategy::ConsistentHash::MAX_RING_POINTS)
    /// points: this library's limit (the Java client builds it, in gigabytes and minutes).
    #[error(
        "a hash ring of {members} members x {virtual_nodes} virtual nodes is over this library's limit of {max} points: give fewer virtual nodes (the Java client builds it)"
    )]
    RingTooLarge {
        /// The members listed.
        members: usize,
        /// The virtual nodes per member.
        virtual_nodes: usize,
        /// The limit.
        max: usize,
    },
    /// The machine-room resolver found no room for a queue's broker.
    #[error("Machine room is null for mq {0}")]
    NoRoomForQueue(MessageQueue),
    /// The machine-room resolver found no room for a consumer.
    #[error("Machine room is null for consumer id {0}")]
    NoRoomForConsumer(ClientId),
    /// A strategy outside this crate failed.
    #[error("{strategy}: {message}")]
    Other {
        /// The strategy's name.
        strategy: String,
        /// What went wrong.
        message: String,
    },
}

impl AllocateError {
    /// The simple name of the exception the Java client throws for this error.
    pub fn java_name(&self) -> &'static str {
        match self {
            // Not an argument Java refuses: this library's own failures and limits.
            AllocateError::Other { .. }
            | AllocateError::TooManyVirtualNodes(_)
            | AllocateError::RingTooLarge { .. } => "RuntimeException",
            _ => "IllegalArgumentException",
        }
    }

    /// `"<ExceptionSimpleName>: <message>"`, the form the reference vectors record.
    pub fn java_message(&self) -> String {
        format!("{}: {}", self.java_name(), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientId, MessageQueue};

    #[test]
    fn java_messages_name_the_exception_java_throws() {
        // The reference vectors record exactly these strings.
        assert_eq!(
            AllocateError::EmptyQueues.java_message(),
            "IllegalArgumentException: mqAll is null or mqAll empty"
        );
        assert_eq!(
            AllocateError::NoRoomForConsumer(ClientId::from("c@1")).java_message(),
            "IllegalArgumentException: Machine room is null for consumer id c@1"
        );
        assert_eq!(
            AllocateError::NoRoomForQueue(MessageQueue::new("T", "b", 2)).java_message(),
            "IllegalArgumentException: Machine room is null for mq \
             MessageQueue [topic=T, brokerName=b, queueId=2]"
        );
        // A strategy of our own failing is not an argument Java would have refused.
        let other = AllocateError::Other {
            strategy: "mine".into(),
            message: "no luck".into(),
        };
        assert_eq!(other.java_name(), "RuntimeException");
        assert_eq!(other.java_message(), "RuntimeException: mine: no luck");
    }
}
