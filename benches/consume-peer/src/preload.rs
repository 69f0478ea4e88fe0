//! The workload: a topic of `queues` queues on the test broker, each queue holding exactly
//! `per_queue` messages of `body_size` bytes (offsets `0..per_queue`), sent with SEND_MESSAGE by
//! several senders at once.

use std::time::Instant;

use bytes::Bytes;
use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::unique_id;
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{Admin, Message, MessageSender, NameServerClient};
use rebalance_consume::property;

/// Senders per queue (requests in flight: queues × this).
const SENDERS_PER_QUEUE: u64 = 8;

/// Creates `topic` and fills it; returns how long the sending took.
pub async fn preload(
    cluster: &TestCluster,
    topic: &str,
    queues: u32,
    per_queue: u64,
    body_size: usize,
) -> Result<std::time::Duration, Box<dyn std::error::Error>> {
    let queue_count = i32::try_from(queues)?;
    let route = cluster.create_topic(topic, queue_count).await?;
    let broker = route
        .queue_datas
        .first()
        .map(|q| q.broker_name.clone())
        .ok_or("the topic's route has no broker")?;
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr())?;
    let sender = MessageSender::new(name_server, "bench-preload");
    let body = Bytes::from(vec![b'x'; body_size]);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for queue_id in 0..queue_count {
        for part in 0..SENDERS_PER_QUEUE {
            let count =
                per_queue / SENDERS_PER_QUEUE + u64::from(part < per_queue % SENDERS_PER_QUEUE);
            let sender = sender.clone();
            let queue = MessageQueue::new(topic, broker.as_str(), queue_id);
            let body = body.clone();
            tasks.spawn(async move {
                for _ in 0..count {
                    // A unique id, as a Java producer (and `rebalance send`) gives each message.
                    let message =
                        Message::new(body.clone()).with_property(property::UNIQ_KEY, unique_id());
                    sender.send(&queue, &message).await?;
                }
                Ok::<_, rebalance_runtime::RemoteError>(())
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let took = started.elapsed();
    let admin = Admin::new(cluster.remoting());
    let addr = cluster.broker_addr(&broker)?;
    for queue_id in 0..queue_count {
        let max = admin.max_offset(&addr, topic, queue_id).await?;
        if u64::try_from(max).ok() != Some(per_queue) {
            return Err(format!("queue {queue_id} holds {max} messages, not {per_queue}").into());
        }
    }
    Ok(took)
}
