//! The producer half against a real RocketMQ name server and brokers: messages sent through the
//! runtime's queue selector with SEND_MESSAGE land round robin on the topic's queues (checked
//! with GET_MAX_OFFSET), and sends keep succeeding on the other broker when one is stopped.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_rocketmq::producer::{
    Message, MessageSender, SendError, SendStatus, send_message_request,
};
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{Admin, NameServerClient};
use rebalance_runtime::RemoteError;
use rebalance_runtime::producer::{Producer, SelectByHash};
use tokio::time::Instant;

use common::init_tracing;

/// Sends one message like the Java producer: up to 1 + `retries` attempts, each failure
/// reported to the selector and the next attempt told which broker failed. Returns the queue
/// it was stored on and every broker tried.
async fn send_with_retries(
    producer: &rebalance_runtime::producer::ProducerHandle,
    sender: &MessageSender,
    topic: &str,
    message: &Message,
    retries: usize,
) -> (Result<MessageQueue, SendError>, Vec<String>) {
    let mut tried = Vec::new();
    let mut last_failed: Option<String> = None;
    let mut last_error = SendError::Remote(RemoteError::Unreachable("no attempt".into()));
    for _ in 0..=retries {
        let queue = producer
            .select(topic, last_failed.as_deref())
            .await
            .expect("a queue");
        tried.push(queue.broker_name.to_string());
        let started = Instant::now();
        match sender.send(&queue, message).await {
            Ok(result) => {
                producer.report(&queue.broker_name, result.latency, true);
                assert_eq!(result.queue, queue);
                return (Ok(result.queue), tried);
            }
            Err(e) => {
                producer.report(&queue.broker_name, started.elapsed(), false);
                last_failed = Some(queue.broker_name.to_string());
                last_error = e;
            }
        }
    }
    (Err(last_error), tried)
}

async fn max_offsets(admin: &Admin, addr: &str, topic: &str, queues: i32) -> Vec<i64> {
    let mut offsets = Vec::new();
    for id in 0..queues {
        offsets.push(admin.max_offset(addr, topic, id).await.unwrap());
    }
    offsets
}

/// The max offsets once they equal `expected` (the broker builds its consume queues from the
/// commit log a moment after it answers a send), or the last ones seen after 5 s.
async fn settled_max_offsets(admin: &Admin, addr: &str, topic: &str, expected: &[i64]) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let offsets = max_offsets(admin, addr, topic, expected.len() as i32).await;
        if offsets == expected || Instant::now() >= deadline {
            return offsets;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_through_the_selector_spread_round_robin_over_the_queues() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    let broker = cluster.first_broker_addr();
    cluster.create_topic("ProduceTopic", 4).await.unwrap();
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let sender = MessageSender::new(name_server.clone(), "real-producer");
    let producer = Producer::builder("real-producer")
        .name_server(Arc::new(name_server))
        .latency_fault_avoidance(true)
        .start()
        .await
        .unwrap();

    let mut per_queue: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for i in 0..12 {
        let queue = producer.select("ProduceTopic", None).await.unwrap();
        let message = Message::new(format!("message {i}"))
            .with_tags("TagA")
            .with_keys(format!("key-{i}"));
        let result = sender.send(&queue, &message).await.unwrap();
        producer.report(&queue.broker_name, result.latency, true);
        assert_eq!(result.status, SendStatus::SendOk);
        assert_eq!(result.queue, queue, "stored on the queue asked for");
        assert_eq!(Some(result.msg_id.as_str()), message.unique_key());
        assert!(result.offset_msg_id.is_some());
        per_queue
            .entry(queue.queue_id)
            .or_default()
            .push(result.queue_offset.expect("the broker says the offset"));
    }
    // Round robin: three messages per queue, at offsets 0, 1, 2 of each.
    assert_eq!(per_queue.len(), 4, "{per_queue:?}");
    assert!(per_queue.values().all(|o| o == &[0, 1, 2]), "{per_queue:?}");
    let admin = Admin::default();
    assert_eq!(
        settled_max_offsets(&admin, &broker, "ProduceTopic", &[3, 3, 3, 3]).await,
        [3, 3, 3, 3]
    );

    // Keyed: every message of a key lands on the key's queue.
    let keyed = producer
        .select_by("ProduceTopic", &SelectByHash, "order-42")
        .await
        .unwrap();
    for _ in 0..3 {
        let queue = producer
            .select_by("ProduceTopic", &SelectByHash, "order-42")
            .await
            .unwrap();
        assert_eq!(queue, keyed);
        sender.send(&queue, &Message::new("ordered")).await.unwrap();
    }
    let expected: Vec<i64> = (0..4)
        .map(|id| if id == keyed.queue_id { 6 } else { 3 })
        .collect();
    assert_eq!(
        settled_max_offsets(&admin, &broker, "ProduceTopic", &expected).await,
        expected
    );
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_requires_these_send_header_fields_and_checks_the_queue_id() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    let broker = cluster.first_broker_addr();
    cluster.create_topic("HeaderTopic", 2).await.unwrap();
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let remoting = name_server.remoting().clone();
    let queue = MessageQueue::new("HeaderTopic", "broker-a", 1);
    let full = send_message_request("G", &queue, &Message::new("x"), 1_700_000_000_000);

    // Without any one of these, the broker answers 29 "Request header is invalid".
    let required = [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
    ];
    // These may be left out (a Java client sends them).
    let optional = ["properties", "reconsumeTimes", "unitMode", "batch", "bname"];
    assert_eq!(required.len() + optional.len(), full.ext_fields.len());
    for field in required {
        let mut request = full.clone();
        request.ext_fields.remove(field);
        let response = remoting.invoke(&broker, request).await.unwrap();
        assert_eq!(
            (response.code, response.remark_or_empty()),
            (29, "Request header is invalid"),
            "without {field}"
        );
    }
    for field in optional {
        let mut request = full.clone();
        request.ext_fields.remove(field);
        let response = remoting.invoke(&broker, request).await.unwrap();
        assert_eq!(response.code, 0, "without {field}: {response:?}");
    }
    // The answer: msgId (the broker's offset message id), queueId, queueOffset, and a
    // transactionId (the message's unique key) even for a plain message.
    let response = remoting.invoke(&broker, full).await.unwrap();
    assert_eq!(response.code, 0);
    assert_eq!(response.ext("queueId"), Some("1"));
    assert_eq!(response.ext("queueOffset"), Some("5"), "{response:?}");
    assert_eq!(response.ext("msgId").map(str::len), Some(32));
    assert!(response.ext("transactionId").is_some());
    let admin = Admin::default();
    assert_eq!(
        settled_max_offsets(&admin, &broker, "HeaderTopic", &[0, 6]).await,
        [0, 6]
    );

    let sender = MessageSender::new(name_server, "G");
    // A queue id beyond the topic's write queues: refused with code 1.
    match sender
        .send(
            &MessageQueue::new("HeaderTopic", "broker-a", 7),
            &Message::new("x"),
        )
        .await
    {
        Err(SendError::Remote(RemoteError::Refused { code, remark })) => {
            assert_eq!(code, 1);
            assert!(remark.contains("queueId[7] is illegal"), "{remark}");
        }
        other => panic!("{other:?}"),
    }
    // Queue id -1: the broker picks one.
    let picked = sender
        .send(
            &MessageQueue::new("HeaderTopic", "broker-a", -1),
            &Message::new("x"),
        )
        .await
        .unwrap();
    assert!((0..2).contains(&picked.queue.queue_id), "{picked:?}");
    assert!(picked.transaction_id.is_some());
    // An unknown broker name has no address.
    assert!(matches!(
        sender
            .send(
                &MessageQueue::new("HeaderTopic", "broker-zz", 0),
                &Message::new("x")
            )
            .await,
        Err(SendError::NotSent {
            error: RemoteError::Unreachable(_),
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_of_two_brokers_stopped_sends_keep_succeeding_on_the_other() {
    init_tracing();
    let mut cluster = TestCluster::start().unwrap();
    let addr_b = cluster.add_broker("broker-b").unwrap();
    let addr_a = cluster.first_broker_addr();
    let route = cluster.create_topic("FailoverTopic", 2).await.unwrap();
    assert_eq!(route.queue_datas.len(), 2, "{route:?}");
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let sender = MessageSender::new(name_server.clone(), "failover-producer");
    let producer = Producer::builder("failover-producer")
        .name_server(Arc::new(name_server))
        .topic("FailoverTopic")
        .latency_fault_avoidance(true)
        .start()
        .await
        .unwrap();
    assert_eq!(
        producer
            .publish_info("FailoverTopic")
            .unwrap()
            .broker_names()
            .collect::<Vec<_>>(),
        ["broker-a", "broker-b"]
    );

    // Both brokers up: the messages are spread over both.
    let mut stored: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..8 {
        let (result, tried) = send_with_retries(
            &producer,
            &sender,
            "FailoverTopic",
            &Message::new(format!("{i}")),
            2,
        )
        .await;
        let queue = result.unwrap();
        assert_eq!(tried.len(), 1, "no retry needed: {tried:?}");
        *stored.entry(queue.broker_name.to_string()).or_default() += 1;
    }
    assert_eq!(stored.get("broker-a"), Some(&4), "{stored:?}");
    assert_eq!(stored.get("broker-b"), Some(&4), "{stored:?}");

    // broker-b stops; the producer still has it in its route (polled every 30 s).
    cluster.stop_broker("broker-b").unwrap();
    let admin = Admin::default();
    // Four messages on broker-a's two queues so far.
    assert_eq!(
        settled_max_offsets(&admin, &addr_a, "FailoverTopic", &[2, 2]).await,
        [2, 2]
    );
    let a_before = 4;
    let mut attempts_on_b = 0;
    for i in 0..20 {
        let (result, tried) = send_with_retries(
            &producer,
            &sender,
            "FailoverTopic",
            &Message::new(format!("after {i}")),
            2,
        )
        .await;
        let queue = result.unwrap_or_else(|e| panic!("message {i} lost after {tried:?}: {e}"));
        assert_eq!(&*queue.broker_name, "broker-a", "{tried:?}");
        attempts_on_b += tried.iter().filter(|b| *b == "broker-b").count();
    }
    // The first failure puts broker-b on the avoid list for 600 s: no further attempt there.
    assert_eq!(attempts_on_b, 1);
    assert!(
        producer
            .faults()
            .avoided(Instant::now())
            .iter()
            .any(|(b, _)| b == "broker-b")
    );
    let mut a_after = 0;
    for _ in 0..250 {
        a_after = max_offsets(&admin, &addr_a, "FailoverTopic", 2)
            .await
            .iter()
            .sum();
        if a_after - a_before >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a_after - a_before, 20, "every message stored on broker-a");
    assert!(admin.max_offset(&addr_b, "FailoverTopic", 0).await.is_err());
    producer.shutdown().await;
}
