//! (d) Ours through the stream: the `StreamConsumer` over the same `BrokerClient` (the push
//! consumer's pull loops, buffer, commits and rebalance, with the stream in the listener's
//! place), each message noted and acknowledged by one loop, as an application drives it.

use std::sync::Arc;

use rebalance_consume::{StreamConsumer, StreamConsumerHandle};
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::config::ConsumeFrom;

use crate::tally::Tally;

/// Starts our stream consumer and the loop draining its stream; they run until the process
/// exits.
pub async fn start(
    namesrv: &str,
    topic: &str,
    group: &str,
    tally: Arc<Tally>,
) -> Result<StreamConsumerHandle, Box<dyn std::error::Error>> {
    let name_server = NameServerClient::from_addresses(namesrv)?;
    let brokers = BrokerClient::new(name_server.clone());
    let directory = brokers.clone();
    let mut stream = StreamConsumer::builder(group)
        .subscribe(topic)
        .configure(|c| {
            c.consume_from(ConsumeFrom::FirstOffset)
                .name_server(Arc::new(name_server))
                .directory(Arc::new(directory.clone()))
                .offset_store(Arc::new(directory.clone()))
                .locker(Arc::new(directory))
        })
        .source(Arc::new(brokers))
        .start()
        .await?;
    let handle = stream.handle().clone();
    tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            tally.record(
                message.queue().queue_id,
                message.queue_offset(),
                message.body().len(),
            );
            message.ack();
        }
    });
    Ok(handle)
}
