//! The workload: a topic of `queues` queues on the test broker, each queue holding exactly
//! `per_queue` messages of `body_size` bytes (offsets `0..per_queue`), sent with SEND_MESSAGE by
//! several senders at once.

use std::time::{Duration, Instant};

use bytes::Bytes;
use rebalance_consume::property;
use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::unique_id;
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{
    Admin, ClientConfig, Message, MessageSender, NameServerClient, RemotingClient, SendError,
};
use rebalance_runtime::RemoteError;

/// Senders per queue (requests in flight: queues × this).
const SENDERS_PER_QUEUE: u64 = 8;

/// How long one send may take before it counts as lost. A lost send may still have been stored,
/// so it is not sent again at once: the queues are counted at the end and topped up.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The broker's "busy, flow control" refusal (`SYSTEM_BUSY`): nothing stored, sent again.
const SYSTEM_BUSY: i32 = 2;

/// Rounds of counting and topping up the queues after lost sends.
const TOP_UP_ROUNDS: usize = 10;

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
    let remoting = RemotingClient::new(ClientConfig {
        request_timeout: SEND_TIMEOUT,
        ..ClientConfig::default()
    });
    let name_server = NameServerClient::new(remoting, &cluster.namesrv_addr())?;
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
                    send_one(&sender, &queue, &body).await?;
                }
                Ok::<_, SendError>(())
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    // Count each queue; send what lost sends did not store.
    let admin = Admin::new(cluster.remoting());
    let addr = cluster.broker_addr(&broker)?;
    for queue_id in 0..queue_count {
        let queue = MessageQueue::new(topic, broker.as_str(), queue_id);
        let mut rounds = 0;
        loop {
            let max = u64::try_from(admin.max_offset(&addr, topic, queue_id).await?)?;
            if max == per_queue {
                break;
            }
            rounds += 1;
            if max > per_queue || rounds > TOP_UP_ROUNDS {
                return Err(
                    format!("queue {queue_id} holds {max} messages, not {per_queue}").into(),
                );
            }
            for _ in max..per_queue {
                send_one(&sender, &queue, &body).await?;
            }
        }
    }
    Ok(started.elapsed())
}

/// Sends one message to `queue`, again while the broker says it is busy. A send that times out,
/// or whose connection is lost, may or may not have been stored: it is not sent again here (the
/// caller counts the queue). The Rust broker 1.0 sometimes stops answering for 10 s or more
/// while a preload starts, and the transport then closes the connection ("server silent") with
/// every send on it: those are topped up, not a failed bench.
async fn send_one(
    sender: &MessageSender,
    queue: &MessageQueue,
    body: &Bytes,
) -> Result<(), SendError> {
    // A unique id, as a Java producer (and `rebalance send`) gives each message.
    let message = Message::new(body.clone()).with_property(property::UNIQ_KEY, unique_id());
    loop {
        match sender.send(queue, &message).await {
            Err(SendError::Remote(RemoteError::Refused {
                code: SYSTEM_BUSY, ..
            })) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(SendError::Remote(RemoteError::Timeout { .. } | RemoteError::Unreachable(_))) => {
                return Ok(());
            }
            // Never sent because the broker could not be reached (the connection refused, or
            // backing off after its silence): topped up by the caller like the others. A name
            // server's failure is an error of the bench.
            Err(SendError::NotSent {
                broker_at_fault: true,
                ..
            }) => return Ok(()),
            sent => return sent.map(drop),
        }
    }
}
