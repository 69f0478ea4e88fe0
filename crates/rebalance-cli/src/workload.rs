//! Workloads built exactly like the Java reference timings, so that our figures compare with
//! theirs (`BENCHMARKS.md`).
//!
//! RocketMQ: one topic `TopicTest`; brokers of 16 queues named `room{b mod 3}@broker-{b}` (the
//! last broker may have fewer); client ids `room{i mod 3}@10.0.{i div 250}.{i mod 250 + 1}@{20000
//! + i}`; both sorted the Java way. Kafka: topics `topic-{8 hex digits}` from a seeded
//! [`SplitMix64`], members `consumer-{i}` all subscribing to every topic.

use std::collections::HashSet;
use std::sync::Arc;

use rebalance_core::assignor::{
    GroupAssignment, GroupSubscription, MemberSubscription, Topic, TopicPartition,
};
use rebalance_core::strategy::Params;
use rebalance_core::{ClientId, MessageQueue};

use crate::rng::SplitMix64;

/// The strategies of the Java reference timings: (label, strategy name, parameters before
/// [`with_reference_params`](crate::bench::strategy::with_reference_params) fills in the
/// workload's own).
pub fn reference_strategies() -> Vec<(&'static str, &'static str, Params)> {
    let inner = |name: &str| {
        let mut p = Params::new();
        p.insert("inner_strategy".into(), serde_json::json!(name));
        p
    };
    vec![
        ("averagely", "averagely", Params::new()),
        ("averagely_by_circle", "averagely_by_circle", Params::new()),
        ("by_config", "by_config", Params::new()),
        ("by_machine_room", "by_machine_room", Params::new()),
        ("consistent_hash", "consistent_hash", Params::new()),
        (
            "machine_room_nearby",
            "machine_room_nearby",
            inner("averagely"),
        ),
        (
            "machine_room_nearby_consistent_hash",
            "machine_room_nearby",
            inner("consistent_hash"),
        ),
        ("balanced_sticky", "balanced_sticky", Params::new()),
    ]
}

/// The topic of the RocketMQ workloads.
pub const TOPIC: &str = "TopicTest";
/// Queues per broker in the RocketMQ workloads.
pub const QUEUES_PER_BROKER: usize = 16;
/// The seed of the Kafka workloads' topic names unless another is given.
pub const DEFAULT_TOPIC_SEED: u64 = 42;

/// The name of broker `b`: `room{b mod 3}@broker-{b}`.
pub fn broker_name(b: usize) -> String {
    format!("room{}@broker-{b}", b % 3)
}

/// `count` queues of [`TOPIC`] over brokers of [`QUEUES_PER_BROKER`], sorted like the Java
/// client sorts them. Queues of one broker share its name string.
///
/// ```
/// let queues = rebalance_cli::workload::queues(18);
/// assert_eq!(queues.len(), 18);
/// assert_eq!(&*queues[0].broker_name, "room0@broker-0");
/// assert_eq!(&*queues[16].broker_name, "room1@broker-1");
/// ```
pub fn queues(count: usize) -> Vec<MessageQueue> {
    let topic: Arc<str> = TOPIC.into();
    let mut queues = Vec::with_capacity(count);
    for b in 0..count.div_ceil(QUEUES_PER_BROKER) {
        let broker: Arc<str> = broker_name(b).into();
        let on_this = QUEUES_PER_BROKER.min(count - b * QUEUES_PER_BROKER);
        queues.extend(
            (0..on_this as i32).map(|i| MessageQueue::new(topic.clone(), broker.clone(), i)),
        );
    }
    queues.sort();
    queues
}

/// The id of client `i`: `room{i mod 3}@10.0.{i div 250}.{i mod 250 + 1}@{20000 + i}`.
///
/// ```
/// assert_eq!(rebalance_cli::workload::client_id(251).as_str(), "room2@10.0.1.2@20251");
/// ```
pub fn client_id(i: usize) -> ClientId {
    ClientId::from(format!(
        "room{}@10.0.{}.{}@{}",
        i % 3,
        i / 250,
        i % 250 + 1,
        20000 + i
    ))
}

/// Clients `0..count`, sorted like the Java client sorts them.
pub fn client_ids(count: usize) -> Vec<ClientId> {
    let mut ids: Vec<ClientId> = (0..count).map(client_id).collect();
    ids.sort();
    ids
}

/// `count` distinct topic names `topic-{8 hex digits}`, the digits drawn from a
/// [`SplitMix64`] seeded with `seed` (the high 32 bits of each draw; a repeated name is drawn
/// again).
///
/// ```
/// let names = rebalance_cli::workload::topic_names(3, 42);
/// assert_eq!(names.len(), 3);
/// assert!(names.iter().all(|t| t.len() == 14 && t.starts_with("topic-")));
/// ```
pub fn topic_names(count: usize, seed: u64) -> Vec<Topic> {
    let mut rng = SplitMix64::new(seed);
    let mut seen = HashSet::with_capacity(count);
    let mut names = Vec::with_capacity(count);
    while names.len() < count {
        let name = format!("topic-{:08x}", rng.next_u64() >> 32);
        if seen.insert(name.clone()) {
            names.push(Topic::from(name));
        }
    }
    names
}

/// A group of `members` members `consumer-{i}` (in that order) all subscribing to every topic
/// of `topics`, each with `partitions` partitions. The members share one topic list.
pub fn kafka_group(topics: &[Topic], partitions: u32, members: usize) -> GroupSubscription {
    let shared: Arc<[Topic]> = topics.into();
    let mut group = GroupSubscription::new();
    for t in topics {
        group.partitions_per_topic.insert(t.clone(), partitions);
    }
    group.members = (0..members)
        .map(|i| MemberSubscription::with_shared_topics(format!("consumer-{i}"), shared.clone()))
        .collect();
    group
}

/// The member that leaves in the `member_left` scenario: `consumer-{M/2}`.
pub fn leaving_member(members: usize) -> String {
    format!("consumer-{}", members / 2)
}

/// The next round after `assignment`: every member owns what it was assigned, at `generation`,
/// and `leaving` is gone. Owned partitions reuse the group's topic strings.
pub fn after_assignment(
    group: &GroupSubscription,
    assignment: &GroupAssignment,
    generation: i32,
    leaving: &str,
) -> GroupSubscription {
    let mut next = GroupSubscription {
        members: Vec::with_capacity(group.members.len()),
        partitions_per_topic: group.partitions_per_topic.clone(),
        partition_racks: group.partition_racks.clone(),
    };
    for member in &group.members {
        if member.member_id.as_str() == leaving {
            continue;
        }
        let owned: Vec<TopicPartition> = assignment
            .get(&member.member_id)
            .map(|p| {
                p.iter()
                    .map(|(t, p)| TopicPartition::new(t.clone(), p))
                    .collect()
            })
            .unwrap_or_default();
        next.members
            .push(member.clone().with_owned(owned).with_generation(generation));
    }
    next
}

/// Partitions that a member of `group` owned but is not assigned in `assignment` (cooperative
/// hand-overs held back for a round count as lost).
pub fn moved(group: &GroupSubscription, assignment: &GroupAssignment) -> usize {
    group
        .members
        .iter()
        .map(|m| {
            let now: HashSet<(&str, i32)> = assignment
                .get(&m.member_id)
                .map(|p| p.iter().map(|(t, p)| (t.as_str(), p)).collect())
                .unwrap_or_default();
            m.owned
                .iter()
                .filter(|tp| !now.contains(&(tp.topic.as_str(), tp.partition)))
                .count()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebalance_core::assignor::build_assignor;

    /// The benches run these; a name or parameter that no longer builds would only show when
    /// someone benchmarks. Every one must plan the bench's workload, and every strategy of the
    /// Java reference timings must be there.
    #[test]
    fn every_reference_strategy_plans_the_workload() {
        use crate::bench::strategy::with_reference_params;
        let registry = rebalance_core::strategy::StrategyRegistry::default();
        let (mq_all, cids) = (queues(40), client_ids(6));
        let mut labels = Vec::new();
        for (label, name, params) in reference_strategies() {
            let params = with_reference_params(name, params, &mq_all, cids.len());
            let strategy = registry.build(name, &params).unwrap();
            let plan = strategy.plan("G", &mq_all, &cids).unwrap();
            let planned: usize = plan.iter().map(|(_, share)| share.len()).sum();
            assert!(planned > 0, "{label}");
            labels.push(label);
        }
        for java in [
            "averagely",
            "averagely_by_circle",
            "by_config",
            "by_machine_room",
            "consistent_hash",
            "machine_room_nearby",
            "machine_room_nearby_consistent_hash",
        ] {
            assert!(labels.contains(&java), "{java} missing: {labels:?}");
        }
    }

    #[test]
    fn queues_follow_the_java_layout() {
        let q = queues(40);
        assert_eq!(q.len(), 40);
        // broker-0 (16), broker-1 (16), broker-2 (8), sorted by broker name then id.
        assert_eq!(
            q.iter()
                .filter(|m| &*m.broker_name == "room2@broker-2")
                .count(),
            8
        );
        assert!(q.windows(2).all(|w| w[0] < w[1]));
        // Java order: "room0@broker-0" < "room0@broker-3" < "room1@broker-1" (by string).
        let names: Vec<&str> = q.iter().map(|m| &*m.broker_name).collect();
        assert_eq!(names[0], "room0@broker-0");
        assert_eq!(names[16], "room1@broker-1");
    }

    #[test]
    fn client_ids_sort_like_java() {
        let ids = client_ids(300);
        assert_eq!(ids.len(), 300);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        // String order: '0' sorts before '@', so ...0.100@ comes before ...0.1@.
        assert_eq!(ids[0].as_str(), "room0@10.0.0.100@20099");
    }

    #[test]
    fn topic_names_are_reproducible_and_distinct() {
        let a = topic_names(500, 1);
        assert_eq!(a, topic_names(500, 1));
        assert_ne!(a, topic_names(500, 2));
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), 500);
    }

    #[test]
    fn member_left_feeds_the_assignment_back_and_counts_losses() {
        let topics = topic_names(2, 7);
        let group = kafka_group(&topics, 4, 3);
        let first = build_assignor("range").unwrap().assign(&group).unwrap();
        let next = after_assignment(&group, &first, 1, &leaving_member(3));
        assert_eq!(next.members.len(), 2);
        assert!(next.members.iter().all(|m| m.generation == Some(1)));
        let left_with = first.get("consumer-1").unwrap().len();
        assert_eq!(
            left_with, 2,
            "range gives consumer-1 one partition of each topic"
        );
        assert_eq!(
            next.members.iter().map(|m| m.owned.len()).sum::<usize>(),
            8 - left_with
        );
        // Nothing assigned: every owned partition is lost.
        let empty = GroupAssignment::from_lists(
            next.members
                .iter()
                .map(|m| (m.member_id.clone(), Vec::new())),
        );
        let owned: usize = next.members.iter().map(|m| m.owned.len()).sum();
        assert_eq!(moved(&next, &empty), owned);
        // The same assignment again: nothing lost.
        assert_eq!(moved(&next, &first), 0);
    }
}
