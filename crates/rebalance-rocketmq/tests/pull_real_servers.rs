//! The broker client as a message source against a real RocketMQ name server and broker:
//! messages sent come back from PULL_MESSAGE in order with their bodies, ids and tags; a held
//! pull answers when a message arrives; the tag filter; the queue's offsets; send-back to the
//! retry topic (and to the dead-letter topic at the maximum), and its fallback; an offset out of
//! range. Every wait is bounded.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use rebalance_consume::{
    Message, MessageSource, PullError, PullRequest, PullResult, SendBack, property,
};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::unique_id;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::QueueLocker;
use rebalance_runtime::subscription::TagExpression;
use tokio::time::Instant;

use common::init_tracing;

const BROKER: &str = "broker-a";

struct Setup {
    // Dropped last: the servers outlive the clients.
    brokers: BrokerClient,
    sender: MessageSender,
    cluster: TestCluster,
}

async fn setup(topic: &str, queues: i32) -> Setup {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic(topic, queues).await.unwrap();
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let sender = MessageSender::new(name_server, "pull-test-producer");
    Setup {
        brokers,
        sender,
        cluster,
    }
}

/// Sends `body` with `tag` and a unique id to `queue`; returns the id.
async fn send(sender: &MessageSender, queue: &MessageQueue, body: &str, tag: &str) -> String {
    let id = unique_id();
    let message = Outgoing::new(body.to_string())
        .with_tags(tag)
        .with_keys(format!("key-{body}"))
        .with_property(property::UNIQ_KEY, &id);
    let result = sender.send(queue, &message).await.unwrap();
    assert_eq!(&result.queue, queue);
    id
}

fn queue(topic: &str, id: i32) -> MessageQueue {
    MessageQueue::new(topic, BROKER, id)
}

/// Pulls `queue` from `from` (with `expression`) until `expected` messages came or `within`
/// passed; returns them and the next offset.
async fn pull_until(
    brokers: &BrokerClient,
    queue: &MessageQueue,
    expression: &TagExpression,
    from: i64,
    expected: usize,
    within: Duration,
) -> (Vec<Message>, i64) {
    let deadline = Instant::now() + within;
    let mut messages = Vec::new();
    let mut offset = from;
    while messages.len() < expected && Instant::now() < deadline {
        let request = PullRequest::new("pull-test", queue.clone(), offset, expression.clone())
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
            Ok(other) => panic!("unexpected pull result {other:?}"),
            Err(e) => {
                tracing::warn!(error = %e, "pull failed; trying again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    (messages, offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sent_messages_are_pulled_back_in_order_with_their_bodies_ids_and_tags() {
    let s = setup("PullOrder", 4).await;
    let mut sent: Vec<Vec<(String, String, String)>> = vec![Vec::new(); 4];
    for i in 0..40 {
        let q = i % 4;
        let body = format!("body-{i}");
        let tag = if i % 3 == 0 { "TagA" } else { "TagB" };
        let id = send(&s.sender, &queue("PullOrder", q), &body, tag).await;
        sent[q as usize].push((id, body, tag.to_string()));
    }
    for (q, expected) in sent.iter().enumerate() {
        let mq = queue("PullOrder", q as i32);
        let (messages, next) = pull_until(
            &s.brokers,
            &mq,
            &TagExpression::all(),
            0,
            expected.len(),
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(messages.len(), expected.len(), "queue {q}");
        assert_eq!(next, expected.len() as i64);
        let mut commit_log_offsets = BTreeSet::new();
        for (offset, (message, (id, body, tag))) in messages.iter().zip(expected).enumerate() {
            assert_eq!(message.queue(), &mq);
            assert_eq!(message.queue_offset(), offset as i64);
            assert_eq!(message.msg_id(), id);
            assert_eq!(&message.body()[..], body.as_bytes());
            assert_eq!(message.tags(), Some(tag.as_str()));
            assert_eq!(message.keys().collect::<Vec<_>>(), [format!("key-{body}")]);
            assert_eq!(message.reconsume_times(), 0);
            assert!(message.store_timestamp() >= message.born_timestamp());
            assert_eq!(message.property(property::MIN_OFFSET), Some("0"));
            assert!(commit_log_offsets.insert(message.commit_log_offset()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_pull_answers_when_a_message_arrives() {
    let s = setup("PullHeld", 1).await;
    let mq = queue("PullHeld", 0);
    let request = PullRequest::new("pull-test", mq.clone(), 0, TagExpression::all());
    let brokers = s.brokers.clone();
    let started = Instant::now();
    let held = tokio::spawn(async move { brokers.pull(&request).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!held.is_finished(), "the broker held the pull");
    send(&s.sender, &mq, "wake", "T").await;
    let result = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the held pull answered within 10 s of the message")
        .unwrap()
        .unwrap();
    let waited = started.elapsed();
    match result {
        PullResult::Found { messages, .. } => {
            assert_eq!(messages.len(), 1);
            assert_eq!(&messages[0].body()[..], b"wake");
        }
        PullResult::NoNewMessage { .. } => {
            panic!("the pull answered without the message after {waited:?}")
        }
        other => panic!("{other:?}"),
    }
    assert!(waited < Duration::from_secs(12), "{waited:?}");
    // With nothing arriving the pull is answered when the suspend runs out.
    let request = PullRequest::new("pull-test", mq, 1, TagExpression::all())
        .with_suspend(Duration::from_secs(2));
    let started = Instant::now();
    let result = s.brokers.pull(&request).await.unwrap();
    assert_eq!(result, PullResult::NoNewMessage { next_offset: 1 });
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_messages_with_a_subscribed_tag_come_back() {
    let s = setup("PullTags", 1).await;
    let mq = queue("PullTags", 0);
    for (i, tag) in ["TagA", "TagB", "TagC", "TagA", "TagB", "TagA"]
        .iter()
        .enumerate()
    {
        send(&s.sender, &mq, &format!("m{i}"), tag).await;
    }
    let expression = TagExpression::parse("TagA || TagC").unwrap();
    let (messages, _) =
        pull_until(&s.brokers, &mq, &expression, 0, 4, Duration::from_secs(20)).await;
    let got: Vec<(i64, Option<&str>)> = messages
        .iter()
        .map(|m| (m.queue_offset(), m.tags()))
        .collect();
    assert_eq!(
        got,
        [
            (0, Some("TagA")),
            (2, Some("TagC")),
            (3, Some("TagA")),
            (5, Some("TagA"))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_min_max_by_time_and_out_of_range() {
    let s = setup("PullOffsets", 1).await;
    let mq = queue("PullOffsets", 0);
    for i in 0..6 {
        send(&s.sender, &mq, &format!("m{i}"), "T").await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let (messages, _) = pull_until(
        &s.brokers,
        &mq,
        &TagExpression::all(),
        0,
        6,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(messages.len(), 6);
    assert_eq!(s.brokers.min_offset(&mq).await.unwrap(), 0);
    assert_eq!(s.brokers.max_offset(&mq).await.unwrap(), 6);
    let first = messages[0].store_timestamp();
    assert_eq!(s.brokers.offset_at(&mq, first - 60_000).await.unwrap(), 0);
    let third = &messages[3];
    let expected = messages
        .iter()
        .position(|m| m.store_timestamp() >= third.store_timestamp())
        .unwrap() as i64;
    assert_eq!(
        s.brokers
            .offset_at(&mq, third.store_timestamp())
            .await
            .unwrap(),
        expected
    );
    let later = messages[5].store_timestamp() + 3_600_000;
    let at_end = s.brokers.offset_at(&mq, later).await.unwrap();
    assert!((5..=6).contains(&at_end), "{at_end}");

    let request = PullRequest::new("pull-test", mq.clone(), 1000, TagExpression::all())
        .with_suspend(Duration::ZERO);
    match s.brokers.pull(&request).await.unwrap() {
        PullResult::OffsetMoved { next_offset } => {
            assert!((0..=6).contains(&next_offset), "{next_offset}")
        }
        other => panic!("an offset past the end: {other:?}"),
    }
    // An unknown topic is an error for that pull, not a panic.
    let unknown = PullRequest::new(
        "pull-test",
        queue("NoSuchTopic", 0),
        0,
        TagExpression::all(),
    )
    .with_suspend(Duration::ZERO);
    let err = s.brokers.pull(&unknown).await.unwrap_err();
    assert!(matches!(err, PullError::Remote(_)), "{err:?}");
}

/// Pulls the one queue of `topic` (a retry or dead-letter topic) until a message with
/// `origin` as ORIGIN_MESSAGE_ID or id arrives.
async fn wait_in(brokers: &BrokerClient, topic: &str, origin: &str, within: Duration) -> Message {
    let mq = queue(topic, 0);
    let deadline = Instant::now() + within;
    let mut offset = 0;
    while Instant::now() < deadline {
        let request = PullRequest::new("pull-test", mq.clone(), offset, TagExpression::all())
            .with_suspend(Duration::from_secs(1));
        match brokers.pull(&request).await {
            Ok(PullResult::Found {
                messages,
                next_offset,
                ..
            }) => {
                if let Some(m) = messages.into_iter().find(|m| {
                    m.property(property::ORIGIN_MESSAGE_ID) == Some(origin) || m.msg_id() == origin
                }) {
                    return m;
                }
                offset = next_offset;
            }
            Ok(PullResult::NoNewMessage { next_offset })
            | Ok(PullResult::OffsetMoved { next_offset }) => offset = next_offset,
            Ok(other) => panic!("{other:?}"),
            // The topic may not be routed yet.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    panic!("no message from {origin} in {topic} within {within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_back_comes_again_through_the_retry_topic_then_the_dead_letters() {
    let s = setup("PullBack", 1).await;
    let mq = queue("PullBack", 0);
    let id = send(&s.sender, &mq, "fails", "T").await;
    let (messages, _) = pull_until(
        &s.brokers,
        &mq,
        &TagExpression::all(),
        0,
        1,
        Duration::from_secs(20),
    )
    .await;
    let failed = &messages[0];
    s.brokers
        .send_back(
            SendBack::new("BackGroup", failed)
                .with_delay_level(1)
                .with_max_reconsume_times(2),
        )
        .await
        .unwrap();
    let retried = wait_in(&s.brokers, "%RETRY%BackGroup", &id, Duration::from_secs(40)).await;
    assert_eq!(&retried.body()[..], b"fails");
    assert_eq!(retried.reconsume_times(), 1);
    assert_eq!(retried.property(property::RETRY_TOPIC), Some("PullBack"));
    assert_eq!(retried.tags(), Some("T"));
    // Shown under its own topic again, as the consume layer does, then failed past the
    // maximum: straight to the dead letters.
    let retried = retried.with_topic("PullBack");
    s.brokers
        .send_back(
            SendBack::new("BackGroup", &retried)
                .with_delay_level(1)
                .with_max_reconsume_times(1),
        )
        .await
        .unwrap();
    let dead = wait_in(&s.brokers, "%DLQ%BackGroup", &id, Duration::from_secs(20)).await;
    assert_eq!(&dead.body()[..], b"fails");
}

/// CONSUMER_SEND_MSG_BACK cannot find a message at a commit-log offset that does not exist:
/// the message is sent to the retry topic as a normal message instead, with Java's properties.
///
/// Where it lands is the broker's choice, and the Rust broker 1.0 inverts Java's test in
/// `SendMessageProcessor::handle_retry_and_dlq`: Java sends a message for `%RETRY%{group}`
/// straight to the dead letters when the group still holds a queue lock (an orderly group),
/// the Rust broker 1.0 when it holds none (`is_lock_all_expired` without Java's `!`). So for a
/// concurrent group the fallback ends in `%DLQ%{group}` at once, and it reaches the retry topic
/// (and is redelivered, after delay level 3: 10 s) only while the group holds a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_back_falls_back_to_a_send_to_the_retry_topic() {
    let s = setup("PullFallback", 1).await;
    let mq = queue("PullFallback", 0);
    // The retry topic is made by the group's first heartbeat (as a consumer's would be).
    s.cluster
        .create_topic("%RETRY%FallbackGroup", 1)
        .await
        .unwrap();
    let orphan = send(&s.sender, &mq, "orphan", "T").await;
    let locked = send(&s.sender, &mq, "locked", "T").await;
    let (messages, _) = pull_until(
        &s.brokers,
        &mq,
        &TagExpression::all(),
        0,
        2,
        Duration::from_secs(20),
    )
    .await;
    let bogus = |m: &Message| m.clone().with_commit_log_offset(1 << 40);
    let check = |m: &Message, id: &str, body: &[u8]| {
        assert_eq!(&m.body()[..], body);
        assert_eq!(m.property(property::RETRY_TOPIC), Some("PullFallback"));
        assert_eq!(m.property(property::ORIGIN_MESSAGE_ID), Some(id));
    };

    // No lock held by the group: broker 1.0 puts the fallback in the dead letters.
    s.brokers
        .send_back(SendBack::new("FallbackGroup", &bogus(&messages[0])).with_max_reconsume_times(5))
        .await
        .unwrap();
    let dead = wait_in(
        &s.brokers,
        "%DLQ%FallbackGroup",
        &orphan,
        Duration::from_secs(20),
    )
    .await;
    check(&dead, &orphan, b"orphan");

    // A queue locked by the group: the fallback goes to the retry topic and comes back.
    let client = rebalance_core::ClientId::from("127.0.0.1@fallback-locker");
    let outcome = s
        .brokers
        .lock("FallbackGroup", &client, std::slice::from_ref(&mq))
        .await
        .unwrap();
    assert_eq!(outcome.granted, std::slice::from_ref(&mq));
    s.brokers
        .send_back(SendBack::new("FallbackGroup", &bogus(&messages[1])).with_max_reconsume_times(5))
        .await
        .unwrap();
    // Delay level 3 + 0: 10 s.
    let retried = wait_in(
        &s.brokers,
        "%RETRY%FallbackGroup",
        &locked,
        Duration::from_secs(45),
    )
    .await;
    check(&retried, &locked, b"locked");
    assert_eq!(retried.reconsume_times(), 1);
}
