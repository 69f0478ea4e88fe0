//! Consumption against a real RocketMQ broker that enforces authentication: a push consumer
//! whose name-server client is signed pulls every message (PULL_MESSAGE), sends a failed one
//! back (CONSUMER_SEND_MSG_BACK) and consumes its redelivery from the retry topic, all signed;
//! an unsigned pull is refused with the typed denial naming the pull and the queue's topic.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, MessageSource, PullError,
    PullRequest, PushConsumer,
};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};
use rebalance_rocketmq::{BrokerClient, Credentials, NameServerClient};
use rebalance_runtime::RemoteError;
use rebalance_runtime::config::{ConsumeFrom, Intervals};
use rebalance_runtime::subscription::TagExpression;

use common::{eventually, init_tracing};

const GROUP: &str = "auth-consume";
const TOPIC: &str = "AuthConsume";
/// The body whose first delivery fails, so that it is sent back and redelivered.
const FAILS_ONCE: &str = "m-3";

fn super_user() -> Credentials {
    Credentials::new("rocketmq2", "12345678").unwrap()
}

/// Each delivery: the body, the queue's topic it was pulled from, and its reconsume count.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(String, String, i32)>>,
}

#[async_trait]
impl ConcurrentListener for Recorder {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let mut seen = self.seen.lock().unwrap();
        for m in messages {
            let body = String::from_utf8_lossy(m.body()).into_owned();
            if m.reconsume_times() == 0 && body == FAILS_ONCE {
                return ConsumeResult::ReconsumeLater;
            }
            seen.push((body, m.queue().topic.to_string(), m.reconsume_times()));
        }
        ConsumeResult::Success
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_push_consumer_pulls_sends_back_and_consumes_its_redelivery() {
    init_tracing();
    let cluster = TestCluster::start_with(ClusterOptions {
        authentication: Some(super_user()),
        ..Default::default()
    })
    .unwrap();
    cluster.create_topic(TOPIC, 2).await.unwrap();
    let signed = NameServerClient::builder(&cluster.namesrv_addr())
        .credentials(super_user())
        .build()
        .unwrap();
    let brokers = BrokerClient::new(signed.clone());
    let recorder = Arc::new(Recorder::default());
    let consumer = PushConsumer::builder(GROUP)
        .configure(|b| {
            b.client_id(common::client_id("signed"))
                .consume_from(ConsumeFrom::FirstOffset)
                .intervals(Intervals {
                    rebalance_wait: Duration::from_secs(2),
                    ..Intervals::default()
                })
                .name_server(Arc::new(signed.clone()))
                .directory(Arc::new(brokers.clone()))
                .offset_store(Arc::new(brokers.clone()))
                .locker(Arc::new(brokers.clone()))
        })
        .subscribe(TOPIC)
        .source(Arc::new(brokers.clone()))
        .concurrently(recorder.clone())
        .start()
        .await
        .unwrap();
    consumer
        .consumer()
        .ready(Duration::from_secs(30))
        .await
        .expect("the signed consumer is ready");

    let sender = MessageSender::new(signed, "auth-consume-producer");
    let mut sent = BTreeSet::new();
    for i in 0..10 {
        let body = format!("m-{i}");
        let queue = MessageQueue::new(TOPIC, "broker-a", i % 2);
        sender
            .send(&queue, &Outgoing::new(body.clone()))
            .await
            .unwrap();
        sent.insert(body);
    }

    // The failed first delivery comes back after delay level 3 (10 s), from the retry topic.
    let seen = eventually(
        "every message consumed, the failed one redelivered",
        Duration::from_secs(90),
        || async {
            let seen = recorder.seen.lock().unwrap().clone();
            let bodies: BTreeSet<String> = seen.iter().map(|(b, _, _)| b.clone()).collect();
            (bodies == sent).then_some(seen)
        },
    )
    .await;
    for (body, queue_topic, reconsume_times) in &seen {
        if body == FAILS_ONCE {
            assert_eq!(*reconsume_times, 1, "{seen:?}");
            assert_eq!(*queue_topic, format!("%RETRY%{GROUP}"), "{seen:?}");
        } else {
            assert_eq!((queue_topic.as_str(), *reconsume_times), (TOPIC, 0));
        }
    }
    consumer.shutdown().await;

    // The same pull, unsigned: a typed denial naming the pull and the topic, not a plain
    // refusal.
    let unsigned =
        BrokerClient::new(NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap());
    let mut request = PullRequest::new(
        GROUP,
        MessageQueue::new(TOPIC, "broker-a", 0),
        0,
        TagExpression::all(),
    );
    request.suspend = Duration::ZERO;
    match unsigned.pull(&request).await {
        Err(PullError::Remote(RemoteError::Denied {
            operation,
            resource,
            ..
        })) => {
            assert!(operation.contains("pull"), "{operation}");
            assert!(resource.contains(TOPIC), "{resource}");
        }
        other => panic!("an unsigned pull must be denied: {other:?}"),
    }
}
