//! The indexed form every built-in assignor works on: topics interned, partitions numbered.
//!
//! A topic that exists (count > 0) and that some member subscribes to gets an index in Java
//! order; its partitions get consecutive global numbers (`offsets[t] + p`). Each distinct
//! subscription becomes a *class* (a sorted list of topic indices), so members sharing a list
//! share one copy. Nothing per partition is a string.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::{AssignError, GroupSubscription, MemberSubscription, Topic};
use crate::java;

/// "No member" in per-partition arrays.
pub(crate) const NONE: u32 = u32::MAX;

/// The most partitions an assignment covers, of all the subscribed topics together: each
/// assignor keeps a few bytes per partition, and the counts come from a broker's metadata, so
/// a larger group is refused with an error rather than allocated (found by review: a topic
/// claiming `i32::MAX` partitions aborted the process asking for 17 to 26 GB).
pub const MAX_PARTITIONS: u64 = 10_000_000;

pub(crate) struct Layout<'a> {
    pub group: &'a GroupSubscription,
    /// Existing, subscribed topics in Java order.
    pub topics: Vec<&'a Topic>,
    /// `offsets[t]..offsets[t + 1]` are topic `t`'s global partition numbers.
    pub offsets: Vec<u32>,
    /// Distinct subscriptions: sorted topic indices.
    pub classes: Vec<Vec<u32>>,
    /// Each member's class.
    pub class_of: Vec<u32>,
    names: HashMap<&'a str, u32>,
    addrs: HashMap<usize, u32, BuildHasherDefault<AddrHasher>>,
}

/// Hashes the address of a shared topic string: one multiplication instead of SipHash over a
/// million owned partitions. Addresses are not chosen by an attacker, so no keyed hash is needed.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_usize(usize::from(b) ^ self.0 as usize);
        }
    }

    fn write_usize(&mut self, n: usize) {
        let h = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

impl<'a> Layout<'a> {
    pub fn build(group: &'a GroupSubscription) -> Result<Self, AssignError> {
        let members = &group.members;
        let mut seen = HashSet::with_capacity(members.len());
        for m in members {
            if !seen.insert(m.member_id.as_str()) {
                return Err(AssignError::DuplicateMember(m.member_id.clone()));
            }
        }
        // Candidates: topics that exist, in Java order (the map's order).
        let candidates: Vec<(&Topic, u32)> = group
            .partitions_per_topic
            .iter()
            .filter(|&(_, &n)| n > 0)
            .map(|(t, &n)| (t, n))
            .collect();
        let candidate_index: HashMap<&str, u32> = candidates
            .iter()
            .enumerate()
            .map(|(i, (t, _))| (t.as_str(), i as u32))
            .collect();

        let mut classes: Vec<Vec<u32>> = Vec::new();
        let mut class_index: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut class_of = Vec::with_capacity(members.len());
        let mut previous: Option<(&Arc<[Topic]>, u32)> = None;
        for m in members {
            if let Some((topics, class)) = previous
                && (Arc::ptr_eq(topics, &m.topics) || **topics == *m.topics)
            {
                class_of.push(class);
                continue;
            }
            let mut list: Vec<u32> = m
                .topics
                .iter()
                .filter_map(|t| candidate_index.get(t.as_str()).copied())
                .collect();
            list.sort_unstable();
            list.dedup();
            let next = classes.len() as u32;
            let class = *class_index.entry(list.clone()).or_insert_with(|| {
                classes.push(list);
                next
            });
            class_of.push(class);
            previous = Some((&m.topics, class));
        }

        // Keep the subscribed candidates only, renumbered in order.
        let mut renumber = vec![NONE; candidates.len()];
        for class in &classes {
            for &t in class {
                renumber[t as usize] = 0;
            }
        }
        let mut topics = Vec::new();
        let mut offsets = vec![0u32];
        let mut total: u64 = 0;
        for (i, (topic, n)) in candidates.iter().enumerate() {
            if renumber[i] == NONE {
                continue;
            }
            if *n > i32::MAX as u32 {
                // Partition numbers are Java ints: a larger count has no valid partition ids.
                return Err(AssignError::Other {
                    assignor: "layout".into(),
                    message: format!(
                        "topic `{topic}` has {n} partitions; partition numbers go up to {}",
                        i32::MAX
                    ),
                });
            }
            renumber[i] = topics.len() as u32;
            topics.push(*topic);
            total += u64::from(*n);
            if total > MAX_PARTITIONS {
                return Err(AssignError::Other {
                    assignor: "layout".into(),
                    message: format!(
                        "the subscribed topics have more than {MAX_PARTITIONS} partitions in all (this library's limit)"
                    ),
                });
            }
            offsets.push(total as u32);
        }
        for class in &mut classes {
            for t in class.iter_mut() {
                *t = renumber[*t as usize];
            }
        }
        let names = topics
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i as u32))
            .collect();
        let mut addrs: HashMap<usize, u32, BuildHasherDefault<AddrHasher>> = topics
            .iter()
            .enumerate()
            .map(|(i, t)| (t.addr(), i as u32))
            .collect();
        // The members' own topic strings are often the ones their owned lists point at.
        let mut last: Option<&Arc<[Topic]>> = None;
        for m in members {
            if last.is_some_and(|l| Arc::ptr_eq(l, &m.topics)) {
                continue;
            }
            last = Some(&m.topics);
            for t in m.topics.iter() {
                if let Some(&i) = candidate_index.get(t.as_str()) {
                    let i = renumber[i as usize];
                    if i != NONE {
                        addrs.insert(t.addr(), i);
                    }
                }
            }
        }
        Ok(Self {
            group,
            topics,
            offsets,
            classes,
            class_of,
            names,
            addrs,
        })
    }

    pub fn members(&self) -> &'a [MemberSubscription] {
        &self.group.members
    }

    pub fn topic_count(&self) -> usize {
        self.topics.len()
    }

    /// Total number of partitions.
    pub fn total(&self) -> u32 {
        self.offsets.last().copied().unwrap_or(0)
    }

    pub fn partition_count(&self, t: u32) -> u32 {
        self.offsets[t as usize + 1] - self.offsets[t as usize]
    }

    /// Member `m`'s subscribed topics (existing only), sorted.
    pub fn subscription(&self, m: usize) -> &[u32] {
        &self.classes[self.class_of[m] as usize]
    }

    /// The index of `topic`, when it exists and is subscribed.
    pub fn topic_index(&self, topic: &Topic) -> Option<u32> {
        self.addrs
            .get(&topic.addr())
            .or_else(|| self.names.get(topic.as_str()))
            .copied()
    }

    /// The global number of `topic`'s `partition`, when both exist.
    pub fn global(&self, t: u32, partition: i32) -> Option<u32> {
        let p = u32::try_from(partition).ok()?;
        (p < self.partition_count(t)).then(|| self.offsets[t as usize] + p)
    }

    /// The topics' table for a [`GroupAssignment`](super::GroupAssignment).
    pub fn topic_table(&self) -> Arc<[Topic]> {
        self.topics.iter().map(|t| (*t).clone()).collect()
    }

    pub fn member_ids(&self) -> Vec<crate::ClientId> {
        self.members().iter().map(|m| m.member_id.clone()).collect()
    }
}

/// Member positions sorted by member id (Java order).
pub(crate) fn by_member_id(members: &[MemberSubscription]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..members.len() as u32).collect();
    order.sort_by(|&a, &b| {
        java::compare_str(
            &members[a as usize].member_id,
            &members[b as usize].member_id,
        )
    });
    order
}

/// Member positions in Kafka's `MemberInfo` order (range and round robin): members with a
/// `group.instance.id` first, by instance id, then the others by member id. Kafka leaves ties
/// between equal instance ids in hash-map order; they are broken by member id here.
pub(crate) fn by_member_info(members: &[MemberSubscription]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..members.len() as u32).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&members[a as usize], &members[b as usize]);
        let by_instance = match (&a.group_instance_id, &b.group_instance_id) {
            (Some(x), Some(y)) => java::compare_str(x, y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        };
        by_instance.then_with(|| java::compare_str(&a.member_id, &b.member_id))
    });
    order
}

/// The inverse of an order: `rank[member] = position`.
pub(crate) fn ranks(order: &[u32]) -> Vec<u32> {
    let mut rank = vec![0; order.len()];
    for (i, &m) in order.iter().enumerate() {
        rank[m as usize] = i as u32;
    }
    rank
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::{
        Broadcast, CooperativeSticky, GroupAssignor, MemberSubscription, Range, RoundRobin, Sticky,
    };

    #[test]
    fn partition_counts_beyond_java_ints_are_refused_before_any_allocation() {
        let group = GroupSubscription::new()
            .with_topic("small", 3)
            .with_topic("huge", 3_000_000_000)
            .with_member(MemberSubscription::new("a", ["small", "huge"]));
        for result in [Broadcast.assign(&group), Range.assign(&group)] {
            let err = result.unwrap_err();
            assert!(
                err.to_string().contains("`huge` has 3000000000 partitions"),
                "{err}"
            );
        }
        let fits = GroupSubscription::new()
            .with_topic("t", MAX_PARTITIONS as u32)
            .with_member(MemberSubscription::new("a", ["t"]));
        assert!(Layout::build(&fits).is_ok(), "exactly the limit fits");
        // Past it, every assignor answers an error instead of allocating per partition.
        let over = GroupSubscription::new()
            .with_topic("t", i32::MAX as u32)
            .with_member(MemberSubscription::new("a", ["t"]));
        for result in [
            Range.assign(&over),
            RoundRobin.assign(&over),
            Sticky.assign(&over),
            CooperativeSticky.assign(&over),
        ] {
            let err = result.unwrap_err();
            assert!(
                err.to_string().contains("more than 10000000 partitions"),
                "{err}"
            );
        }
    }
}
