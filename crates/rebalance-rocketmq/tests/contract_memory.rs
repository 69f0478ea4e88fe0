//! The broker contract (`contract/mod.rs`) against the in-memory cluster, on paused time.

mod contract;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use contract::{Backend, Deviation};
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{MessageSource, PopSource};
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::{ClusterClient, ClusterConfig, InMemoryCluster};
use rebalance_runtime::{AssignmentSource, GroupDirectory, OffsetStore, QueueLocker};

struct Memory {
    cluster: InMemoryCluster,
    client: ClusterClient,
}

impl Memory {
    fn new() -> Self {
        let cluster = InMemoryCluster::new();
        let client = cluster.client("127.0.0.1@contract");
        Self { cluster, client }
    }
}

#[async_trait]
impl Backend for Memory {
    fn name(&self) -> &'static str {
        "in-memory cluster"
    }

    fn broker(&self) -> &str {
        "broker-0"
    }

    fn source(&self) -> Arc<dyn MessageSource> {
        Arc::new(self.client.clone())
    }

    fn offsets(&self) -> Arc<dyn OffsetStore> {
        Arc::new(self.client.clone())
    }

    fn locker(&self) -> Arc<dyn QueueLocker> {
        Arc::new(self.client.clone())
    }

    fn directory(&self) -> Arc<dyn GroupDirectory> {
        Arc::new(self.client.clone())
    }

    fn directory_of_another_client(&self) -> Arc<dyn GroupDirectory> {
        Arc::new(self.cluster.client("127.0.0.1@contract-other"))
    }

    fn pop_source(&self) -> Arc<dyn PopSource> {
        Arc::new(self.client.clone())
    }

    fn assignments(&self) -> Arc<dyn AssignmentSource> {
        Arc::new(self.client.clone())
    }

    fn lock_expiry(&self) -> Duration {
        ClusterConfig::default().lock_expiry
    }

    async fn create_topic(&self, topic: &str, queues: i32) {
        self.cluster.create_topic(topic, 1, queues);
    }

    async fn send(&self, queue: &MessageQueue, body: &str) {
        self.cluster
            .send_to(queue, OutgoingMessage::new(body.to_owned()))
            .unwrap();
    }

    fn deviations(&self) -> &[Deviation] {
        &[]
    }
}

#[tokio::test(start_paused = true)]
async fn send_back_is_decided_with_the_stored_message() {
    contract::send_back_is_decided_with_the_stored_message(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn a_send_back_the_broker_cannot_find_falls_back_to_a_new_message() {
    contract::a_send_back_the_broker_cannot_find_falls_back_to_a_new_message(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn offsets_are_committed_read_and_carried_by_pulls() {
    contract::offsets_are_committed_read_and_carried_by_pulls(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn locks_are_exclusive_renewed_and_released() {
    contract::locks_are_exclusive_renewed_and_released(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn an_unrenewed_lock_expires() {
    contract::an_unrenewed_lock_expires(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn pull_answers_follow_the_brokers_codes() {
    contract::pull_answers_follow_the_brokers_codes(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn ordinary_pops_hide_and_revive_unacknowledged_messages() {
    contract::ordinary_pops_hide_and_revive_unacknowledged_messages(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn orderly_pops_hold_the_queue_and_redeliver_in_order() {
    contract::orderly_pops_hold_the_queue_and_redeliver_in_order(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn server_side_assignment_follows_the_read_mode() {
    contract::server_side_assignment_follows_the_read_mode(&Memory::new()).await;
}

#[tokio::test(start_paused = true)]
async fn a_departed_members_locks_are_dropped_only_once_it_is_not_listed() {
    contract::a_departed_members_locks_are_dropped_only_once_it_is_not_listed(&Memory::new()).await;
}
