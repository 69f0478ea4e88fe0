//! Final offsets the store refuses when a queue is released: retried only while this client's
//! broker lock keeps everyone else off the queue, never written over the next owner's progress.

mod common;

use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::QueueLocker;
use rebalance_runtime::memory::{ClusterCall, ClusterConfig, InMemoryCluster};
use rebalance_runtime::{ConsumerBuilder, RemovalReason, StartPosition, config::Intervals};

const MIN: Duration = Duration::from_secs(1);

fn queue(i: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", i)
}

fn exclusive(b: ConsumerBuilder) -> ConsumerBuilder {
    b.exclusive_hand_off(true)
}

/// Member 0 holds queues 0 and 1 and has consumed queue 1 up to 77; member 1 will take queue 1.
async fn first_member(
    cluster: &InMemoryCluster,
    configure: fn(ConsumerBuilder) -> ConsumerBuilder,
) -> Member {
    let a = start_with(cluster, 0, &["T"], configure).await;
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 2);
    a.recorder.leases.lock().unwrap()[&queue(1)].commit(77);
    a
}

/// A cluster whose broker locks expire after 10 s, before the client's renewal (every 20 s) and
/// before it stops trusting them (30 s); queue 1 has 10 stored.
fn short_lock_cluster() -> InMemoryCluster {
    let cluster = InMemoryCluster::with_config(ClusterConfig {
        lock_expiry: Duration::from_secs(10),
        ..ClusterConfig::default()
    });
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    cluster
}

fn start_of(m: &Member, q: &MessageQueue) -> Option<StartPosition> {
    m.recorder
        .added()
        .into_iter()
        .rev()
        .find(|(added, _)| added == q)
        .map(|(_, start)| start)
}

#[tokio::test(start_paused = true)]
async fn without_a_lock_a_refused_final_offset_is_not_written_over_the_next_owner() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = first_member(&cluster, |b| b).await;
    // a's final write of queue 1 (at 1 s) is refused, and so is the next persistence call:
    // with retries, a's tick at 5 s would fail and the one at 10 s would store 77 after b
    // stored its own progress at 6 s.
    cluster.fail_next(ClusterCall::PersistOffset, 2);
    let b = start(&cluster, 1, &["T"]).await;
    settle(MIN).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    assert_eq!(
        start_of(&b, &queue(1)),
        Some(StartPosition::Latest),
        "nothing stored for b to resume from"
    );
    b.recorder.leases.lock().unwrap()[&queue(1)].commit(100);
    settle(Duration::from_secs(60)).await;
    assert_eq!(
        cluster.offset(GROUP, &queue(1)),
        Some(100),
        "a's late retry moved the next owner's offset"
    );
    assert_partition(&[&a, &b], &all_queues(&cluster, &["T"]));
}

#[tokio::test(start_paused = true)]
async fn with_a_lock_a_refused_final_offset_is_retried_then_the_queue_handed_over() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let a = first_member(&cluster, exclusive).await;
    cluster.fail_next(ClusterCall::PersistOffset, 1);
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(3 * MIN).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    assert_eq!(
        cluster.lock_owner(GROUP, &queue(1)),
        Some(a.id.clone()),
        "a keeps the lock while its final offset is not stored"
    );
    assert!(b.handle.assignment().is_empty());
    // a's persistence tick at 5 s stores 77 and unlocks; b's next lock retry takes the queue.
    settle(3 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(77));
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
    assert_eq!(start_of(&b, &queue(1)), Some(StartPosition::Offset(77)));
    assert_partition(&[&a, &b], &all_queues(&cluster, &["T"]));
}

/// a keeps queue 1 locked while the store refuses its final offset (77), and the broker
/// restarts: its lock table is empty, so b is granted the queue and stores its progress (100).
/// a no longer retries its value, which would move b's stored offset back (found by review:
/// the retries went on until the lock granted before the restart was 30 s old).
#[tokio::test(start_paused = true)]
async fn a_broker_restart_ends_the_retries_of_a_locked_final_offset() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let a = first_member(&cluster, exclusive).await;
    // a's final write (at 1 s) and its first retry (at 5 s) are refused.
    cluster.fail_next(ClusterCall::PersistOffset, 2);
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(5 * MIN).await;
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(a.id.clone()));
    assert!(b.handle.assignment().is_empty());
    cluster.restart_broker("broker-0");
    settle(MIN).await;
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
    assert_eq!(start_of(&b, &queue(1)), Some(StartPosition::Offset(10)));
    b.recorder.leases.lock().unwrap()[&queue(1)].persist_now(100);
    settle(MIN).await;
    // Every 100 ms for a minute (b stores its progress again at each of its ticks, which
    // would hide a moment's step back).
    for _ in 0..600 {
        assert_eq!(
            cluster.offset(GROUP, &queue(1)),
            Some(100),
            "a's retry moved the next owner's offset back"
        );
        settle(Duration::from_millis(100)).await;
    }
    assert_partition(&[&a, &b], &all_queues(&cluster, &["T"]));
}

#[tokio::test(start_paused = true)]
async fn with_a_lock_a_refused_final_offset_is_given_up_when_the_lock_may_pass() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let lifetime = Intervals::default().lock_lifetime;
    let a = first_member(&cluster, exclusive).await;
    // The store refuses a's final write at 1 s and every retry (5 s, 10 s, … 25 s, maybe 30 s).
    cluster.fail_next(ClusterCall::PersistOffset, 7);
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    // The lock of queue 1 was granted at 0 s: up to `lock_lifetime` (30 s) nobody else can
    // have it, and a keeps it.
    settle(lifetime - 2 * MIN).await;
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(a.id.clone()));
    assert!(b.handle.assignment().is_empty());
    // Then a gives the value up and unlocks (without waiting for the broker's 60 s expiry):
    // b resumes from the last stored offset.
    settle(7 * MIN).await;
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), Some(b.id.clone()));
    assert_eq!(start_of(&b, &queue(1)), Some(StartPosition::Offset(10)));
    b.recorder.leases.lock().unwrap()[&queue(1)].commit(100);
    settle(Duration::from_secs(120)).await;
    assert_eq!(
        cluster.offset(GROUP, &queue(1)),
        Some(100),
        "a's given-up value never lands over b's progress"
    );
    assert_partition(&[&a, &b], &all_queues(&cluster, &["T"]));
}

#[tokio::test(start_paused = true)]
async fn taking_the_queue_back_while_locked_resumes_from_the_refused_offset() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let a = first_member(&cluster, exclusive).await;
    cluster.fail_next(ClusterCall::PersistOffset, 1);
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_millis(500)).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    // b leaves before a's next persistence tick: queue 1 comes back to a, whose lock never
    // lapsed, so nobody consumed it meanwhile and 77 is still its progress.
    b.handle.shutdown().await;
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 2);
    assert_eq!(start_of(&a, &queue(1)), Some(StartPosition::Offset(77)));
    // 77 is progress the store does not have: it is persisted like a commit, although the
    // queue is idle and the application commits nothing more.
    settle(Duration::from_secs(6)).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(77));
}

/// At 12 s another client holds queue 1's lock, and at 13 s has stored its progress, 100; `a`,
/// unaware, commits 90, and its next `persist_failures` writes are refused; its renewal at 20 s
/// is refused (the broker says the lock is someone else's), and it loses the queue. Then
/// nothing, neither the release nor a retry, writes 90 over the new holder's progress.
async fn a_loses_queue_1_to_an_intruder_with_persists_refused(persist_failures: usize) {
    let cluster = short_lock_cluster();
    let a = first_member(&cluster, exclusive).await;
    settle(Duration::from_secs(11)).await;
    intruder_locks(&cluster, &queue(1)).await;
    settle(MIN).await;
    cluster.set_offset(GROUP, &queue(1), 100);
    a.recorder.leases.lock().unwrap()[&queue(1)].commit(90);
    cluster.fail_next(ClusterCall::PersistOffset, persist_failures);
    settle(Duration::from_secs(8)).await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost), vec![queue(1)]);
    settle(Duration::from_secs(30)).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(100));
}

#[tokio::test(start_paused = true)]
async fn a_refused_lock_renewal_ends_the_retries_of_a_final_offset() {
    // Refused until the renewal is: the final offset's retries end there.
    a_loses_queue_1_to_an_intruder_with_persists_refused(2).await;
}

#[tokio::test(start_paused = true)]
async fn a_queue_lost_with_a_refused_lock_writes_no_final_offset_over_the_new_holder() {
    // The tick at 15 s refused: the release writes no final offset either.
    a_loses_queue_1_to_an_intruder_with_persists_refused(1).await;
}

#[tokio::test(start_paused = true)]
async fn no_offset_is_persisted_under_a_lock_no_longer_trusted() {
    let cluster = short_lock_cluster();
    let a = first_member(&cluster, exclusive).await;
    // a's renewal at 20 s goes unanswered: it trusts its lock of queue 1 until about 30 s, and
    // keeps the queue until its next renewal, at 40 s.
    settle(Duration::from_secs(18)).await;
    cluster.fail_next(ClusterCall::Lock, 1);
    settle(Duration::from_secs(13)).await;
    // At 32 s another client holds the lock, and at 33 s has stored its progress, 100; a batch
    // of a's that began before its lock ran out commits 90.
    intruder_locks(&cluster, &queue(1)).await;
    settle(MIN).await;
    cluster.set_offset(GROUP, &queue(1), 100);
    a.recorder.leases.lock().unwrap()[&queue(1)].commit(90);
    // Neither the persistence ticks at 35 s and 40 s nor the release writes 90.
    settle(Duration::from_secs(10)).await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Lost), vec![queue(1)]);
    settle(Duration::from_secs(30)).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(100));
}

#[tokio::test(start_paused = true)]
async fn a_final_offset_still_refused_at_shutdown_is_given_up_and_its_queue_unlocked() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let a = first_member(&cluster, exclusive).await;
    // Every write of a's shutdown is refused: the final offset at release, and its retry.
    cluster.fail_next(ClusterCall::PersistOffset, 10);
    a.handle.shutdown().await;
    assert_eq!(a.recorder.removed_with(RemovalReason::Shutdown).len(), 2);
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(10), "77 was refused");
    // Nobody retries the value once a is gone: the queue is unlocked at once for its next
    // owner, who resumes from 10, instead of staying locked until the broker's lock expiry.
    assert_eq!(cluster.lock_owner(GROUP, &queue(1)), None);
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), None);
}

#[tokio::test(start_paused = true)]
async fn a_refused_lock_when_taking_a_queue_back_ends_the_retries_of_its_final_offset() {
    let cluster = short_lock_cluster();
    let a = first_member(&cluster, exclusive).await;
    // a's final write of queue 1 and its retries until 15 s are refused: 77 stays pending,
    // under a's lock (b consumes without locks).
    cluster.fail_next(ClusterCall::PersistOffset, 4);
    let b = start(&cluster, 1, &["T"]).await;
    settle(MIN).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    // At 11 s a's lock has expired at the broker and another client takes it, and stores its
    // progress, 100.
    settle(Duration::from_secs(9)).await;
    let intruder = intruder_locks(&cluster, &queue(1)).await;
    let id = intruder.client_id().clone();
    cluster.set_offset(GROUP, &queue(1), 100);
    // b leaves at 15 s: queue 1 is a's again, but its lock is refused.
    settle(Duration::from_secs(4)).await;
    intruder.lock(GROUP, &id, &[queue(1)]).await.unwrap();
    b.handle.shutdown().await;
    settle(Duration::from_secs(3)).await;
    intruder.lock(GROUP, &id, &[queue(1)]).await.unwrap();
    assert!(!a.handle.assignment().contains(&queue(1)));
    // From 20 s the store would take a's retry: it must not be made.
    settle(Duration::from_secs(20)).await;
    assert_eq!(cluster.offset(GROUP, &queue(1)), Some(100));
}

/// Another client ("next@1") tries to lock `queue` every 100 ms; once granted, it reads the
/// stored offset it would resume from.
fn next_owner_resumes(
    cluster: &InMemoryCluster,
    queue: MessageQueue,
) -> tokio::task::JoinHandle<Option<i64>> {
    let cluster = cluster.clone();
    tokio::spawn(async move {
        let next = cluster.client("next@1");
        let id = next.client_id().clone();
        loop {
            let answer = next.lock(GROUP, &id, std::slice::from_ref(&queue)).await;
            if answer.is_ok_and(|a| a.granted.contains(&queue)) {
                return cluster.offset(GROUP, &queue);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_while_taking_a_queue_back_settles_its_refused_final_offset_under_the_lock() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    cluster.set_offset(GROUP, &queue(1), 10);
    let a = first_member(&cluster, exclusive).await;
    // a's final write of queue 1 is refused: 77 is pending under a's lock, and b waits for it.
    cluster.fail_next(ClusterCall::PersistOffset, 1);
    let b = start_with(&cluster, 1, &["T"], exclusive).await;
    settle(Duration::from_millis(500)).await;
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Reassigned),
        vec![queue(1)]
    );
    assert!(b.handle.assignment().is_empty());
    b.handle.shutdown().await;
    // Queue 1 comes back to a, whose lock request is answered 2 s late; a shuts down meanwhile.
    cluster.delay_next(ClusterCall::Lock, 1, Duration::from_secs(2));
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 1);
    // a's first unlock from now on takes effect at once but is answered a second late, so that
    // a lock released before 77 is stored is seen by the next owner.
    cluster.delay_next(ClusterCall::Unlock, 1, MIN);
    let next = next_owner_resumes(&cluster, queue(1));
    let started = tokio::time::Instant::now();
    a.handle.shutdown().await;
    assert!(
        started.elapsed() >= MIN,
        "the shutdown began during the round's lock request"
    );
    assert_eq!(
        a.recorder.added().len(),
        2,
        "queue 1 is not handed out again (a lease cancelled at birth): {:?}",
        a.recorder.events()
    );
    assert_eq!(
        a.recorder.removed_with(RemovalReason::Shutdown),
        vec![queue(0)]
    );
    // The round kept queue 1's lock for the shutdown, which stored 77 and then unlocked.
    let resumed = tokio::time::timeout(MIN, next).await;
    assert_eq!(
        resumed.ok().and_then(Result::ok),
        Some(Some(77)),
        "the lock passed before the final offset was stored"
    );
    assert_eq!(cluster.lock_owner(GROUP, &queue(0)), None);
    let violations = a.recorder.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}

/// Queue 0 of broker-1 of `T` (two brokers of two queues), consumed by a lone member without
/// locks.
fn leaving_queue() -> MessageQueue {
    MessageQueue::new("T", "broker-1", 0)
}

/// A lone member without locks consumes `leaving_queue` up to 10 (stored by the tick at 5 s),
/// then, at 26 s, up to 50; from then the store refuses every write, and broker-1 leaves `T`'s route,
/// which the poll at 30 s sees: the queue is released and its final offset, 50, refused. The
/// store takes writes again at 31 s. Returns the member, the full route and the start time.
async fn unlocked_release_refused(
    cluster: &InMemoryCluster,
) -> (Member, rebalance_core::TopicRoute, tokio::time::Instant) {
    cluster.create_topic("T", 2, 2);
    let full = cluster.route("T").unwrap();
    let t0 = tokio::time::Instant::now();
    let a = start(cluster, 0, &["T"]).await;
    settle(MIN).await;
    assert_eq!(a.handle.assignment().len(), 4);
    let lease = a.recorder.leases.lock().unwrap()[&leaving_queue()].clone();
    lease.commit(10);
    tokio::time::sleep_until(t0 + 6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &leaving_queue()), Some(10));
    tokio::time::sleep_until(t0 + 26 * MIN).await;
    lease.commit(50);
    cluster.set_denied(ClusterCall::PersistOffset, true);
    cluster.set_route(
        "T",
        rebalance_runtime::memory::route_of(&["broker-0".to_string()], 2),
    );
    tokio::time::sleep_until(t0 + 31 * MIN).await;
    cluster.set_denied(ClusterCall::PersistOffset, false);
    assert!(
        a.recorder
            .removed_with(RemovalReason::Reassigned)
            .contains(&leaving_queue()),
        "{:?}",
        a.recorder.events()
    );
    assert_eq!(a.handle.assignment().len(), 2);
    assert_eq!(
        cluster.offset(GROUP, &leaving_queue()),
        Some(10),
        "50 refused"
    );
    (a, full, t0)
}

/// Puts `full` back as `T`'s route and waits for `a` to take its queues again.
async fn broker_back(cluster: &InMemoryCluster, a: &Member, full: rebalance_core::TopicRoute) {
    cluster.set_route("T", full);
    settle(5 * MIN).await;
    assert_eq!(a.handle.assignment().len(), 4);
}

/// Found by review: a queue without a lock whose final offset the store refused (its broker
/// had just left the route) came back from the stale stored offset, and with none stored, from
/// `consume_from`, which with `LastOffset` skips what was produced meanwhile.
#[tokio::test(start_paused = true)]
async fn an_unlocked_queue_taken_back_resumes_from_its_refused_final_offset() {
    let cluster = InMemoryCluster::new();
    let (a, full, _) = unlocked_release_refused(&cluster).await;
    broker_back(&cluster, &a, full).await;
    assert_eq!(
        start_of(&a, &leaving_queue()),
        Some(StartPosition::Offset(50))
    );
    // 50 is progress the store does not have: persisted like a commit.
    settle(6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &leaving_queue()), Some(50));
}

/// The refused final offset of a queue without a lock is a floor, never a rewind: another
/// member may have consumed the queue meanwhile and stored further progress.
#[tokio::test(start_paused = true)]
async fn an_unlocked_queue_taken_back_never_resumes_behind_the_stored_progress() {
    let cluster = InMemoryCluster::new();
    let (a, full, _) = unlocked_release_refused(&cluster).await;
    cluster.set_offset(GROUP, &leaving_queue(), 80);
    broker_back(&cluster, &a, full).await;
    assert_eq!(
        start_of(&a, &leaving_queue()),
        Some(StartPosition::Offset(80))
    );
    settle(6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &leaving_queue()), Some(80));
}

/// An operator's reset of the queue while it is away drops the refused final offset: the queue
/// comes back from the reset offset, even below it.
#[tokio::test(start_paused = true)]
async fn an_offset_reset_drops_the_refused_final_offset_of_an_unlocked_queue() {
    let cluster = InMemoryCluster::new();
    let (a, full, _) = unlocked_release_refused(&cluster).await;
    cluster.set_offset(GROUP, &leaving_queue(), 5);
    a.handle.reset_offsets([(leaving_queue(), 5)]).unwrap();
    settle(MIN).await;
    broker_back(&cluster, &a, full).await;
    assert_eq!(
        start_of(&a, &leaving_queue()),
        Some(StartPosition::Offset(5))
    );
}

/// A shutdown settles the refused final offset of a queue without a lock (the store takes
/// writes again), as it settles a locked queue's; and not over further stored progress.
#[tokio::test(start_paused = true)]
async fn a_shutdown_settles_the_refused_final_offset_of_an_unlocked_queue() {
    let cluster = InMemoryCluster::new();
    let (a, _, _) = unlocked_release_refused(&cluster).await;
    a.handle.shutdown().await;
    assert_eq!(cluster.offset(GROUP, &leaving_queue()), Some(50));

    let cluster = InMemoryCluster::new();
    let (a, _, _) = unlocked_release_refused(&cluster).await;
    cluster.set_offset(GROUP, &leaving_queue(), 80);
    a.handle.shutdown().await;
    assert_eq!(cluster.offset(GROUP, &leaving_queue()), Some(80));
}
