//! The test's producer: SEND_MESSAGE to chosen queues, in one burst or streamed at a rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rebalance::MessageQueue;
use rebalance_rocketmq::NameServerClient;
use rebalance_rocketmq::producer::{Message, MessageSender};
use rebalance_rocketmq::testkit::TestCluster;
use tokio::task::JoinHandle;

/// Sends to the queues of one topic on both brokers.
#[derive(Clone)]
pub struct Producer {
    sender: MessageSender,
    queues: Arc<Vec<MessageQueue>>,
}

impl Producer {
    /// A producer of `topic`.
    pub fn new(cluster: &TestCluster, topic: &str) -> Self {
        let name_server =
            NameServerClient::from_addresses(&cluster.namesrv_addrs()).expect("the name servers");
        Self {
            sender: MessageSender::new(name_server, "e2e-producer"),
            queues: Arc::new(super::queues(topic)),
        }
    }

    /// The queues sent to, in the Java order.
    pub fn queues(&self) -> &[MessageQueue] {
        &self.queues
    }

    /// Sends `body` to `queue`, trying 3 times (a send that fails is not a consumer's loss).
    pub async fn send_to(&self, queue: &MessageQueue, body: &str) {
        let mut last = None;
        for _ in 0..3 {
            match self
                .sender
                .send(queue, &Message::new(body.to_string()))
                .await
            {
                Ok(_) => return,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("cannot send {body} to {queue:?}: {last:?}");
    }

    /// Sends `count` messages `{prefix}-{i}` round robin over the queues; returns their bodies.
    pub async fn send(&self, prefix: &str, count: usize) -> Vec<String> {
        let mut bodies = Vec::with_capacity(count);
        for i in 0..count {
            let body = format!("{prefix}-{i}");
            self.send_to(&self.queues[i % self.queues.len()], &body)
                .await;
            bodies.push(body);
        }
        bodies
    }

    /// Starts sending `{prefix}-{i}` round robin at `per_second` messages a second, until
    /// stopped.
    pub fn stream(&self, prefix: &str, per_second: u32) -> Stream {
        self.stream_sized(prefix, per_second, 0)
    }

    /// [`stream`](Self::stream), each body padded with `x`s to `bytes` (`{prefix}-{i}:xxx…`).
    pub fn stream_sized(&self, prefix: &str, per_second: u32, bytes: usize) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let producer = self.clone();
        let prefix = prefix.to_string();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
            let mut bodies = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                let i = bodies.len();
                let body = padded(format!("{prefix}-{i}"), bytes);
                producer
                    .send_to(&producer.queues[i % producer.queues.len()], &body)
                    .await;
                bodies.push(body);
            }
            bodies
        });
        Stream { stop, task }
    }
}

impl Producer {
    /// Sends `body` to `queue` once; whether the broker stored it.
    pub async fn try_send_to(&self, queue: &MessageQueue, body: &str) -> bool {
        self.sender
            .send(queue, &Message::new(body.to_string()))
            .await
            .is_ok()
    }

    /// [`stream`](Self::stream), for a cluster whose brokers may be down: a message whose send
    /// fails is not sent again and not counted as sent (it is nobody's loss), and the stream
    /// goes on with the next queue.
    pub fn stream_tolerant(&self, prefix: &str, per_second: u32) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let producer = self.clone();
        let prefix = prefix.to_string();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut bodies = Vec::new();
            let mut i = 0usize;
            while !stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                let body = format!("{prefix}-{i}");
                let queue = &producer.queues[i % producer.queues.len()];
                i += 1;
                if producer.try_send_to(queue, &body).await {
                    bodies.push(body);
                }
            }
            bodies
        });
        Stream { stop, task }
    }
}

/// `body`, then `:` and `x`s up to `bytes` when it is shorter.
fn padded(mut body: String, bytes: usize) -> String {
    if body.len() < bytes {
        body.push(':');
        body.extend(std::iter::repeat_n('x', bytes - body.len()));
    }
    body
}

/// A producer streaming messages.
pub struct Stream {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<String>>,
}

impl Stream {
    /// Stops the stream; returns the bodies sent.
    pub async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the producer task")
    }
}
