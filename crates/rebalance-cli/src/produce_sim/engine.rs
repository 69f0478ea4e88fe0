//! Sends simulated messages through the runtime's producer (its real queue selector) on the
//! in-memory cluster and tokio's paused clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rebalance_runtime::memory::{InMemoryCluster, route_of};
use rebalance_runtime::producer::ProducerHandle;
use rebalance_runtime::producer::{Producer, ProducerError, SelectError};
use tokio::time::Instant;

/// The topic every simulated message goes to.
pub const TOPIC: &str = "produce-sim";

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Brokers, named `broker-0`, `broker-1`, ….
    pub brokers: usize,
    /// Write queues per broker.
    pub queues: i32,
    /// Brokers that answer slowly, with their latency.
    pub slow: BTreeMap<String, Duration>,
    /// Brokers whose sends fail (after their latency).
    pub failing: BTreeSet<String>,
    /// Messages to send, one after another.
    pub messages: u64,
    /// The latency of the other brokers.
    pub latency: Duration,
    /// Retries after a failed attempt (the Java producer's `retryTimesWhenSendFailed`, 2).
    pub retries: usize,
    /// The pause between one message's completion and the next message.
    pub interval: Duration,
}

impl Config {
    /// The broker names, in index order.
    pub fn broker_names(&self) -> Vec<String> {
        (0..self.brokers).map(|b| format!("broker-{b}")).collect()
    }

    /// How long a send to `broker` takes.
    pub fn latency_of(&self, broker: &str) -> Duration {
        self.slow.get(broker).copied().unwrap_or(self.latency)
    }
}

/// Attempts and deliveries of one queue or broker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Sends tried there.
    pub attempts: u64,
    /// Sends that succeeded there.
    pub delivered: u64,
}

/// What one run (with or without fault avoidance) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Whether latency fault avoidance was on.
    pub avoidance: bool,
    /// Per broker (index order), then per queue id.
    pub queues: Vec<(String, Vec<Counts>)>,
    /// Messages delivered (possibly after retries).
    pub delivered: u64,
    /// Messages that failed every attempt.
    pub lost: u64,
    /// Attempts on failing brokers.
    pub failing_hits: u64,
    /// Attempts on slow brokers.
    pub slow_hits: u64,
    /// Simulated time from the first message to the last answer.
    pub elapsed: Duration,
    /// Time spent in sends, over all messages.
    pub send_time: Duration,
}

impl Outcome {
    /// Every attempt.
    pub fn attempts(&self) -> u64 {
        self.queues
            .iter()
            .flat_map(|(_, q)| q.iter().map(|c| c.attempts))
            .sum()
    }

    /// The counts of a broker, all queues together.
    pub fn broker_counts(&self, index: usize) -> Counts {
        self.queues
            .get(index)
            .map_or_else(Counts::default, |(_, q)| Counts {
                attempts: q.iter().map(|c| c.attempts).sum(),
                delivered: q.iter().map(|c| c.delivered).sum(),
            })
    }
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The tokio runtime could not be built.
    #[error("could not build the runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The producer did not start.
    #[error("the producer did not start: {0}")]
    Start(#[from] ProducerError),
    /// No queue could be selected.
    #[error("no queue selected: {0}")]
    Select(#[from] SelectError),
}

/// Runs the messages once without and once with fault avoidance, each on a fresh paused clock.
pub fn simulate(config: &Config) -> Result<[Outcome; 2], EngineError> {
    Ok([run_once(config, false)?, run_once(config, true)?])
}

fn run_once(config: &Config, avoidance: bool) -> Result<Outcome, EngineError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    runtime.block_on(run(config, avoidance))
}

async fn run(config: &Config, avoidance: bool) -> Result<Outcome, EngineError> {
    let names = config.broker_names();
    let cluster = InMemoryCluster::new();
    cluster.set_route(TOPIC, route_of(&names, config.queues));
    let producer = Producer::builder("produce-sim")
        .name_server(Arc::new(cluster.client("produce-sim")))
        .topic(TOPIC)
        .latency_fault_avoidance(avoidance)
        // Both runs (and every run of the same arguments) send in the same order.
        .round_robin_start(0)
        .start()
        .await?;
    let mut outcome = Outcome {
        avoidance,
        queues: names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    vec![Counts::default(); config.queues.max(0) as usize],
                )
            })
            .collect(),
        delivered: 0,
        lost: 0,
        failing_hits: 0,
        slow_hits: 0,
        elapsed: Duration::ZERO,
        send_time: Duration::ZERO,
    };
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let epoch = Instant::now();
    for message in 0..config.messages {
        if message > 0 {
            // The pause comes between messages: none after the last one.
            tokio::time::sleep(config.interval).await;
        }
        let delivered = send(config, &producer, &index, &mut outcome).await?;
        if delivered {
            outcome.delivered += 1;
        } else {
            outcome.lost += 1;
        }
    }
    outcome.elapsed = epoch.elapsed();
    producer.shutdown().await;
    Ok(outcome)
}

/// One message, with retries like the Java producer; returns whether it was delivered.
async fn send(
    config: &Config,
    producer: &ProducerHandle,
    index: &BTreeMap<&str, usize>,
    outcome: &mut Outcome,
) -> Result<bool, EngineError> {
    let mut last_failed: Option<String> = None;
    for _ in 0..=config.retries {
        let queue = producer.select(TOPIC, last_failed.as_deref()).await?;
        let broker: &str = &queue.broker_name;
        let latency = config.latency_of(broker);
        tokio::time::sleep(latency).await;
        outcome.send_time += latency;
        let ok = !config.failing.contains(broker);
        producer.report(broker, latency, ok);
        outcome.failing_hits += u64::from(!ok);
        outcome.slow_hits += u64::from(config.slow.contains_key(broker));
        let counts = index
            .get(broker)
            .and_then(|b| outcome.queues.get_mut(*b))
            .and_then(|(_, q)| q.get_mut(queue.queue_id as usize));
        if let Some(counts) = counts {
            counts.attempts += 1;
            counts.delivered += u64::from(ok);
        }
        if ok {
            return Ok(true);
        }
        last_failed = Some(broker.to_string());
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            brokers: 4,
            queues: 2,
            slow: BTreeMap::new(),
            failing: BTreeSet::new(),
            messages: 80,
            latency: Duration::from_millis(5),
            retries: 2,
            interval: Duration::ZERO,
        }
    }

    #[test]
    fn healthy_brokers_share_the_messages_equally() {
        let [without, with] = simulate(&config()).unwrap();
        for o in [&without, &with] {
            assert_eq!((o.delivered, o.lost, o.attempts()), (80, 0, 80));
            for (_, queues) in &o.queues {
                assert!(queues.iter().all(|c| *c
                    == Counts {
                        attempts: 10,
                        delivered: 10
                    }));
            }
            assert_eq!(o.elapsed, Duration::from_millis(400));
        }
    }

    #[test]
    fn elapsed_ends_at_the_last_answer_not_after_a_trailing_interval() {
        // `elapsed` is "from the first message to the last answer": the pause between
        // messages comes between them, not after the last one.
        let mut c = config();
        c.messages = 3;
        c.interval = Duration::from_secs(10);
        let [without, with] = simulate(&c).unwrap();
        for o in [&without, &with] {
            assert_eq!(o.elapsed, Duration::from_millis(3 * 5 + 2 * 10_000));
        }
        c.messages = 1;
        c.interval = Duration::from_secs(3600);
        let [without, _] = simulate(&c).unwrap();
        assert_eq!(without.elapsed, Duration::from_millis(5));
    }

    #[test]
    fn avoidance_cuts_sends_to_a_slow_broker() {
        let mut c = config();
        c.slow
            .insert("broker-1".into(), Duration::from_millis(2000));
        let [without, with] = simulate(&c).unwrap();
        assert_eq!(without.slow_hits, 20, "a quarter of the messages");
        assert_eq!(with.slow_hits, 1, "once, then avoided for 120 s");
        assert_eq!(with.broker_counts(1).attempts, 1);
        assert!(
            with.elapsed < without.elapsed / 10,
            "{:?} vs {:?}",
            with.elapsed,
            without.elapsed
        );
        assert_eq!(with.delivered + without.delivered, 160);
    }

    #[test]
    fn retries_deliver_around_a_failing_broker() {
        let mut c = config();
        c.failing.insert("broker-2".into());
        let [without, with] = simulate(&c).unwrap();
        assert_eq!((without.delivered, without.lost), (80, 0));
        assert_eq!((with.delivered, with.lost), (80, 0));
        // Queues 4 and 5 are broker-2's. A failure on queue 4 is retried on queue 6 (queue 5 is
        // skipped, its turn consumed), so a round of 8 turns carries 6 messages and 1 failure:
        // 80 messages make 13 rounds and 2 messages, 13 failures.
        assert_eq!(without.failing_hits, 13);
        assert_eq!(without.attempts(), 93, "one retry per failure");
        assert_eq!(with.failing_hits, 1);
        assert_eq!(without.broker_counts(2).delivered, 0);
        // Every failing broker: messages are lost after 1 + 2 attempts.
        let mut all = config();
        all.messages = 5;
        all.failing = (0..4).map(|b| format!("broker-{b}")).collect();
        let [without, with] = simulate(&all).unwrap();
        assert_eq!((without.lost, without.attempts()), (5, 15));
        assert_eq!((with.lost, with.attempts()), (5, 15));
    }
}
