//! `Intervals::membership_settle`: a burst of membership changes is rebalanced once, when the
//! group has settled, instead of once per intermediate group; on tokio's paused clock.

mod common;

use std::time::Duration;

use common::*;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    ConsumerBuilder,
    config::{ConsumeOrder, Intervals},
    wake::WakeReasons,
};
use tokio::time::Instant;

const SETTLE: Duration = Duration::from_secs(1);
const EPSILON: Duration = Duration::from_millis(50);

fn settling(b: ConsumerBuilder) -> ConsumerBuilder {
    b.intervals(Intervals {
        membership_settle: SETTLE,
        ..Intervals::default()
    })
}

async fn member(cluster: &InMemoryCluster, i: usize) -> Member {
    start_with(cluster, i, &["T"], settling).await
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_joins_is_rebalanced_once_when_the_group_has_settled() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 12);
    let all = all_queues(&cluster, &["T"]);
    let a = member(&cluster, 0).await;
    settle(3 * SETTLE).await;
    assert_eq!(a.recorder.held(), all);
    let rounds_before = a.handle.rounds().borrow().round;

    // Three members join 400 ms apart: every join pushes the others' round back.
    let mut joined = vec![member(&cluster, 1).await];
    for i in 2..4 {
        settle(Duration::from_millis(400)).await;
        joined.push(member(&cluster, i).await);
    }
    let last_join = Instant::now();
    settle(SETTLE - EPSILON).await;
    assert_eq!(
        a.handle.rounds().borrow().round,
        rounds_before,
        "no round while the group is still changing"
    );
    assert_eq!(a.recorder.held(), all, "nothing moved yet");
    assert!(joined.iter().all(|m| m.recorder.held().is_empty()));

    settle(2 * EPSILON).await;
    let report = a.handle.rounds().borrow().clone();
    assert_eq!(
        report.round,
        rounds_before + 1,
        "one round for the whole burst"
    );
    assert!(report.reasons.contains(WakeReasons::MEMBERSHIP_CHANGED));
    let members: Vec<&Member> = std::iter::once(&a).chain(&joined).collect();
    assert_partition(&members, &all);
    // Every queue moved at most once: straight from `a` to its final owner.
    let removed = a
        .recorder
        .removed_with(rebalance_runtime::RemovalReason::Reassigned);
    assert_eq!(removed.len(), all.len() - a.recorder.held().len());
    for m in &joined {
        assert!(
            m.recorder
                .removed_with(rebalance_runtime::RemovalReason::Reassigned)
                .is_empty()
        );
        let first_added = m.recorder.events.lock().unwrap().first().map(|(t, _)| *t);
        assert!(first_added.is_some_and(|t| t >= last_join + SETTLE));
    }
}

#[tokio::test(start_paused = true)]
async fn a_starting_member_waits_for_the_group_to_settle() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = member(&cluster, 0).await;
    settle(SETTLE - EPSILON).await;
    assert!(a.recorder.held().is_empty());
    assert_eq!(a.handle.rounds().borrow().round, 0);
    settle(2 * EPSILON).await;
    assert_eq!(a.recorder.held(), all);
}

#[tokio::test(start_paused = true)]
async fn endless_churn_does_not_hold_rounds_off_past_the_timer() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let a = member(&cluster, 0).await;
    settle(3 * SETTLE).await;
    let mut rounds = a.handle.rounds();
    let watcher = tokio::spawn(async move {
        let mut at = vec![Instant::now()];
        while rounds.changed().await.is_ok() {
            at.push(Instant::now());
        }
        at
    });
    // A member comes and goes every 500 ms for a minute: the group never settles.
    let churn_until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < churn_until {
        let b = member(&cluster, 1).await;
        settle(Duration::from_millis(250)).await;
        b.handle.shutdown().await;
        settle(Duration::from_millis(250)).await;
    }
    a.handle.shutdown().await;
    let at = watcher.await.unwrap();
    let wait = Intervals::default().rebalance_wait;
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 3, "rounds ran: {gaps:?}");
    assert!(
        gaps.iter().all(|g| *g <= wait + SETTLE),
        "a gap longer than the timer's: {gaps:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_lock_is_not_retried_while_the_group_settles() {
    let orderly = |b: ConsumerBuilder| settling(b).consume_order(ConsumeOrder::Orderly);
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let a = start_with(&cluster, 0, &["T"], orderly).await;
    settle(3 * SETTLE).await;
    // `a` is in the middle of a batch on every queue: it keeps their locks for a while.
    let leases = a.recorder.held_leases();
    let mut guards = Vec::new();
    for lease in &leases {
        guards.push(lease.consume_guard().await.expect("held queue"));
    }
    // `b` joins; once settled it is refused its share's locks and retries every 500 ms.
    let b = start_with(&cluster, 1, &["T"], orderly).await;
    settle(SETTLE + Duration::from_secs(2)).await;
    let retrying = b.handle.rounds().borrow().round;
    settle(Duration::from_secs(1)).await;
    assert!(
        b.handle.rounds().borrow().round > retrying,
        "b retries its refused locks"
    );
    // A third member joins: while the group settles, b does not retry.
    let _c = start_with(&cluster, 2, &["T"], orderly).await;
    // (A retry due at this very instant may still run; the notification is seen after it.)
    settle(EPSILON).await;
    let before = b.handle.rounds().borrow().round;
    settle(SETTLE - 2 * EPSILON).await;
    assert_eq!(
        b.handle.rounds().borrow().round,
        before,
        "no lock-retry round while the group settles"
    );
    settle(2 * EPSILON).await;
    let report = b.handle.rounds().borrow().clone();
    assert_eq!(report.round, before + 1);
    assert!(report.reasons.contains(WakeReasons::MEMBERSHIP_CHANGED));
    drop(guards);
}

#[tokio::test(start_paused = true)]
async fn a_round_asked_for_another_reason_runs_while_the_group_settles() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let a = member(&cluster, 0).await;
    settle(3 * SETTLE).await;
    let before = a.handle.rounds().borrow().round;
    // `b` joins: `a` would wait for the group to settle...
    let _b = member(&cluster, 1).await;
    settle(EPSILON).await;
    assert_eq!(a.handle.rounds().borrow().round, before, "a settles");
    // ...but `rebalance_now` is not a membership change: it runs as usual, not after the
    // settle delay.
    a.handle.rebalance_now();
    settle(EPSILON).await;
    let report = a.handle.rounds().borrow().clone();
    assert_eq!(report.round, before + 1, "rebalance_now ran while settling");
    assert!(report.reasons.contains(WakeReasons::MANUAL), "{report:?}");
}
