//! A consumer group on the in-memory cluster: members join, leave and crash, and each prints the
//! queues it is given and takes away, in plain words.
//!
//! `cargo run --example quickstart`
//!
//! The cluster and the consumers run on tokio's paused clock, so the scenario's minutes of
//! simulated time (a crashed member is only noticed when its heartbeats expire, after 120 s)
//! take a moment of real time, and every run prints the same story.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance::runtime::memory::InMemoryCluster;
use rebalance::runtime::{ListenerError, StartPosition};
use rebalance::{Consumer, ConsumerHandle, MessageQueue, QueueLease, QueueListener, RemovedQueue};
use tokio::time::Instant;

/// Prints what happens to one member.
struct Narrator {
    name: &'static str,
    epoch: Instant,
}

impl Narrator {
    fn say(&self, what: String) {
        println!(
            "[{:>6.1}s] {:<8} {what}",
            self.epoch.elapsed().as_secs_f64(),
            self.name
        );
    }
}

fn describe(queues: impl Iterator<Item = MessageQueue>) -> String {
    let names: Vec<String> = queues
        .map(|q| format!("{}#{}", q.broker_name, q.queue_id))
        .collect();
    format!("{} queue(s): {}", names.len(), names.join(" "))
}

#[async_trait]
impl QueueListener for Narrator {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        let start = match queues.first().map(QueueLease::start_position) {
            Some(StartPosition::Offset(o)) => format!("resuming at offset {o}"),
            _ => "starting from the latest message".to_string(),
        };
        let what = describe(queues.iter().map(|l| l.queue().clone()));
        self.say(format!("now consumes {topic} {what} ({start})"));
        // A real consumer would spawn a pull loop per lease here, stop it when
        // `lease.cancelled()` completes, and report progress with `lease.commit(offset)`.
        for lease in queues {
            lease.commit(100 + i64::from(lease.queue().queue_id));
        }
        Ok(())
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        let reason = queues.first().map_or("", |r| r.reason.as_str());
        let what = describe(queues.iter().map(|r| r.queue.clone()));
        self.say(format!("gives up {topic} {what} ({reason})"));
        Ok(())
    }
}

async fn join(
    cluster: &InMemoryCluster,
    name: &'static str,
    epoch: Instant,
) -> Result<ConsumerHandle, Box<dyn std::error::Error>> {
    let id = format!("10.0.0.{}@{name}", name.len());
    let consumer = Consumer::builder("orders-group")
        .client_id(id.as_str())
        .subscribe("Orders")
        .strategy_named("averagely", &Default::default())?
        .cluster(cluster.client(id.as_str()))
        .listener(Arc::new(Narrator { name, epoch }))
        .start()
        .await?;
    Ok(consumer)
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("Orders", 2, 4); // broker-0 and broker-1, 4 queues each
    let epoch = Instant::now();
    let pause = |secs| tokio::time::sleep(Duration::from_secs(secs));

    println!("Topic Orders has 8 queues on 2 brokers; the group divides them with `averagely`.\n");
    let alice = join(&cluster, "alice", epoch).await?;
    pause(5).await;
    let bob = join(&cluster, "bob", epoch).await?;
    pause(5).await;
    let carol = join(&cluster, "carol", epoch).await?;
    pause(5).await;

    println!("\nbob leaves cleanly: he releases his queues and unregisters.");
    bob.shutdown().await;
    pause(5).await;

    println!("\ncarol crashes: nobody is told; the directory expires her after 120 s of silence.");
    carol.abort();
    pause(150).await;

    println!("\nalice shuts down.");
    alice.shutdown().await;
    println!("\nOffsets stored for the group:");
    for broker in ["broker-0", "broker-1"] {
        for id in 0..4 {
            let queue = MessageQueue::new("Orders", broker, id);
            if let Some(offset) = cluster.offset("orders-group", &queue) {
                println!("  {broker}#{id}: {offset}");
            }
        }
    }
    Ok(())
}
