//! [`QueueLocker`]: exclusive locks for ordered consumption.

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};

use crate::RemoteError;

/// Locks queues at their brokers so that only one client consumes an ordered queue.
///
/// Locks expire at the broker when they are not renewed (RocketMQ: 60 s); the runtime renews
/// them every `lock_renew_interval`.
#[async_trait]
pub trait QueueLocker: Send + Sync + 'static {
    /// Locks (or renews) `queues` for `client`; returns the queues the client holds now. A queue
    /// locked by another client is simply left out.
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<Vec<MessageQueue>, RemoteError>;

    /// Releases `client`'s locks on `queues`.
    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError>;
}
