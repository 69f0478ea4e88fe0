//! Messages in a simulation: the producer's schedule, the listeners that consume with a set
//! time per message and fail some first deliveries, and what they recorded.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::ClusterMessages;
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, OrderlyContext, OrderlyListener,
    OrderlyResult,
};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::memory::InMemoryCluster;
use tokio::time::Instant;

/// How the simulation carries messages (`--produce` and the flags that go with it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    /// Messages per second per topic, spread over its queues by the producer's round robin.
    pub rate: f64,
    /// How long the listener takes per message.
    pub consume_time: Duration,
    /// The first delivery of every Nth message produced fails (`ReconsumeLater`, or `Suspend`
    /// when orderly).
    pub fail_every: Option<u64>,
    /// Ordered consumption (the queues are locked, each consumed in order).
    pub orderly: bool,
    /// The consumers' `exclusive_hand_off`.
    pub exclusive_hand_off: bool,
    /// How long consumers run after production stops, before the count.
    pub drain: Duration,
    /// POP consumption (`--pop`): the brokers assign the queues (every client pops every
    /// queue of each broker) and a popped message stays invisible this long; `None`:
    /// client-side rebalance, pulling.
    pub pop: Option<Duration>,
}

impl Traffic {
    /// The times (from the start) at which each topic gets a message: every `1 / rate` seconds
    /// from 0, before `until`.
    pub fn send_times(&self, until: Duration) -> impl Iterator<Item = Duration> {
        let step = 1e9 / self.rate;
        let until = until.as_nanos() as f64;
        (0u64..)
            .map(move |k| k as f64 * step)
            .take_while(move |ns| *ns < until)
            .map(|ns| Duration::from_nanos(ns as u64))
    }

    /// How many messages the schedule sends in all over `topics` topics before `until`.
    pub fn total(rate: f64, topics: usize, until: Duration) -> f64 {
        (until.as_secs_f64() * rate).ceil() * topics as f64
    }
}

/// One message the producer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    /// Its id.
    pub msg_id: String,
    /// Its topic.
    pub topic: String,
    /// When it was sent (simulated ms since the start).
    pub t_ms: u64,
}

/// One delivery of a message to a listener (recorded when the listener finished with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// When the listener got it (simulated ms since the start).
    pub t_ms: u64,
    /// The client.
    pub client: ClientId,
    /// The message's topic (the original one for a redelivery from the retry topic).
    pub topic: String,
    /// The queue it was pulled from (a retry topic's queue for a redelivery).
    pub queue: MessageQueue,
    /// Its offset in that queue.
    pub offset: i64,
    /// Its id (a redelivery keeps it).
    pub msg_id: String,
    /// How many times it was consumed before and failed.
    pub reconsume_times: i32,
    /// Whether the listener failed it.
    pub failed: bool,
}

/// Everything the messages of a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageOutcome {
    /// Every message sent, in order.
    pub produced: Vec<Produced>,
    /// Every delivery a listener finished, in the order they finished.
    pub deliveries: Vec<Delivery>,
    /// The ids of the messages in the group's dead-letter topic.
    pub dead_lettered: Vec<String>,
    /// Sends the cluster refused (none unless the simulation has a bug: its topics always
    /// have a route).
    pub send_failures: u64,
}

#[derive(Debug, Default)]
struct Record {
    outcome: MessageOutcome,
    /// The production index of each message id.
    index: HashMap<String, u64>,
    /// The ids delivered at least once (started).
    seen: HashSet<String>,
}

/// What the producer and the listeners of one run record, shared between them.
#[derive(Debug, Clone)]
pub struct Recorder {
    epoch: Instant,
    fail_every: Option<u64>,
    record: Arc<Mutex<Record>>,
}

impl Recorder {
    /// A recorder of a run that started at `epoch`.
    pub fn new(epoch: Instant, fail_every: Option<u64>) -> Self {
        Self {
            epoch,
            fail_every,
            record: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Sends one message to each of `topics` at every time of the schedule before `until`,
    /// through the cluster's round robin.
    pub async fn produce(
        self,
        cluster: InMemoryCluster,
        topics: Vec<String>,
        traffic: Traffic,
        until: Duration,
    ) {
        for at in traffic.send_times(until) {
            tokio::time::sleep_until(self.epoch + at).await;
            for topic in &topics {
                let body = format!("{topic}#{}", self.lock().outcome.produced.len());
                let message = rebalance_consume::memory::OutgoingMessage::new(body);
                match cluster.send(topic, message) {
                    Ok(receipt) => {
                        let mut record = self.lock();
                        let index = record.outcome.produced.len() as u64;
                        record.index.insert(receipt.msg_id.clone(), index);
                        record.outcome.produced.push(Produced {
                            msg_id: receipt.msg_id,
                            topic: topic.clone(),
                            t_ms: at.as_millis() as u64,
                        });
                    }
                    Err(_) => self.lock().outcome.send_failures += 1,
                }
            }
        }
    }

    /// Marks the start of a delivery: whether it fails (the first delivery of every Nth
    /// message produced).
    fn starts(&self, messages: &[Message]) -> bool {
        let mut record = self.lock();
        let mut fail = false;
        for message in messages {
            let first = record.seen.insert(message.msg_id().to_string());
            let nth = match (self.fail_every, record.index.get(message.msg_id())) {
                (Some(n), Some(index)) => (index + 1) % n == 0,
                _ => false,
            };
            fail |= first && nth;
        }
        fail
    }

    /// Records the deliveries of a batch the listener finished.
    fn finished(&self, client: &ClientId, t_ms: u64, messages: &[Message], failed: bool) {
        let mut record = self.lock();
        for message in messages {
            record.outcome.deliveries.push(Delivery {
                t_ms,
                client: client.clone(),
                topic: message.topic().to_string(),
                queue: message.queue().clone(),
                offset: message.queue_offset(),
                msg_id: message.msg_id().to_string(),
                reconsume_times: message.reconsume_times(),
                failed,
            });
        }
    }

    /// What was recorded, with the group's dead letters.
    pub fn outcome(&self, dead_lettered: Vec<String>) -> MessageOutcome {
        let mut outcome = self.lock().outcome.clone();
        outcome.dead_lettered = dead_lettered;
        outcome
    }

    /// The listener of one client.
    pub fn listener(&self, client: ClientId, consume_time: Duration) -> SimListener {
        SimListener {
            client,
            consume_time,
            recorder: self.clone(),
        }
    }
}

/// A client's listener: takes `consume_time` per message, fails the first delivery of every
/// Nth message, records every delivery it finishes.
#[derive(Debug, Clone)]
pub struct SimListener {
    client: ClientId,
    consume_time: Duration,
    recorder: Recorder,
}

impl SimListener {
    /// Consumes a batch: whether it failed.
    async fn consume(&self, messages: &[Message]) -> bool {
        let t_ms = self.recorder.now_ms();
        let fail = self.recorder.starts(messages);
        let n = u32::try_from(messages.len()).unwrap_or(u32::MAX);
        tokio::time::sleep(self.consume_time.saturating_mul(n)).await;
        self.recorder.finished(&self.client, t_ms, messages, fail);
        fail
    }
}

#[async_trait]
impl ConcurrentListener for SimListener {
    async fn consume(
        &self,
        messages: &[Message],
        _context: &mut ConcurrentContext,
    ) -> ConsumeResult {
        if SimListener::consume(self, messages).await {
            ConsumeResult::ReconsumeLater
        } else {
            ConsumeResult::Success
        }
    }
}

#[async_trait]
impl OrderlyListener for SimListener {
    async fn consume(&self, messages: &[Message], _context: &mut OrderlyContext) -> OrderlyResult {
        if SimListener::consume(self, messages).await {
            OrderlyResult::Suspend
        } else {
            OrderlyResult::Success
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traffic(rate: f64) -> Traffic {
        Traffic {
            rate,
            consume_time: Duration::ZERO,
            fail_every: None,
            orderly: false,
            exclusive_hand_off: false,
            drain: Duration::ZERO,
            pop: None,
        }
    }

    #[test]
    fn the_schedule_sends_every_one_over_rate_seconds_before_the_end() {
        let times: Vec<Duration> = traffic(4.0).send_times(Duration::from_secs(1)).collect();
        assert_eq!(
            times,
            [0, 250, 500, 750].map(Duration::from_millis),
            "the end is excluded"
        );
        assert_eq!(traffic(0.5).send_times(Duration::from_secs(5)).count(), 3);
        assert_eq!(Traffic::total(0.5, 2, Duration::from_secs(5)), 6.0);
        assert_eq!(Traffic::total(4.0, 3, Duration::from_secs(1)), 12.0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_delivery_of_every_nth_message_fails() {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 1);
        let recorder = Recorder::new(Instant::now(), Some(3));
        let schedule = Traffic {
            fail_every: Some(3),
            ..traffic(1.0)
        };
        recorder
            .clone()
            .produce(
                cluster.clone(),
                vec!["T".into()],
                schedule,
                Duration::from_secs(6),
            )
            .await;
        let messages = cluster.messages(&MessageQueue::new("T", "broker-0", 0));
        assert_eq!(messages.len(), 6);
        let fails: Vec<bool> = messages
            .iter()
            .map(|m| recorder.starts(std::slice::from_ref(m)))
            .collect();
        assert_eq!(fails, [false, false, true, false, false, true]);
        assert!(!recorder.starts(&messages[2..3]), "only the first delivery");
        let produced = recorder.outcome(Vec::new()).produced;
        let sent_at: Vec<u64> = produced.iter().map(|p| p.t_ms).collect();
        assert_eq!(sent_at, [0, 1000, 2000, 3000, 4000, 5000]);
        assert_eq!(produced[4].msg_id, messages[4].msg_id());
    }
}
