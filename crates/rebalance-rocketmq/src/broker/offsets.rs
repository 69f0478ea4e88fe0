//! [`OffsetStore`] at the brokers: QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET.

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_runtime::{OffsetStore, RemoteError};

use super::{BrokerClient, refused};
use crate::command::{RemotingCommand, request_code, response_code};

#[async_trait]
impl OffsetStore for BrokerClient {
    /// QUERY_CONSUMER_OFFSET at the queue's broker (its master, else a slave). Asks the broker
    /// not to invent an offset of 0 (`setZeroIfNotFound=false`), so "nothing stored" is `None`.
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError> {
        let addr = self.broker_addr(queue, false).await?;
        let request = RemotingCommand::request(request_code::QUERY_CONSUMER_OFFSET)
            .with_ext("consumerGroup", self.wire(group))
            .with_ext("topic", self.wire(&queue.topic))
            .with_ext("queueId", queue.queue_id)
            .with_ext("setZeroIfNotFound", false);
        let op = self.group_topic_op("offset read", group, &queue.topic);
        let response = self.call(&addr, &op, request).await?;
        let offset = stored_offset(&response)?;
        tracing::debug!(broker = %addr, group, ?queue, ?offset, "offset read");
        Ok(offset)
    }

    /// UPDATE_CONSUMER_OFFSET at the queue's broker, waiting for its acknowledgement.
    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError> {
        let addr = self.broker_addr(queue, false).await?;
        let request = RemotingCommand::request(request_code::UPDATE_CONSUMER_OFFSET)
            .with_ext("consumerGroup", self.wire(group))
            .with_ext("topic", self.wire(&queue.topic))
            .with_ext("queueId", queue.queue_id)
            .with_ext("commitOffset", offset);
        let op = self.group_topic_op("offset commit", group, &queue.topic);
        self.call_ok(&addr, &op, request).await?;
        tracing::debug!(broker = %addr, group, ?queue, offset, "offset persisted");
        Ok(())
    }
}

/// The offset in an answer to QUERY_CONSUMER_OFFSET.
fn stored_offset(response: &RemotingCommand) -> Result<Option<i64>, RemoteError> {
    match response.code {
        response_code::SUCCESS => {
            let text = response.ext("offset").ok_or_else(|| {
                RemoteError::BadResponse("offset answer without an `offset` field".into())
            })?;
            text.parse::<i64>().map(Some).map_err(|_| {
                RemoteError::BadResponse(format!(
                    "offset `{}` is not a number",
                    crate::error::excerpt(text)
                ))
            })
        }
        response_code::QUERY_NOT_FOUND => Ok(None),
        _ => Err(refused(response)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_answers() {
        let ok = RemotingCommand::response(0, 1, None).with_ext("offset", "42");
        assert_eq!(stored_offset(&ok), Ok(Some(42)));
        let none = RemotingCommand::response(22, 1, Some("Not found".into()));
        assert_eq!(stored_offset(&none), Ok(None));
        let missing = RemotingCommand::response(0, 1, None);
        assert!(matches!(
            stored_offset(&missing),
            Err(RemoteError::BadResponse(_))
        ));
        let garbage = RemotingCommand::response(0, 1, None).with_ext("offset", "4x");
        assert!(matches!(
            stored_offset(&garbage),
            Err(RemoteError::BadResponse(_))
        ));
        let refused = RemotingCommand::response(17, 1, Some("topic not exist".into()));
        assert_eq!(
            stored_offset(&refused),
            Err(RemoteError::Refused {
                code: 17,
                remark: "topic not exist".into()
            })
        );
    }
}
