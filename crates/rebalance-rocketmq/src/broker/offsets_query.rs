//! Where a start position resolves to: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and
//! SEARCH_OFFSET_BY_TIMESTAMP (29) at a queue's broker.

use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;

use super::BrokerClient;
use crate::command::{RemotingCommand, request_code};

/// The request for `code` about `queue` (its topic as the broker knows it: `topic`), naming
/// its broker (`bname`) as the Java client does.
fn queue_request(code: i32, queue: &MessageQueue, topic: &str) -> RemotingCommand {
    RemotingCommand::request(code)
        .with_ext("topic", topic)
        .with_ext("queueId", queue.queue_id)
        .with_ext("bname", &*queue.broker_name)
}

/// The `offset` field of a successful answer (quoted in an excerpt when it is not a number:
/// a header may be up to 16 MiB).
pub(crate) fn answered_offset(response: &RemotingCommand, what: &str) -> Result<i64, RemoteError> {
    let text = response
        .ext("offset")
        .ok_or_else(|| RemoteError::BadResponse(format!("{what} answer without `offset`")))?;
    text.parse().map_err(|_| {
        RemoteError::BadResponse(format!(
            "{what} `{}` is not a number",
            crate::error::excerpt(text)
        ))
    })
}

impl BrokerClient {
    async fn queue_offset(
        &self,
        what: &'static str,
        queue: &MessageQueue,
        request: RemotingCommand,
    ) -> Result<i64, RemoteError> {
        let addr = self.broker_addr(queue, false).await?;
        let op = crate::denial::Op::new(what, format!("topic {}", self.wire(&queue.topic)));
        let response = self.call_ok(&addr, &op, request).await?;
        let offset = answered_offset(&response, what)?;
        tracing::debug!(broker = %addr, ?queue, what, offset, "queue offset");
        Ok(offset)
    }

    /// GET_MAX_OFFSET: one past the queue's last message.
    pub(super) async fn query_max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        let request = queue_request(
            request_code::GET_MAX_OFFSET,
            queue,
            &self.wire(&queue.topic),
        );
        self.queue_offset("max offset", queue, request).await
    }

    /// GET_MIN_OFFSET: the queue's first message still stored.
    pub(super) async fn query_min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        let request = queue_request(
            request_code::GET_MIN_OFFSET,
            queue,
            &self.wire(&queue.topic),
        );
        self.queue_offset("min offset", queue, request).await
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP: the first message stored at or after `timestamp_ms`.
    pub(super) async fn search_offset(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
    ) -> Result<i64, RemoteError> {
        let request = queue_request(
            request_code::SEARCH_OFFSET_BY_TIMESTAMP,
            queue,
            &self.wire(&queue.topic),
        )
        .with_ext("timestamp", timestamp_ms);
        self.queue_offset("offset by timestamp", queue, request)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_the_queue_and_answers_carry_the_offset() {
        let queue = MessageQueue::new("T", "broker-a", 3);
        let request = queue_request(31, &queue, "NS%T").with_ext("timestamp", 5);
        assert_eq!(request.ext("topic"), Some("NS%T"), "the topic as given");
        assert_eq!(request.ext("queueId"), Some("3"));
        assert_eq!(request.ext("bname"), Some("broker-a"));
        let ok = RemotingCommand::response(0, 1, None).with_ext("offset", "17");
        assert_eq!(answered_offset(&ok, "min offset"), Ok(17));
        let missing = RemotingCommand::response(0, 1, None);
        assert!(matches!(
            answered_offset(&missing, "min offset"),
            Err(RemoteError::BadResponse(text)) if text.contains("min offset")
        ));
        let garbage = RemotingCommand::response(0, 1, None).with_ext("offset", "x");
        assert!(answered_offset(&garbage, "max offset").is_err());
        // A huge garbage header is quoted in an excerpt, not whole.
        let huge = RemotingCommand::response(0, 1, None).with_ext("offset", "9".repeat(100_000));
        let Err(RemoteError::BadResponse(text)) = answered_offset(&huge, "max offset") else {
            panic!("not a number");
        };
        assert!(
            text.len() < 1_000 && text.contains("100000 bytes"),
            "{text}"
        );
    }
}
