//! [`GroupAssignment`]: every member's partitions, stored compactly.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::{Topic, TopicPartition};
use crate::ClientId;

/// A partition as a position in a topic table: 8 bytes instead of a string per partition.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(crate) struct PartitionRef {
    pub topic: u32,
    pub partition: i32,
}

/// The result of a group assignment: one entry for every member (in the order of the input),
/// each with its partitions sorted by (topic, partition).
///
/// Partitions are stored as positions into one shared topic table, so a million partitions cost
/// 8 bytes each and no string copies. [`pending_revocation`](Self::pending_revocation) lists
/// what a cooperative assignor held back this round (a partition moving between two live
/// members is first revoked by its owner and assigned in the next round).
///
/// ```
/// use rebalance_core::assignor::{GroupAssignment, TopicPartition};
///
/// let a = GroupAssignment::from_lists([
///     ("c0", vec![TopicPartition::new("t", 1), TopicPartition::new("t", 0)]),
///     ("c1", vec![]),
/// ]);
/// let c0: Vec<(String, i32)> = a.get("c0").unwrap().iter().map(|(t, p)| (t.to_string(), p)).collect();
/// assert_eq!(c0, [("t".to_string(), 0), ("t".to_string(), 1)]);
/// assert!(a.get("c1").unwrap().is_empty());
/// assert!(a.get("nobody").is_none());
/// ```
#[derive(Clone)]
pub struct GroupAssignment {
    topics: Arc<[Topic]>,
    members: Vec<ClientId>,
    /// `partitions[offsets[i]..offsets[i + 1]]` belongs to `members[i]`.
    offsets: Vec<usize>,
    partitions: Vec<PartitionRef>,
    pending: Vec<PartitionRef>,
}

impl GroupAssignment {
    /// Builds an assignment from explicit lists (what a custom assignor computes). Lists are
    /// sorted; duplicates within a list are kept as given.
    pub fn from_lists<M, I>(lists: I) -> Self
    where
        M: Into<ClientId>,
        I: IntoIterator<Item = (M, Vec<TopicPartition>)>,
    {
        let mut table: Vec<Topic> = Vec::new();
        let mut index: HashMap<Topic, u32> = HashMap::new();
        let mut members = Vec::new();
        let mut raw: Vec<Vec<(Topic, i32)>> = Vec::new();
        for (member, list) in lists {
            members.push(member.into());
            raw.push(
                list.into_iter()
                    .map(|tp| (tp.topic, tp.partition))
                    .collect(),
            );
        }
        for list in &raw {
            for (topic, _) in list {
                if !index.contains_key(topic) {
                    index.insert(topic.clone(), 0);
                    table.push(topic.clone());
                }
            }
        }
        table.sort();
        for (i, topic) in table.iter().enumerate() {
            index.insert(topic.clone(), i as u32);
        }
        let lists = raw
            .into_iter()
            .map(|list| {
                list.into_iter()
                    .map(|(topic, partition)| PartitionRef {
                        topic: index[&topic],
                        partition,
                    })
                    .collect()
            })
            .collect();
        Self::from_member_lists(table.into(), members, lists, true)
    }

    /// Flattens per-member lists (sorting them first when `sort`).
    pub(crate) fn from_member_lists(
        topics: Arc<[Topic]>,
        members: Vec<ClientId>,
        mut lists: Vec<Vec<PartitionRef>>,
        sort: bool,
    ) -> Self {
        let mut offsets = Vec::with_capacity(members.len() + 1);
        offsets.push(0);
        let total = lists.iter().map(Vec::len).sum();
        let mut partitions = Vec::with_capacity(total);
        for list in &mut lists {
            if sort {
                list.sort_unstable();
            }
            partitions.extend_from_slice(list);
            offsets.push(partitions.len());
        }
        Self {
            topics,
            members,
            offsets,
            partitions,
            pending: Vec::new(),
        }
    }

    /// Takes already flattened lists: `partitions[offsets[i]..offsets[i + 1]]` is member `i`'s,
    /// each sorted.
    pub(crate) fn from_flat(
        topics: Arc<[Topic]>,
        members: Vec<ClientId>,
        offsets: Vec<usize>,
        partitions: Vec<PartitionRef>,
        pending: Vec<PartitionRef>,
    ) -> Self {
        debug_assert_eq!(offsets.len(), members.len() + 1);
        Self {
            topics,
            members,
            offsets,
            partitions,
            pending,
        }
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there is no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members, in the order of the input.
    pub fn members(&self) -> impl ExactSizeIterator<Item = &ClientId> {
        self.members.iter()
    }

    /// Every member with its partitions, in the order of the input.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&ClientId, MemberPartitions<'_>)> {
        self.members
            .iter()
            .enumerate()
            .map(|(i, m)| (m, self.partitions_of(i)))
    }

    /// A member's partitions, or `None` when it is not in the group.
    pub fn get(&self, member: &str) -> Option<MemberPartitions<'_>> {
        let i = self.members.iter().position(|m| m.as_str() == member)?;
        Some(self.partitions_of(i))
    }

    /// The number of partitions assigned, over all members.
    pub fn assigned_count(&self) -> usize {
        self.partitions.len()
    }

    /// Partitions a cooperative assignor held back this round because they move from one live
    /// member to another: their owner revokes them, and the next round assigns them.
    pub fn pending_revocation(&self) -> MemberPartitions<'_> {
        MemberPartitions {
            topics: &self.topics,
            list: &self.pending,
        }
    }

    /// Every member with an owned copy of its list.
    pub fn to_lists(&self) -> Vec<(ClientId, Vec<TopicPartition>)> {
        self.iter().map(|(m, p)| (m.clone(), p.to_vec())).collect()
    }

    fn partitions_of(&self, i: usize) -> MemberPartitions<'_> {
        MemberPartitions {
            topics: &self.topics,
            list: &self.partitions[self.offsets[i]..self.offsets[i + 1]],
        }
    }
}

impl PartialEq for GroupAssignment {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
            && self.iter().zip(other.iter()).all(|((_, a), (_, b))| a == b)
            && self.pending_revocation() == other.pending_revocation()
    }
}

impl Eq for GroupAssignment {}

impl fmt::Debug for GroupAssignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (m, p) in self.iter() {
            map.entry(m, &p);
        }
        map.finish()
    }
}

/// One member's partitions (or the pending revocations), sorted by (topic, partition).
#[derive(Clone, Copy)]
pub struct MemberPartitions<'a> {
    topics: &'a [Topic],
    list: &'a [PartitionRef],
}

impl<'a> MemberPartitions<'a> {
    /// How many partitions.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The partitions in (topic, partition) order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'a Topic, i32)> + 'a {
        let topics = self.topics;
        self.list
            .iter()
            .map(move |p| (&topics[p.topic as usize], p.partition))
    }

    /// Whether `topic`'s `partition` is in the list.
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        self.iter()
            .any(|(t, p)| p == partition && t.as_str() == topic)
    }

    /// An owned copy.
    pub fn to_vec(&self) -> Vec<TopicPartition> {
        self.iter()
            .map(|(t, p)| TopicPartition::new(t.clone(), p))
            .collect()
    }
}

impl<'a> IntoIterator for MemberPartitions<'a> {
    type Item = (&'a Topic, i32);
    type IntoIter = Box<dyn ExactSizeIterator<Item = (&'a Topic, i32)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl PartialEq for MemberPartitions<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for MemberPartitions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(t, p)| format!("{t}-{p}")))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    fn sample() -> GroupAssignment {
        GroupAssignment::from_lists([
            ("c0", vec![tp("b", 1), tp("a", 2), tp("b", 0)]),
            ("c1", vec![]),
            ("c2", vec![tp("a", 0)]),
        ])
    }

    #[test]
    fn from_lists_sorts_each_list_and_keeps_the_member_order() {
        let a = sample();
        assert_eq!((a.len(), a.is_empty(), a.assigned_count()), (3, false, 4));
        let members: Vec<&str> = a.members().map(ClientId::as_str).collect();
        assert_eq!(members, ["c0", "c1", "c2"]);
        assert_eq!(
            a.to_lists(),
            [
                (
                    ClientId::from("c0"),
                    vec![tp("a", 2), tp("b", 0), tp("b", 1)]
                ),
                (ClientId::from("c1"), vec![]),
                (ClientId::from("c2"), vec![tp("a", 0)]),
            ]
        );
        let empty = GroupAssignment::from_lists(Vec::<(&str, Vec<TopicPartition>)>::new());
        assert_eq!(
            (empty.len(), empty.is_empty(), empty.assigned_count()),
            (0, true, 0)
        );
        assert!(empty.to_lists().is_empty());
    }

    #[test]
    fn contains_needs_both_the_topic_and_the_partition() {
        let a = sample();
        let c0 = a.get("c0").unwrap();
        assert!(c0.contains("a", 2) && c0.contains("b", 0));
        assert!(!c0.contains("a", 0), "a-0 is c2's");
        assert!(!c0.contains("c", 2), "no topic c");
        assert!(!a.get("c1").unwrap().contains("a", 2));
    }

    #[test]
    fn equal_only_with_the_same_members_lists_and_pending_revocations() {
        let a = sample();
        assert_eq!(a, sample());
        let renamed = GroupAssignment::from_lists([
            ("c0", vec![tp("a", 2), tp("b", 0), tp("b", 1)]),
            ("cX", vec![]),
            ("c2", vec![tp("a", 0)]),
        ]);
        assert_ne!(a, renamed);
        let moved = GroupAssignment::from_lists([
            ("c0", vec![tp("a", 2), tp("b", 0)]),
            ("c1", vec![tp("b", 1)]),
            ("c2", vec![tp("a", 0)]),
        ]);
        assert_ne!(a, moved);
        let shorter = GroupAssignment::from_lists([
            ("c0", vec![tp("a", 2), tp("b", 0)]),
            ("c1", vec![]),
            ("c2", vec![tp("a", 0)]),
        ]);
        assert_ne!(a.get("c0").unwrap(), shorter.get("c0").unwrap());
        assert_ne!(a, shorter);
        let swapped = GroupAssignment::from_lists([
            ("c0", vec![tp("a", 0), tp("b", 0), tp("b", 1)]),
            ("c1", vec![]),
            ("c2", vec![tp("a", 2)]),
        ]);
        assert_ne!(a.get("c0").unwrap(), swapped.get("c0").unwrap());
        assert_ne!(a, swapped);
        let held_back = GroupAssignment::from_flat(
            a.topics.clone(),
            a.members.clone(),
            a.offsets.clone(),
            a.partitions.clone(),
            vec![PartitionRef {
                topic: 0,
                partition: 1,
            }],
        );
        assert_ne!(a, held_back);
        assert_eq!(held_back.pending_revocation().to_vec(), [tp("a", 1)]);
    }

    #[test]
    fn debug_shows_every_member_with_its_partitions() {
        assert_eq!(
            format!("{:?}", sample()),
            r#"{"c0": ["a-2", "b-0", "b-1"], "c1": [], "c2": ["a-0"]}"#
        );
    }
}
