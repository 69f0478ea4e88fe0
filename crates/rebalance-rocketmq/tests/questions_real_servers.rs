//! The brokers' questions to a client, against a real RocketMQ name server and broker: the
//! running info (307) and consumer status (221) the broker forwards to the client, and an
//! operator's offset reset (222), pushed to the client (220) or kept by the broker for the next
//! pull (server-side reset, the broker's default).

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer, PushConsumerHandle,
};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::config::{ConsumeFrom, Intervals};

use common::{eventually, init_tracing};

/// Every body consumed, in order of consumption (a body twice: consumed twice).
type Seen = Arc<Mutex<Vec<String>>>;

struct Recorder(Seen);

#[async_trait]
impl ConcurrentListener for Recorder {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let mut seen = self.0.lock().unwrap();
        seen.extend(
            messages
                .iter()
                .map(|m| String::from_utf8_lossy(m.body()).into_owned()),
        );
        ConsumeResult::Success
    }
}

async fn member(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
    seen: &Seen,
) -> PushConsumerHandle {
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    PushConsumer::builder(group)
        .configure(|b| {
            b.client_id(common::client_id("q"))
                .consume_from(ConsumeFrom::FirstOffset)
                .intervals(Intervals {
                    rebalance_wait: Duration::from_secs(2),
                    ..Intervals::default()
                })
                .name_server(Arc::new(name_server))
                .directory(Arc::new(brokers.clone()))
                .offset_store(Arc::new(brokers.clone()))
                .locker(Arc::new(brokers.clone()))
        })
        .subscribe(topic)
        .source(Arc::new(brokers))
        .concurrently(Arc::new(Recorder(seen.clone())))
        .start()
        .await
        .unwrap()
}

async fn send(cluster: &TestCluster, topic: &str, queues: i32, count: usize) -> Vec<String> {
    let sender = MessageSender::new(
        NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap(),
        "questions-test-producer",
    );
    let mut bodies = Vec::new();
    for i in 0..count {
        let body = format!("m-{i}");
        let queue = MessageQueue::new(topic, "broker-a", (i % queues as usize) as i32);
        sender
            .send(&queue, &Outgoing::new(body.clone()))
            .await
            .unwrap();
        bodies.push(body);
    }
    bodies
}

/// An admin's client of its own.
fn admin(cluster: &TestCluster) -> BrokerClient {
    BrokerClient::new(NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap())
}

/// Waits until every one of `sent` was consumed at least `times` times.
async fn consumed(seen: &Seen, sent: &[String], times: usize, within: Duration) {
    eventually("every message consumed", within, || async {
        let seen = seen.lock().unwrap();
        sent.iter()
            .all(|s| seen.iter().filter(|b| *b == s).count() >= times)
            .then_some(())
    })
    .await
}

/// Waits until the broker's committed offsets of `topic` add up to `total`.
async fn committed(brokers: &BrokerClient, addr: &str, group: &str, topic: &str, total: i64) {
    eventually(
        "the committed offsets reach the broker",
        Duration::from_secs(30),
        || async {
            let stats = brokers
                .consume_stats_at(addr, group, Some(topic))
                .await
                .ok()?;
            let sum: i64 = stats.iter().map(|q| q.consumer_offset).sum();
            (sum == total).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_info_and_status_are_answered_through_the_broker() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("QInfo", 4).await.unwrap();
    let seen = Seen::default();
    let consumer = member(&cluster, "QInfoG", "QInfo", &seen).await;
    eventually("the queues are held", Duration::from_secs(30), || async {
        (consumer
            .consumer()
            .assignment()
            .queues
            .get("QInfo")
            .map(Vec::len)
            == Some(4))
        .then_some(())
    })
    .await;
    let sent = send(&cluster, "QInfo", 4, 20).await;
    consumed(&seen, &sent, 1, Duration::from_secs(60)).await;
    let addr = cluster.first_broker_addr();
    let brokers = admin(&cluster);
    committed(&brokers, &addr, "QInfoG", "QInfo", 20).await;
    let client_id = consumer.consumer().client_id().to_string();

    // 307, forwarded by the broker to the client and answered in Java's shape.
    let info = brokers
        .running_info_at(&addr, "QInfoG", &client_id)
        .await
        .unwrap();
    let held: Vec<(MessageQueue, i64)> = info
        .queues
        .iter()
        .filter(|(q, _)| &*q.topic == "QInfo")
        .cloned()
        .collect();
    assert_eq!(held.len(), 4, "{info:?}");
    assert_eq!(held.iter().map(|(_, o)| o).sum::<i64>(), 20, "{held:?}");
    assert_eq!(info.properties["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY");
    assert_eq!(info.properties["PROP_CLIENT_LANGUAGE"], "RUST");
    assert!(
        info.properties["PROP_CONSUMER_START_TIMESTAMP"]
            .parse::<i64>()
            .unwrap()
            > 0
    );
    assert!(info.fingerprint("QInfo").is_some(), "{:?}", info.user_info);
    assert_eq!(info.user_info["consuming"], "true");
    assert!(info.subscriptions.contains(&"QInfo".to_string()));
    // An id the broker does not know: its refusal, relayed.
    let unknown = brokers
        .running_info_at(&addr, "QInfoG", "127.0.0.1@nobody")
        .await;
    assert!(unknown.is_err(), "{unknown:?}");

    // 223 → 221: the broker asks every member for its offsets of the topic.
    let status = brokers
        .consumer_status_at(&addr, "QInfoG", "QInfo")
        .await
        .unwrap();
    let ours = &status[&client_id];
    assert_eq!(ours.len(), 4, "{status:?}");
    assert_eq!(ours.iter().map(|(_, o)| o).sum::<i64>(), 20);

    // 208: committed and max offsets per queue, no lag.
    let stats = brokers
        .consume_stats_at(&addr, "QInfoG", Some("QInfo"))
        .await
        .unwrap();
    assert_eq!(stats.len(), 4);
    assert!(stats.iter().all(|q| q.lag() == 0), "{stats:?}");
    consumer.shutdown().await;
}

/// Resets the group to the topic's first message and expects every message consumed again and
/// the committed offsets back where they were.
async fn reset_consumes_again(server_side_reset: bool, topic: &str, group: &str) {
    init_tracing();
    let cluster = TestCluster::start_with(ClusterOptions {
        server_side_reset,
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.create_topic(topic, 2).await.unwrap();
    let seen = Seen::default();
    let consumer = member(&cluster, group, topic, &seen).await;
    eventually("the queues are held", Duration::from_secs(30), || async {
        (consumer
            .consumer()
            .assignment()
            .queues
            .get(topic)
            .map(Vec::len)
            == Some(2))
        .then_some(())
    })
    .await;
    let sent = send(&cluster, topic, 2, 10).await;
    consumed(&seen, &sent, 1, Duration::from_secs(60)).await;
    let addr = cluster.first_broker_addr();
    let brokers = admin(&cluster);
    committed(&brokers, &addr, group, topic, 10).await;

    let reset = brokers
        .reset_offsets_at(&addr, group, topic, 0, true)
        .await
        .unwrap();
    assert_eq!(reset.iter().map(|(_, o)| o).sum::<i64>(), 0, "{reset:?}");
    // Nothing new is sent: only a reset makes the messages come again.
    consumed(&seen, &sent, 2, Duration::from_secs(60)).await;
    committed(&brokers, &addr, group, topic, 10).await;
    let bodies: BTreeSet<String> = seen.lock().unwrap().iter().cloned().collect();
    assert_eq!(bodies.len(), 10);
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_reset_restarts_the_queues_from_the_new_offset() {
    reset_consumes_again(false, "QPushReset", "QPushResetG").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_side_reset_is_taken_from_the_next_pull() {
    reset_consumes_again(true, "QServerReset", "QServerResetG").await;
}
