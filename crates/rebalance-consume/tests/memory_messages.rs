//! The in-memory cluster holds messages: sends, pulls with long polling, send-back through the
//! retry topic's delay levels, the dead-letter topic, retention and faults, on paused time.

use std::time::Duration;

use rebalance_consume::memory::{ClusterMessages, OutgoingMessage, SendError};
use rebalance_consume::{
    Message, MessageSource, PullError, PullRequest, PullResult, SendBack, property,
};
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::{CLUSTER_EPOCH_MS, ClusterCall, ClusterClient, InMemoryCluster};
use rebalance_runtime::subscription::TagExpression;
use rebalance_runtime::{NameServer, RemoteError};
use tokio::time::Instant;

const GROUP: &str = "G";

fn queue(topic: &str, i: i32) -> MessageQueue {
    MessageQueue::new(topic, "broker-0", i)
}

fn setup() -> (InMemoryCluster, ClusterClient) {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let client = cluster.client("10.0.0.1@1");
    (cluster, client)
}

fn pull_at(queue: MessageQueue, offset: i64) -> PullRequest {
    PullRequest::new(GROUP, queue, offset, TagExpression::all())
}

fn found(result: &PullResult) -> Vec<Message> {
    match result {
        PullResult::Found { messages, .. } => messages.clone(),
        other => panic!("expected messages, got {other:?}"),
    }
}

/// Pulls the one message at `offset` of `queue` at once.
async fn pull_one(client: &ClusterClient, queue: MessageQueue, offset: i64) -> Message {
    let result = client
        .pull(&pull_at(queue, offset).with_suspend(Duration::ZERO))
        .await
        .unwrap();
    found(&result).remove(0)
}

#[tokio::test(start_paused = true)]
async fn sends_go_round_robin_or_to_the_chosen_queue_with_ids_and_timestamps() {
    let (cluster, _) = setup();
    let a = cluster
        .send("T", OutgoingMessage::new("a").with_tags("A"))
        .unwrap();
    tokio::time::advance(Duration::from_millis(1500)).await;
    let b = cluster
        .send("T", OutgoingMessage::new("b").with_keys(["k1", "k2"]))
        .unwrap();
    let c = cluster.send("T", OutgoingMessage::new("c")).unwrap();
    assert_eq!((a.queue.clone(), a.offset), (queue("T", 0), 0));
    assert_eq!((b.queue.clone(), b.offset), (queue("T", 1), 0));
    assert_eq!((c.queue.clone(), c.offset), (queue("T", 0), 1));
    let to = cluster
        .send_to(&queue("T", 1), OutgoingMessage::new("d"))
        .unwrap();
    assert_eq!(to.offset, 1);
    let ids = [&a.msg_id, &b.msg_id, &c.msg_id, &to.msg_id];
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id.len(), 32, "an offset message id's shape");
        assert!(
            ids[i + 1..].iter().all(|other| other != id),
            "ids are unique"
        );
    }

    let stored = cluster.messages(&queue("T", 0));
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0].msg_id(), a.msg_id);
    assert_eq!(stored[0].tags(), Some("A"));
    assert_eq!(stored[0].store_timestamp(), CLUSTER_EPOCH_MS);
    assert_eq!(stored[1].born_timestamp(), CLUSTER_EPOCH_MS + 1500);
    assert_eq!(
        stored[1].commit_log_offset(),
        2,
        "one log position per message"
    );
    let keyed = &cluster.messages(&queue("T", 1))[0];
    assert_eq!(keyed.keys().collect::<Vec<_>>(), ["k1", "k2"]);
    assert_eq!(cluster.now_ms(), CLUSTER_EPOCH_MS + 1500);

    assert!(matches!(
        cluster.send("Nope", OutgoingMessage::new("x")),
        Err(SendError::TopicNotFound(_))
    ));
    assert!(matches!(
        cluster.send_to(&queue("T", 2), OutgoingMessage::new("x")),
        Err(SendError::NotWritable(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn sends_through_a_producer_follow_its_selection() {
    let (cluster, _) = setup();
    let producer = rebalance_runtime::producer::Producer::builder("P")
        .name_server(std::sync::Arc::new(cluster.client("producer")))
        .round_robin_start(1)
        .start()
        .await
        .unwrap();
    let first = cluster
        .send_with(&producer, "T", OutgoingMessage::new("x"))
        .await
        .unwrap();
    let second = cluster
        .send_with(&producer, "T", OutgoingMessage::new("y"))
        .await
        .unwrap();
    assert_eq!(
        first.queue,
        queue("T", 1),
        "the producer's round robin starts at 1"
    );
    assert_eq!(second.queue, queue("T", 0));
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pulls_keep_to_the_limits_and_the_tag_filter() {
    let (cluster, client) = setup();
    for i in 0..10 {
        let tag = if i % 3 == 0 { "A" } else { "B" };
        cluster
            .send_to(
                &queue("T", 0),
                OutgoingMessage::new(vec![0u8; 100]).with_tags(tag),
            )
            .unwrap();
    }
    let limited = pull_at(queue("T", 0), 1).with_limits(4, 1 << 20);
    let result = client.pull(&limited).await.unwrap();
    let offsets: Vec<i64> = found(&result).iter().map(Message::queue_offset).collect();
    assert_eq!(offsets, [1, 2, 3, 4]);
    assert!(matches!(
        result,
        PullResult::Found {
            next_offset: 5,
            min_offset: 0,
            max_offset: 10,
            ..
        }
    ));
    let by_bytes = pull_at(queue("T", 0), 0).with_limits(32, 250);
    assert_eq!(found(&client.pull(&by_bytes).await.unwrap()).len(), 2);

    let tag_a = PullRequest::new(GROUP, queue("T", 0), 0, TagExpression::parse("A").unwrap());
    let result = client.pull(&tag_a).await.unwrap();
    let offsets: Vec<i64> = found(&result).iter().map(Message::queue_offset).collect();
    assert_eq!(offsets, [0, 3, 6, 9]);
    assert!(matches!(
        result,
        PullResult::Found {
            next_offset: 10,
            ..
        }
    ));
}

/// A broker filters by the tag's hash code (Java's `String.hashCode`), not by the tag: a tag
/// with the subscribed tag's hash ("Aa" and "BB" both hash to 2112) passes the broker, and the
/// client re-filters it (the Java client's `PullAPIWrapper.processPullResult`). The pull
/// answers found, with none left, and the offset after the colliding message; it is not held.
#[tokio::test(start_paused = true)]
async fn a_tag_of_the_same_hash_passes_the_broker_and_is_filtered_by_the_client() {
    let (cluster, client) = setup();
    for tag in ["BB", "BB", "Aa", "C"] {
        cluster
            .send_to(&queue("T", 0), OutgoingMessage::new("x").with_tags(tag))
            .unwrap();
    }
    let aa = TagExpression::parse("Aa").unwrap();
    let request = PullRequest::new(GROUP, queue("T", 0), 0, aa.clone()).with_limits(2, 1 << 20);
    let started = Instant::now();
    let result = client.pull(&request).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "found: not held");
    assert_eq!(
        result,
        PullResult::Found {
            messages: Vec::new(),
            next_offset: 2,
            min_offset: 0,
            max_offset: 4,
        },
        "two messages passed the broker's hash filter, none the client's"
    );
    let next = PullRequest::new(GROUP, queue("T", 0), 2, aa);
    let result = client.pull(&next).await.unwrap();
    let offsets: Vec<i64> = found(&result).iter().map(Message::queue_offset).collect();
    assert_eq!(offsets, [2]);
    assert!(matches!(result, PullResult::Found { next_offset: 4, .. }));
}

#[tokio::test(start_paused = true)]
async fn a_held_pull_wakes_when_a_message_arrives() {
    let (cluster, client) = setup();
    cluster
        .send_to(&queue("T", 0), OutgoingMessage::new("old"))
        .unwrap();
    let start = Instant::now();
    let held = tokio::spawn(async move { client.pull(&pull_at(queue("T", 0), 1)).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    // A message on another queue does not wake it.
    cluster
        .send_to(&queue("T", 1), OutgoingMessage::new("other"))
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!held.is_finished(), "held while its queue has nothing new");
    let sent = cluster
        .send_to(&queue("T", 0), OutgoingMessage::new("new"))
        .unwrap();
    let result = held.await.unwrap().unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(4),
        "answered on arrival"
    );
    let messages = found(&result);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].msg_id(), sent.msg_id);
}

#[tokio::test(start_paused = true)]
async fn a_held_pull_answers_no_new_message_at_the_end_of_its_suspend_time() {
    let (_cluster, client) = setup();
    let start = Instant::now();
    let request = pull_at(queue("T", 0), 0).with_suspend(Duration::from_secs(15));
    let result = client.pull(&request).await.unwrap();
    assert_eq!(result, PullResult::NoNewMessage { next_offset: 0 });
    assert_eq!(start.elapsed(), Duration::from_secs(15));
    let at_once = client
        .pull(&request.clone().with_suspend(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(at_once, PullResult::NoNewMessage { next_offset: 0 });
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(15),
        "zero suspend: no hold"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pull_of_a_queue_outside_the_route_is_refused() {
    let (_cluster, client) = setup();
    let error = client.pull(&pull_at(queue("T", 7), 0)).await.unwrap_err();
    assert!(matches!(
        error,
        PullError::Remote(RemoteError::Refused { code: 17, .. })
    ));
}

/// Sends one message to T/0 and returns it as pulled.
async fn one_message(cluster: &InMemoryCluster, client: &ClusterClient) -> Message {
    let sent = cluster
        .send_to(&queue("T", 0), OutgoingMessage::new("body").with_tags("A"))
        .unwrap();
    pull_one(client, queue("T", 0), sent.offset).await
}

/// Waits (with a pull held up to 3 h) until the retry topic's queue on broker-0 has `n`
/// messages; how long it took.
async fn redelivered_after(client: &ClusterClient, n: usize) -> Duration {
    let start = Instant::now();
    let retry = MessageQueue::new("%RETRY%G", "broker-0", 0);
    let request = pull_at(retry, n as i64 - 1).with_suspend(Duration::from_secs(3 * 3600));
    let result = client.pull(&request).await.unwrap();
    assert!(!found(&result).is_empty(), "redelivered");
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_message_sent_back_is_redelivered_through_the_retry_topic_after_its_delay_level() {
    let (cluster, client) = setup();
    let message = one_message(&cluster, &client).await;
    client
        .send_back(SendBack::new(GROUP, &message))
        .await
        .unwrap();
    assert_eq!(cluster.pending_redeliveries(GROUP), 1);
    // Level 0 lets the broker decide: 3 + 0 redeliveries = level 3 = 10 s.
    let waited = redelivered_after(&client, 1).await;
    assert_eq!(waited, Duration::from_secs(10));
    assert_eq!(cluster.pending_redeliveries(GROUP), 0);
    let retry = MessageQueue::new("%RETRY%G", "broker-0", 0);
    let route = client.topic_route("%RETRY%G").await.unwrap();
    assert_eq!(
        route.subscribable_queues("%RETRY%G"),
        std::slice::from_ref(&retry),
        "routed, so a rebalance sees it"
    );

    let copy = pull_one(&client, retry.clone(), 0).await;
    assert_eq!(copy.msg_id(), message.msg_id(), "a redelivery keeps the id");
    assert_eq!(copy.reconsume_times(), 1);
    assert_eq!(copy.property(property::RETRY_TOPIC), Some("T"));
    assert_eq!(
        copy.property(property::ORIGIN_MESSAGE_ID),
        Some(message.msg_id())
    );
    assert_eq!(copy.tags(), Some("A"));
    assert_eq!(copy.body(), message.body());
    assert_eq!(copy.born_timestamp(), message.born_timestamp());
    assert_eq!(copy.store_timestamp(), message.store_timestamp() + 10_000);

    // The second failure: level 3 + 1 = 30 s; the retry topic is kept as the origin.
    client.send_back(SendBack::new(GROUP, &copy)).await.unwrap();
    assert_eq!(redelivered_after(&client, 2).await, Duration::from_secs(30));
    let again = pull_one(&client, retry, 1).await;
    assert_eq!(again.reconsume_times(), 2);
    assert_eq!(again.property(property::RETRY_TOPIC), Some("T"));
}

#[tokio::test(start_paused = true)]
async fn explicit_delay_levels_follow_the_java_table() {
    let (cluster, client) = setup();
    let message = one_message(&cluster, &client).await;
    let expected = [(1, 1), (2, 5), (5, 60), (18, 7200), (40, 7200)];
    for (n, (level, secs)) in expected.into_iter().enumerate() {
        let request = SendBack::new(GROUP, &message).with_delay_level(level);
        client.send_back(request).await.unwrap();
        let waited = redelivered_after(&client, n + 1).await;
        assert_eq!(waited, Duration::from_secs(secs), "level {level}");
    }
}

/// A send-back is decided, as a broker decides it, with the message the cluster stored (found
/// by its commit-log offset), not with the client's copy: a fresh message is retried whatever
/// count the client gives it; one redelivered up to the limit, or sent with a negative level,
/// is dead-lettered (counting one more delivery, as the retry copy does); a message the cluster
/// does not hold falls back to a new message, as the client transport sends it.
#[tokio::test(start_paused = true)]
async fn send_backs_are_decided_with_the_stored_message() {
    let (cluster, client) = setup();
    let message = one_message(&cluster, &client).await;
    let claimed = message.clone().with_reconsume_times(16);
    client
        .send_back(SendBack::new(GROUP, &claimed))
        .await
        .unwrap();
    assert!(
        cluster.dead_letters(GROUP).is_empty(),
        "stored count 0: retried, whatever the client's copy says"
    );
    assert_eq!(cluster.pending_redeliveries(GROUP), 1);
    assert_eq!(redelivered_after(&client, 1).await, Duration::from_secs(10));
    let retry = MessageQueue::new("%RETRY%G", "broker-0", 0);
    let first = pull_one(&client, retry.clone(), 0).await;
    assert_eq!(first.reconsume_times(), 1);

    // Stored count 1, limit 2: retried; stored count 2: dead-lettered, keeping its count.
    let limited = SendBack::new(GROUP, &first).with_max_reconsume_times(2);
    client.send_back(limited).await.unwrap();
    redelivered_after(&client, 2).await;
    let second = pull_one(&client, retry.clone(), 1).await;
    assert_eq!(second.reconsume_times(), 2);
    let limited = SendBack::new(GROUP, &second).with_max_reconsume_times(2);
    client.send_back(limited).await.unwrap();
    let dead = cluster.dead_letters(GROUP);
    assert_eq!(dead.len(), 1, "dead-lettered at once");
    assert_eq!(dead[0].msg_id(), message.msg_id());
    assert_eq!(dead[0].queue(), &MessageQueue::new("%DLQ%G", "broker-0", 0));
    assert_eq!(dead[0].reconsume_times(), 3, "the stored count and one");
    assert_eq!(cluster.pending_redeliveries(GROUP), 0);

    // A negative level dead-letters a fresh message.
    let fresh = one_message(&cluster, &client).await;
    client
        .send_back(SendBack::new(GROUP, &fresh).to_dead_letters())
        .await
        .unwrap();
    assert_eq!(cluster.dead_letters(GROUP).len(), 2);
    assert_eq!(cluster.dead_letters(GROUP)[1].reconsume_times(), 1);
    assert!(cluster.dead_letters("other").is_empty());
    assert!(client.topic_route("%DLQ%G").await.is_ok());

    // A message the cluster does not hold (another commit-log position): the broker cannot
    // find it, and the client sends its copy to the retry topic as a new message, counted
    // from the copy (2 + 1), after level 3 + 2 (1 min).
    let unknown = fresh
        .clone()
        .with_commit_log_offset(9_999)
        .with_reconsume_times(2);
    client
        .send_back(SendBack::new(GROUP, &unknown))
        .await
        .unwrap();
    assert_eq!(cluster.pending_redeliveries(GROUP), 1);
    assert_eq!(redelivered_after(&client, 3).await, Duration::from_secs(60));
    let copy = pull_one(&client, retry, 2).await;
    assert_eq!(copy.reconsume_times(), 3);
    assert_eq!(copy.msg_id(), fresh.msg_id());
}

/// The client's fallback send of a message the broker cannot find carries the copy's count plus
/// one, and a broker dead-letters it on arrival only when that count is *above* the maximum
/// (`SendMessageProcessor.handleRetryAndDLQ`: `reconsumeTimes > maxReconsumeTimes`, in the Java
/// broker and the Rust one alike: the client has counted the delivery already). A count that
/// reaches the maximum is retried once more (after level 3 + the copy's count, capped at 18).
#[tokio::test(start_paused = true)]
async fn a_fallback_send_is_dead_lettered_only_above_the_maximum() {
    let (cluster, client) = setup();
    let message = one_message(&cluster, &client).await;
    let unknown = |count| {
        message
            .clone()
            .with_commit_log_offset(9_999)
            .with_reconsume_times(count)
    };
    let at_max = unknown(15);
    client
        .send_back(SendBack::new(GROUP, &at_max).with_max_reconsume_times(16))
        .await
        .unwrap();
    assert!(
        cluster.dead_letters(GROUP).is_empty(),
        "a count of 16 is not above 16: retried"
    );
    assert_eq!(cluster.pending_redeliveries(GROUP), 1);
    assert_eq!(
        redelivered_after(&client, 1).await,
        Duration::from_secs(7200)
    );
    let retry = MessageQueue::new("%RETRY%G", "broker-0", 0);
    assert_eq!(pull_one(&client, retry, 0).await.reconsume_times(), 16);

    let above = unknown(16);
    client
        .send_back(SendBack::new(GROUP, &above).with_max_reconsume_times(16))
        .await
        .unwrap();
    let dead = cluster.dead_letters(GROUP);
    assert_eq!(dead.len(), 1, "a count of 17 is above 16: dead-lettered");
    assert_eq!(dead[0].reconsume_times(), 17);

    // Sent to the dead letters and falling back: a count above the maximum, or a broker would
    // retry it (`16 > 16` is false; found by review).
    let given_up = unknown(3);
    client
        .send_back(
            SendBack::new(GROUP, &given_up)
                .with_max_reconsume_times(16)
                .to_dead_letters(),
        )
        .await
        .unwrap();
    let dead = cluster.dead_letters(GROUP);
    assert_eq!(dead.len(), 2, "dead-lettered, not retried");
    assert_eq!(dead[1].reconsume_times(), 17);
}

#[tokio::test(start_paused = true)]
async fn truncated_offsets_move_to_the_smallest_left() {
    let (cluster, client) = setup();
    for _ in 0..5 {
        cluster
            .send_to(&queue("T", 0), OutgoingMessage::new("x"))
            .unwrap();
    }
    cluster.truncate(&queue("T", 0), 3);
    assert_eq!(client.min_offset(&queue("T", 0)).await.unwrap(), 3);
    assert_eq!(client.max_offset(&queue("T", 0)).await.unwrap(), 5);
    let moved = client.pull(&pull_at(queue("T", 0), 1)).await.unwrap();
    assert_eq!(moved, PullResult::OffsetMoved { next_offset: 3 });
    let beyond = client.pull(&pull_at(queue("T", 0), 9)).await.unwrap();
    assert_eq!(beyond, PullResult::OffsetMoved { next_offset: 5 });
    let offsets: Vec<i64> = cluster
        .messages(&queue("T", 0))
        .iter()
        .map(Message::queue_offset)
        .collect();
    assert_eq!(offsets, [3, 4]);
    assert_eq!(pull_one(&client, queue("T", 0), 3).await.queue_offset(), 3);
}

#[tokio::test(start_paused = true)]
async fn offsets_by_timestamp_and_bounds() {
    let (cluster, client) = setup();
    let q = queue("T", 0);
    assert_eq!(
        client.max_offset(&q).await.unwrap(),
        0,
        "a queue never written"
    );
    for _ in 0..3 {
        cluster.send_to(&q, OutgoingMessage::new("x")).unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
    }
    // Stored at epoch + 0, 10 s, 20 s.
    assert_eq!(
        client
            .offset_at(&q, CLUSTER_EPOCH_MS + 5_000)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        client
            .offset_at(&q, CLUSTER_EPOCH_MS + 10_000)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        client
            .offset_at(&q, CLUSTER_EPOCH_MS + 60_000)
            .await
            .unwrap(),
        3
    );
    assert_eq!(client.offset_at(&q, 0).await.unwrap(), 0);
    assert_eq!(cluster.min_offset(&q), 0);
    assert_eq!(cluster.max_offset(&q), 3);
    assert_eq!(cluster.offset_at(&q, CLUSTER_EPOCH_MS + 15_000), 2);
}

#[tokio::test(start_paused = true)]
async fn pull_faults_fail_slow_down_or_lose_the_answer() {
    let (cluster, client) = setup();
    cluster
        .send_to(&queue("T", 0), OutgoingMessage::new("x"))
        .unwrap();
    let request = pull_at(queue("T", 0), 0);

    cluster.fail_next(ClusterCall::Pull, 1);
    assert!(matches!(
        client.pull(&request).await,
        Err(PullError::Remote(RemoteError::Unreachable(_)))
    ));

    cluster.delay_next(ClusterCall::Pull, 1, Duration::from_secs(2));
    let start = Instant::now();
    assert_eq!(found(&client.pull(&request).await.unwrap()).len(), 1);
    assert_eq!(start.elapsed(), Duration::from_secs(2));

    cluster.lose_next_replies(ClusterCall::Pull, 1);
    assert!(client.pull(&request).await.is_err());
    assert_eq!(
        found(&client.pull(&request).await.unwrap()).len(),
        1,
        "faults are used up"
    );

    cluster.partition(client.client_id(), true);
    assert!(client.pull(&request).await.is_err());
    assert!(client.max_offset(&queue("T", 0)).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn send_back_faults_fail_or_lose_the_answer_after_sending() {
    let (cluster, client) = setup();
    let message = one_message(&cluster, &client).await;
    cluster.fail_next(ClusterCall::SendBack, 1);
    assert!(
        client
            .send_back(SendBack::new(GROUP, &message))
            .await
            .is_err()
    );
    assert_eq!(
        cluster.pending_redeliveries(GROUP),
        0,
        "a failed call sends nothing"
    );

    cluster.lose_next_replies(ClusterCall::SendBack, 1);
    assert!(
        client
            .send_back(SendBack::new(GROUP, &message))
            .await
            .is_err()
    );
    assert_eq!(
        cluster.pending_redeliveries(GROUP),
        1,
        "a lost reply still sent it"
    );

    cluster.delay_next(ClusterCall::SendBack, 1, Duration::from_secs(4));
    let start = Instant::now();
    client
        .send_back(SendBack::new(GROUP, &message))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(4));
    assert_eq!(redelivered_after(&client, 1).await, Duration::from_secs(6));
    let retry = MessageQueue::new("%RETRY%G", "broker-0", 0);
    assert_eq!(
        cluster.messages(&retry).len(),
        2,
        "both copies arrived together"
    );

    cluster.fail_next(ClusterCall::QueryOffset, 1);
    assert!(client.min_offset(&queue("T", 0)).await.is_err());
    assert!(client.min_offset(&queue("T", 0)).await.is_ok());
}
