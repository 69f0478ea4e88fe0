//! (a) Ours: the `PushConsumer` over the transport's `BrokerClient` (pull, buffer, 20 workers,
//! commits, the rebalance), with a no-op listener.

use std::sync::Arc;

use async_trait::async_trait;
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message, PushConsumer,
    PushConsumerHandle,
};
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::config::ConsumeFrom;

use crate::tally::Tally;

struct NoOp(Arc<Tally>);

#[async_trait]
impl ConcurrentListener for NoOp {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        for m in messages {
            self.0
                .record(m.queue().queue_id, m.queue_offset(), m.body().len());
        }
        ConsumeResult::Success
    }
}

/// Starts our push consumer (default options, or the given messages per listener call and per
/// pull); it runs until the process exits.
pub async fn start(
    namesrv: &str,
    topic: &str,
    group: &str,
    (batch, pull): (Option<u32>, Option<u32>),
    tally: Arc<Tally>,
) -> Result<PushConsumerHandle, Box<dyn std::error::Error>> {
    let mut options = ConsumeOptions::default();
    if let Some(batch) = batch {
        options.consume_batch_size = batch as usize;
    }
    if let Some(pull) = pull {
        options.pull_batch_size = pull;
    }
    let name_server = NameServerClient::from_addresses(namesrv)?;
    let brokers = BrokerClient::new(name_server.clone());
    let directory = brokers.clone();
    let consumer = PushConsumer::builder(group)
        .subscribe(topic)
        .configure(|c| {
            c.consume_from(ConsumeFrom::FirstOffset)
                .name_server(Arc::new(name_server))
                .directory(Arc::new(directory.clone()))
                .offset_store(Arc::new(directory.clone()))
                .locker(Arc::new(directory))
        })
        .options(options)
        .source(Arc::new(brokers))
        .concurrently(Arc::new(NoOp(tally)))
        .start()
        .await?;
    Ok(consumer)
}
