//! [`OffsetStore`]: where consumption progress is kept.

use async_trait::async_trait;
use rebalance_core::MessageQueue;

use crate::RemoteError;

/// Consumption progress per group and queue (in RocketMQ clustering mode: the broker).
#[async_trait]
pub trait OffsetStore: Send + Sync + 'static {
    /// The stored offset of `queue`, or `None` when nothing is stored yet.
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError>;

    /// Stores the next offset to consume for `queue`.
    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError>;

    /// Forgets whatever the store keeps locally about `queue`, after the runtime released it and
    /// persisted its last offset. Stores without local state do nothing (the default).
    async fn remove(&self, _group: &str, _queue: &MessageQueue) -> Result<(), RemoteError> {
        Ok(())
    }
}
