//! Runs real runtime clients on the in-memory cluster, on tokio's paused clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::ClusterMessages;
use rebalance_consume::{PopOptions, PushConsumer, PushConsumerError, PushConsumerHandle};
use rebalance_core::route::perm;
use rebalance_core::{BrokerData, ClientId, MessageQueue, QueueData, TopicRoute};
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::subscription::retry_topic;
use rebalance_runtime::{
    Consumer, ConsumerHandle, ListenerError, MemberOptions, QueueLease, QueueListener,
    RemovalReason, RemovedQueue, allocation::Allocation, config::ConsumeFrom, config::Intervals,
};
use tokio::time::Instant;

use super::scenario::{Action, Event};
use super::shared_plans::SharedPlans;
use super::traffic::{self, MessageOutcome, Traffic};

/// The consumer group of every simulated client.
pub const GROUP: &str = "sim-group";

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
    /// Every client's settle window: `None` for the consumers' default (adaptive,
    /// `Intervals::adaptive_settle`), else a fixed `Intervals::membership_settle` (0: none, as
    /// the Java client).
    pub settle: Option<Duration>,
    /// Messages: produced until `duration`, consumed by push consumers until `duration` plus
    /// the drain time. `None`: clients only rebalance.
    pub traffic: Option<Traffic>,
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
    /// When it started (simulated ms).
    pub started_ms: u64,
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
    /// Every queue of every topic (with POP, each broker's queues of a topic as one shared
    /// queue, id -1, which every member holds).
    pub queues: BTreeSet<MessageQueue>,
    /// The simulated duration in ms (with the drain time when messages are carried).
    pub duration_ms: u64,
    /// What the messages did, when the simulation carried messages.
    pub messages: Option<MessageOutcome>,
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
    /// A client carrying messages could not start.
    #[error("client {0} could not start: {1}")]
    StartPush(usize, PushConsumerError),
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

/// A simulated client: a consumer that only rebalances, or a push consumer.
#[derive(Clone)]
enum Member {
    Plain(ConsumerHandle),
    Push {
        handle: PushConsumerHandle,
        /// Set before a clean shutdown: the queues removed from then on are removed for it.
        leaving: Arc<AtomicBool>,
        /// Set before a crash: nothing is recorded from then on (a crashed client stops
        /// without a word; found by review: its last empty assignment was recorded as every
        /// queue removed, reassigned).
        crashed: Arc<AtomicBool>,
    },
}

impl Member {
    fn consumer(&self) -> &ConsumerHandle {
        match self {
            Member::Plain(handle) => handle,
            Member::Push { handle, .. } => handle.consumer(),
        }
    }

    async fn shutdown(&self) {
        match self {
            Member::Plain(handle) => handle.shutdown().await,
            Member::Push {
                handle, leaving, ..
            } => {
                leaving.store(true, Ordering::SeqCst);
                handle.shutdown().await;
            }
        }
    }

    fn abort(&self) {
        match self {
            Member::Plain(handle) => handle.abort(),
            Member::Push {
                handle, crashed, ..
            } => {
                crashed.store(true, Ordering::SeqCst);
                handle.abort();
            }
        }
    }
}

struct SimClient {
    id: ClientId,
    handle: Member,
    status: Status,
    started_ms: u64,
    stopped_ms: Option<u64>,
}

/// The running client `index`, or the error naming the event.
fn running(
    clients: &mut [Option<SimClient>],
    index: usize,
    at: Duration,
) -> Result<&mut SimClient, SimError> {
    let count = clients.iter().filter(|c| c.is_some()).count();
    clients
        .get_mut(index)
        .and_then(Option::as_mut)
        .filter(|c| c.status == Status::Running)
        .ok_or(SimError::NoSuchClient { at, index, count })
}

/// What happens at a moment of the run: an initial client starts, or a scripted event.
enum Step<'e> {
    Start(usize),
    Event(&'e Event),
}

/// Runs the simulation on a fresh paused-clock runtime.
pub fn simulate(config: &Config) -> Result<Outcome, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    runtime.block_on(run(config))
}

/// What every client of a run shares.
struct Run<'a> {
    config: &'a Config,
    /// The configuration's allocation; a strategy answers from one plan per distinct input
    /// ([`SharedPlans`]).
    allocation: Allocation,
    cluster: InMemoryCluster,
    topics: Vec<String>,
    epoch: Instant,
    log: Log,
    messages: Option<traffic::Recorder>,
}

impl Run<'_> {
    /// The settings every client has, whether it carries messages or not.
    fn configure(&self, id: &ClientId, member: MemberOptions) -> MemberOptions {
        member
            .client_id(id.clone())
            .allocation(self.allocation.clone())
            .intervals(match self.config.settle {
                None => Intervals::default(),
                Some(fixed) => Intervals {
                    membership_settle: fixed,
                    adaptive_settle: None,
                    ..Intervals::default()
                },
            })
            .cluster(self.cluster.client(id.clone()))
    }

    fn recorder(&self, id: &ClientId) -> Recorder {
        Recorder {
            client: id.clone(),
            epoch: self.epoch,
            log: self.log.clone(),
        }
    }

    /// Starts client `index`.
    async fn start(&self, index: usize) -> Result<SimClient, SimError> {
        let id = client_id(index);
        let handle = match (self.config.traffic, &self.messages) {
            (Some(traffic), Some(messages)) => {
                self.start_push(index, &id, traffic, messages).await?
            }
            _ => {
                let mut builder = Consumer::builder(GROUP)
                    .configure(|member| self.configure(&id, member))
                    .listener(Arc::new(self.recorder(&id)));
                for topic in &self.topics {
                    builder = builder.subscribe(topic.as_str());
                }
                let handle = builder
                    .start()
                    .await
                    .map_err(|e| SimError::Start(index, e))?;
                Member::Plain(handle)
            }
        };
        Ok(SimClient {
            id,
            handle,
            status: Status::Running,
            started_ms: self.epoch.elapsed().as_millis() as u64,
            stopped_ms: None,
        })
    }

    /// Starts a push consumer: from the first offset of a queue nobody committed (so that no
    /// message sent before the first owner is skipped), with the listener of the run.
    async fn start_push(
        &self,
        index: usize,
        id: &ClientId,
        traffic: Traffic,
        messages: &traffic::Recorder,
    ) -> Result<Member, SimError> {
        let listener = Arc::new(messages.listener(id.clone(), traffic.consume_time));
        let mut builder = PushConsumer::builder(GROUP)
            .configure(|member| {
                self.configure(id, member)
                    .consume_from(ConsumeFrom::FirstOffset)
                    .exclusive_hand_off(traffic.exclusive_hand_off)
            })
            .source(Arc::new(self.cluster.client(id.clone())));
        for topic in &self.topics {
            builder = builder.subscribe(topic.as_str());
        }
        if let Some(invisible_time) = traffic.pop {
            // After `configure`: POP sets the allocation (server-side assignment).
            let options = PopOptions::default().with_invisible_time(invisible_time);
            builder = builder.pop(self.cluster.client(id.clone()), options);
        }
        builder = if traffic.orderly {
            builder.orderly(listener)
        } else {
            builder.concurrently(listener)
        };
        let handle = builder
            .start()
            .await
            .map_err(|e| SimError::StartPush(index, e))?;
        let leaving = Arc::new(AtomicBool::new(false));
        let crashed = Arc::new(AtomicBool::new(false));
        tokio::spawn(record_assignments(
            handle.consumer().watch(),
            self.recorder(id),
            leaving.clone(),
            crashed.clone(),
        ));
        Ok(Member::Push {
            handle,
            leaving,
            crashed,
        })
    }
}

/// Records a push consumer's queue changes from its assignment (its queue listener is the
/// push consumer's own): each change as the callbacks it stands for, removals first; a removal
/// is `shutdown` once the client is leaving, `reassigned` otherwise (an ordered queue whose
/// lock was lost shows as reassigned too).
async fn record_assignments(
    mut assignments: tokio::sync::watch::Receiver<Arc<rebalance_runtime::assignment::Assignment>>,
    recorder: Recorder,
    leaving: Arc<AtomicBool>,
    crashed: Arc<AtomicBool>,
) {
    let mut held: BTreeMap<String, BTreeSet<MessageQueue>> = BTreeMap::new();
    loop {
        if crashed.load(Ordering::SeqCst) {
            return;
        }
        let now: BTreeMap<String, BTreeSet<MessageQueue>> = assignments
            .borrow_and_update()
            .queues
            .iter()
            .map(|(topic, queues)| (topic.clone(), queues.iter().cloned().collect()))
            .collect();
        let reason = if leaving.load(Ordering::SeqCst) {
            RemovalReason::Shutdown
        } else {
            RemovalReason::Reassigned
        };
        let none = BTreeSet::new();
        for (topic, queues) in &held {
            let gone: Vec<MessageQueue> = queues
                .difference(now.get(topic).unwrap_or(&none))
                .cloned()
                .collect();
            if !gone.is_empty() {
                recorder.push(Change::Removed(reason), topic, gone);
            }
        }
        for (topic, queues) in &now {
            let new: Vec<MessageQueue> = queues
                .difference(held.get(topic).unwrap_or(&none))
                .cloned()
                .collect();
            if !new.is_empty() {
                recorder.push(Change::Added, topic, new);
            }
        }
        held = now;
        if assignments.changed().await.is_err() {
            break;
        }
    }
}

async fn run(config: &Config) -> Result<Outcome, SimError> {
    let cluster = InMemoryCluster::new();
    let topics: Vec<String> = (0..config.topics).map(|t| format!("topic-{t}")).collect();
    let pop = config.traffic.is_some_and(|t| t.pop.is_some());
    let mut queues = BTreeSet::new();
    for topic in &topics {
        let route = route(config.queues, config.brokers);
        if pop {
            // What POP members hold: each broker's queues as one shared queue, id -1.
            let brokers: BTreeSet<_> = route
                .subscribable_queues(topic)
                .into_iter()
                .map(|q| q.broker_name)
                .collect();
            queues.extend(
                brokers
                    .into_iter()
                    .map(|b| MessageQueue::new(topic.as_str(), b, -1)),
            );
        } else {
            queues.extend(route.subscribable_queues(topic));
        }
        cluster.set_route(topic, route);
    }
    if config.traffic.is_some() {
        // A broker creates the group's retry topic, with one queue, at the group's first
        // heartbeat: one queue on each broker, shared by the group like any topic.
        let retry = retry_topic(GROUP);
        let brokers = i32::try_from(config.brokers).unwrap_or(i32::MAX);
        let route = route(brokers, config.brokers);
        queues.extend(route.subscribable_queues(&retry));
        cluster.set_route(&retry, route);
    }
    let epoch = Instant::now();
    let allocation = match &config.allocation {
        Allocation::Strategy(strategy) => Allocation::Strategy(Arc::new(SharedPlans::new(
            strategy.clone(),
            cluster.route_share(),
        ))),
        assignor => assignor.clone(),
    };
    let run = Run {
        config,
        allocation,
        cluster: cluster.clone(),
        topics: topics.clone(),
        epoch,
        log: Arc::default(),
        messages: config
            .traffic
            .map(|t| traffic::Recorder::new(epoch, t.fail_every)),
    };
    // Initial clients keep the indices 0..consumers whenever they start; joiners come after.
    let mut clients: Vec<Option<SimClient>> = (0..config.consumers).map(|_| None).collect();

    if let (Some(traffic), Some(messages)) = (config.traffic, &run.messages) {
        let produce =
            messages
                .clone()
                .produce(cluster.clone(), topics.clone(), traffic, config.duration);
        tokio::spawn(produce);
    }

    let mut rng = SplitMix64::new(config.seed);
    let mut jitters: Vec<Duration> = (0..config.consumers)
        .map(|_| Duration::from_millis(rng.next_u64() % 500))
        .collect();
    jitters.sort();
    // One timeline: the initial clients' starts (index in start order) and the events, each at
    // its time, starts first at the same instant; nothing after `duration`.
    let mut steps: Vec<(Duration, Step<'_>)> = jitters
        .into_iter()
        .enumerate()
        .map(|(index, at)| (at, Step::Start(index)))
        .chain(config.events.iter().map(|e| (e.at, Step::Event(e))))
        .collect();
    steps.sort_by_key(|(at, step)| (*at, matches!(step, Step::Event(_))));
    for (at, step) in steps {
        if at > config.duration {
            break;
        }
        tokio::time::sleep_until(epoch + at).await;
        let now_ms = epoch.elapsed().as_millis() as u64;
        let event = match step {
            Step::Start(index) => {
                clients[index] = Some(run.start(index).await?);
                continue;
            }
            Step::Event(event) => event,
        };
        match event.action {
            Action::Join => {
                let index = clients.len();
                clients.push(Some(run.start(index).await?));
            }
            Action::Leave(i) => {
                let c = running(&mut clients, i, event.at)?;
                // In its own task: a shutdown waits for the batches in the listener, and the
                // next events must not wait for it (found by review: they ran late, while the
                // scenario line printed their scripted times).
                let member = c.handle.clone();
                tokio::spawn(async move { member.shutdown().await });
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
    // With messages, consumers go on for the drain time after production stopped.
    let end = config.duration + config.traffic.map_or(Duration::ZERO, |t| t.drain);
    tokio::time::sleep_until(epoch + end).await;
    let duration_ms = end.as_millis() as u64;
    let mut records = std::mem::take(&mut *run.log.lock().unwrap_or_else(PoisonError::into_inner));
    // A leave's shutdown may wait past the end (for a batch in progress): the run ends at
    // `duration` all the same.
    records.retain(|r| r.t_ms <= duration_ms);
    let messages = run.messages.as_ref().map(|m| {
        let dead = cluster.dead_letters(GROUP);
        m.outcome(dead.iter().map(|d| d.msg_id().to_string()).collect())
    });
    let clients = clients
        .into_iter()
        .enumerate()
        // An initial client whose start fell after the end never ran.
        .filter_map(|(index, c)| c.map(|c| (index, c)))
        .map(|(index, c)| ClientEnd {
            owned: match c.status {
                Status::Running => c.handle.consumer().assignment().iter().cloned().collect(),
                _ => Vec::new(),
            },
            rounds: c.handle.consumer().rounds().borrow().round,
            client: c.id,
            index,
            status: c.status,
            started_ms: c.started_ms,
            stopped_ms: c.stopped_ms,
        })
        .collect();
    Ok(Outcome {
        records,
        clients,
        queues,
        duration_ms,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::report::summarize;
    use crate::sim::scenario::parse_events;
    use rebalance_core::strategy::{Params, StrategyRegistry};

    fn config(consumers: usize, events: &str, duration: Duration) -> Config {
        Config {
            allocation: Allocation::Strategy(
                StrategyRegistry::default()
                    .build("averagely", &Params::new())
                    .unwrap(),
            ),
            topics: 1,
            queues: 4,
            brokers: 1,
            consumers,
            events: parse_events(events).unwrap(),
            duration,
            seed: 7,
            settle: Some(Duration::ZERO),
            traffic: None,
        }
    }

    /// When each initial client starts (the seeded jitter, in start order).
    fn starts(consumers: usize, seed: u64) -> Vec<u64> {
        let mut rng = SplitMix64::new(seed);
        let mut at: Vec<u64> = (0..consumers).map(|_| rng.next_u64() % 500).collect();
        at.sort();
        at
    }

    #[test]
    fn an_event_before_a_client_started_does_not_find_it() {
        let at = starts(2, 7);
        assert!(at[1] > 0, "{at:?}");
        let early = format!("crash:1@{}ms", at[1] - 1);
        match simulate(&config(2, &early, Duration::from_secs(5))) {
            Err(SimError::NoSuchClient { index: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
        let on_time = format!("crash:1@{}ms", at[1]);
        let outcome = simulate(&config(2, &on_time, Duration::from_secs(5))).unwrap();
        assert_eq!(outcome.clients[1].status, Status::Crashed);
        assert_eq!(outcome.clients[1].stopped_ms, Some(at[1]));
    }

    #[test]
    fn a_joiner_before_the_last_start_still_takes_the_next_index() {
        let outcome = simulate(&config(3, "join@0s", Duration::from_secs(5))).unwrap();
        let ids: Vec<&str> = outcome.clients.iter().map(|c| c.client.as_str()).collect();
        let expected: Vec<ClientId> = (0..4).map(client_id).collect();
        assert_eq!(
            ids,
            expected.iter().map(ClientId::as_str).collect::<Vec<_>>()
        );
        assert!(outcome.clients.iter().all(|c| c.status == Status::Running));
    }

    fn with_messages(mut config: Config, consume_time: Duration) -> Config {
        config.traffic = Some(Traffic {
            rate: 2.0,
            consume_time,
            fail_every: None,
            orderly: false,
            exclusive_hand_off: false,
            drain: Duration::from_secs(10),
            pop: None,
        });
        config
    }

    /// A leave whose shutdown waits for a batch in the listener does not hold the next events
    /// back (found by review: the crash scripted at the same instant came 5 s late).
    #[test]
    fn a_leave_waiting_for_a_batch_holds_no_later_event_back() {
        let config = with_messages(
            config(3, "leave:0@10s,crash:1@10s", Duration::from_secs(20)),
            Duration::from_secs(5),
        );
        let outcome = simulate(&config).unwrap();
        assert_eq!(outcome.clients[0].status, Status::Left);
        assert_eq!(outcome.clients[1].status, Status::Crashed);
        assert_eq!(outcome.clients[1].stopped_ms, Some(10_000));
    }

    /// A crashed push member stops without a word: no removal is recorded for it (found by
    /// review: its last, empty, assignment was recorded as every queue removed, reassigned).
    #[test]
    fn a_crashed_push_member_records_no_removal() {
        let config = with_messages(
            config(2, "crash:1@5s", Duration::from_secs(10)),
            Duration::from_millis(10),
        );
        let outcome = simulate(&config).unwrap();
        assert_eq!(outcome.clients[1].status, Status::Crashed);
        let id = outcome.clients[1].client.clone();
        assert!(
            outcome
                .records
                .iter()
                .filter(|r| r.client == id)
                .all(|r| matches!(r.change, Change::Added)),
            "{:?}",
            outcome.records
        );
    }

    #[test]
    fn nothing_happens_after_the_end() {
        let at = starts(3, 7);
        let end = Duration::from_millis(at[1]);
        let outcome = simulate(&config(3, "", end)).unwrap();
        assert_eq!(
            outcome.clients.len(),
            2,
            "the third start falls after the end"
        );
        assert!(outcome.records.iter().all(|r| r.t_ms <= at[1]));
        let nothing = simulate(&config(3, "", Duration::ZERO)).unwrap();
        let s = summarize(&nothing);
        assert_eq!(
            (s.moves, s.unowned_queue_ms, s.double_owned_queue_ms),
            (0, 0, 0)
        );
    }
}
