//! A consumer group on the in-memory cluster: members join, leave and crash, and each prints the
//! queues it is given and takes away, in plain words.
//!
//! `cargo run --example quickstart`
//!
//! Each member runs a stand-in for a pull loop per queue it holds (one "message" every 100 ms),
//! which is the shape a real consumer has: `queues_added` starts a task per lease, the task
//! commits its progress on the lease and stops when the lease is cancelled, and
//! `queues_removed` waits for those tasks, so that their last offsets are committed before the
//! runtime stores them and hands the queues over.
//!
//! The cluster and the consumers run on tokio's paused clock, so the scenario's minutes of
//! simulated time (a crashed member is only noticed when its heartbeats expire, after 120 s)
//! take a moment of real time, and every run prints the same story.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rebalance::runtime::memory::InMemoryCluster;
use rebalance::{
    Consumer, ConsumerHandle, ListenerError, MessageQueue, QueueLease, QueueListener, RemovedQueue,
    StartPosition,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One member: prints what happens to it, and runs a consuming task per queue it holds.
struct Member {
    name: &'static str,
    epoch: Instant,
    /// The consuming task of each held queue. Locked only to insert or take tasks, never
    /// across an `.await`.
    consuming: Mutex<HashMap<MessageQueue, JoinHandle<()>>>,
}

impl Member {
    fn say(&self, what: String) {
        println!(
            "[{:>6.1}s] {:<8} {what}",
            self.epoch.elapsed().as_secs_f64(),
            self.name
        );
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<MessageQueue, JoinHandle<()>>> {
        self.consuming
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A crash takes the consuming tasks down with the process.
    fn crash(&self) {
        for (_, task) in self.tasks().drain() {
            task.abort();
        }
    }
}

fn short(q: &MessageQueue) -> String {
    format!("{}#{}", q.broker_name, q.queue_id)
}

/// Stands in for a pull loop: "consumes" one message every 100 ms from `next`, committing after
/// each, until the queue is taken away.
async fn consume(lease: QueueLease, mut next: i64) {
    // Off the whole seconds at which rounds and offset persistence run, so that no message is
    // committed at the very instant of a persistence: the story is the same on every run.
    let first = Instant::now() + Duration::from_millis(50);
    let mut tick = tokio::time::interval_at(first, Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = lease.cancelled() => return,
            _ = tick.tick() => {
                // ... process message `next` here ...
                next += 1;
                lease.commit(next);
            }
        }
    }
}

#[async_trait]
impl QueueListener for Member {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        let mut started = Vec::new();
        for lease in queues {
            let next = match lease.start_position() {
                StartPosition::Offset(offset) => offset,
                // No stored offset: a real consumer asks the broker for the queue's last (or
                // first) offset, or the one at a time, and commits it at once so that a next
                // owner resumes there. The in-memory cluster has no messages: start at 0.
                _ => {
                    lease.commit(0);
                    0
                }
            };
            started.push(format!("{} from {next}", short(lease.queue())));
            let task = tokio::spawn(consume(lease.clone(), next));
            self.tasks().insert(lease.queue().clone(), task);
        }
        self.say(format!("now consumes {topic}: {}", started.join(", ")));
        Ok(())
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        // Take the tasks out first: the lock is not held while waiting for them.
        let stopping: Vec<JoinHandle<()>> = {
            let mut tasks = self.tasks();
            queues
                .iter()
                .filter_map(|r| tasks.remove(&r.queue))
                .collect()
        };
        for task in stopping {
            // The lease is cancelled: the task commits nothing more and ends.
            let _ = task.await;
        }
        let reason = queues.first().map_or("", |r| r.reason.as_str());
        let names: Vec<String> = queues.iter().map(|r| short(&r.queue)).collect();
        self.say(format!("gives up {topic}: {} ({reason})", names.join(", ")));
        Ok(())
    }
}

async fn join(
    cluster: &InMemoryCluster,
    name: &'static str,
    host: u8,
    epoch: Instant,
) -> Result<(ConsumerHandle, Arc<Member>), Box<dyn std::error::Error>> {
    let id = format!("10.0.0.{host}@{name}");
    let member = Arc::new(Member {
        name,
        epoch,
        consuming: Mutex::default(),
    });
    let consumer = Consumer::builder("orders-group")
        .subscribe("Orders")
        .strategy_named("averagely", &Default::default())?
        .cluster(cluster.client(id.as_str()))
        .listener(member.clone())
        .start()
        .await?;
    Ok((consumer, member))
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("Orders", 2, 4); // broker-0 and broker-1, 4 queues each
    let epoch = Instant::now();
    let pause = |secs| tokio::time::sleep(Duration::from_secs(secs));

    println!("Topic Orders has 8 queues on 2 brokers; the group divides them with `averagely`.");
    println!("Each member consumes one message per queue every 100 ms and commits as it goes.");
    println!("Members hand queues over concurrently, as Java's do: the next owner may start");
    println!("before the last one has stopped (`exclusive_hand_off(true)` makes it wait).\n");
    let (alice, _) = join(&cluster, "alice", 1, epoch).await?;
    // An owned snapshot, unlike a `watch()` borrow, which must never be held across an await.
    let first = alice
        .wait_for_assignment(|a| a.len() == 8, Duration::from_secs(10))
        .await?;
    println!(
        "  (alice holds all {} queues after round {})",
        first.len(),
        first.round
    );
    pause(5).await;
    let (bob, _) = join(&cluster, "bob", 2, epoch).await?;
    pause(5).await;
    let (carol, carols_tasks) = join(&cluster, "carol", 3, epoch).await?;
    pause(5).await;

    println!(
        "\nbob leaves cleanly: he stops consuming, his last offsets are stored, he unregisters."
    );
    bob.shutdown().await;
    pause(5).await;

    println!(
        "\ncarol crashes: nobody is told; the directory expires her after 120 s of silence, and"
    );
    println!(
        "her queues resume from the offsets stored last (up to 5 s old: some messages again)."
    );
    carol.abort();
    carols_tasks.crash();
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
