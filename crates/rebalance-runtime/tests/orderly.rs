//! Ordered consumption (broker locks), exclusive hand-off, and broadcasting.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::memory::{ClusterCall, ClusterClient, InMemoryCluster};
use rebalance_runtime::{
    QueueLease, QueueLocker, RemovalReason, StartPosition,
    assignment::Unbalanced,
    config::{ConsumeOrder, Intervals, MessageModel},
    wake::WakeReasons,
};

const MIN: Duration = Duration::from_secs(1);

fn orderly(b: rebalance_runtime::ConsumerBuilder) -> rebalance_runtime::ConsumerBuilder {
    b.consume_order(ConsumeOrder::Orderly)
}

fn queue(i: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", i)
}

/// Another client takes the lock of `queue(0)` first, so the members' own lock of it is
/// refused. Returns that client, to unlock it later.
async fn intruder_holds_queue_0(cluster: &InMemoryCluster) -> ClusterClient {
    intruder_locks(cluster, &queue(0)).await
}

#[tokio::test(start_paused = true)]
async fn a_refused_lock_is_retried_until_granted() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let other = intruder_holds_queue_0(&cluster).await;

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
    let intruder = other.client_id().clone();
    other.unlock(GROUP, &intruder, &[queue(0)]).await.unwrap();
    // Retried every `lock_retry` (500 ms), sooner than the `rebalance_min` (1 s) spacing of
    // other rounds: the lock freed at 3.01 s is taken by the retry at 3.5 s.
    let retry = Intervals::default().lock_retry;
    assert!(retry < MIN);
    settle(retry + Duration::from_millis(10)).await;
    assert_eq!(a.handle.assignment().len(), 4);
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), Some(a.id.clone()));
    let report = a.handle.rounds().borrow().clone();
    assert!(
        report.reasons.contains(WakeReasons::LOCK_RETRY),
        "{report:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn lock_retries_run_every_half_second_while_refused() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    intruder_holds_queue_0(&cluster).await;
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(Duration::from_millis(10)).await;
    let mut rounds = a.handle.rounds();
    let first = rounds.borrow_and_update().round;
    settle(Duration::from_millis(5_000)).await;
    let last = rounds.borrow_and_update().round;
    // 10 retries in 5 s (one every 500 ms), not 5 (one per `rebalance_min`).
    assert_eq!(last - first, 10, "rounds {first}..{last}");
    assert_eq!(a.handle.assignment().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_membership_change_does_not_delay_a_lock_retry() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.create_topic("U", 1, 1);
    intruder_holds_queue_0(&cluster).await;
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    // Rounds at 0, 0.5 s, 1 s...: each retries the refused lock 500 ms after the last.
    settle(Duration::from_millis(600)).await;
    let before = a.handle.rounds().borrow().round;
    // A member of another topic joins the group at 0.6 s: a membership change for `a`, whose
    // round may run only `rebalance_min` after the previous one (at 1.5 s)... except the lock
    // retry, still due at 1 s.
    let _b = start(&cluster, 1, &["U"]).await;
    settle(Duration::from_millis(450)).await;
    let report = a.handle.rounds().borrow().clone();
    assert_eq!(report.round, before + 1, "the retry ran at 1 s: {report:?}");
    assert!(
        report.reasons.contains(WakeReasons::LOCK_RETRY)
            && report.reasons.contains(WakeReasons::MEMBERSHIP_CHANGED),
        "{report:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_in_memory_locker_tells_refused_from_unanswered() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let all: Vec<MessageQueue> = all_queues(&cluster, &["T"]).into_iter().collect();
    let (one, two) = (ClientId::from("one@1"), ClientId::from("two@2"));
    let first = cluster.client(one.clone());
    let second = cluster.client(two.clone());
    first.lock(GROUP, &one, &all[..1]).await.unwrap();
    cluster.set_lock_broker_down("broker-1", true);
    let outcome = second.lock(GROUP, &two, &all).await.unwrap();
    assert_eq!(outcome.granted, vec![queue(1)]);
    assert_eq!(outcome.refused, vec![queue(0)]);
    assert_eq!(outcome.unanswered, all[2..].to_vec());
    assert!(second.unlock(GROUP, &two, &all).await.is_err());
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(1)),
        None,
        "broker-0 unlocked"
    );
    cluster.set_lock_broker_down("broker-1", false);
    assert_eq!(
        second.lock(GROUP, &two, &all[2..]).await.unwrap().granted,
        all[2..].to_vec()
    );
}

#[tokio::test(start_paused = true)]
async fn a_broker_silent_at_renewal_keeps_its_queues_for_the_lock_lifetime() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let all = all_queues(&cluster, &["T"]);
    let on = |broker: &str| -> Vec<MessageQueue> {
        all.iter()
            .filter(|q| &*q.broker_name == broker)
            .cloned()
            .collect()
    };
    let intervals = Intervals::default();
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 4);
    // broker-1 stops answering lock requests; broker-0 keeps renewing.
    cluster.set_lock_broker_down("broker-1", true);
    // The renewal at 20 s gets no answer for broker-1's queues: their locks were granted at
    // 0 s and may still be ours, so they are kept.
    settle(intervals.lock_renew).await;
    assert_eq!(a.handle.assignment().len(), 4, "not released at once");
    assert!(a.recorder.removed_with(RemovalReason::Lost).is_empty());
    // The renewal at 40 s finds them past the lock lifetime (30 s): released as lost, while
    // broker-0's queues, renewed, stay.
    settle(intervals.lock_renew).await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost), on("broker-1"));
    let held: Vec<MessageQueue> = a.handle.assignment().iter().cloned().collect();
    assert_eq!(held, on("broker-0"));
    for q in on("broker-0") {
        assert_eq!(cluster.lock_owner(GROUP, &q), Some(a.id.clone()));
    }
    // Once broker-1 answers again, the 500 ms lock retry takes its queues back.
    cluster.set_lock_broker_down("broker-1", false);
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 4);
    assert_partition(&[&a], &all);
}

/// Two ordered members, `a` and `b`, in the middle of a hand-off: `a` took both queues of `T`,
/// is in a batch of queue 1 (progress 33 committed) when `b` joins, and queue 1 has been
/// announced as reassigned, but `a` keeps its lock until the batch ends (`guard`).
struct HandOffUnderWay {
    cluster: InMemoryCluster,
    all: BTreeSet<MessageQueue>,
    a: Member,
    b: Member,
    lease: QueueLease,
    guard: rebalance_runtime::ConsumeGuard,
}

async fn hand_off_under_way() -> HandOffUnderWay {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
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
    HandOffUnderWay {
        cluster,
        all,
        a,
        b,
        lease,
        guard,
    }
}

#[tokio::test(start_paused = true)]
async fn an_ordered_queue_is_unlocked_only_between_batches() {
    let HandOffUnderWay {
        cluster,
        all,
        a,
        b,
        lease,
        guard,
    } = hand_off_under_way().await;
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

/// A broker restarted while a queue's release waits for its batch forgot the lock the release
/// is under: the next owner is granted it and makes progress, which the release's final
/// offset, written once the batch ends, must not move back (found by review: the loss was
/// applied to held queues only, and the release wrote its older offset over the new owner's).
#[tokio::test(start_paused = true)]
async fn a_lock_lost_during_a_release_writes_no_final_offset_over_the_next_owner() {
    let HandOffUnderWay {
        cluster, b, guard, ..
    } = hand_off_under_way().await;
    cluster.restart_broker("broker-0");
    settle(2 * MIN).await;
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
    let b_lease = b.recorder.leases.lock().unwrap()[&queue(1)].clone();
    b_lease.commit(50);
    settle(6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(50));
    drop(guard);
    settle(3 * MIN).await;
    assert_eq!(
        cluster.offset(GROUP, &queue(1)),
        Some(50),
        "the release's final offset (33) landed over the next owner's progress"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hand_off_under_way_finishes_while_the_directory_fails() {
    let HandOffUnderWay {
        cluster,
        all,
        a,
        b,
        guard,
        ..
    } = hand_off_under_way().await;
    // The directory fails for the next 30 s or so of rounds. Those rounds keep the assignment,
    // but the release already announced still finishes as soon as the batch ends: keeping the
    // lock would hold the queue's next owner off for as long as the directory is down.
    cluster.fail_next(ClusterCall::ConsumerIds, 60);
    drop(guard);
    settle(2 * MIN).await;
    assert!(
        matches!(
            a.handle.rounds().borrow().topics[0].unbalanced,
            Some(Unbalanced::DirectoryFailed(_))
        ),
        "the directory still fails"
    );
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(33));
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(1)),
        None,
        "unlocked for its next owner"
    );
    settle(Duration::from_secs(60)).await;
    assert_partition(&[&a, &b], &all);
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
}

#[tokio::test(start_paused = true)]
async fn a_queue_wanted_back_during_its_release_is_taken_again_after_the_batch() {
    let HandOffUnderWay {
        cluster,
        all,
        a,
        b,
        guard,
        ..
    } = hand_off_under_way().await;
    // b leaves before a's batch ends: queue 1 is a's again. The release under way finishes
    // (offset persisted, lock freed), then a takes the queue back with a new lease.
    b.handle.shutdown().await;
    settle(3 * MIN).await;
    // Meanwhile queue 1 is both in a's share and not added (its release is not done), and not
    // released (its batch is not done).
    assert_eq!(
        a.handle.rounds().borrow().topics[0].unbalanced,
        Some(Unbalanced::Pending {
            not_added: 1,
            not_released: 1
        })
    );
    drop(guard);
    settle(3 * MIN).await;
    assert_partition(&[&a], &all);
    assert!(a.handle.assignment().balanced);
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(a.id.clone()));
    assert!(
        a.recorder
            .added()
            .contains(&(queue(1), StartPosition::Offset(33))),
        "{:?}",
        a.recorder.added()
    );
}

#[tokio::test(start_paused = true)]
async fn a_topic_unsubscribed_mid_batch_keeps_the_rounds_unbalanced_until_it_is_released() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    cluster.create_topic("U", 1, 2);
    let a = start_with(&cluster, 0, &["T", "U"], orderly).await;
    settle(MIN).await;
    let u0 = MessageQueue::new("U", "broker-0", 0);
    let lease = a.recorder.leases.lock().unwrap()[&u0].clone();
    let guard = lease.consume_guard().await.expect("held queue");
    assert!(a.handle.unsubscribe("U").unwrap());
    settle(Duration::from_millis(10)).await;
    let report = a.handle.rounds().borrow().clone();
    let u = report
        .topics
        .iter()
        .find(|t| t.topic == "U")
        .expect("U reported");
    assert_eq!(
        u.unbalanced,
        Some(Unbalanced::Pending {
            not_added: 0,
            not_released: 1
        }),
        "{report:?}"
    );
    assert!(!report.balanced);
    assert_eq!(
        cluster.lock_owner(GROUP, &u0),
        Some(a.id.clone()),
        "not unlocked mid-batch"
    );
    // The batch ends: the next round, a second later as after any unbalanced round (not the
    // 20 s after a balanced one), finishes the release, and then the rounds are balanced.
    drop(guard);
    settle(MIN + Duration::from_millis(10)).await;
    assert_eq!(cluster.lock_owner(GROUP, &u0), None);
    let report = a.handle.rounds().borrow().clone();
    let u = report
        .topics
        .iter()
        .find(|t| t.topic == "U")
        .expect("U reported");
    assert_eq!(u.unbalanced, None, "{report:?}");
    assert!(report.balanced, "{report:?}");
    assert_eq!(a.handle.assignment().len(), 1);
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
    cluster.fail_next(ClusterCall::Lock, 3);
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
async fn no_consume_guard_once_the_lock_is_older_than_its_lifetime() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(0)].clone();
    assert!(lease.consume_guard().await.is_some());
    // Locked at about 1 s. Broker down: the renewal at about 21 s gets no answer, so the queue
    // is kept, trusted until its lock is 30 s old; the next renewal (about 41 s) gives it up.
    cluster.set_lock_broker_down("broker-0", true);
    settle(Duration::from_secs(25)).await; // about 26 s
    assert!(
        lease.consume_guard().await.is_some(),
        "lock 25 s old: still trusted"
    );
    settle(Duration::from_secs(8)).await; // about 34 s
    assert!(!lease.is_cancelled(), "not yet given up by a renewal");
    assert!(
        lease.consume_guard().await.is_none(),
        "lock older than its lifetime: no batch may start"
    );
    settle(Duration::from_secs(10)).await; // about 44 s
    assert!(lease.is_cancelled());
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost), vec![queue(0)]);
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
async fn renewed_locks_keep_an_ordered_queue_consumable() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(0)].clone();
    // Each renewal (every 20 s) extends the lock's trust by its lifetime (30 s), so batches may
    // start for as long as the renewals are granted, not only for the first 30 s.
    settle(Duration::from_secs(100)).await;
    assert!(
        lease.consume_guard().await.is_some(),
        "a lock renewed 20 s ago is trusted"
    );
    // A renewal that gets no answer is judged from the last granted one (at about 100 s),
    // not from the first grant.
    cluster.set_lock_broker_down("broker-0", true);
    settle(Duration::from_secs(20)).await;
    assert!(!lease.is_cancelled());
    assert!(a.recorder.removed_with(RemovalReason::Lost).is_empty());
    assert!(lease.consume_guard().await.is_some());
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_batch_in_progress_then_persists_and_unlocks() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(0)].clone();
    let guard = lease.consume_guard().await.expect("held queue");
    // The batch ends 3 s into the shutdown and commits its progress.
    let batch = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        lease.commit(41);
        drop(guard);
    });
    let started = tokio::time::Instant::now();
    a.handle.shutdown().await;
    batch.await.unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "waited for the batch"
    );
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(41));
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), None);
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Shutdown),
        vec![queue(0)]
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_unlocks_a_batch_that_never_ends_after_the_force_delay() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(MIN).await;
    let lease = a.recorder.leases.lock().unwrap()[&queue(0)].clone();
    let _stuck = lease.consume_guard().await.expect("held queue");
    lease.commit(41);
    let started = tokio::time::Instant::now();
    a.handle.shutdown().await;
    assert_eq!(
        started.elapsed(),
        Intervals::default().force_unlock_after,
        "waited for the batch as long as allowed, not longer"
    );
    assert_eq!(cluster.offset(GROUP, &queue(0)), Some(41));
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(0)),
        None,
        "shutdown releases everything"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_batches_of_every_topic_at_once() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    cluster.create_topic("U", 1, 1);
    let a = start_with(&cluster, 0, &["T", "U"], orderly).await;
    settle(MIN).await;
    let leases = a.recorder.held_leases();
    assert_eq!(leases.len(), 2);
    let mut stuck = Vec::new();
    for lease in &leases {
        stuck.push(lease.consume_guard().await.expect("held queue"));
    }
    let started = tokio::time::Instant::now();
    a.handle.shutdown().await;
    assert_eq!(
        started.elapsed(),
        Intervals::default().force_unlock_after,
        "the force delay bounds the whole shutdown, not each topic's release in turn"
    );
    for lease in &leases {
        assert_eq!(cluster.lock_owner(GROUP, lease.queue()), None);
    }
    assert_eq!(a.recorder.removed_with(RemovalReason::Shutdown).len(), 2);
    drop(stuck);
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
    cluster.delay_next(ClusterCall::ConsumerIds, 1, Duration::from_secs(3));
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

/// The cluster's offset store, except that reading one queue's offset fails.
struct UnreadableOffset {
    inner: ClusterClient,
    queue: MessageQueue,
}

#[async_trait::async_trait]
impl rebalance_runtime::OffsetStore for UnreadableOffset {
    async fn read(
        &self,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<Option<i64>, rebalance_runtime::RemoteError> {
        if *queue == self.queue {
            return Err(rebalance_runtime::RemoteError::Unreachable(
                "offset read refused by the test".into(),
            ));
        }
        self.inner.read(group, queue).await
    }

    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), rebalance_runtime::RemoteError> {
        self.inner.persist(group, queue, offset).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_queue_locked_but_not_added_is_unlocked_for_its_next_owner() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let unreadable = |b: rebalance_runtime::ConsumerBuilder| {
        orderly(b).offset_store(std::sync::Arc::new(UnreadableOffset {
            inner: cluster.client(client_id(0)),
            queue: queue(1),
        }))
    };
    let a = start_with(&cluster, 0, &["T"], unreadable).await;
    settle(Duration::from_millis(10)).await;
    assert_eq!(
        a.recorder.held(),
        [queue(0)].into(),
        "queue 1 is unreadable"
    );
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(1)),
        None,
        "a holds no lock on a queue it did not take"
    );
    // b joins; queue 1 is b's share and must not wait for a's stale lock to expire (60 s).
    let b = start_with(&cluster, 1, &["T"], orderly).await;
    settle(3 * MIN).await;
    assert_partition(&[&a, &b], &all);
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
}
