//! The in-memory cluster serves POP as a Java broker does, on paused time: invisible time,
//! revive through the POP retry topic, acknowledgements, changes of invisible time, orderly
//! POP's blocked queues, long polling, queue id -1, faults.

use std::collections::BTreeSet;
use std::time::Duration;

use rebalance_consume::memory::{ClusterMessages, OutgoingMessage, pop_retry_topic};
use rebalance_consume::{Message, PopRequest, PopResult, PopSource, PopStart, PullError};
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::memory::{ClusterCall, ClusterClient, InMemoryCluster};
use rebalance_runtime::subscription::TagExpression;
use tokio::time::Instant;

const GROUP: &str = "G";

fn setup(queues: i32) -> (InMemoryCluster, ClusterClient) {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, queues);
    let client = cluster.client("10.0.0.1@1");
    (cluster, client)
}

fn all(queue_id: i32) -> PopRequest {
    PopRequest::new(
        GROUP,
        MessageQueue::new("T", "broker-0", queue_id),
        TagExpression::all(),
    )
    .with_invisible_time(Duration::from_secs(10))
    .with_poll_time(Duration::ZERO)
    .with_start(PopStart::Earliest)
}

fn send(cluster: &InMemoryCluster, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            cluster
                .send("T", OutgoingMessage::new(format!("m{i}")))
                .unwrap()
                .msg_id
        })
        .collect()
}

async fn pop(client: &ClusterClient, request: &PopRequest) -> Vec<Message> {
    match client.pop(request).await.unwrap() {
        PopResult::Found { messages, .. } => messages,
        _ => Vec::new(),
    }
}

fn ids(messages: &[Message]) -> BTreeSet<String> {
    messages.iter().map(|m| m.msg_id().to_string()).collect()
}

fn handles(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m.receipt_handle().unwrap())
        .collect()
}

/// A pop of queue -1 takes from every queue; the messages are invisible to the next pop; the
/// acknowledged ones never come back, the others come back once their invisible time passes,
/// through the group's POP retry topic, under the topic, counted once more.
#[tokio::test(start_paused = true)]
async fn unacknowledged_messages_are_revived_after_their_invisible_time() {
    let (cluster, client) = setup(4);
    let sent = send(&cluster, 8);
    let first = pop(&client, &all(-1)).await;
    assert_eq!(ids(&first), sent.iter().cloned().collect());
    let queues: BTreeSet<i32> = first.iter().map(|m| m.queue().queue_id).collect();
    assert_eq!(queues.len(), 4);
    assert!(first.iter().all(|m| m.property("1ST_POP_TIME").is_some()));
    assert!(pop(&client, &all(-1)).await.is_empty(), "invisible");
    let (acked, left) = first.split_at(5);
    client.ack(GROUP, "T", &handles(acked)).await.unwrap();
    tokio::time::advance(Duration::from_millis(9_900)).await;
    assert!(pop(&client, &all(-1)).await.is_empty(), "not yet");
    tokio::time::advance(Duration::from_millis(200)).await;
    tokio::task::yield_now().await;
    let retry = MessageQueue::new(pop_retry_topic(GROUP, "T").as_str(), "broker-0", 0);
    assert_eq!(
        cluster.messages(&retry).len(),
        3,
        "revived into the POP retry topic"
    );
    let back = pop(&client, &all(-1)).await;
    assert_eq!(ids(&back), ids(left));
    assert!(
        back.iter()
            .all(|m| m.topic() == "T" && m.reconsume_times() == 1)
    );
    client.ack(GROUP, "T", &handles(&back)).await.unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;
    tokio::task::yield_now().await;
    assert!(
        pop(&client, &all(-1)).await.is_empty(),
        "acknowledged for good"
    );
}

/// A change of invisible time gives a new handle and moves the redelivery; an
/// acknowledgement with the old handle changes nothing then.
#[tokio::test(start_paused = true)]
async fn a_change_of_invisible_time_moves_the_redelivery() {
    let (cluster, client) = setup(1);
    send(&cluster, 2);
    let popped = pop(&client, &all(0)).await;
    let old = popped[0].receipt_handle().unwrap();
    let new = client
        .change_invisible_time(GROUP, "T", old, Duration::from_secs(30))
        .await
        .unwrap();
    assert_ne!(new, old);
    client
        .ack(GROUP, "T", &[old, popped[1].receipt_handle().unwrap()])
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(15)).await;
    tokio::task::yield_now().await;
    assert!(pop(&client, &all(0)).await.is_empty(), "postponed");
    tokio::time::advance(Duration::from_secs(16)).await;
    tokio::task::yield_now().await;
    let back = pop(&client, &all(0)).await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].msg_id(), popped[0].msg_id());
    // Made visible at once.
    let again = client
        .change_invisible_time(
            GROUP,
            "T",
            back[0].receipt_handle().unwrap(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let now = pop(&client, &all(0)).await;
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].reconsume_times(), 2);
    assert_ne!(again, now[0].receipt_handle().unwrap());
}

/// A message its queue no longer has (deleted past it while invisible) cannot have its
/// invisible time changed: refused with 208, as a broker does, whose POP consumer then stops
/// asking; an acknowledgement of it is not an error (the source's contract). The message is
/// not revived.
#[tokio::test(start_paused = true)]
async fn a_message_deleted_while_invisible_is_refused_a_change_of_invisible_time() {
    let (cluster, client) = setup(1);
    send(&cluster, 3);
    let popped = pop(&client, &all(0)).await;
    assert_eq!(popped.len(), 3);
    cluster.truncate(&MessageQueue::new("T", "broker-0", 0), 2);
    for (message, gone) in popped.iter().zip([true, true, false]) {
        let answer = client
            .change_invisible_time(
                GROUP,
                "T",
                message.receipt_handle().unwrap(),
                Duration::ZERO,
            )
            .await;
        match answer {
            Err(RemoteError::Refused { code: 208, remark }) => {
                assert!(gone, "offset {} refused: {remark}", message.queue_offset());
                assert!(remark.contains("[2, 3]"), "{remark}");
            }
            Ok(_) => assert!(!gone, "offset {} changed", message.queue_offset()),
            Err(e) => panic!("offset {}: {e}", message.queue_offset()),
        }
    }
    client
        .ack(GROUP, "T", &[popped[0].receipt_handle().unwrap()])
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let back = pop(&client, &all(0)).await;
    assert_eq!(
        ids(&back),
        ids(&popped[2..]),
        "only the message still stored, made visible at once"
    );
}

/// Orderly POP: the queue is blocked for other attempts; the same attempt gets the batch again;
/// after the invisible time the same messages come, in order, counted once more; in-order
/// acknowledgements move the group on, and a held pop is answered when the batch is done.
#[tokio::test(start_paused = true)]
async fn orderly_pops_block_their_queue_until_acknowledged_or_visible() {
    let (cluster, client) = setup(1);
    send(&cluster, 3);
    let a1 = all(0).orderly(Some("a1".into()));
    let batch = pop(&client, &a1).await;
    let offsets = |b: &[Message]| -> Vec<(i64, i32)> {
        b.iter()
            .map(|m| (m.queue_offset(), m.reconsume_times()))
            .collect()
    };
    assert_eq!(offsets(&batch), [(0, 0), (1, 0), (2, 0)]);
    assert!(
        pop(&client, &all(0).orderly(Some("a2".into())))
            .await
            .is_empty(),
        "blocked"
    );
    let repeated = pop(&client, &a1).await;
    assert_eq!(
        offsets(&repeated),
        [(0, 0), (1, 0), (2, 0)],
        "the same attempt again, counted as the same delivery"
    );
    tokio::time::advance(Duration::from_secs(11)).await;
    let again = pop(&client, &all(0).orderly(Some("a3".into()))).await;
    assert_eq!(offsets(&again), [(0, 1), (1, 1), (2, 1)]);
    client.ack(GROUP, "T", &handles(&again[..2])).await.unwrap();
    assert_eq!(
        cluster.offset(GROUP, &MessageQueue::new("T", "broker-0", 0)),
        Some(2)
    );
    // A held pop of another member, answered once the batch is done.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            let request = all(0)
                .orderly(Some("b1".into()))
                .with_poll_time(Duration::from_secs(5));
            let started = Instant::now();
            (pop(&client, &request).await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    send(&cluster, 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    client.ack(GROUP, "T", &handles(&again[2..])).await.unwrap();
    let (next, waited) = waiting.await.unwrap();
    assert_eq!(offsets(&next), [(3, 0)]);
    assert_eq!(waited, Duration::from_secs(2));
    // An offset outside the batch is refused.
    let foreign = next[0].receipt_handle().unwrap().replace(" 3", " 9");
    assert!(matches!(
        client.ack(GROUP, "T", &[&foreign]).await,
        Err(RemoteError::Refused { code: 13, .. })
    ));
}

/// A pop that finds nothing is held until a message arrives, or for its poll time.
#[tokio::test(start_paused = true)]
async fn pops_are_held_until_a_message_arrives() {
    let (cluster, client) = setup(2);
    let held = all(-1).with_poll_time(Duration::from_secs(5));
    let started = Instant::now();
    assert_eq!(client.pop(&held).await.unwrap(), PopResult::NoMessage);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    let waiting = {
        let client = client.clone();
        let held = held.clone();
        tokio::spawn(async move { pop(&client, &held).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = send(&cluster, 1);
    assert_eq!(ids(&waiting.await.unwrap()), sent.into_iter().collect());
}

/// Where a group without offset starts, tags, refusals and faults.
#[tokio::test(start_paused = true)]
async fn starts_filters_refusals_and_faults() {
    let (cluster, client) = setup(1);
    for tag in ["A", "B", "A"] {
        cluster
            .send("T", OutgoingMessage::new(tag).with_tags(tag))
            .unwrap();
    }
    let only_a = PopRequest::new(
        GROUP,
        MessageQueue::new("T", "broker-0", 0),
        TagExpression::parse("A").unwrap(),
    )
    .with_poll_time(Duration::ZERO);
    let popped = pop(&client, &only_a).await;
    assert_eq!(
        popped.iter().map(|m| m.queue_offset()).collect::<Vec<_>>(),
        [0, 2],
        "a young queue is delivered whole"
    );
    // Another group, once the queue is truncated: from its last message.
    cluster.truncate(&MessageQueue::new("T", "broker-0", 0), 1);
    let mut latest = all(0).with_start(PopStart::Latest);
    latest.group = "H".into();
    assert_eq!(
        pop(&client, &latest)
            .await
            .iter()
            .map(|m| m.queue_offset())
            .collect::<Vec<_>>(),
        [2]
    );
    let mut unknown = all(0);
    unknown.queue = MessageQueue::new("Nope", "broker-0", -1);
    assert!(matches!(
        client.pop(&unknown).await,
        Err(PullError::Remote(RemoteError::Refused { code: 17, .. }))
    ));
    assert!(matches!(
        client.pop(&all(0).with_max_messages(33)).await,
        Err(PullError::Remote(RemoteError::Refused { code: 29, .. }))
    ));
    assert!(matches!(
        client.ack(GROUP, "T", &["garbage"]).await,
        Err(RemoteError::Refused { code: 29, .. })
    ));
    cluster.fail_next(ClusterCall::Pop, 1);
    assert!(client.pop(&all(0)).await.is_err());
    // A lost reply: the messages were popped (invisible), the caller does not know.
    send(&cluster, 1);
    cluster.lose_next_replies(ClusterCall::Pop, 1);
    assert!(client.pop(&all(0)).await.is_err());
    assert!(pop(&client, &all(0)).await.is_empty());
    tokio::time::advance(Duration::from_secs(11)).await;
    tokio::task::yield_now().await;
    assert_eq!(pop(&client, &all(0)).await.len(), 1, "revived");
}

/// A broker filters a pop by the tag's hash code ("Aa" and "BB" both hash to 2112): the
/// message of the colliding tag is popped too, and comes back as a filtered one, with its
/// handle, for the client to acknowledge (the Java client re-filters a pop by tag and
/// acknowledges what it drops).
#[tokio::test(start_paused = true)]
async fn a_tag_of_the_same_hash_is_popped_and_returned_filtered() {
    let (cluster, client) = setup(1);
    for tag in ["BB", "Aa", "C"] {
        cluster
            .send("T", OutgoingMessage::new(tag).with_tags(tag))
            .unwrap();
    }
    let only_aa = PopRequest::new(
        GROUP,
        MessageQueue::new("T", "broker-0", 0),
        TagExpression::parse("Aa").unwrap(),
    )
    .with_poll_time(Duration::ZERO)
    .with_start(PopStart::Earliest);
    let PopResult::Found { messages, filtered } = client.pop(&only_aa).await.unwrap() else {
        panic!("found expected");
    };
    let offsets = |ms: &[Message]| ms.iter().map(|m| m.queue_offset()).collect::<Vec<_>>();
    assert_eq!(offsets(&messages), [1]);
    assert_eq!(offsets(&filtered), [0], "the colliding tag, filtered");
    assert!(
        filtered[0].receipt_handle().is_some(),
        "with a handle to ack"
    );
}
