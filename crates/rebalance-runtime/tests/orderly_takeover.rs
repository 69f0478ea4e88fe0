//! The ordered queues of a member that left the group are taken over `lock_lifetime` after the
//! others saw it missing, not when the broker expires its locks (60 s after its last renewal):
//! by then it trusts none of them (`Service::take_over_departed`). And never two members at once:
//! at every instant, at most one member holds a lease it may consume of each queue.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
use rebalance_runtime::QueueLocker;
use rebalance_runtime::config::{ConsumeOrder, Intervals};
use rebalance_runtime::memory::{ClusterConfig, InMemoryCluster};
use tokio::time::Instant;

const MIN: Duration = Duration::from_secs(1);
/// The brokers' expiry of a silent client, as the real-server tests configure it.
const EXPIRY: Duration = Duration::from_secs(10);

fn cluster() -> InMemoryCluster {
    InMemoryCluster::with_config(ClusterConfig {
        heartbeat_expiry: EXPIRY,
        ..ClusterConfig::default()
    })
}

/// Orderly, heartbeating every 3 s, with `member_expiry`.
fn orderly(
    member_expiry: Duration,
) -> impl FnOnce(rebalance_runtime::ConsumerBuilder) -> rebalance_runtime::ConsumerBuilder {
    move |b| {
        b.consume_order(ConsumeOrder::Orderly).intervals(Intervals {
            heartbeat: Duration::from_secs(3),
            member_expiry,
            ..java_intervals()
        })
    }
}

/// [`orderly`] with balanced rounds every 5 s.
fn orderly_every_5_s(b: rebalance_runtime::ConsumerBuilder) -> rebalance_runtime::ConsumerBuilder {
    b.consume_order(ConsumeOrder::Orderly).intervals(Intervals {
        heartbeat: Duration::from_secs(3),
        member_expiry: EXPIRY,
        rebalance_wait: 5 * MIN,
        ..java_intervals()
    })
}

/// Every 100 ms for `span`: fails when two members hold a lease of one queue they may consume
/// at that instant (not taken away, membership vouched for, lock trusted); returns, for each
/// queue, the first instant `member` could consume it.
async fn watch_exclusive(
    members: &[&Member],
    span: Duration,
    member: usize,
) -> BTreeMap<MessageQueue, Instant> {
    watch_exclusive_for(members, span, &[member]).await
}

/// [`watch_exclusive`], with the first instant any of `of` could consume each queue.
async fn watch_exclusive_for(
    members: &[&Member],
    span: Duration,
    of: &[usize],
) -> BTreeMap<MessageQueue, Instant> {
    let end = Instant::now() + span;
    let mut first = BTreeMap::new();
    while Instant::now() < end {
        let now = Instant::now();
        let mut holders: BTreeMap<MessageQueue, Vec<String>> = BTreeMap::new();
        for (i, m) in members.iter().enumerate() {
            for lease in m.recorder.leases.lock().unwrap().values() {
                if lease.is_trusted(now) {
                    holders
                        .entry(lease.queue().clone())
                        .or_default()
                        .push(m.id.to_string());
                    if of.contains(&i) {
                        first.entry(lease.queue().clone()).or_insert(now);
                    }
                }
            }
        }
        for (queue, who) in &holders {
            assert!(who.len() <= 1, "{queue:?} consumable by {who:?} at once");
        }
        settle(Duration::from_millis(100)).await;
    }
    first
}

#[tokio::test(start_paused = true)]
async fn the_ordered_queues_of_a_member_that_died_are_taken_over_after_the_lock_lifetime() {
    let cluster = cluster();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = start_with(&cluster, 0, &["T"], orderly(EXPIRY)).await;
    let b = start_with(&cluster, 1, &["T"], orderly(EXPIRY)).await;
    settle(3 * MIN).await;
    assert_partition(&[&a, &b], &all);
    let orphans: BTreeSet<MessageQueue> = a.recorder.held();
    // a dies just after a renewal (every 20 s): no goodbye, its locks stay at the broker until
    // 60 s after that renewal.
    settle(18 * MIN).await;
    let died = Instant::now();
    a.handle.abort();
    let lifetime = Intervals::default().lock_lifetime;
    let first = watch_exclusive(&[&a, &b], 60 * MIN, 1).await;
    let took: Vec<Duration> = orphans
        .iter()
        .map(|q| first.get(q).map_or(Duration::MAX, |at| *at - died))
        .collect();
    // Dropped by the directory within its expiry and a heartbeat, seen missing at b's next
    // round, then lock_lifetime: well before the broker's 60 s.
    for t in &took {
        assert!(
            *t >= lifetime,
            "taken over after {t:?}, before lock_lifetime"
        );
        assert!(*t <= EXPIRY + lifetime + 5 * MIN, "taken over after {t:?}");
    }
    assert_eq!(b.handle.assignment().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_member_cut_off_with_its_locks_never_consumes_a_queue_its_successor_took() {
    let cluster = cluster();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    // a trusts its membership for 120 s although the directory drops it after 10 s: only its
    // locks' lifetime keeps it off the queues b takes over.
    let a = start_with(&cluster, 0, &["T"], orderly(12 * EXPIRY)).await;
    let b = start_with(&cluster, 1, &["T"], orderly(EXPIRY)).await;
    settle(3 * MIN).await;
    assert_partition(&[&a, &b], &all);
    let orphans: BTreeSet<MessageQueue> = a.recorder.held();
    settle(7 * MIN).await;
    cluster.partition(&a.id, true);
    let cut = Instant::now();
    let first = watch_exclusive(&[&a, &b], 80 * MIN, 1).await;
    for q in &orphans {
        let at = first.get(q).copied();
        assert!(
            at.is_some_and(|at| at - cut < 60 * MIN),
            "{q:?} taken over at {:?}",
            at.map(|at| at - cut)
        );
    }
    // Back: a gives up what it held and takes its share again, still one at a time.
    cluster.partition(&a.id, false);
    watch_exclusive(&[&a, &b], 60 * MIN, 0).await;
    assert_partition(&[&a, &b], &all);
}

#[tokio::test(start_paused = true)]
async fn a_member_that_joined_after_the_departure_gets_the_departed_members_queues_as_soon() {
    let cluster = cluster();
    cluster.create_topic("T", 1, 4);
    let all = all_queues(&cluster, &["T"]);
    // Ids sort c < a < b: a holds queues 0 and 1, and once a is gone and c has joined, c is
    // given them.
    let a = start_with(&cluster, 1, &["T"], orderly_every_5_s).await;
    let b = start_with(&cluster, 2, &["T"], orderly_every_5_s).await;
    settle(3 * MIN).await;
    assert_partition(&[&a, &b], &all);
    let orphans: BTreeSet<MessageQueue> = a.recorder.held();
    // a dies just after a renewal; c joins at once and never sees a in the group. b, which saw
    // a leave, frees a's locks lock_lifetime after, and c's lock retry gets them.
    settle(18 * MIN).await;
    let died = Instant::now();
    a.handle.abort();
    let c = start_with(&cluster, 0, &["T"], orderly_every_5_s).await;
    let lifetime = Intervals::default().lock_lifetime;
    let first = watch_exclusive_for(&[&a, &b, &c], 70 * MIN, &[2]).await;
    for q in &orphans {
        let took = first.get(q).map(|at| *at - died);
        assert!(
            took.is_some_and(|t| t >= lifetime && t <= EXPIRY + lifetime + 10 * MIN),
            "{q:?}: c could consume it {took:?} after a died"
        );
    }
    assert_partition(&[&b, &c], &all);
}

/// Whether `member` holds a lease of `queue` it may consume at `now`.
fn trusts(member: &Member, queue: &MessageQueue, now: Instant) -> bool {
    member
        .recorder
        .leases
        .lock()
        .unwrap()
        .values()
        .any(|lease| lease.queue() == queue && lease.is_trusted(now))
}

/// The queues of `broker` among `queues`.
fn of_broker(queues: &BTreeSet<MessageQueue>, broker: &str) -> Vec<MessageQueue> {
    queues
        .iter()
        .filter(|q| &*q.broker_name == broker)
        .cloned()
        .collect()
}

/// Member `a`, orderly, alone on topic T (two brokers of two queues) on `cluster`, just after
/// a renewal of its locks (every 20 s): it trusts them for another 29 s or so. With every
/// queue of T.
async fn alone_just_after_a_renewal(cluster: &InMemoryCluster) -> (Member, BTreeSet<MessageQueue>) {
    cluster.create_topic("T", 2, 2);
    let all = all_queues(cluster, &["T"]);
    let a = start_with(cluster, 0, &["T"], orderly(EXPIRY)).await;
    settle(3 * MIN).await;
    assert_partition(&[&a], &all);
    settle(18 * MIN).await;
    (a, all)
}

#[tokio::test(start_paused = true)]
async fn a_restarted_broker_s_locks_stop_being_trusted_at_once_and_a_lock_granted_elsewhere_is_released()
 {
    let cluster = cluster();
    let (a, all) = alone_just_after_a_renewal(&cluster).await;
    // The broker restarts; a sees its connection close and asks for its locks again at once,
    // while the broker is still down (the request fails).
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::Lock, 1);
    let restarted = Instant::now();
    cluster.restart_broker("broker-0");
    let at_broker_0 = of_broker(&all, "broker-0");
    settle(Duration::from_millis(1)).await;
    for q in &at_broker_0 {
        assert!(
            !trusts(&a, q, Instant::now()),
            "{q:?} still trusted after its broker restarted"
        );
    }
    // Another client reconnects first and is granted one of a's queues: the broker forgot a's
    // lock.
    let taken = at_broker_0[0].clone();
    let b = cluster.client(client_id(1));
    let b_id = b.client_id().clone();
    let answer = b
        .lock(GROUP, &b_id, std::slice::from_ref(&taken))
        .await
        .unwrap();
    assert_eq!(answer.granted, vec![taken.clone()]);
    // From the restart on, a never consumes the queue b locked; its other locks at the
    // restarted broker are granted again by the immediate renewal, and broker-1's never stop
    // being trusted.
    let end = restarted + 40 * MIN;
    let mut step = 0;
    while Instant::now() < end {
        let now = Instant::now();
        assert!(
            !trusts(&a, &taken, now),
            "a trusts {taken:?} {:?} after the restart, while b holds its lock",
            now - restarted
        );
        if now - restarted >= MIN {
            for q in all.iter().filter(|q| **q != taken) {
                assert!(
                    trusts(&a, q, now),
                    "{q:?} not trusted {:?} after the restart",
                    now - restarted
                );
            }
        }
        settle(if step < 10 {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(100)
        })
        .await;
        step += 1;
    }
    assert!(
        a.recorder
            .removed_with(rebalance_runtime::RemovalReason::Lost)
            .contains(&taken),
        "a released {taken:?} as lost"
    );
    assert!(!a.recorder.held().contains(&taken));
    assert_eq!(cluster.lock_owner(GROUP, &taken), Some(b_id));
}

#[tokio::test(start_paused = true)]
async fn locks_at_a_restarted_broker_that_does_not_answer_yet_are_not_trusted_until_it_grants_them()
{
    let cluster = cluster();
    let (a, all) = alone_just_after_a_renewal(&cluster).await;
    // The broker restarts and answers nothing for 5 s.
    cluster.set_lock_broker_down("broker-0", true);
    let restarted = Instant::now();
    cluster.restart_broker("broker-0");
    let at_broker_0 = of_broker(&all, "broker-0");
    let at_broker_1 = of_broker(&all, "broker-1");
    settle(Duration::from_millis(1)).await;
    while Instant::now() < restarted + 5 * MIN {
        let now = Instant::now();
        for q in &at_broker_0 {
            assert!(!trusts(&a, q, now), "{q:?} trusted while unanswered");
        }
        for q in &at_broker_1 {
            assert!(trusts(&a, q, now), "{q:?} of the other broker not trusted");
        }
        settle(Duration::from_millis(100)).await;
    }
    // Back: the next retry (every lock_retry) is granted, and the queues are trusted again,
    // never released.
    cluster.set_lock_broker_down("broker-0", false);
    settle(MIN).await;
    let now = Instant::now();
    for q in &all {
        assert!(trusts(&a, q, now), "{q:?} not trusted again");
    }
    assert!(
        a.recorder
            .removed_with(rebalance_runtime::RemovalReason::Lost)
            .is_empty()
    );
    assert_partition(&[&a], &all);
}

#[tokio::test(start_paused = true)]
async fn locks_at_a_restarted_broker_that_never_answers_are_released_when_their_lifetime_ends() {
    let cluster = cluster();
    let (a, all) = alone_just_after_a_renewal(&cluster).await;
    let renewed = Instant::now() - MIN;
    cluster.set_lock_broker_down("broker-0", true);
    cluster.restart_broker("broker-0");
    let at_broker_0 = of_broker(&all, "broker-0");
    settle(25 * MIN).await;
    assert!(
        a.recorder
            .removed_with(rebalance_runtime::RemovalReason::Lost)
            .is_empty(),
        "released before the lifetime of the lock granted before the restart ended"
    );
    settle(10 * MIN).await;
    let lost = a
        .recorder
        .removed_with(rebalance_runtime::RemovalReason::Lost);
    for q in &at_broker_0 {
        assert!(
            lost.contains(q),
            "{q:?} not released {:?} after its last grant",
            Instant::now() - renewed
        );
    }
}

/// Two consumers (two groups) on one client share its locker: a broker's restart reaches both,
/// where the first to look took the news from the other (found by review), which went on
/// trusting its locks at the restarted broker for up to `lock_lifetime`.
#[tokio::test(start_paused = true)]
async fn a_restart_reaches_every_consumer_sharing_one_locker() {
    let cluster = cluster();
    cluster.create_topic("T", 1, 2);
    let all = all_queues(&cluster, &["T"]);
    let id = client_id(0);
    let client = cluster.client(id.clone());
    let mut members = Vec::new();
    for group in ["G1", "G2"] {
        let recorder = Recorder::new();
        let handle = orderly(EXPIRY)(
            rebalance_runtime::Consumer::builder(group)
                .client_id(id.clone())
                .cluster(client.clone())
                .listener(recorder.clone())
                .subscribe("T"),
        )
        .start()
        .await
        .expect("consumer starts");
        members.push(Member {
            id: id.clone(),
            handle,
            recorder,
        });
    }
    settle(3 * MIN).await;
    for m in &members {
        assert_eq!(m.recorder.held(), all, "each group holds the topic");
    }
    settle(18 * MIN).await;
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::Lock, 2);
    cluster.restart_broker("broker-0");
    settle(Duration::from_millis(1)).await;
    for (m, group) in members.iter().zip(["G1", "G2"]) {
        for q in &all {
            assert!(
                !trusts(m, q, Instant::now()),
                "{group} still trusts {q:?} after its broker restarted"
            );
        }
    }
}

/// A lock at risk (its broker restarted, the immediate renewal unanswered) whose queue is then
/// released is not asked for again: granted, nothing would unlock it, and its next owner would
/// be refused until the broker expired it (found by review).
#[tokio::test(start_paused = true)]
async fn a_lock_at_risk_whose_queue_was_released_is_not_asked_for_again() {
    let cluster = cluster();
    cluster.create_topic("T", 1, 2);
    cluster.create_topic("U", 1, 2);
    let a = start_with(&cluster, 0, &["T", "U"], orderly(EXPIRY)).await;
    settle(3 * MIN).await;
    let t0 = MessageQueue::new("T", "broker-0", 0);
    assert!(a.recorder.held().contains(&t0));
    settle(18 * MIN).await;
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::Lock, 1);
    cluster.restart_broker("broker-0");
    settle(Duration::from_millis(1)).await;
    assert!(!trusts(&a, &t0, Instant::now()));
    assert!(a.handle.unsubscribe("T").unwrap());
    for _ in 0..50 {
        settle(100 * Duration::from_millis(1)).await;
        assert_eq!(
            cluster.lock_owner(GROUP, &t0),
            None,
            "a released {t0:?}, yet locked it again"
        );
    }
    assert!(!a.recorder.held().contains(&t0));
}
