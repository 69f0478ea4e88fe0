//! Runs real runtime clients on the in-memory cluster, on tokio's paused clock.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::route::perm;
use rebalance_core::{BrokerData, ClientId, MessageQueue, QueueData, TopicRoute};
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    Allocation, Consumer, ConsumerHandle, Intervals, ListenerError, QueueLease, QueueListener,
    RemovalReason, RemovedQueue,
};
use tokio::time::Instant;

use super::scenario::{Action, Event};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Config {
    /// The allocation every client uses: a per-topic strategy or a group assignor.
    pub allocation: Allocation,
    /// Topics `topic-0`, `topic-1`, ….
    pub topics: usize,
    /// Queues per topic.
    pub queues: i32,
    /// Brokers per topic (`room{b mod 3}@broker-{b}`), the queues spread evenly over them.
    pub brokers: usize,
    /// Clients at the start.
    pub consumers: usize,
    /// Scripted events.
    pub events: Vec<Event>,
    /// How long the simulation runs.
    pub duration: Duration,
    /// Seeds the start-up jitter of the initial clients (up to 500 ms each).
    pub seed: u64,
    /// Every client's `Intervals::membership_settle`.
    pub settle: Duration,
}

/// A callback a client received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `queues_added`.
    Added,
    /// `queues_removed`, with the reason.
    Removed(RemovalReason),
}

/// One callback, as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Simulated milliseconds since the start.
    pub t_ms: u64,
    /// The client.
    pub client: ClientId,
    /// Added or removed.
    pub change: Change,
    /// The topic.
    pub topic: String,
    /// The queues.
    pub queues: Vec<MessageQueue>,
}

/// How a client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Still running at the end.
    Running,
    /// Shut down cleanly.
    Left,
    /// Crashed.
    Crashed,
}

impl Status {
    /// The name used in the output.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Left => "left",
            Status::Crashed => "crashed",
        }
    }
}

/// A client at the end of the simulation.
#[derive(Debug, Clone)]
pub struct ClientEnd {
    /// Its id.
    pub client: ClientId,
    /// Its index (start order).
    pub index: usize,
    /// How it ended.
    pub status: Status,
    /// What it holds at the end (nothing unless running).
    pub owned: Vec<MessageQueue>,
    /// How many rounds it ran.
    pub rounds: u64,
    /// When it crashed or left (simulated ms).
    pub stopped_ms: Option<u64>,
}

/// Everything that happened.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every callback, in order.
    pub records: Vec<Record>,
    /// Every client.
    pub clients: Vec<ClientEnd>,
    /// Every queue of every topic.
    pub queues: BTreeSet<MessageQueue>,
    /// The simulated duration in ms.
    pub duration_ms: u64,
}

/// Simulation failures (configuration, not behaviour).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The tokio runtime could not be built.
    #[error("could not build the runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// A client could not start.
    #[error("client {0} could not start: {1}")]
    Start(usize, rebalance_runtime::ConsumerError),
    /// An event names a client that does not exist or has stopped.
    #[error(
        "event at {at:?} names client {index}, which is not running ({count} clients have started)"
    )]
    NoSuchClient {
        /// When.
        at: Duration,
        /// The index named.
        index: usize,
        /// How many clients exist.
        count: usize,
    },
}

type Log = Arc<Mutex<Vec<Record>>>;

struct Recorder {
    client: ClientId,
    epoch: Instant,
    log: Log,
}

impl Recorder {
    fn push(&self, change: Change, topic: &str, queues: Vec<MessageQueue>) {
        let record = Record {
            t_ms: self.epoch.elapsed().as_millis() as u64,
            client: self.client.clone(),
            change,
            topic: topic.to_string(),
            queues,
        };
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }
}

#[async_trait]
impl QueueListener for Recorder {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.push(
            Change::Added,
            topic,
            queues.iter().map(|l| l.queue().clone()).collect(),
        );
        Ok(())
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        // One callback carries one reason in practice; record it per reason to be exact.
        let mut reasons: Vec<RemovalReason> = queues.iter().map(|r| r.reason).collect();
        reasons.dedup();
        for reason in reasons {
            let these = queues
                .iter()
                .filter(|r| r.reason == reason)
                .map(|r| r.queue.clone())
                .collect();
            self.push(Change::Removed(reason), topic, these);
        }
        Ok(())
    }
}

/// The id of client `i`, built like the Java reference timings' ids.
pub use crate::workload::client_id;

/// The route of a topic with `queues` queues over `brokers` brokers named `room{b mod 3}@broker-{b}`.
pub fn route(queues: i32, brokers: usize) -> TopicRoute {
    let brokers = brokers.max(1);
    let names: Vec<String> = (0..brokers)
        .map(|b| format!("room{}@broker-{b}", b % 3))
        .collect();
    let per = queues / brokers as i32;
    let extra = queues % brokers as i32;
    TopicRoute {
        queue_datas: names
            .iter()
            .enumerate()
            .map(|(b, name)| {
                let n = per + i32::from((b as i32) < extra);
                QueueData {
                    broker_name: name.clone(),
                    read_queue_nums: n,
                    write_queue_nums: n,
                    perm: perm::READ | perm::WRITE,
                    topic_sys_flag: 0,
                }
            })
            .collect(),
        broker_datas: names
            .iter()
            .enumerate()
            .map(|(b, name)| BrokerData {
                cluster: "sim".into(),
                broker_name: name.clone(),
                broker_addrs: [(0, format!("sim:{}", 10911 + b))].into(),
            })
            .collect(),
        order_topic_conf: None,
    }
}

/// The seeded generator of the start-up jitter.
pub use crate::rng::SplitMix64;

struct SimClient {
    id: ClientId,
    handle: ConsumerHandle,
    status: Status,
    stopped_ms: Option<u64>,
}

/// The running client `index`, or the error naming the event.
fn running(
    clients: &mut [SimClient],
    index: usize,
    at: Duration,
) -> Result<&mut SimClient, SimError> {
    let count = clients.len();
    clients
        .get_mut(index)
        .filter(|c| c.status == Status::Running)
        .ok_or(SimError::NoSuchClient { at, index, count })
}

/// Runs the simulation on a fresh paused-clock runtime.
pub fn simulate(config: &Config) -> Result<Outcome, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    runtime.block_on(run(config))
}

async fn run(config: &Config) -> Result<Outcome, SimError> {
    let cluster = InMemoryCluster::new();
    let topics: Vec<String> = (0..config.topics).map(|t| format!("topic-{t}")).collect();
    let mut queues = BTreeSet::new();
    for topic in &topics {
        let route = route(config.queues, config.brokers);
        queues.extend(route.subscribable_queues(topic));
        cluster.set_route(topic, route);
    }
    let epoch = Instant::now();
    let log: Log = Arc::default();
    let mut clients: Vec<SimClient> = Vec::new();

    let start = |index: usize| {
        let id = client_id(index);
        let mut builder = Consumer::builder("sim-group")
            .client_id(id.clone())
            .allocation(config.allocation.clone())
            .intervals(Intervals {
                membership_settle: config.settle,
                ..Intervals::default()
            })
            .cluster(cluster.client(id.clone()))
            .listener(Arc::new(Recorder {
                client: id.clone(),
                epoch,
                log: log.clone(),
            }));
        for topic in &topics {
            builder = builder.subscribe(topic.as_str());
        }
        async move {
            let handle = builder
                .start()
                .await
                .map_err(|e| SimError::Start(index, e))?;
            Ok::<_, SimError>(SimClient {
                id,
                handle,
                status: Status::Running,
                stopped_ms: None,
            })
        }
    };

    let mut rng = SplitMix64::new(config.seed);
    let mut jitters: Vec<Duration> = (0..config.consumers)
        .map(|_| Duration::from_millis(rng.next_u64() % 500))
        .collect();
    jitters.sort();
    for jitter in jitters {
        tokio::time::sleep_until(epoch + jitter).await;
        let index = clients.len();
        clients.push(start(index).await?);
    }
    for event in &config.events {
        if event.at > config.duration {
            break;
        }
        tokio::time::sleep_until(epoch + event.at).await;
        let now_ms = epoch.elapsed().as_millis() as u64;
        match event.action {
            Action::Join => {
                let index = clients.len();
                clients.push(start(index).await?);
            }
            Action::Leave(i) => {
                let c = running(&mut clients, i, event.at)?;
                c.handle.shutdown().await;
                c.status = Status::Left;
                c.stopped_ms = Some(now_ms);
            }
            Action::Crash(i) => {
                let c = running(&mut clients, i, event.at)?;
                c.handle.abort();
                c.status = Status::Crashed;
                c.stopped_ms = Some(now_ms);
            }
            Action::NameServerDown => cluster.set_name_server_down(true),
            Action::NameServerUp => cluster.set_name_server_down(false),
        }
    }
    tokio::time::sleep_until(epoch + config.duration).await;
    let records = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    let clients = clients
        .into_iter()
        .enumerate()
        .map(|(index, c)| ClientEnd {
            owned: match c.status {
                Status::Running => c.handle.assignment().iter().cloned().collect(),
                _ => Vec::new(),
            },
            rounds: c.handle.rounds().borrow().round,
            client: c.id,
            index,
            status: c.status,
            stopped_ms: c.stopped_ms,
        })
        .collect();
    Ok(Outcome {
        records,
        clients,
        queues,
        duration_ms: config.duration.as_millis() as u64,
    })
}
