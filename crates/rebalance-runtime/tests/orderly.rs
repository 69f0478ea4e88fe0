//! Ordered consumption (broker locks), exclusive hand-off, and broadcasting.

mod common;

use std::time::Duration;

use common::*;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::memory::{InMemoryCluster, Operation};
use rebalance_runtime::{ConsumeOrder, MessageModel, QueueLocker, RemovalReason};

const MIN: Duration = Duration::from_secs(1);

fn orderly(b: rebalance_runtime::ConsumerBuilder) -> rebalance_runtime::ConsumerBuilder {
    b.consume_order(ConsumeOrder::Orderly)
}

fn queue(i: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", i)
}

#[tokio::test(start_paused = true)]
async fn a_refused_lock_is_retried_until_granted() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let intruder = ClientId::from("intruder@1");
    let other = cluster.client(intruder.clone());
    assert_eq!(
        other.lock(GROUP, &intruder, &[queue(0)]).await.unwrap(),
        vec![queue(0)]
    );

    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(Duration::from_millis(10)).await;
    assert_eq!(
        a.handle.assignment().len(),
        3,
        "queue 0 is locked by someone else"
    );
    assert!(!a.handle.assignment().balanced);
    for i in 1..4 {
        assert_eq!(cluster.lock_owner(GROUP, &queue(i)), Some(a.id.clone()));
    }
    settle(Duration::from_secs(3)).await;
    other.unlock(GROUP, &intruder, &[queue(0)]).await.unwrap();
    // Retried every second while unbalanced.
    settle(MIN + Duration::from_millis(10)).await;
    assert_eq!(a.handle.assignment().len(), 4);
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), Some(a.id.clone()));
}

#[tokio::test(start_paused = true)]
async fn an_ordered_queue_is_unlocked_only_between_batches() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    // a is processing a batch of queue 1, the queue that moves to b.
    let lease = a.recorder.leases.lock().unwrap()[&queue(1)].clone();
    let guard = lease.consume_guard().await.expect("held queue");
    lease.commit(33);
    let b = start_with(&cluster, 1, &["T"], orderly).await;
    settle(3 * MIN).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)],
        "announced at once"
    );
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(1)),
        Some(a.id.clone()),
        "but not unlocked mid-batch"
    );
    assert!(b.handle.assignment().is_empty());
    drop(guard);
    settle(2 * MIN).await;
    assert_partition(&[&a, &b], &all);
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
    assert_eq!(
        cluster.offset(GROUP, &queue(1)),
        Some(33),
        "offset persisted before the unlock"
    );
    assert!(
        lease.consume_guard().await.is_none(),
        "a released lease gives no more guards"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_never_ends_is_unlocked_after_the_force_delay() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(1)].clone();
    let _stuck = lease.consume_guard().await.expect("held queue");
    let b = start_with(&cluster, 1, &["T"], orderly).await;
    settle(Duration::from_secs(10)).await;
    assert!(b.handle.assignment().is_empty());
    settle(Duration::from_secs(12)).await;
    assert_partition(&[&a, &b], &all);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lock_releases_the_queue_until_it_is_back() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 2);
    // Renewals (every 20 s) fail; after the lock lifetime (30 s) the client stops trusting
    // its locks and stops consuming.
    cluster.fail_next(Operation::Lock, 3);
    settle(Duration::from_secs(45)).await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost).len(), 2);
    settle(Duration::from_secs(30)).await;
    assert_eq!(
        a.handle.assignment().len(),
        2,
        "taken again once locking works"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_persists_then_unlocks() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    for lease in a.recorder.leases.lock().unwrap().values() {
        lease.commit(5);
    }
    a.handle.shutdown().await;
    for i in 0..2 {
        assert_eq!(cluster.lock_owner(GROUP, &queue(i)), None);
        assert_eq!(cluster.offset(GROUP, &queue(i)), Some(5));
    }
}

#[tokio::test(start_paused = true)]
async fn exclusive_hand_off_waits_for_the_previous_owner() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let exclusive = |b: rebalance_runtime::ConsumerBuilder| b.exclusive_hand_off(true);
    let a = start_with(&cluster, 0, &["T"], exclusive).await;
    settle(MIN).await;
    for lease in a.recorder.leases.lock().unwrap().values() {
        lease.commit(9);
    }
    // b's first round runs before a has released anything: the lock keeps b off queue 1.
    cluster.delay_next(Operation::ConsumerIds, 1, Duration::from_secs(3));
    a.handle.rebalance_now();
    settle(Duration::from_millis(1)).await;
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_millis(10)).await;
    assert!(b.handle.assignment().is_empty(), "b waits for a's release");
    settle(5 * MIN).await;
    assert_partition(&[&a, &b], &all);
    let (q, start) = b.recorder.added().pop().unwrap();
    assert_eq!(q, queue(1));
    assert_eq!(
        start,
        rebalance_runtime::StartPosition::Offset(9),
        "b resumes where a stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn broadcasting_gives_everyone_everything_without_locks() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 3);
    let all = all_queues(&cluster, &["T"]);
    let broadcast = |b: rebalance_runtime::ConsumerBuilder| {
        b.message_model(MessageModel::Broadcasting)
            .consume_order(ConsumeOrder::Orderly)
            // Each client keeps its own progress (the cluster's store is the group's).
            .offset_store(std::sync::Arc::new(
                rebalance_runtime::LocalOffsetStore::new(),
            ))
    };
    let members = [
        start_with(&cluster, 0, &["T"], broadcast).await,
        start_with(&cluster, 1, &["T"], broadcast).await,
        start_with(&cluster, 2, &["T"], broadcast).await,
    ];
    settle(2 * MIN).await;
    for m in &members {
        assert_eq!(m.recorder.held(), all, "{}", m.id);
    }
    for q in &all {
        assert_eq!(cluster.lock_owner(GROUP, q), None);
    }
}
