//! `ConsumerHandle::ready`: returns once every subscribed topic had a balanced round, else says
//! per topic why not.

mod common;

use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::config::ConsumeOrder;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{ConsumerError, NotReady, TopicNotReady};

const WAIT: Duration = Duration::from_secs(10);

/// The reasons of a `ready` that failed.
fn not_ready(result: Result<(), ConsumerError>) -> NotReady {
    match result {
        Err(ConsumerError::NotReady(not_ready)) => not_ready,
        other => panic!("expected NotReady, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_healthy_consumer_is_ready_after_its_first_round() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start(&cluster, 0, &["T"]).await;
    a.handle.ready(WAIT).await.expect("ready");
    assert_eq!(a.handle.assignment().len(), 4);
    a.handle.shutdown().await;
    assert!(matches!(
        a.handle.ready(WAIT).await,
        Err(ConsumerError::ShutDown)
    ));
}

/// A timeout too long to add to the clock waits as long as it takes (it panicked with
/// "overflow when adding duration to instant"; found by review).
#[tokio::test(start_paused = true)]
async fn a_timeout_too_long_for_the_clock_waits_as_long_as_it_takes() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start(&cluster, 0, &["T"]).await;
    a.handle.ready(Duration::MAX).await.expect("ready");
    a.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_misspelled_topic_is_named_as_not_found() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("Orders", 1, 4);
    let a = start(&cluster, 0, &["Orders", "Ordres"]).await;
    let err = not_ready(a.handle.ready(WAIT).await);
    assert_eq!(err.after, WAIT);
    // Orders is ready; only the misspelled topic is named.
    assert_eq!(
        err.topics.into_iter().collect::<Vec<_>>(),
        [("Ordres".to_string(), TopicNotReady::TopicNotFound)]
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_name_server_is_told_apart_from_an_unknown_topic() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("Orders", 1, 4);
    cluster.set_name_server_down(true);
    let a = start(&cluster, 0, &["Orders"]).await;
    let err = not_ready(a.handle.ready(WAIT).await);
    // The message says why the name server fails, not only that it does.
    let TopicNotReady::NameServerUnreachable(cause) = &err.topics["Orders"] else {
        panic!("{err:?}");
    };
    let text = err.to_string();
    assert!(
        text.starts_with(
            "not ready after 10s: Orders: no route for the topic: the name server fails: "
        ) && text.ends_with(&cause.to_string()),
        "{text}"
    );
    let topics: Vec<_> = err.topics.into_iter().collect();
    assert_eq!(topics.len(), 1, "{topics:?}");
    assert_eq!(topics[0].0, "Orders");
    assert!(
        matches!(topics[0].1, TopicNotReady::NameServerUnreachable(_)),
        "{topics:?}"
    );
    // Once it answers, the same consumer becomes ready.
    cluster.set_name_server_down(false);
    a.handle
        .ready(Duration::from_secs(60))
        .await
        .expect("ready once the name server answers");
}

#[tokio::test(start_paused = true)]
async fn a_client_the_directory_does_not_list_is_named() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let _b = start(&cluster, 1, &["T"]).await;
    let directory = WatchedDirectory::new(cluster.client(client_id(0)));
    directory.refuse(true);
    let a = start_with(&cluster, 0, &["T"], |b| b.directory(directory.clone())).await;
    let err = not_ready(a.handle.ready(WAIT).await);
    assert_eq!(err.topics.get("T"), Some(&TopicNotReady::NotListed));
    assert!(
        err.to_string()
            .contains("T: the directory does not list this client"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn refused_locks_are_named() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    intruder_locks(&cluster, &MessageQueue::new("T", "broker-0", 0)).await;
    let a = start_with(&cluster, 0, &["T"], |b| {
        b.consume_order(ConsumeOrder::Orderly)
    })
    .await;
    let err = not_ready(a.handle.ready(WAIT).await);
    assert_eq!(
        err.topics.get("T"),
        Some(&TopicNotReady::LocksRefused { not_locked: 1 })
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_callback_is_named_until_it_succeeds() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let recorder = Recorder::new();
    *recorder.fail_added.lock().unwrap() = 1;
    let a = start_recording(&cluster, 0, &["T"], recorder, |b| b).await;
    let err = not_ready(a.handle.ready(Duration::from_secs(5)).await);
    match err.topics.get("T") {
        Some(TopicNotReady::CallbackFailing(e)) => assert_eq!(e.topic, "T"),
        other => panic!("expected CallbackFailing, got {other:?}"),
    }
    // Retried 1 s after the failure, it succeeded: the next round (20 s after the first) is
    // balanced without a failure.
    a.handle
        .ready(Duration::from_secs(30))
        .await
        .expect("ready");
}
