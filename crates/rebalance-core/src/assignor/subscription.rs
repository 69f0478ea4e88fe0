//! What a group assignor is given: every member's subscription and the topics' metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Topic, TopicPartition};
use crate::ClientId;

/// One member's part of a [`GroupSubscription`]: what it subscribes to and, where known, what it
/// owns now.
///
/// `topics` is shared (`Arc<[Topic]>`): members of a group usually subscribe to the same list,
/// and a list shared between members is recognised without comparing it topic by topic.
///
/// ```
/// use rebalance_core::assignor::MemberSubscription;
///
/// let m = MemberSubscription::new("consumer-1", ["orders", "payments"])
///     .with_owned([("orders", 0), ("orders", 3)])
///     .with_generation(4)
///     .with_rack("eu-west-1a");
/// assert_eq!(m.owned.len(), 2);
/// assert_eq!(m.generation, Some(4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// The member id.
    pub member_id: ClientId,
    /// The topics it subscribes to (any order; duplicates and unknown topics are ignored).
    pub topics: Arc<[Topic]>,
    /// The partitions it owns now (cooperative protocol), or owned in its last generation
    /// (eager sticky's user data). Empty for a new member.
    pub owned: Vec<TopicPartition>,
    /// The generation `owned` belongs to; `None` means unknown (Kafka's −1).
    pub generation: Option<i32>,
    /// The rack the member runs in; `None` or `""` means unknown.
    pub rack: Option<String>,
    /// The static member id (`group.instance.id`); range and round robin order members that have
    /// one first.
    pub group_instance_id: Option<String>,
}

impl MemberSubscription {
    /// A member subscribing to `topics`, owning nothing.
    pub fn new<T: Into<Topic>>(
        member_id: impl Into<ClientId>,
        topics: impl IntoIterator<Item = T>,
    ) -> Self {
        Self::with_shared_topics(member_id, topics.into_iter().map(Into::into).collect())
    }

    /// A member subscribing to a list shared with other members.
    pub fn with_shared_topics(member_id: impl Into<ClientId>, topics: Arc<[Topic]>) -> Self {
        Self {
            member_id: member_id.into(),
            topics,
            owned: Vec::new(),
            generation: None,
            rack: None,
            group_instance_id: None,
        }
    }

    /// Sets the owned partitions.
    pub fn with_owned<P: Into<TopicPartition>>(
        mut self,
        owned: impl IntoIterator<Item = P>,
    ) -> Self {
        self.owned = owned.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the generation of the owned partitions.
    pub fn with_generation(mut self, generation: i32) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Sets the member's rack.
    pub fn with_rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = Some(rack.into());
        self
    }

    /// Sets the static member id.
    pub fn with_group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = Some(id.into());
        self
    }

    /// The member's rack, with `""` read as unknown (as Kafka does).
    pub fn rack_id(&self) -> Option<&str> {
        self.rack.as_deref().filter(|r| !r.is_empty())
    }
}

/// Everything a group assignor decides from: the members (in the order the leader received them)
/// and the topics' partition counts and, optionally, the racks of each partition's replicas.
///
/// A topic that is missing from `partitions_per_topic` or has 0 partitions does not exist for
/// the assignors; its subscribers still get an entry in the result.
///
/// ```
/// use rebalance_core::assignor::{GroupSubscription, MemberSubscription};
///
/// let group = GroupSubscription::new()
///     .with_topic("t0", 3)
///     .with_topic("t1", 3)
///     .with_member(MemberSubscription::new("c0", ["t0", "t1"]))
///     .with_member(MemberSubscription::new("c1", ["t0", "t1"]));
/// assert_eq!(group.members.len(), 2);
/// assert_eq!(group.partitions("t1"), Some(3));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSubscription {
    /// Every member, in the order the leader received them.
    pub members: Vec<MemberSubscription>,
    /// The number of partitions of each topic the cluster knows.
    pub partitions_per_topic: BTreeMap<Topic, u32>,
    /// For a topic, the racks of the replicas of each of its partitions (index = partition
    /// number). Missing topics or partitions have no known racks.
    pub partition_racks: BTreeMap<Topic, Vec<Vec<String>>>,
}

impl GroupSubscription {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// The partition count of `topic`, if the cluster knows it. (The maps are ordered the Java
    /// way, which is not `str`'s order, so they are looked up by [`Topic`], not by `&str`.)
    pub fn partitions(&self, topic: &str) -> Option<u32> {
        self.partitions_per_topic.get(&Topic::from(topic)).copied()
    }

    /// Adds (or replaces) a topic with its partition count.
    pub fn with_topic(mut self, topic: impl Into<Topic>, partitions: u32) -> Self {
        self.partitions_per_topic.insert(topic.into(), partitions);
        self
    }

    /// Adds a member after the existing ones.
    pub fn with_member(mut self, member: MemberSubscription) -> Self {
        self.members.push(member);
        self
    }

    /// Sets the replica racks of a topic's partitions.
    pub fn with_partition_racks<R: Into<String>>(
        mut self,
        topic: impl Into<Topic>,
        racks: impl IntoIterator<Item = impl IntoIterator<Item = R>>,
    ) -> Self {
        let racks = racks
            .into_iter()
            .map(|p| p.into_iter().map(Into::into).collect())
            .collect();
        self.partition_racks.insert(topic.into(), racks);
        self
    }
}
