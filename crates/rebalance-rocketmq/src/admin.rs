//! [`Admin`]: the few broker administration requests tests and tools need.

use rebalance_core::route::perm;
use rebalance_runtime::RemoteError;

use crate::broker::refused;
use crate::client::RemotingClient;
use crate::command::{RemotingCommand, request_code, response_code};

/// A topic to create or update on a broker (UPDATE_AND_CREATE_TOPIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// The topic.
    pub topic: String,
    /// Queues consumers read.
    pub read_queue_nums: i32,
    /// Queues producers write.
    pub write_queue_nums: i32,
    /// Permission bits (see [`rebalance_core::route::perm`]).
    pub perm: i32,
    /// Whether the topic is ordered.
    pub order: bool,
}

impl TopicConfig {
    /// A readable and writable topic with `queues` read and write queues.
    pub fn new(topic: impl Into<String>, queues: i32) -> Self {
        Self {
            topic: topic.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: perm::READ | perm::WRITE,
            order: false,
        }
    }
}

/// Broker administration over a [`RemotingClient`].
#[derive(Debug, Clone, Default)]
pub struct Admin {
    remoting: RemotingClient,
}

impl Admin {
    /// An admin client using `remoting`'s connections.
    pub fn new(remoting: RemotingClient) -> Self {
        Self { remoting }
    }

    /// Creates (or updates) a topic on the broker at `broker_addr`. The broker then registers
    /// it with its name servers.
    pub async fn create_topic(
        &self,
        broker_addr: &str,
        config: &TopicConfig,
    ) -> Result<(), RemoteError> {
        let request = RemotingCommand::request(request_code::UPDATE_AND_CREATE_TOPIC)
            .with_ext("topic", &config.topic)
            .with_ext("defaultTopic", "TBW102")
            .with_ext("readQueueNums", config.read_queue_nums)
            .with_ext("writeQueueNums", config.write_queue_nums)
            .with_ext("perm", config.perm)
            .with_ext("topicFilterType", "SINGLE_TAG")
            .with_ext("topicSysFlag", 0)
            .with_ext("order", config.order);
        let response = self.remoting.invoke(broker_addr, request).await?;
        if response.code != response_code::SUCCESS {
            return Err(refused(&response));
        }
        tracing::info!(broker = broker_addr, topic = %config.topic, queues = config.read_queue_nums, "topic created");
        Ok(())
    }

    /// The largest offset of a queue (GET_MAX_OFFSET): the offset the next message gets.
    pub async fn max_offset(
        &self,
        broker_addr: &str,
        topic: &str,
        queue_id: i32,
    ) -> Result<i64, RemoteError> {
        let request = RemotingCommand::request(request_code::GET_MAX_OFFSET)
            .with_ext("topic", topic)
            .with_ext("queueId", queue_id);
        let response = self.remoting.invoke(broker_addr, request).await?;
        if response.code != response_code::SUCCESS {
            return Err(refused(&response));
        }
        crate::broker::offsets_query::answered_offset(&response, "max offset")
    }
}
