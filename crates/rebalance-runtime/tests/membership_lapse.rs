//! A member that cannot be sure it is still a member stops trusting its leases: no heartbeat
//! accepted for `member_expiry` (frozen, or cut off from the brokers) and the directory may
//! have dropped it, the others split its queues. Its leases say so before any pull or batch
//! (`QueueLease::is_trusted`), it writes no offset of theirs, and once a heartbeat is accepted
//! again it releases them all (reason `MembershipLapsed`) and takes its share again from the
//! offsets the store has, with new leases.

mod common;

use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{RemovalReason, StartPosition};
use tokio::time::Instant;

const MIN: Duration = Duration::from_secs(1);

fn lease_of(member: &Member, queue: &MessageQueue) -> rebalance_runtime::QueueLease {
    member.recorder.leases.lock().unwrap()[queue].clone()
}

#[tokio::test(start_paused = true)]
async fn a_member_cut_off_past_its_member_expiry_stops_trusting_its_leases_and_takes_its_share_again_from_the_store()
 {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let started = Instant::now();
    let expiry = java_intervals().member_expiry;
    let a = start(&cluster, 0, &["T"]).await;
    let b = start(&cluster, 1, &["T"]).await;
    settle(2 * MIN).await;
    assert_partition(&[&a, &b], &all);
    let mine: Vec<MessageQueue> = a.recorder.held().into_iter().collect();
    let q = mine[0].clone();
    let lease = lease_of(&a, &q);
    assert!(lease.is_trusted(Instant::now()));
    assert!(
        lease
            .trusted_until()
            .is_some_and(|until| until >= started + expiry),
        "vouched for by the first heartbeat: {:?}",
        lease.trusted_until()
    );
    lease.commit(10);
    settle(6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &q), Some(10));

    // a is cut off: its heartbeats fail (the last one accepted was sent at its start), and
    // the directory drops it at 120 s; b takes every queue.
    cluster.partition(&a.id, true);
    // a goes on consuming what it buffered, as far as it knows.
    lease.commit(50);
    settle(started + expiry - MIN - Instant::now()).await;
    assert!(lease.is_trusted(Instant::now()), "trusted until 120 s");
    settle(2 * MIN).await;
    assert!(
        !lease.is_trusted(Instant::now()),
        "not past the last accepted heartbeat's sending plus member_expiry"
    );
    assert!(lease.trusted_until().is_some_and(|u| u <= Instant::now()));
    settle(20 * MIN).await;
    assert_eq!(b.handle.assignment().len(), 4, "b took a's queues");
    lease_of(&b, &q).commit(30);
    settle(6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &q), Some(30));

    // Back: a's heartbeat is accepted after the gap. a releases every queue it held without
    // writing its stale progress (50: b's 30 stands), and takes its share again from the store.
    cluster.partition(&a.id, false);
    settle(10 * MIN).await;
    let lapsed = a.recorder.removed_with(RemovalReason::MembershipLapsed);
    assert_eq!(lapsed, mine, "released every queue held before the gap");
    assert_eq!(a.recorder.removed_with(RemovalReason::Reassigned), vec![]);
    assert!(lease.is_cancelled());
    assert!(
        !lease.is_trusted(Instant::now()),
        "an old lease stays untrusted"
    );
    assert_partition(&[&a, &b], &all);
    // Averagely gives `a` its first half again, `q` with it: checked, not assumed (a skipped
    // check would prove nothing; found by a test audit).
    assert!(
        a.recorder.held().contains(&q),
        "a holds its share again: {:?}",
        a.recorder.held()
    );
    let again = lease_of(&a, &q);
    assert!(!again.is_same_lease(&lease));
    assert_eq!(again.start_position(), StartPosition::Offset(30));
    assert!(again.is_trusted(Instant::now()));
    assert_eq!(
        cluster.offset(GROUP, &q),
        Some(30),
        "b's progress stands: a's from before the gap (50) is never written, nor anything older"
    );
}

#[tokio::test(start_paused = true)]
async fn while_untrusted_a_member_writes_no_offset_and_starts_no_batch() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let started = Instant::now();
    let expiry = java_intervals().member_expiry;
    let a = start_with(&cluster, 0, &["T"], |b| b.exclusive_hand_off(true)).await;
    settle(2 * MIN).await;
    let q = a.recorder.held().into_iter().next().unwrap();
    let lease = lease_of(&a, &q);
    lease.commit(5);
    settle(6 * MIN).await;
    assert_eq!(cluster.offset(GROUP, &q), Some(5));
    // Only the heartbeats fail: the store and the locker still answer.
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::Register, 500);
    settle(started + expiry + MIN - Instant::now()).await;
    assert!(!lease.is_trusted(Instant::now()));
    assert!(lease.consume_guard().await.is_none(), "no batch starts");
    lease.commit(9);
    settle(10 * MIN).await;
    assert_eq!(
        cluster.offset(GROUP, &q),
        Some(5),
        "nothing written while the membership is not vouched for"
    );
    // Asked to persist now, the consumer says it did not, naming the queue.
    match a.handle.persist_offsets().await {
        Err(rebalance_runtime::ConsumerError::OffsetsNotPersisted { refused }) => {
            assert_eq!(
                refused.iter().map(|(queue, _)| queue).collect::<Vec<_>>(),
                vec![&q]
            );
        }
        other => panic!("persist_offsets while untrusted: {other:?}"),
    }
    assert_eq!(cluster.offset(GROUP, &q), Some(5));
}
