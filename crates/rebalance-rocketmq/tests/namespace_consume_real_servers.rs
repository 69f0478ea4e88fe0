//! Namespaced consumption against a real RocketMQ name server and broker: two namespaces with
//! the same group and topic names on one broker, each pulling only its own messages (sent
//! through its namespaced sender), with the send-back and the redelivery through the retry
//! topic namespaced too, and the application seeing plain names throughout.

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
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient, Namespace};
use rebalance_runtime::config::{ConsumeFrom, Intervals};

use common::{eventually, init_tracing};

const GROUP: &str = "CG";
const TOPIC: &str = "Orders";

/// One delivery as the application saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Delivery {
    body: String,
    topic: String,
    queue_topic: String,
    reconsume_times: i32,
}

struct Recorder {
    seen: Arc<Mutex<Vec<Delivery>>>,
    /// The body whose first delivery fails.
    fail_first: String,
}

#[async_trait]
impl ConcurrentListener for Recorder {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let mut seen = self.seen.lock().unwrap();
        for m in messages {
            let body = String::from_utf8_lossy(m.body()).into_owned();
            if m.reconsume_times() == 0 && body == self.fail_first {
                return ConsumeResult::ReconsumeLater;
            }
            seen.push(Delivery {
                body,
                topic: m.topic().to_string(),
                queue_topic: m.queue().topic.to_string(),
                reconsume_times: m.reconsume_times(),
            });
        }
        ConsumeResult::Success
    }
}

fn in_namespace(cluster: &TestCluster, ns: &str) -> NameServerClient {
    NameServerClient::builder(&cluster.namesrv_addr())
        .namespace(Namespace::new(ns).unwrap())
        .build()
        .unwrap()
}

async fn consumer(
    cluster: &TestCluster,
    ns: &str,
    seen: &Arc<Mutex<Vec<Delivery>>>,
    fail_first: &str,
) -> PushConsumerHandle {
    let name_server = in_namespace(cluster, ns);
    let brokers = BrokerClient::new(name_server.clone());
    let recorder = Arc::new(Recorder {
        seen: seen.clone(),
        fail_first: fail_first.to_string(),
    });
    PushConsumer::builder(GROUP)
        .configure(|b| {
            b.client_id(common::client_id(ns))
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
        .subscribe(TOPIC)
        .source(Arc::new(brokers))
        .concurrently(recorder)
        .start()
        .await
        .unwrap()
}

/// Sends `count` messages `{prefix}-{i}` to the plain topic through a sender in `ns`.
async fn send(cluster: &TestCluster, ns: &str, prefix: &str, count: usize) -> BTreeSet<String> {
    let sender = MessageSender::new(in_namespace(cluster, ns), "ns-test-producer");
    let mut bodies = BTreeSet::new();
    for i in 0..count {
        let body = format!("{prefix}-{i}");
        let queue = MessageQueue::new(TOPIC, "broker-a", (i % 2) as i32);
        let sent = sender
            .send(&queue, &Outgoing::new(body.clone()))
            .await
            .unwrap();
        assert_eq!(
            &*sent.queue.topic, TOPIC,
            "the send result's names are plain"
        );
        bodies.insert(body);
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_consume_only_their_own_messages() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    for ns in ["tenant1", "tenant2"] {
        cluster
            .create_topic(&format!("{ns}%{TOPIC}"), 2)
            .await
            .unwrap();
    }
    let seen1 = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::new(Mutex::new(Vec::new()));
    let one = consumer(&cluster, "tenant1", &seen1, "one-3").await;
    let two = consumer(&cluster, "tenant2", &seen2, "two-5").await;
    for c in [&one, &two] {
        c.consumer()
            .wait_for_assignment(
                |a| a.queues.get(TOPIC).is_some_and(|q| q.len() == 2),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
    }
    let sent1 = send(&cluster, "tenant1", "one", 10).await;
    let sent2 = send(&cluster, "tenant2", "two", 10).await;
    // The failed first deliveries come back after delay level 3 (10 s).
    for (seen, sent) in [(&seen1, &sent1), (&seen2, &sent2)] {
        eventually(
            "every message of the namespace consumed",
            Duration::from_secs(90),
            || async {
                let seen = seen.lock().unwrap();
                let bodies: BTreeSet<&String> = seen.iter().map(|d| &d.body).collect();
                sent.iter().all(|s| bodies.contains(s)).then_some(())
            },
        )
        .await;
    }
    // A little longer: nothing of the other namespace arrives late.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (seen, sent, failed) in [(&seen1, &sent1, "one-3"), (&seen2, &sent2, "two-5")] {
        let seen = seen.lock().unwrap().clone();
        let bodies: BTreeSet<String> = seen.iter().map(|d| d.body.clone()).collect();
        assert_eq!(&bodies, sent, "its own messages, and only those: {seen:?}");
        for d in &seen {
            assert_eq!(d.topic, TOPIC, "plain topic: {d:?}");
            if d.body == failed {
                assert_eq!(d.reconsume_times, 1, "{d:?}");
                assert_eq!(d.queue_topic, format!("%RETRY%{GROUP}"), "{d:?}");
            } else {
                assert_eq!(d.queue_topic, TOPIC, "{d:?}");
            }
        }
    }
    one.shutdown().await;
    two.shutdown().await;
}
