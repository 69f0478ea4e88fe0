//! (b) The raw pull loop: per queue, one pull at a time from the transport's `BrokerClient`
//! (PULL_MESSAGE, the answer decoded into messages), each message noted, the next pull sent at
//! once. No buffer, no workers, no commits, no rebalance: the most this broker gives one
//! client that pulls each queue the way a push consumer does.

use std::sync::Arc;

use rebalance_consume::{
    DEFAULT_PULL_BATCH_BYTES, DEFAULT_PULL_BATCH_SIZE, MessageSource, PullError, PullRequest,
    PullResult,
};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::NameServer;
use rebalance_runtime::subscription::TagExpression;

use crate::tally::Tally;

/// Starts one pull loop per queue of `topic` (pulls of `pull` messages, else 32); they run
/// until the process exits.
pub async fn start(
    namesrv: &str,
    topic: &str,
    group: &str,
    pull: Option<u32>,
    tally: Arc<Tally>,
) -> Result<(), Box<dyn std::error::Error>> {
    let pull = pull.unwrap_or(DEFAULT_PULL_BATCH_SIZE);
    let name_server = NameServerClient::from_addresses(namesrv)?;
    let brokers = BrokerClient::new(name_server.clone());
    let route = name_server.topic_route(topic).await?;
    let queues = route.subscribable_queues(topic);
    if queues.is_empty() {
        return Err(format!("topic {topic} has no queues").into());
    }
    let group: Arc<str> = Arc::from(group);
    for queue in queues.iter().cloned() {
        tokio::spawn(pull_loop(
            brokers.clone(),
            group.clone(),
            queue,
            pull,
            tally.clone(),
        ));
    }
    Ok(())
}

async fn pull_loop(
    brokers: BrokerClient,
    group: Arc<str>,
    queue: MessageQueue,
    pull: u32,
    tally: Arc<Tally>,
) {
    let mut offset = 0;
    loop {
        let request = PullRequest::new(group.clone(), queue.clone(), offset, TagExpression::all())
            .with_limits(pull, DEFAULT_PULL_BATCH_BYTES);
        match brokers.pull(&request).await {
            Ok(PullResult::Found {
                messages,
                next_offset,
                ..
            }) => {
                for m in &messages {
                    tally.record(queue.queue_id, m.queue_offset(), m.body().len());
                }
                offset = next_offset;
            }
            Ok(
                PullResult::NoNewMessage { next_offset } | PullResult::OffsetMoved { next_offset },
            ) => offset = next_offset,
            Ok(other) => {
                eprintln!("raw pull loop: {queue:?}: unexpected answer {other:?}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e @ (PullError::Throttled(_) | PullError::Remote(_))) => {
                eprintln!("raw pull loop: {queue:?}: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => {
                eprintln!("raw pull loop: {queue:?}: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}
