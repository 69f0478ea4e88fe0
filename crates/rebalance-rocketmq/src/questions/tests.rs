use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    Consumer, ConsumerHandle, ListenerError, QueueLease, QueueListener, RemovedQueue,
};

use super::*;

/// Commits 42 on every queue it gets.
struct Committing;

#[async_trait]
impl QueueListener for Committing {
    async fn queues_added(&self, _: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        for lease in queues {
            lease.commit(42);
        }
        Ok(())
    }
    async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> {
        Ok(())
    }
}

async fn consumer(cluster: &InMemoryCluster, id: &str) -> ConsumerHandle {
    let handle = Consumer::builder("G")
        .subscribe("T")
        .cluster(cluster.client(id))
        .listener(Arc::new(Committing))
        .start()
        .await
        .unwrap();
    // Its first round (after the start-up settle window) took every queue.
    handle.ready(Duration::from_secs(10)).await.unwrap();
    handle
}

fn json_of(body: &[u8]) -> serde_json::Value {
    let text = std::str::from_utf8(body).unwrap();
    serde_json::from_str(&stringify_object_keys(text)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn running_info_is_answered_in_javas_shape() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let handle = consumer(&cluster, "10.0.0.1@1").await;
    let questions = ServerQuestions::default();
    let ns = Namespace::new("NS").unwrap();
    questions.attach(
        "NS%G",
        handle.started(),
        Some(ns),
        &["10.0.0.9:9876".into()],
    );
    let ask = |group: &str, client: &str| {
        RemotingCommand::request(request_code::GET_CONSUMER_RUNNING_INFO)
            .with_ext("consumerGroup", group)
            .with_ext("clientId", client)
            .with_ext("jstackEnable", "false")
    };
    let answer = questions.handle("b:1", &ask("NS%G", "10.0.0.1@1")).unwrap();
    assert_eq!(answer.code, response_code::SUCCESS);
    let text = std::str::from_utf8(&answer.body).unwrap();
    assert!(
        text.contains(r#"{"brokerName":"broker-0","queueId":0,"topic":"NS%T"}:{"#),
        "queue keys are fastjson objects, named in the namespace: {text}"
    );
    let info = json_of(&answer.body);
    let props = &info["properties"];
    for key in [
        "PROP_CLIENT_VERSION",
        "PROP_CONSUMER_START_TIMESTAMP",
        "PROP_CONSUME_TYPE",
        "PROP_CONSUMEORDERLY",
        "PROP_NAMESERVER_ADDR",
        "PROP_CLIENT_LANGUAGE",
    ] {
        assert!(props[key].is_string(), "{key} is a string: {props}");
    }
    assert!(
        props["PROP_CONSUMER_START_TIMESTAMP"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
            > 0
    );
    assert_eq!(props["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY");
    assert_eq!(props["PROP_NAMESERVER_ADDR"], "10.0.0.9:9876;");
    assert_eq!(props["consumerGroup"], "NS%G");
    let topics: Vec<&str> = info["subscriptionSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, ["%RETRY%NS%G", "NS%T"]);
    let table = info["mqTable"].as_object().unwrap();
    assert_eq!(table.len(), 2);
    for (key, queue) in table {
        assert_eq!(parse_queue_key(key).unwrap().topic.as_ref(), "NS%T");
        assert_eq!(queue["commitOffset"], 42);
        assert_eq!(queue["cachedMsgSizeInMiB"], 0);
        assert_eq!(queue["droped"], false);
        assert_eq!(queue["lastPullTimestamp"], 0, "no consume layer");
    }
    assert!(info["statusTable"]["NS%T"]["consumeOKTPS"].is_f64());
    assert_eq!(info["mqPopTable"], serde_json::json!({}));
    assert_eq!(info["userConsumerInfo"]["consuming"], "false");

    // Another client id, or another group: Java's refusal.
    for (group, client) in [("NS%G", "10.0.0.2@2"), ("H", "10.0.0.1@1")] {
        let answer = questions.handle("b:1", &ask(group, client)).unwrap();
        assert_eq!(answer.code, response_code::SYSTEM_ERROR);
        assert!(
            answer
                .remark_or_empty()
                .contains("not exist in this consumer")
        );
    }
    handle.shutdown().await;
    let answer = questions.handle("b:1", &ask("NS%G", "10.0.0.1@1")).unwrap();
    assert_eq!(
        answer.code,
        response_code::SYSTEM_ERROR,
        "a stopped consumer is not answered for"
    );
}

#[tokio::test(start_paused = true)]
async fn consumer_status_lists_the_committed_offsets_of_the_topic() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let handle = consumer(&cluster, "10.0.0.1@1").await;
    let questions = ServerQuestions::default();
    questions.attach("G", handle.started(), None, &[]);
    let ask = RemotingCommand::request(request_code::GET_CONSUMER_STATUS_FROM_CLIENT)
        .with_ext("group", "G")
        .with_ext("topic", "T");
    let answer = questions.handle("b:1", &ask).unwrap();
    assert_eq!(answer.code, response_code::SUCCESS);
    let status = json_of(&answer.body);
    let table = status["messageQueueTable"].as_object().unwrap();
    let mut offsets: Vec<(MessageQueue, i64)> = table
        .iter()
        .map(|(k, v)| (parse_queue_key(k).unwrap(), v.as_i64().unwrap()))
        .collect();
    offsets.sort();
    assert_eq!(
        offsets,
        vec![
            (MessageQueue::new("T", "broker-0", 0), 42),
            (MessageQueue::new("T", "broker-0", 1), 42)
        ]
    );
    assert_eq!(status["consumerTable"], serde_json::json!({}));
    // An unknown group: an empty table, as Java answers.
    let other = RemotingCommand::request(request_code::GET_CONSUMER_STATUS_FROM_CLIENT)
        .with_ext("group", "H")
        .with_ext("topic", "T");
    let answer = questions.handle("b:1", &other).unwrap();
    assert_eq!(
        json_of(&answer.body)["messageQueueTable"],
        serde_json::json!({})
    );
    handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_pushed_reset_reaches_the_consumer_and_garbage_is_refused() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let handle = consumer(&cluster, "10.0.0.1@1").await;
    let questions = ServerQuestions::default();
    questions.attach("G", handle.started(), None, &[]);
    let body = r#"{"offsetTable":{{"topic":"T","brokerName":"broker-0","queueId":1}:5,{"topic":"T","brokerName":"broker-0","queueId":0}:3}}"#;
    let mut push = RemotingCommand::request(request_code::RESET_CONSUMER_CLIENT_OFFSET)
        .with_ext("topic", "T")
        .with_ext("group", "G")
        .with_ext("timestamp", "-1")
        .with_ext("isForce", "true")
        .with_body(body);
    push.flag |= crate::command::FLAG_ONEWAY;
    assert_eq!(
        questions.handle("b:1", &push).unwrap().code,
        response_code::SUCCESS
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let queue = |i| MessageQueue::new("T", "broker-0", i);
    // Reset, then taken again and committed at 42 by the listener, in memory: the store saw
    // the reset first.
    let report = handle.rounds().borrow().clone();
    assert!(
        report
            .reasons
            .contains(rebalance_runtime::wake::WakeReasons::OFFSET_RESET)
    );
    let removed: Vec<_> = report.removed().map(|r| r.queue.clone()).collect();
    assert_eq!(removed, vec![queue(0), queue(1)]);
    let garbage = RemotingCommand::request(request_code::RESET_CONSUMER_CLIENT_OFFSET)
        .with_ext("group", "G")
        .with_body("{\"offsetTable\":[1,2]}");
    assert_eq!(
        questions.handle("b:1", &garbage).unwrap().code,
        response_code::SYSTEM_ERROR
    );
    handle.shutdown().await;
}

#[test]
fn other_codes_are_not_supported() {
    let questions = ServerQuestions::default();
    assert!(
        questions
            .handle("b:1", &RemotingCommand::request(309))
            .is_none()
    );
}
