//! A consumer group on the in-memory cluster consumes a stream of orders while members join,
//! leave and crash; each member says which queues it is given, and at the end the example
//! counts what was consumed, twice, or never.
//!
//! `cargo run --example quickstart`
//!
//! A member is a [`PushConsumer`]: one pull loop per queue it holds, a buffer with flow
//! control, a listener called for each message, failed messages sent back for redelivery, the
//! commit offset kept for the next owner, and a clean hand-off when a queue moves. The
//! application writes only the listener.
//!
//! The cluster and the consumers run on tokio's paused clock, so the scenario's minutes of
//! simulated time (a crashed member is only noticed when its heartbeats expire, after 120 s)
//! take a moment of real time, and every run prints the same story.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance::runtime::consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer, PushConsumerHandle,
};
use rebalance::runtime::memory::{ClusterMessages, InMemoryCluster, OutgoingMessage};
use tokio::time::Instant;

/// Every member's deliveries, by message id.
type Deliveries = Arc<Mutex<HashMap<String, usize>>>;

/// The application: what each member does with an order.
struct Orders {
    deliveries: Deliveries,
}

#[async_trait]
impl ConcurrentListener for Orders {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let mut deliveries = self.deliveries.lock().unwrap_or_else(|e| e.into_inner());
        for order in messages {
            *deliveries.entry(order.msg_id().to_string()).or_default() += 1;
        }
        ConsumeResult::Success
    }
}

/// Starts a member of `orders-group`.
async fn join(
    cluster: &InMemoryCluster,
    name: &'static str,
    deliveries: &Deliveries,
    epoch: Instant,
) -> Result<PushConsumerHandle, Box<dyn std::error::Error>> {
    let consumer = PushConsumer::builder("orders-group")
        .cluster(cluster.client(format!("10.0.0.1@{name}")))
        .subscribe("Orders")
        .concurrently(Arc::new(Orders {
            deliveries: deliveries.clone(),
        }))
        .start()
        .await?;
    tokio::spawn(say_assignments(name, consumer.clone(), epoch));
    Ok(consumer)
}

/// Prints a member's queues each time they change.
async fn say_assignments(name: &'static str, consumer: PushConsumerHandle, epoch: Instant) {
    let mut assignment = consumer.consumer().watch();
    drop(consumer); // a watch does not keep the member running
    while assignment.changed().await.is_ok() {
        let queues: Vec<String> = assignment
            .borrow()
            .iter()
            .filter(|q| q.topic.as_ref() == "Orders")
            .map(|q| format!("{}#{}", q.broker_name, q.queue_id))
            .collect();
        let at = epoch.elapsed().as_secs_f64();
        let queues = if queues.is_empty() {
            "nothing".to_string()
        } else {
            queues.join(" ")
        };
        println!("[{at:>6.1}s] {name:<6} consumes {queues}");
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("Orders", 2, 4); // broker-0 and broker-1, 4 queues each
    let deliveries = Deliveries::default();
    let epoch = Instant::now();
    let pause = |secs| tokio::time::sleep(Duration::from_secs(secs));

    println!("Topic Orders has 8 queues on 2 brokers; 100 orders a second arrive for 30 s.\n");
    let alice = join(&cluster, "alice", &deliveries, epoch).await?;
    pause(1).await;
    let producer = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..3000 {
                let receipt = cluster.send("Orders", OutgoingMessage::new(format!("order {i}")));
                sent.extend(receipt.map(|r| r.msg_id));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            sent
        })
    };
    pause(5).await;
    let bob = join(&cluster, "bob", &deliveries, epoch).await?;
    pause(5).await;
    let carol = join(&cluster, "carol", &deliveries, epoch).await?;
    pause(5).await;
    println!("\nbob leaves cleanly: his last batches finish and are committed before he goes.");
    bob.shutdown().await;
    pause(5).await;
    println!("\ncarol crashes: her queues wait for her heartbeats to expire (120 s), then");
    println!("resume from her last stored offsets: what she consumed after them comes again.");
    println!("(Hand-offs at joins repeat a few orders too: the next owner may start before the");
    println!("last one stopped; `exclusive_hand_off(true)` makes it wait.)");
    carol.abort();
    let sent = producer.await?;
    pause(150).await;
    alice.shutdown().await;

    let deliveries = deliveries.lock().unwrap_or_else(|e| e.into_inner());
    let lost = sent
        .iter()
        .filter(|id| !deliveries.contains_key(*id))
        .count();
    let twice: usize = deliveries.values().map(|n| n - 1).sum();
    println!(
        "\n{} orders sent, {} consumed, {twice} of them more than once, {lost} lost.",
        sent.len(),
        deliveries.len()
    );
    Ok(())
}
