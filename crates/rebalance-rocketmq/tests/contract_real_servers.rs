//! The broker contract (`contract/mod.rs`) against a real Rust RocketMQ broker 1.0 and name
//! server started on loopback. Every wait is bounded.

mod common;
mod contract;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use contract::{Backend, Deviation};
use rebalance_consume::{MessageSource, PopSource};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{NameServerClient, RocketMq};
use rebalance_runtime::{AssignmentSource, GroupDirectory, OffsetStore, QueueLocker};

/// What the Rust broker 1.0 decides differently from Java's (see [`Deviation`]).
const RUST_BROKER_1_0: &[Deviation] = &[
    Deviation::FallbackLockTestInverted,
    Deviation::BackwardCommitIgnored,
    Deviation::PopNotRevived,
    Deviation::OrderlyBatchHoldsQueue,
    Deviation::OrderlyAckOutOfOrder,
    Deviation::UnknownStrategyEmpty,
];

/// The real servers through `RocketMq`, the one value users give a consumer (so that every seam
/// it forwards to its `BrokerClient` is checked here, default trait methods included).
struct Real {
    brokers: RocketMq,
    sender: MessageSender,
    // Dropped last: the servers outlive the clients.
    cluster: TestCluster,
}

impl Real {
    fn start() -> Self {
        common::init_tracing();
        let cluster = TestCluster::start().unwrap();
        let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
        let brokers = RocketMq::from(name_server.clone());
        let sender = MessageSender::new(name_server, "contract-producer");
        Self {
            brokers,
            sender,
            cluster,
        }
    }
}

#[async_trait]
impl Backend for Real {
    fn name(&self) -> &'static str {
        "Rust broker 1.0"
    }

    fn broker(&self) -> &str {
        "broker-a"
    }

    fn source(&self) -> Arc<dyn MessageSource> {
        Arc::new(self.brokers.clone())
    }

    fn offsets(&self) -> Arc<dyn OffsetStore> {
        Arc::new(self.brokers.clone())
    }

    fn locker(&self) -> Arc<dyn QueueLocker> {
        Arc::new(self.brokers.clone())
    }

    fn directory(&self) -> Arc<dyn GroupDirectory> {
        Arc::new(self.brokers.clone())
    }

    fn directory_of_another_client(&self) -> Arc<dyn GroupDirectory> {
        let name_server = NameServerClient::from_addresses(&self.cluster.namesrv_addr()).unwrap();
        Arc::new(RocketMq::from(name_server))
    }

    fn pop_source(&self) -> Arc<dyn PopSource> {
        Arc::new(self.brokers.clone())
    }

    fn assignments(&self) -> Arc<dyn AssignmentSource> {
        Arc::new(self.brokers.clone())
    }

    fn lock_expiry(&self) -> Duration {
        Duration::from_secs(60)
    }

    async fn create_topic(&self, topic: &str, queues: i32) {
        self.cluster.create_topic(topic, queues).await.unwrap();
    }

    async fn send(&self, queue: &MessageQueue, body: &str) {
        self.sender
            .send(queue, &Outgoing::new(body.to_owned()))
            .await
            .unwrap();
    }

    fn deviations(&self) -> &[Deviation] {
        RUST_BROKER_1_0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_back_is_decided_with_the_stored_message() {
    contract::send_back_is_decided_with_the_stored_message(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_back_the_broker_cannot_find_falls_back_to_a_new_message() {
    contract::a_send_back_the_broker_cannot_find_falls_back_to_a_new_message(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_committed_read_and_carried_by_pulls() {
    contract::offsets_are_committed_read_and_carried_by_pulls(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_exclusive_renewed_and_released() {
    contract::locks_are_exclusive_renewed_and_released(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_lock_expires() {
    contract::an_unrenewed_lock_expires(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_answers_follow_the_brokers_codes() {
    contract::pull_answers_follow_the_brokers_codes(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_pops_hide_and_revive_unacknowledged_messages() {
    contract::ordinary_pops_hide_and_revive_unacknowledged_messages(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orderly_pops_hold_the_queue_and_redeliver_in_order() {
    contract::orderly_pops_hold_the_queue_and_redeliver_in_order(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_assignment_follows_the_read_mode() {
    contract::server_side_assignment_follows_the_read_mode(&Real::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_members_locks_are_dropped_only_once_it_is_not_listed() {
    contract::a_departed_members_locks_are_dropped_only_once_it_is_not_listed(&Real::start()).await;
}
