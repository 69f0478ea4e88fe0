//! What the end-to-end tests share: a real name server with two brokers (the test kit's), consumers
//! that are separate processes (the `rocketmq_consumer` example with `--consume --json`) whose
//! output lines are collected in the order the consumers printed them, each with the instant it
//! was printed (the consumer's own clock: see `log`), a producer in the test, and the waits, each
//! bounded and failing with what was missing.
// Each test binary uses its part of the kit.
#![allow(dead_code, unused_imports)]

mod consumer;
mod faults;
mod log;
mod producer;

use std::collections::BTreeSet;
use std::time::Duration;

use rebalance::MessageQueue;
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};

pub use consumer::{ConsumerProcess, rss_kib};
pub use faults::{
    Group, MemberProxies, MemorySampler, Zombies, ordered_overlaps, percentile, stale_after,
    takeover, zombies,
};
pub use log::{Delivery, Event, Log, Msg, Queue};
pub use producer::{Producer, Stream};

/// The brokers of every end-to-end cluster.
pub const BROKERS: [&str; 2] = ["broker-a", "broker-b"];
/// The queues of the topic on each broker.
pub const QUEUES_PER_BROKER: i32 = 4;
/// How often the consumers rebalance when nothing wakes them (`--rebalance-interval`).
pub const REBALANCE_INTERVAL: Duration = Duration::from_secs(2);
/// How often the consumers heartbeat (`--heartbeat-interval`): well below the kit's channel
/// expiry (10 s), so that no live consumer is ever dropped from the group.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);

/// Logs of the test process to its output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A name server and two brokers (the kit's channel expiry: 10 s, scanned every 10 s), with
/// `topics` created on both, 4 queues each.
pub async fn two_broker_cluster(topics: &[&str]) -> TestCluster {
    two_broker_cluster_with(ClusterOptions::default(), topics).await
}

/// [`two_broker_cluster`] with `options` (several name servers, say).
pub async fn two_broker_cluster_with(options: ClusterOptions, topics: &[&str]) -> TestCluster {
    init_tracing();
    let mut cluster = TestCluster::start_with(options).expect("the name server and broker-a start");
    cluster
        .add_broker(BROKERS[1])
        .expect("broker-b starts and registers");
    for topic in topics {
        cluster
            .create_topic(topic, QUEUES_PER_BROKER)
            .await
            .expect("the topic is created on both brokers and routed");
    }
    cluster
}

/// Every queue of `topic` on the two brokers, in the Java order.
pub fn queues(topic: &str) -> Vec<MessageQueue> {
    BROKERS
        .iter()
        .flat_map(|b| (0..QUEUES_PER_BROKER).map(move |q| MessageQueue::new(topic, *b, q)))
        .collect()
}

/// The same queues as the log names them.
pub fn queue_set(topic: &str) -> BTreeSet<Queue> {
    queues(topic).iter().map(Queue::of).collect()
}

/// Waits until `check` answers, every 50 ms, for at most `within`; fails with `what`.
pub async fn eventually<T>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Only one end-to-end scenario runs at a time in a test binary: they measure times, and the
/// machine is small.
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ONE_AT_A_TIME.lock().await
}
