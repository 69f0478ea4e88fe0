//! A runtime consumer's subscriptions as a real broker sees them: the tag expression and the
//! group's retry topic in the subscription table (read back with GET_CONSUMER_CONNECTION_LIST),
//! and the retry topic's queues shared once the broker has created and routed it.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient, RemotingClient, RemotingCommand};
use rebalance_runtime::{
    Consumer, ConsumerHandle, ListenerError, NameServer, QueueLease, QueueListener, RemovedQueue,
    config::{Intervals, MessageModel},
};
use serde_json::Value;

/// Accepts every queue.
struct Accept;

#[async_trait]
impl QueueListener for Accept {
    async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> {
        Ok(())
    }

    async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> {
        Ok(())
    }
}

/// Routes polled every second, so that the retry topic's route is seen soon after the broker
/// registers it.
fn intervals() -> Intervals {
    Intervals {
        poll_name_server: Duration::from_secs(1),
        rebalance_wait: Duration::from_secs(2),
        ..Intervals::default()
    }
}

async fn start(
    cluster: &TestCluster,
    group: &str,
    label: &str,
    configure: impl FnOnce(rebalance_runtime::ConsumerBuilder) -> rebalance_runtime::ConsumerBuilder,
) -> ConsumerHandle {
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let builder = Consumer::builder(group)
        .client_id(common::client_id(label))
        .intervals(intervals())
        .name_server(Arc::new(name_server))
        .directory(Arc::new(brokers.clone()))
        .offset_store(Arc::new(brokers.clone()))
        .locker(Arc::new(brokers))
        .listener(Arc::new(Accept));
    configure(builder).start().await.unwrap()
}

/// The broker's GET_CONSUMER_CONNECTION_LIST answer for `group` (`None` while the group is not
/// online there).
async fn consumer_connection(cluster: &TestCluster, group: &str) -> Option<Value> {
    let request =
        RemotingCommand::request(rebalance_rocketmq::request_code::GET_CONSUMER_CONNECTION_LIST)
            .with_ext("consumerGroup", group);
    let response = RemotingClient::default()
        .invoke(&cluster.first_broker_addr(), request)
        .await
        .unwrap();
    (response.code == 0).then(|| serde_json::from_slice(&response.body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_knows_the_tags_and_the_retry_topic_whose_queues_are_then_shared() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "SubsTagged";
    let group = "subs-it-tags";
    let retry = format!("%RETRY%{group}");
    let queues = cluster.create_topic(topic, 4).await.unwrap();
    assert_eq!(queues.subscribable_queues(topic).len(), 4);

    let consumer = start(&cluster, group, "tags", |b| {
        b.subscribe_tags(topic, "TagA || TagB").unwrap()
    })
    .await;

    // The subscription table as the broker has it, from the consumer's heartbeat.
    let connection = common::eventually("the group is online", Duration::from_secs(10), || {
        consumer_connection(&cluster, group)
    })
    .await;
    let table = &connection["subscriptionTable"];
    let tagged = &table[topic];
    assert_eq!(tagged["subString"], "TagA || TagB", "{connection}");
    assert_eq!(tagged["expressionType"], "TAG");
    let tags: BTreeSet<&str> = tagged["tagsSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tags, BTreeSet::from(["TagA", "TagB"]));
    let codes: BTreeSet<i64> = tagged["codeSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_i64().unwrap())
        .collect();
    // Java's "TagA".hashCode() and "TagB".hashCode().
    assert_eq!(codes, BTreeSet::from([2_598_919, 2_598_920]));
    let retried = &table[retry.as_str()];
    assert_eq!(retried["subString"], "*", "{connection}");
    assert_eq!(retried["tagsSet"], Value::Array(Vec::new()));
    assert_eq!(retried["codeSet"], Value::Array(Vec::new()));
    let ids: Vec<&str> = connection["connectionSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["clientId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [consumer.client_id().as_str()]);

    // The broker created the retry topic when it handled the first heartbeat and registers it
    // with the name server; once routed, its queues are the consumer's too.
    let retry_queues: BTreeSet<MessageQueue> = common::eventually(
        "the retry topic's queues are assigned",
        Duration::from_secs(45),
        || async {
            let held: BTreeSet<MessageQueue> = consumer
                .assignment()
                .iter()
                .filter(|q| *q.topic == *retry)
                .cloned()
                .collect();
            (!held.is_empty()).then_some(held)
        },
    )
    .await;
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let route = name_server.topic_route(&retry).await.unwrap();
    let routed: BTreeSet<MessageQueue> = route.subscribable_queues(&retry).into_iter().collect();
    assert_eq!(retry_queues, routed);
    assert_eq!(
        consumer.assignment().len(),
        4 + routed.len(),
        "the topic's queues and the retry topic's"
    );
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcasting_and_opted_out_consumers_do_not_subscribe_to_the_retry_topic() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "SubsPlain";
    cluster.create_topic(topic, 2).await.unwrap();
    for (group, configure) in [
        (
            "subs-it-optout",
            Box::new(|b: rebalance_runtime::ConsumerBuilder| b.consume_retry_topic(false))
                as Box<dyn FnOnce(_) -> _>,
        ),
        (
            "subs-it-broadcast",
            Box::new(|b: rebalance_runtime::ConsumerBuilder| {
                b.message_model(MessageModel::Broadcasting)
                    .offset_store(Arc::new(rebalance_runtime::LocalOffsetStore::new()))
            }),
        ),
    ] {
        let consumer = start(&cluster, group, group, |b| configure(b.subscribe(topic))).await;
        let connection = common::eventually("the group is online", Duration::from_secs(10), || {
            consumer_connection(&cluster, group)
        })
        .await;
        let table = connection["subscriptionTable"].as_object().unwrap();
        let topics: Vec<&str> = table.keys().map(String::as_str).collect();
        assert_eq!(topics, [topic], "{group}: {connection}");
        assert_eq!(table[topic]["subString"], "*");
        consumer.shutdown().await;
    }
}
