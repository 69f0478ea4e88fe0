//! `ConsumerHandle::wait_for_assignment`: an owned snapshot of the first matching assignment,
//! or a typed error when none comes in time or the consumer stops.

mod common;

use std::time::Duration;

use common::*;
use rebalance_runtime::ConsumerError;
use rebalance_runtime::memory::InMemoryCluster;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn returns_the_first_matching_assignment_as_an_owned_snapshot() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let a = start(&cluster, 0, &["T"]).await;
    let all = a
        .handle
        .wait_for_assignment(|x| x.len() == 8, Duration::from_secs(10))
        .await
        .expect("the only member takes every queue");
    assert_eq!(all.len(), 8);
    assert!(all.balanced);

    // A second member: the first one's share halves, and the wait sees it.
    let b = start(&cluster, 1, &["T"]).await;
    let half = a
        .handle
        .wait_for_assignment(|x| x.len() == 4, Duration::from_secs(30))
        .await
        .expect("the share halves");
    assert_eq!(half.len(), 4);
    assert!(half.round > all.round, "a later round's assignment");
    // Already satisfied: returned at once, without waiting for another change.
    let before = Instant::now();
    let again = a
        .handle
        .wait_for_assignment(|x| x.len() == 4, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(Instant::now(), before);
    assert_eq!(again, half);

    // The snapshots are no borrows: shutting down while holding them finishes.
    b.handle.shutdown().await;
    a.handle.shutdown().await;
    assert_eq!(all.len(), 8, "a snapshot does not change afterwards");
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_never_matches_times_out_with_the_last_assignment() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("Orders", 1, 4);
    // Misspelled: the name server never knows it.
    let a = start(&cluster, 0, &["Ordres"]).await;
    let started = Instant::now();
    let error = a
        .handle
        .wait_for_assignment(|x| x.len() == 4, Duration::from_secs(15))
        .await
        .expect_err("nothing can be assigned");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(15),
        "waited the timeout"
    );
    match &error {
        ConsumerError::AssignmentTimedOut { after, last } => {
            assert_eq!(*after, Duration::from_secs(15));
            assert!(last.is_empty(), "{last:?}");
        }
        other => panic!("expected AssignmentTimedOut, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("within 15s"), "{message}");
    assert!(
        message.contains("0 queue(s)") && message.contains("not balanced"),
        "{message}"
    );
    a.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_consumer_stopping_ends_the_wait_with_shut_down() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let a = start(&cluster, 0, &["T"]).await;
    let handle = a.handle.clone();
    let waiting = tokio::spawn(async move {
        handle
            .wait_for_assignment(|x| x.len() == 100, Duration::from_secs(3600))
            .await
    });
    settle(Duration::from_secs(2)).await;
    a.handle.shutdown().await;
    let started = Instant::now();
    let result = waiting.await.expect("the wait does not panic");
    assert!(matches!(result, Err(ConsumerError::ShutDown)), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "ended by the shutdown, not the timeout"
    );
}
