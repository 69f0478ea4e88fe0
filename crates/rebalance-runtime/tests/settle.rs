//! `Intervals::membership_settle` and `Intervals::adaptive_settle`: a burst of membership
//! changes is rebalanced once, when the group has settled, instead of once per intermediate
//! group; a stable group acts at once; on tokio's paused clock.

mod common;

use std::time::Duration;

use common::*;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{
    ConsumerBuilder,
    config::{AdaptiveSettle, ConsumeOrder, Intervals},
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

// The adaptive settle window, on by default (`Intervals::adaptive_settle`).

fn adaptive(b: ConsumerBuilder) -> ConsumerBuilder {
    b.intervals(Intervals::default())
}

async fn default_member(cluster: &InMemoryCluster, i: usize) -> Member {
    start_with(cluster, i, &["T"], adaptive).await
}

fn round_of(m: &Member) -> u64 {
    m.handle.rounds().borrow().round
}

/// When `m` was first given a queue (its first `queues_added`).
fn first_added(m: &Member) -> Option<Instant> {
    m.recorder.events.lock().unwrap().first().map(|(t, _)| *t)
}

/// A member alone in its group does not pay a group's settle window. From
/// `start()` returning to its first `queues_added` (with the leases) takes `min` (20 ms), not
/// `max` (1 s); the target is 100 ms.
#[tokio::test(start_paused = true)]
async fn a_member_alone_in_its_group_takes_every_queue_within_100_ms_of_its_start() {
    let config = AdaptiveSettle::default();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = default_member(&cluster, 0).await;
    let started = Instant::now();
    settle(config.min - Duration::from_millis(1)).await;
    assert_eq!(
        round_of(&a),
        0,
        "others starting with it have `min` to show up"
    );
    settle(Duration::from_millis(2)).await;
    assert_eq!(a.recorder.held(), all);
    assert_eq!(a.recorder.held_leases().len(), all.len());
    let took = first_added(&a).expect("queues added") - started;
    eprintln!("a lone member's first queues_added came {took:?} after start() returned");
    assert!(took <= Duration::from_millis(100), "{took:?}");
    assert_eq!(took, config.min);
    let report = a.handle.rounds().borrow().clone();
    assert_eq!(report.round, 1);
    assert!(report.reasons.contains(WakeReasons::START));
}

/// The rule that tells a lone start from a group's: the directory's member list right after
/// the start. With anybody else listed (here a member running for a while), the newcomer waits
/// `max` as before: the running members hold its share until they have reacted to its
/// arrival, and it cannot know the group's pace.
#[tokio::test(start_paused = true)]
async fn a_member_starting_into_a_running_group_still_waits_for_it() {
    let max = AdaptiveSettle::default().max;
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = default_member(&cluster, 0).await;
    settle(3 * max).await;
    assert_eq!(a.recorder.held(), all);
    let b = default_member(&cluster, 1).await;
    let started = Instant::now();
    settle(max - EPSILON).await;
    assert!(b.recorder.held().is_empty(), "b waits for the group");
    settle(2 * EPSILON).await;
    assert_partition(&[&a, &b], &all);
    assert!(first_added(&b).is_some_and(|t| t - started >= max));
}

/// Two members starting 15 ms apart: the first is alone at its start, but the second arrives
/// within `min`, so the first waits for the pace of the two (10 x 15 ms) and plans once, from
/// both: nothing moves.
#[tokio::test(start_paused = true)]
async fn a_member_arriving_within_min_of_a_lone_start_makes_it_wait_for_the_pace() {
    let config = AdaptiveSettle::default();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = default_member(&cluster, 0).await;
    let gap = Duration::from_millis(15);
    settle(gap).await;
    let b = default_member(&cluster, 1).await;
    let arrived = Instant::now();
    let quiet = gap * config.gap_factor;
    settle(quiet - Duration::from_millis(1)).await;
    assert_eq!(round_of(&a), 0, "a waits for the pace it saw");
    settle(Duration::from_millis(2)).await;
    assert_eq!(round_of(&a), 1);
    assert!(first_added(&a).is_some_and(|t| t - arrived >= quiet));
    // b saw nobody arrive after it: it waits `max`, then takes the rest.
    settle(config.max).await;
    assert_partition(&[&a, &b], &all);
    for m in [&a, &b] {
        let events = m.recorder.events.lock().unwrap().clone();
        assert!(
            events.iter().all(|(_, e)| matches!(e, Event::Added(..))),
            "nothing moved: {events:?}"
        );
    }
}

/// The price of the rule, and how it stays safe: a second member arriving after the lone
/// member's first round (here 50 ms after its start: the first of a group starting slowly, not
/// a lone member) would plan from its own view of the group's pace while the first, which may
/// not run another round for `rebalance_min`, still held its share. So the first gives every
/// queue back at once when somebody arrives within its start's burst, and both then take their
/// shares once the group has settled: the first member's queues move (it held them for 30 ms),
/// nothing is ever held twice.
#[tokio::test(start_paused = true)]
async fn a_member_arriving_right_after_a_lone_start_makes_it_give_everything_back() {
    let config = AdaptiveSettle::default();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let a = default_member(&cluster, 0).await;
    settle(Duration::from_millis(50)).await;
    assert_eq!(a.recorder.held(), all);
    let b = default_member(&cluster, 1).await;
    settle(Duration::from_millis(1)).await;
    assert!(
        a.recorder.held().is_empty(),
        "a gave everything back at once"
    );
    let given_back = a.handle.rounds().borrow().clone();
    assert_eq!(given_back.round, 2);
    assert_eq!(given_back.removed().count(), all.len());
    assert!(given_back.reasons.contains(WakeReasons::MEMBERSHIP_CHANGED));
    settle(config.max + EPSILON).await;
    assert_partition(&[&a, &b], &all);
    let events = |m: &Member| m.recorder.events.lock().unwrap().clone();
    let released_at = events(&a)
        .iter()
        .filter(|(_, e)| matches!(e, Event::Removed(..)))
        .map(|(t, _)| *t)
        .max();
    assert!(first_added(&b) >= released_at);
    assert!(
        events(&b)
            .iter()
            .all(|(_, e)| matches!(e, Event::Added(..))),
        "b took its share once"
    );
    // Later arrivals find a running member as usual: no more giving back.
    settle(3 * config.max).await;
    let rounds = round_of(&a);
    let _c = default_member(&cluster, 2).await;
    settle(EPSILON).await;
    assert_eq!(round_of(&a), rounds + 1);
    assert!(!a.recorder.held().is_empty());
}

/// A start that cannot list the group (the directory fails) waits as if others were there.
#[tokio::test(start_paused = true)]
async fn a_start_that_cannot_list_the_group_waits_as_if_others_were_there() {
    let max = AdaptiveSettle::default().max;
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::ConsumerIds, 1);
    let a = default_member(&cluster, 0).await;
    settle(max - EPSILON).await;
    assert_eq!(round_of(&a), 0);
    settle(2 * EPSILON).await;
    assert_eq!(a.recorder.held(), all);
}

/// Broadcasting members take every queue whoever else is there: each starts as if alone.
#[tokio::test(start_paused = true)]
async fn broadcasting_members_never_wait_for_the_group() {
    let min = AdaptiveSettle::default().min;
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    let all = all_queues(&cluster, &["T"]);
    let broadcast = |b: ConsumerBuilder| {
        adaptive(b)
            .message_model(rebalance_runtime::config::MessageModel::Broadcasting)
            .offset_store(std::sync::Arc::new(
                rebalance_runtime::LocalOffsetStore::new(),
            ))
    };
    let a = start_with(&cluster, 0, &["T"], broadcast).await;
    settle(Duration::from_secs(3)).await;
    let b = start_with(&cluster, 1, &["T"], broadcast).await;
    let started = Instant::now();
    settle(min + Duration::from_millis(1)).await;
    assert_eq!(b.recorder.held(), all);
    assert_eq!(first_added(&b).map(|t| t - started), Some(min));
    assert_eq!(a.recorder.held(), all);
}

#[tokio::test(start_paused = true)]
async fn a_group_starting_together_plans_once_from_the_whole_group() {
    let config = AdaptiveSettle::default();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 4, 10);
    let all = all_queues(&cluster, &["T"]);
    // 20 members, one every 5 ms: a quick pace, so they wait 10 x 5 ms after the last one.
    let gap = Duration::from_millis(5);
    let mut members = Vec::new();
    for i in 0..20 {
        if i > 0 {
            settle(gap).await;
        }
        members.push(default_member(&cluster, i).await);
    }
    let quiet = (gap * config.gap_factor).clamp(config.min, config.max);
    assert!(quiet < config.max);
    settle(quiet - EPSILON / 5).await;
    assert!(
        members.iter().all(|m| round_of(m) == 0),
        "no round while members keep arriving"
    );
    settle(EPSILON).await;
    // All but the last one, which saw nobody arrive after it, plan now, from the whole group.
    let (last, others) = members.split_last().unwrap();
    assert!(others.iter().all(|m| round_of(m) == 1));
    assert_eq!(round_of(last), 0);
    let held: usize = others.iter().map(|m| m.recorder.held().len()).sum();
    assert_eq!(held, all.len() - all.len() / members.len());
    // The last one waits for the pace it could not see, then takes the rest.
    settle(config.max - quiet).await;
    let refs: Vec<&Member> = members.iter().collect();
    assert_partition(&refs, &all);
    for m in &members {
        assert_eq!(round_of(m), 1, "one round each");
        let events = m.recorder.events.lock().unwrap().clone();
        assert!(
            events.iter().all(|(_, e)| matches!(e, Event::Added(..))),
            "nothing moved: {events:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stable_group_acts_at_once_when_a_member_restarts() {
    let max = AdaptiveSettle::default().max;
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 6);
    let all = all_queues(&cluster, &["T"]);
    let a = default_member(&cluster, 0).await;
    let b = default_member(&cluster, 1).await;
    let c = default_member(&cluster, 2).await;
    settle(3 * max).await;
    assert_partition(&[&a, &b, &c], &all);
    let (a0, b0) = (round_of(&a), round_of(&b));

    // `c` restarts: it leaves, and its new process (a new client id) starts 1.5 s later.
    c.handle.shutdown().await;
    settle(EPSILON).await;
    assert_eq!(
        (round_of(&a), round_of(&b)),
        (a0 + 1, b0 + 1),
        "the leave is acted upon at once"
    );
    assert_partition(&[&a, &b], &all);
    settle(Duration::from_millis(1500)).await;
    let d = default_member(&cluster, 3).await;
    settle(EPSILON).await;
    assert_eq!(
        (round_of(&a), round_of(&b)),
        (a0 + 2, b0 + 2),
        "the join is acted upon at once: a stable group does not settle"
    );
    // `a` and `b` gave up `d`'s share at once; `d` takes it once it has waited for the pace.
    let given_up = all.len() - a.recorder.held().len() - b.recorder.held().len();
    assert!(given_up > 0);
    assert!(d.recorder.held().is_empty());
    settle(max).await;
    assert_partition(&[&a, &b, &d], &all);
    assert_eq!(d.recorder.held().len(), given_up);
    // Never held twice: `d` took its share after the others had released it.
    let released_at = |m: &Member| {
        m.recorder
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| matches!(e, Event::Removed(..)))
            .map(|(t, _)| *t)
            .max()
    };
    let taken_at = d.recorder.events.lock().unwrap().first().map(|(t, _)| *t);
    assert!(taken_at >= released_at(&a).max(released_at(&b)));
}

#[tokio::test(start_paused = true)]
async fn a_churning_group_settles_and_no_wake_up_is_lost() {
    let config = AdaptiveSettle::default();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 12);
    let all = all_queues(&cluster, &["T"]);
    let a = default_member(&cluster, 0).await;
    // A wake-up asked for while the start settles (`min`: it is alone) is kept for the first
    // round.
    settle(config.min / 2).await;
    a.handle.rebalance_now();
    settle(config.max).await;
    let first = a.handle.rounds().borrow().clone();
    assert_eq!(first.round, 1);
    assert!(
        first
            .reasons
            .contains(WakeReasons::START | WakeReasons::MANUAL)
    );
    assert_eq!(a.recorder.held(), all);
    settle(3 * config.max).await;
    let before = round_of(&a);

    // Five members join 200 ms apart: the first two joins are acted upon at once (at most
    // one round per `rebalance_min`), from the third on `a` waits for the group to be quiet
    // for 10 x 200 ms, capped at `max`.
    let mut joined = Vec::new();
    let mut last_join = Instant::now();
    for i in 1..=5 {
        joined.push(default_member(&cluster, i).await);
        last_join = Instant::now();
        settle(Duration::from_millis(200)).await;
    }
    let during = round_of(&a) - before;
    assert!(during <= 2, "{during} rounds during the burst");
    settle(last_join + config.max - Instant::now() - EPSILON).await;
    let settled_before = round_of(&a);
    settle(2 * EPSILON).await;
    let report = a.handle.rounds().borrow().clone();
    assert_eq!(report.round, settled_before + 1, "one round once quiet");
    assert!(report.reasons.contains(WakeReasons::MEMBERSHIP_CHANGED));
    let members: Vec<&Member> = std::iter::once(&a).chain(&joined).collect();
    assert_partition(&members, &all);
}
