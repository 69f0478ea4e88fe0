//! What a consumer subscribes to: its topics with their tag expressions, and, in clustering
//! mode, the group's retry topic, which is left out quietly until it exists and then shared
//! like any other topic.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    ConsumerError, LocalOffsetStore,
    config::{Intervals, MessageModel},
    subscription::{Subscription, TagExpression, TagExpressionError},
    wake::WakeReasons,
};

const RETRY: &str = "%RETRY%G";

/// The last registration `directory` was sent, as (topic, expression) pairs.
fn last(directory: &WatchedDirectory) -> Vec<(String, String)> {
    let sent = directory.sent();
    let last = sent.last().expect("a heartbeat was sent");
    last.subscriptions
        .iter()
        .map(|s| (s.topic.clone(), s.expression.to_string()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(t, e)| (t.to_string(), e.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn clustering_consumers_register_the_retry_topic_and_their_tag_expressions() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let directory = WatchedDirectory::new(cluster.client(client_id(0)));
    let observed = directory.clone();
    let a = start_with(&cluster, 0, &[], move |b| {
        b.subscribe_tags("T", " TagA || TagB ")
            .unwrap()
            .directory(observed)
    })
    .await;
    assert_eq!(
        last(&directory),
        pairs(&[(RETRY, "*"), ("T", "TagA || TagB")]),
        "the first heartbeat"
    );

    // At run time: a new topic with tags, heartbeated at once.
    let sent = directory.registers();
    assert!(a.handle.subscribe_tags("U", "X").unwrap());
    settle(Duration::from_millis(10)).await;
    assert_eq!(directory.registers(), sent + 1);
    assert_eq!(
        last(&directory),
        pairs(&[(RETRY, "*"), ("T", "TagA || TagB"), ("U", "X")])
    );
    // The same expression again changes nothing; `subscribe` means every tag.
    assert!(!a.handle.subscribe_tags("U", "X").unwrap());
    assert!(a.handle.subscribe("U").unwrap());
    settle(Duration::from_millis(10)).await;
    assert_eq!(
        last(&directory),
        pairs(&[(RETRY, "*"), ("T", "TagA || TagB"), ("U", "*")])
    );
    // A malformed expression is refused and changes nothing.
    let refused = a.handle.subscribe_tags("U", "X ||").unwrap_err();
    assert!(
        matches!(
            &refused,
            ConsumerError::TagExpression {
                topic,
                source: TagExpressionError::EmptyTag { position: 2, .. }
            } if topic == "U"
        ),
        "{refused}"
    );
    // The retry topic is the consumer's own: unsubscribing it leaves it there.
    assert!(!a.handle.unsubscribe(RETRY).unwrap());
    assert!(a.handle.unsubscribe("U").unwrap());
    settle(Duration::from_millis(10)).await;
    assert_eq!(
        last(&directory),
        pairs(&[(RETRY, "*"), ("T", "TagA || TagB")])
    );
    a.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn broadcasting_and_opted_out_consumers_leave_the_retry_topic_alone() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    cluster.create_topic(RETRY, 1, 1);

    let opted_out = WatchedDirectory::new(cluster.client(client_id(0)));
    let observed = opted_out.clone();
    let a = start_with(&cluster, 0, &["T"], move |b| {
        b.consume_retry_topic(false).directory(observed)
    })
    .await;

    let broadcasting = WatchedDirectory::new(cluster.client(client_id(1)));
    let observed = broadcasting.clone();
    let b = start_with(&cluster, 1, &["T"], move |b| {
        b.message_model(MessageModel::Broadcasting)
            .offset_store(Arc::new(LocalOffsetStore::new()))
            .directory(observed)
    })
    .await;
    settle(Duration::from_secs(60)).await;
    assert_eq!(last(&opted_out), pairs(&[("T", "*")]));
    assert_eq!(last(&broadcasting), pairs(&[("T", "*")]));
    for m in [&a, &b] {
        assert!(
            m.handle.assignment().iter().all(|q| &*q.topic == "T"),
            "{}: {:?}",
            m.id,
            m.handle.assignment().queues
        );
    }
    a.handle.shutdown().await;
    b.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_missing_retry_topic_is_quiet_and_shared_once_it_appears() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start(&cluster, 0, &["T"]).await;
    let b = start(&cluster, 1, &["T"]).await;
    settle(Duration::from_secs(60)).await;
    assert_partition(&[&a, &b], &all_queues(&cluster, &["T"]));
    for m in [&a, &b] {
        let report = m.handle.rounds().borrow().clone();
        assert!(report.balanced, "{}: {report:?}", m.id);
        let topics: Vec<&str> = report.topics.iter().map(|t| t.topic.as_str()).collect();
        assert_eq!(topics, ["T"], "nothing to report about the retry topic yet");
        // Balanced rounds every 20 s (plus the membership change), not a retry every second.
        assert!(
            report.round <= 6,
            "{}: {} rounds in 60 s",
            m.id,
            report.round
        );
    }

    // The broker creates the retry topic; its route is seen at the next poll (30 s), which
    // wakes a round that shares its queues.
    cluster.create_topic(RETRY, 2, 1);
    let mut rounds = a.handle.rounds();
    rounds.borrow_and_update();
    let within = Intervals::default().poll_name_server + Duration::from_secs(2);
    let woken = tokio::time::timeout(
        within,
        rounds.wait_for(|r| r.reasons.contains(WakeReasons::ROUTE_CHANGED)),
    )
    .await
    .expect("a round woken by the retry topic's route")
    .unwrap()
    .clone();
    assert!(woken.topics.iter().any(|t| t.topic == RETRY), "{woken:?}");
    // b polls at the same moments; let its round run too.
    settle(Duration::from_secs(2)).await;
    let all = all_queues(&cluster, &["T", RETRY]);
    assert_eq!(all.len(), 6);
    assert_partition(&[&a, &b], &all);
    for m in [&a, &b] {
        assert_eq!(
            m.handle
                .assignment()
                .iter()
                .filter(|q| &*q.topic == RETRY)
                .count(),
            1,
            "{}: one of the two retry queues",
            m.id
        );
    }
    a.handle.shutdown().await;
    b.handle.shutdown().await;
}

#[test]
fn malformed_expressions_fail_the_builder_with_the_topic() {
    let builder = rebalance_runtime::Consumer::builder("G");
    let error = builder.subscribe_tags("T", "A || * ").unwrap_err();
    assert!(
        matches!(
            &error,
            ConsumerError::TagExpression {
                topic,
                source: TagExpressionError::WildcardAmongTags { .. }
            } if topic == "T"
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "subscription to `T`: tag expression `A || * `: `*` cannot be combined with tags; write `*` alone to consume every tag"
    );
    assert_eq!(
        Subscription::new("T", TagExpression::parse("A").unwrap())
            .expression
            .tags(),
        ["A"]
    );
}
