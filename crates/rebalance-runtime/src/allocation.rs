//! How a consumer computes its share: a per-topic strategy, or a group assignor run leaderlessly.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use rebalance_core::assignor::{
    AssignError, AssignorRef, GroupSubscription, MemberSubscription, Topic,
};
use rebalance_core::{ClientId, MessageQueue, StrategyRef};

/// The allocation a consumer follows.
#[derive(Clone)]
pub enum Allocation {
    /// A RocketMQ-style per-topic strategy: "which of this topic's queues are mine?".
    Strategy(StrategyRef),
    /// A Kafka-style group assignor, run by every member on the same view (no leader).
    ///
    /// The view: each topic's queues, sorted the Java way, are its partitions `0..Q`; a member
    /// subscribes to a topic when the directory lists it for that topic; nobody's owned
    /// partitions are known (the directory does not share them), so every member passes empty
    /// owned lists and every member computes the same result.
    ///
    /// Which assignors make sense that way: `range` and `broadcast` decide each topic from
    /// that topic's subscribers alone, so they also work when members subscribe to different
    /// topics; `roundrobin` needs every member to see the same topic set (identical
    /// subscriptions). `sticky` and `cooperative_sticky` are balanced and deterministic here but
    /// not sticky, since stickiness needs everyone's owned partitions, which only a leader (or a
    /// directory that shares them) has; prefer a per-topic strategy such as `consistent_hash`
    /// when moving few queues matters.
    Assignor(AssignorRef),
}

impl Allocation {
    /// The strategy's or assignor's name.
    pub fn name(&self) -> &str {
        match self {
            Allocation::Strategy(s) => s.name(),
            Allocation::Assignor(a) => a.name(),
        }
    }
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allocation::Strategy(s) => f.debug_tuple("Strategy").field(&s.name()).finish(),
            Allocation::Assignor(a) => f.debug_tuple("Assignor").field(&a.name()).finish(),
        }
    }
}

/// One topic as every member sees it.
#[derive(Debug, Clone)]
pub(crate) struct TopicView {
    pub(crate) queues: Arc<[MessageQueue]>,
    /// Sorted the Java way.
    pub(crate) ids: Vec<ClientId>,
}

/// Runs a group assignor over the views of every topic and returns this client's queues per
/// topic.
pub(crate) fn assign_leaderless(
    assignor: &AssignorRef,
    me: &ClientId,
    views: &BTreeMap<String, TopicView>,
) -> Result<BTreeMap<String, Vec<MessageQueue>>, AssignError> {
    let mut topics_of: BTreeMap<&ClientId, BTreeSet<&str>> = BTreeMap::new();
    for (topic, view) in views {
        for id in &view.ids {
            topics_of.entry(id).or_default().insert(topic);
        }
    }
    let mut group = GroupSubscription::new();
    for (topic, view) in views {
        group = group.with_topic(topic.as_str(), view.queues.len() as u32);
    }
    for (id, topics) in topics_of {
        group = group.with_member(MemberSubscription::new(
            id.clone(),
            topics.into_iter().map(Topic::from),
        ));
    }
    let assignment = assignor.assign(&group)?;
    let mut mine: BTreeMap<String, Vec<MessageQueue>> =
        views.keys().map(|t| (t.clone(), Vec::new())).collect();
    if let Some(partitions) = assignment.get(me) {
        for (topic, partition) in partitions.iter() {
            let queue = views.get(topic.as_str()).and_then(|v| {
                usize::try_from(partition)
                    .ok()
                    .and_then(|p| v.queues.get(p))
            });
            if let (Some(queue), Some(list)) = (queue, mine.get_mut(topic.as_str())) {
                list.push(queue.clone());
            }
        }
    }
    Ok(mine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebalance_core::assignor::build_assignor;

    fn view(topic: &str, queues: i32, ids: &[&str]) -> TopicView {
        TopicView {
            queues: (0..queues)
                .map(|i| MessageQueue::new(topic, "b", i))
                .collect(),
            ids: ids.iter().copied().map(ClientId::from).collect(),
        }
    }

    #[test]
    fn every_member_computes_the_same_partition() {
        let views: BTreeMap<String, TopicView> = [
            ("T".to_string(), view("T", 5, &["a", "b"])),
            ("U".to_string(), view("U", 3, &["a", "b"])),
        ]
        .into();
        for name in ["range", "roundrobin", "sticky", "cooperative_sticky"] {
            let assignor = build_assignor(name).unwrap();
            let a = assign_leaderless(&assignor, &"a".into(), &views).unwrap();
            let b = assign_leaderless(&assignor, &"b".into(), &views).unwrap();
            for topic in ["T", "U"] {
                let mut all: Vec<&MessageQueue> = a[topic].iter().chain(&b[topic]).collect();
                all.sort();
                all.dedup();
                assert_eq!(
                    all.len(),
                    a[topic].len() + b[topic].len(),
                    "{name}: disjoint"
                );
                assert_eq!(all.len(), views[topic].queues.len(), "{name}: complete");
            }
        }
    }

    #[test]
    fn range_follows_each_topics_subscribers() {
        let views: BTreeMap<String, TopicView> = [
            ("T".to_string(), view("T", 4, &["a", "b"])),
            ("U".to_string(), view("U", 2, &["b"])),
        ]
        .into();
        let assignor = build_assignor("range").unwrap();
        let a = assign_leaderless(&assignor, &"a".into(), &views).unwrap();
        let b = assign_leaderless(&assignor, &"b".into(), &views).unwrap();
        assert_eq!((a["T"].len(), a["U"].len()), (2, 0));
        assert_eq!((b["T"].len(), b["U"].len()), (2, 2));
    }

    #[test]
    fn the_name_is_the_strategys_or_the_assignors() {
        let strategy =
            rebalance_core::strategy::build_strategy("averagely", &Default::default()).unwrap();
        let allocation = Allocation::Strategy(strategy.clone());
        assert_eq!(allocation.name(), strategy.name());
        assert_eq!(
            format!("{allocation:?}"),
            format!("Strategy({:?})", strategy.name())
        );
        let allocation = Allocation::Assignor(build_assignor("range").unwrap());
        assert_eq!(allocation.name(), "range");
    }

    #[test]
    fn broadcast_gives_every_subscriber_everything() {
        let views: BTreeMap<String, TopicView> =
            [("T".to_string(), view("T", 3, &["a", "b"]))].into();
        let assignor = build_assignor("broadcast").unwrap();
        assert_eq!(
            assign_leaderless(&assignor, &"b".into(), &views).unwrap()["T"].len(),
            3
        );
    }
}
