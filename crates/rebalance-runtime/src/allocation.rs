//! How a consumer computes its share: a per-topic strategy, a group assignor run leaderlessly,
//! or the brokers' answer (server-side assignment).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use rebalance_core::assignor::{
    AssignError, AssignorRef, GroupSubscription, MemberSubscription, Topic,
};
use rebalance_core::{ClientId, MessageQueue, StrategyRef};

use crate::assignment_source::{AssignmentSource, ReadMode};

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
    /// Server-side assignment (RocketMQ 5): each round asks the brokers for this client's
    /// share of each topic instead of running a strategy (see [`ServerAllocation`]).
    Server(ServerAllocation),
}

impl Allocation {
    /// The strategy's or assignor's name (the brokers' strategy for [`Allocation::Server`]).
    pub fn name(&self) -> &str {
        match self {
            Allocation::Strategy(s) => s.name(),
            Allocation::Assignor(a) => a.name(),
            Allocation::Server(s) => s.strategy(),
        }
    }
}

/// Server-side assignment: the brokers allocate each topic's queues among the clients their
/// heartbeats registered, with one of the strategies they know, and say how each queue is read
/// ([`ReadMode`]). The runtime keeps doing everything else as for a strategy of its own: leases,
/// callbacks, round reports, the hand-off and its order.
///
/// - Only clustering, concurrent consumers can use it, as in the Java client (where orderly
///   and broadcasting consumers always rebalance on the client): `start()` refuses the others,
///   and a strategy the source does not list in [`AssignmentSource::strategies`].
/// - A queue answered as [`ReadMode::Pop`] is taken only by a consumer that
///   [accepts POP](Self::accepting_pop) (the push consumer's POP mode); for any other, such an
///   answer leaves the topic unbalanced, with what it holds, and says why.
/// - [`with_read_mode`](Self::with_read_mode) sets the group's mode at the brokers of each
///   topic before the first question (RocketMQ: SET_MESSAGE_REQUEST_MODE); without it the
///   brokers' setting stands (PULL unless an operator set POP).
///
/// **Mixing client-side and server-side members.** The brokers compute a PULL assignment with
/// the same strategy code and the same sorted inputs (the route's queues, the registered
/// clients) as a client does, so a group may mix members that allocate themselves with
/// `averagely` (or `averagely_by_circle`) and members that ask the brokers for `AVG` (or
/// `AVG_BY_CIRCLE`): their shares agree whenever their views do. In POP mode a group cannot be
/// mixed: the brokers give every POP member the popped queues (`-1`, or shared shares), which a
/// client-side member would pull at the same time.
#[derive(Clone)]
pub struct ServerAllocation {
    source: Arc<dyn AssignmentSource>,
    strategy: String,
    read_mode: Option<(ReadMode, i32)>,
    accepts_pop: bool,
}

impl ServerAllocation {
    /// Asks `source` with `strategy` (RocketMQ: `AVG` or `AVG_BY_CIRCLE`), leaving the group's
    /// read mode as the brokers have it and accepting pulled queues only.
    pub fn new(source: Arc<dyn AssignmentSource>, strategy: impl Into<String>) -> Self {
        Self {
            source,
            strategy: strategy.into(),
            read_mode: None,
            accepts_pop: false,
        }
    }

    /// Sets the group's read mode at the brokers of each topic before asking (with POP, each
    /// client also reads the shares of `pop_share` other clients; 0: every queue is read by
    /// every client). Setting POP also [accepts POP](Self::accepting_pop).
    pub fn with_read_mode(mut self, mode: ReadMode, pop_share: i32) -> Self {
        self.read_mode = Some((mode, pop_share));
        if mode == ReadMode::Pop {
            self.accepts_pop = true;
        }
        self
    }

    /// Whether popped queues are taken (the consumer's listener must then read the leases whose
    /// [`read_mode`](crate::QueueLease::read_mode) is [`ReadMode::Pop`] by POP).
    pub fn accepting_pop(mut self, accepts: bool) -> Self {
        self.accepts_pop = accepts;
        self
    }

    /// The brokers' strategy.
    pub fn strategy(&self) -> &str {
        &self.strategy
    }

    /// Where assignments come from.
    pub fn source(&self) -> &Arc<dyn AssignmentSource> {
        &self.source
    }

    /// The read mode set at the brokers before asking, with its POP share, if any.
    pub fn read_mode(&self) -> Option<(ReadMode, i32)> {
        self.read_mode
    }

    /// Whether popped queues are taken.
    pub fn accepts_pop(&self) -> bool {
        self.accepts_pop
    }
}

impl fmt::Debug for ServerAllocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerAllocation")
            .field("strategy", &self.strategy)
            .field("read_mode", &self.read_mode)
            .field("accepts_pop", &self.accepts_pop)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allocation::Strategy(s) => f.debug_tuple("Strategy").field(&s.name()).finish(),
            Allocation::Assignor(a) => f.debug_tuple("Assignor").field(&a.name()).finish(),
            Allocation::Server(s) => f.debug_tuple("Server").field(s).finish(),
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
