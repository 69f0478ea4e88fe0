//! Steady rounds: a round whose inputs (queues, members, allocation) are those of the last
//! balanced round, with the table untouched since, neither allocates nor diffs. Everything
//! else a round owes the group still happens on such rounds: queues lost with their lock are
//! taken back, releases still under way are finished, refused locks are asked for again.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use rebalance_core::strategy::Averagely;
use rebalance_core::{AllocateError, AllocateStrategy, ClientId, MessageQueue};
use rebalance_runtime::config::ConsumeOrder;
use rebalance_runtime::memory::{ClusterCall, InMemoryCluster};
use rebalance_runtime::{ConsumerBuilder, QueueLocker, RemovalReason};

const MIN: Duration = Duration::from_secs(1);

/// Averagely, counting the calls.
#[derive(Debug, Default)]
struct Counted {
    calls: AtomicUsize,
}

impl AllocateStrategy for Counted {
    fn name(&self) -> &str {
        "counted"
    }

    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Averagely.allocate(group, current, mq_all, cid_all)
    }
}

impl Counted {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn counted(strategy: &Arc<Counted>) -> impl FnOnce(ConsumerBuilder) -> ConsumerBuilder {
    let strategy = strategy.clone();
    move |b| b.strategy(strategy)
}

fn orderly_counted(strategy: &Arc<Counted>) -> impl FnOnce(ConsumerBuilder) -> ConsumerBuilder {
    let strategy = strategy.clone();
    move |b| b.strategy(strategy).consume_order(ConsumeOrder::Orderly)
}

fn queue(i: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", i)
}

/// Runs `n` rounds, each asked for once `rebalance_min` has passed.
async fn rounds(member: &Member, n: usize) {
    for _ in 0..n {
        member.handle.rebalance_now();
        settle(MIN + Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_steady_round_does_not_allocate_and_a_change_does() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let strategy = Arc::new(Counted::default());
    let a = start_with(&cluster, 0, &["T"], counted(&strategy)).await;
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 4);
    let first = a.handle.rounds().borrow().clone();
    assert_eq!(strategy.calls(), 1);
    rounds(&a, 3).await;
    let steady = a.handle.rounds().borrow().clone();
    assert!(steady.round >= first.round + 3, "{steady:?}");
    assert_eq!(strategy.calls(), 1, "steady rounds do not allocate");
    assert!(steady.balanced);
    assert_eq!(
        steady.topics[0].fingerprint, first.topics[0].fingerprint,
        "a skipped round reports the same fingerprint"
    );
    // A member joins: the inputs changed.
    let b = start(&cluster, 1, &["T"]).await;
    settle(2 * MIN).await;
    assert!(strategy.calls() >= 2);
    assert_eq!(a.handle.assignment().len(), 2);
    assert_ne!(
        a.handle.rounds().borrow().topics[0].fingerprint,
        first.topics[0].fingerprint
    );
    assert_partition(&[&a, &b], &all_queues(&cluster, &["T"]));
}

#[tokio::test(start_paused = true)]
async fn queues_lost_with_their_lock_between_steady_rounds_are_taken_back() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let strategy = Arc::new(Counted::default());
    let a = start_with(&cluster, 0, &["T"], orderly_counted(&strategy)).await;
    settle(MIN).await;
    rounds(&a, 2).await;
    assert_eq!(strategy.calls(), 1, "steady");
    assert_eq!(a.handle.assignment().len(), 2);
    // Renewals (every 20 s) fail; after the lock lifetime (30 s) the queues are lost, then
    // locking works again: nothing the allocation depends on changed meanwhile.
    cluster.fail_next(ClusterCall::Lock, 3);
    settle(Duration::from_secs(45)).await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost).len(), 2);
    settle(Duration::from_secs(30)).await;
    assert_eq!(
        a.handle.assignment().len(),
        2,
        "taken again although the inputs are unchanged"
    );
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), Some(a.id.clone()));
    let calls = strategy.calls();
    rounds(&a, 2).await;
    assert_eq!(strategy.calls(), calls, "steady again");
}

#[tokio::test(start_paused = true)]
async fn a_release_under_way_is_finished_by_rounds_with_unchanged_inputs() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let strategy = Arc::new(Counted::default());
    let a = start_with(&cluster, 0, &["T"], orderly_counted(&strategy)).await;
    settle(MIN).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(1)].clone();
    let guard = lease.consume_guard().await.expect("held queue");
    let b = start_with(&cluster, 1, &["T"], |b| {
        b.consume_order(ConsumeOrder::Orderly)
    })
    .await;
    settle(3 * MIN).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(1)),
        Some(a.id.clone()),
        "not unlocked mid-batch"
    );
    // The members stay the same; the batch ends: the next round finishes the release.
    let calls = strategy.calls();
    drop(guard);
    settle(2 * MIN).await;
    assert!(
        strategy.calls() > calls,
        "rounds after an unbalanced one allocate"
    );
    assert_partition(&[&a, &b], &all);
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
    assert!(a.handle.rounds().borrow().balanced);
    let calls = strategy.calls();
    rounds(&a, 2).await;
    assert_eq!(strategy.calls(), calls, "steady once balanced");
}

#[tokio::test(start_paused = true)]
async fn a_refused_lock_is_asked_for_again_while_the_inputs_stay_the_same() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let other = intruder_locks(&cluster, &queue(0)).await;
    let strategy = Arc::new(Counted::default());
    let a = start_with(&cluster, 0, &["T"], orderly_counted(&strategy)).await;
    settle(3 * MIN).await;
    assert_eq!(a.handle.assignment().len(), 1);
    assert!(!a.handle.assignment().balanced);
    let intruder = other.client_id().clone();
    other.unlock(GROUP, &intruder, &[queue(0)]).await.unwrap();
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 2);
    assert!(a.handle.assignment().balanced);
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), Some(a.id.clone()));
}
