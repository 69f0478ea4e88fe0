//! `rebalance send` against a real RocketMQ name server and broker (started by the test kit):
//! the messages land round robin (or on their key's queue, in order), and what `--json` prints
//! is what a consumer pulls back.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

use rebalance_consume::{Message, MessageSource, PullRequest, PullResult};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::subscription::TagExpression;
use serde_json::Value;

async fn send(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rebalance"))
            .arg("send")
            .args(args)
            .output()
            .expect("run rebalance send")
    })
    .await
    .unwrap()
}

fn args(namesrv: &str, topic: &str, extra: &[&str]) -> Vec<String> {
    let mut all = vec!["--namesrv", namesrv, "--topic", topic];
    all.extend_from_slice(extra);
    all.into_iter().map(str::to_string).collect()
}

fn lines(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Every message of `queue` from offset 0, up to `expected` of them, within 20 s.
async fn pull_all(brokers: &BrokerClient, queue: MessageQueue, expected: usize) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut offset = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while messages.len() < expected && tokio::time::Instant::now() < deadline {
        let request = PullRequest::new("send-test", queue.clone(), offset, TagExpression::all())
            .with_suspend(Duration::from_millis(500));
        match brokers.pull(&request).await {
            Ok(PullResult::Found {
                messages: found,
                next_offset,
                ..
            }) => {
                messages.extend(found);
                offset = next_offset;
            }
            Ok(PullResult::NoNewMessage { next_offset }) => offset = next_offset,
            other => panic!("{other:?}"),
        }
    }
    messages
}

#[tokio::test]
async fn sent_messages_are_what_a_consumer_pulls_back() {
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("SendTopic", 4).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let output = send(args(
        &namesrv,
        "SendTopic",
        &[
            "--count", "12", "--tags", "TagS", "--keys", "k{i}", "--json",
        ],
    ))
    .await;
    let sent = lines(&output);
    assert_eq!(sent.len(), 12);
    let mut per_queue: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    for (i, line) in sent.iter().enumerate() {
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys.len(),
            6,
            "exactly msg_id, topic, broker, queue, offset, body: {line}"
        );
        for key in ["msg_id", "topic", "broker", "queue", "offset", "body"] {
            assert!(line.get(key).is_some(), "{key} in {line}");
        }
        assert_eq!(line["topic"], "SendTopic");
        assert_eq!(line["broker"], "broker-a");
        assert_eq!(line["body"], format!("msg-{i}"));
        per_queue
            .entry(line["queue"].as_i64().unwrap())
            .or_default()
            .push(line);
    }
    // Round robin over the 4 queues.
    assert_eq!(per_queue.len(), 4);
    assert!(per_queue.values().all(|lines| lines.len() == 3));

    let brokers = BrokerClient::new(NameServerClient::from_addresses(&namesrv).unwrap());
    for (queue_id, lines) in &per_queue {
        let queue = MessageQueue::new("SendTopic", "broker-a", *queue_id as i32);
        let pulled = pull_all(&brokers, queue, lines.len()).await;
        assert_eq!(pulled.len(), lines.len(), "queue {queue_id}");
        for (message, line) in pulled.iter().zip(lines) {
            assert_eq!(message.queue_offset(), line["offset"].as_i64().unwrap());
            assert_eq!(message.msg_id(), line["msg_id"].as_str().unwrap());
            let body = line["body"].as_str().unwrap();
            assert_eq!(&message.body()[..], body.as_bytes());
            assert_eq!(message.tags(), Some("TagS"));
            let number = body.trim_start_matches("msg-");
            assert_eq!(message.keys().collect::<Vec<_>>(), [format!("k{number}")]);
        }
    }
}

#[tokio::test]
async fn ordered_messages_share_their_keys_queue_in_order() {
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("SendOrdered", 4).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let output = send(args(
        &namesrv,
        "SendOrdered",
        &[
            "--count",
            "8",
            "--ordered-by",
            "order-42",
            "--body-prefix",
            "o-",
            "--rate",
            "50",
            "--json",
        ],
    ))
    .await;
    let sent = lines(&output);
    assert_eq!(sent.len(), 8);
    let queue = sent[0]["queue"].as_i64().unwrap();
    let offsets: Vec<i64> = sent.iter().map(|l| l["offset"].as_i64().unwrap()).collect();
    assert!(sent.iter().all(|l| l["queue"].as_i64() == Some(queue)));
    assert_eq!(offsets, (0..8).collect::<Vec<_>>());
    assert_eq!(sent[7]["body"], "o-7");

    // Without --json: one text line per message.
    let output = send(args(&namesrv, "SendOrdered", &["--count", "2"])).await;
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.starts_with("msg-0\tSendOrdered@broker-a:"), "{text}");
}

#[tokio::test]
async fn an_unknown_topic_fails_the_run_at_once() {
    let cluster = TestCluster::start().unwrap();
    let output = send(args(
        &cluster.namesrv_addr(),
        "NoSuchTopicForSend",
        &["--count", "3", "--timeout", "1s"],
    ))
    .await;
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rebalance send: topic:"), "{stderr}");
}
