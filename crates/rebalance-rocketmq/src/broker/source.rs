//! The broker client as the consume layer's [`MessageSource`].

use async_trait::async_trait;
use rebalance_consume::{MessageSource, PullError, PullRequest, PullResult, SendBack};
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;

use super::BrokerClient;

#[async_trait]
impl MessageSource for BrokerClient {
    /// PULL_MESSAGE, with the subscription in the request (see [`pull`](super::pull)).
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError> {
        self.pull_message(request).await
    }

    /// CONSUMER_SEND_MSG_BACK, falling back to a send to `%RETRY%{group}` (see
    /// [`send_back`](super::send_back)).
    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        self.send_message_back(request).await
    }

    /// GET_MIN_OFFSET.
    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        self.query_min_offset(queue).await
    }

    /// GET_MAX_OFFSET.
    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        self.query_max_offset(queue).await
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP.
    async fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64, RemoteError> {
        self.search_offset(queue, timestamp_ms).await
    }
}
