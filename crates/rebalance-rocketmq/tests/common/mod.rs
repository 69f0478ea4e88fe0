//! Helpers shared by the real-server tests.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rebalance_core::ClientId;
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::{
    Registration,
    config::{ConsumeFrom, ConsumeOrder, MessageModel},
    subscription::Subscription,
};

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A client of its own (own connections), like a separate consumer process.
pub struct Client {
    pub name_server: NameServerClient,
    pub brokers: BrokerClient,
    pub registration: Registration,
}

/// A unique client id, shaped like the Java client's `ip@instance`.
pub fn client_id(label: &str) -> ClientId {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    ClientId::from(format!("127.0.0.1@{label}-{}-{n}", std::process::id()))
}

pub fn client(cluster: &TestCluster, label: &str, group: &str, topics: &[&str]) -> Client {
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    Client {
        name_server,
        brokers,
        registration: Registration {
            client_id: client_id(label),
            group: group.to_string(),
            message_model: MessageModel::Clustering,
            consume_order: ConsumeOrder::Concurrent,
            consume_from: ConsumeFrom::LastOffset,
            subscriptions: topics.iter().map(|t| Subscription::all(*t)).collect(),
        },
    }
}

/// Polls `check` every 20 ms until it returns `Some`, failing the test with `what` after
/// `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match rebalance_rocketmq::testkit::wait_until(within, Duration::from_millis(20), check).await {
        Some(value) => value,
        None => panic!("{what}: not within {within:?}"),
    }
}
