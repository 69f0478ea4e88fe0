//! The ordered queues of a member that left the group are taken over `lock_lifetime` after the
//! others saw it missing, not when the broker expires its locks (60 s after its last renewal):
//! by then it trusts none of them (`Service::take_over_departed`). And never two members at once:
//! at every instant, at most one member holds a lease it may consume of each queue.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use rebalance_core::MessageQueue;
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
