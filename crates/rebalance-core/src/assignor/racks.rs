//! Racks: which rack each member runs in and which racks host each partition's replicas, as
//! small integers, and Kafka's test for whether rack awareness applies (KIP-881).

use std::collections::HashMap;

use super::layout::Layout;

pub(crate) struct Racks {
    /// Each member's rack (`""` is no rack).
    pub member: Vec<Option<u32>>,
    /// `racks[off[g]..off[g + 1]]`: the distinct racks hosting global partition `g`, sorted.
    off: Vec<u32>,
    racks: Vec<u32>,
    /// How many distinct racks there are.
    pub count: usize,
}

impl Racks {
    /// `None` when no member has a rack: rack awareness is then off for every assignor.
    pub fn build(layout: &Layout<'_>) -> Option<Racks> {
        fn intern<'s>(r: &'s str, ids: &mut HashMap<&'s str, u32>) -> u32 {
            let next = ids.len() as u32;
            *ids.entry(r).or_insert(next)
        }
        let mut ids: HashMap<&str, u32> = HashMap::new();
        let mut member = Vec::with_capacity(layout.members().len());
        for m in layout.members() {
            member.push(m.rack_id().map(|r| intern(r, &mut ids)));
        }
        if member.iter().all(Option::is_none) {
            return None;
        }
        let group = layout.group;
        let mut off = Vec::with_capacity(layout.total() as usize + 1);
        let mut racks = Vec::new();
        off.push(0);
        for (t, topic) in layout.topics.iter().enumerate() {
            let listed = group.partition_racks.get(*topic);
            for p in 0..layout.partition_count(t as u32) {
                let start = racks.len();
                if let Some(replicas) = listed.and_then(|l| l.get(p as usize)) {
                    for r in replicas {
                        racks.push(intern(r, &mut ids));
                    }
                }
                racks[start..].sort_unstable();
                let mut w = start;
                for i in start..racks.len() {
                    if i == start || racks[i] != racks[w - 1] {
                        racks[w] = racks[i];
                        w += 1;
                    }
                }
                racks.truncate(w);
                off.push(racks.len() as u32);
            }
        }
        Some(Racks {
            member,
            off,
            racks,
            count: ids.len(),
        })
    }

    /// The racks hosting global partition `g`.
    pub fn of(&self, g: u32) -> &[u32] {
        &self.racks[self.off[g as usize] as usize..self.off[g as usize + 1] as usize]
    }

    /// Whether member `m`'s rack hosts `g`; `None` when the member has no rack.
    pub fn member_hosts(&self, m: u32, g: u32) -> Option<bool> {
        let r = self.member[m as usize]?;
        Some(self.of(g).binary_search(&r).is_ok())
    }

    /// Kafka's `useRackAwareAssignment`: on when some consumer has a rack, the consumers' racks
    /// overlap the partitions' racks, and not every partition is hosted on every one of them.
    pub fn rack_aware(
        &self,
        consumers: impl IntoIterator<Item = u32>,
        partitions: impl IntoIterator<Item = u32> + Clone,
    ) -> bool {
        let mut consumer_racks = vec![false; self.count];
        let mut any = false;
        for m in consumers {
            if let Some(r) = self.member[m as usize] {
                consumer_racks[r as usize] = true;
                any = true;
            }
        }
        if !any {
            return false;
        }
        let mut union = vec![false; self.count];
        let mut union_size = 0;
        for g in partitions.clone() {
            for &r in self.of(g) {
                if !union[r as usize] {
                    union[r as usize] = true;
                    union_size += 1;
                }
            }
        }
        let overlap = union.iter().zip(&consumer_racks).any(|(&u, &c)| u && c);
        overlap
            && partitions
                .into_iter()
                .any(|g| self.of(g).len() != union_size)
    }
}

/// For each topic, the sorted distinct racks of the given members subscribing to it.
pub(crate) fn subscriber_racks(
    layout: &Layout<'_>,
    racks: &Racks,
    members: &[u32],
) -> Vec<Vec<u32>> {
    let mut per_topic = vec![Vec::new(); layout.topic_count()];
    for &m in members {
        if let Some(r) = racks.member[m as usize] {
            for &t in layout.subscription(m as usize) {
                per_topic[t as usize].push(r);
            }
        }
    }
    for list in &mut per_topic {
        list.sort_unstable();
        list.dedup();
    }
    per_topic
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::{GroupSubscription, MemberSubscription};

    /// Topic `t` with one partition per entry of `replicas`; members `c{i}` on `member_racks[i]`
    /// (`""` for none), all subscribing to `t`.
    fn group(replicas: &[&[&str]], member_racks: &[&str]) -> GroupSubscription {
        let mut g = GroupSubscription::new()
            .with_topic("t", replicas.len() as u32)
            .with_partition_racks("t", replicas.iter().map(|r| r.iter().copied()));
        for (i, rack) in member_racks.iter().enumerate() {
            let m = MemberSubscription::new(format!("c{i}"), ["t"]);
            g = g.with_member(if rack.is_empty() {
                m
            } else {
                m.with_rack(*rack)
            });
        }
        g
    }

    /// Whether rack awareness applies to the whole group.
    fn aware(g: &GroupSubscription) -> Option<bool> {
        let layout = Layout::build(g).unwrap();
        let racks = Racks::build(&layout)?;
        Some(racks.rack_aware(0..layout.members().len() as u32, 0..layout.total()))
    }

    #[test]
    fn replicas_in_one_rack_count_once() {
        // Three replicas, two of them in r0: the partition is hosted by r0 and r1.
        let g = group(&[&["r0", "r1", "r0"], &["r1", "r1"]], &["r0", "r1"]);
        let layout = Layout::build(&g).unwrap();
        let racks = Racks::build(&layout).unwrap();
        let (r0, r1) = (racks.member[0].unwrap(), racks.member[1].unwrap());
        let mut both = vec![r0, r1];
        both.sort_unstable();
        assert_eq!(racks.of(0), both);
        assert_eq!(racks.of(1), [r1]);
        assert_eq!(racks.count, 2);
        assert_eq!(racks.member_hosts(0, 1), Some(false));
        assert_eq!(racks.member_hosts(1, 1), Some(true));
    }

    #[test]
    fn kafkas_test_for_rack_awareness() {
        // No member with a rack: off, without even building the table.
        assert_eq!(aware(&group(&[&["r0"], &["r1"]], &["", ""])), None);
        // Members' racks host some partitions and not others: on.
        assert_eq!(aware(&group(&[&["r0"], &["r1"]], &["r0", ""])), Some(true));
        // Every partition on every rack (one rack listed twice for a partition): nothing to align.
        let everywhere: &[&[&str]] = &[&["r0", "r1", "r0"], &["r1", "r0"]];
        assert_eq!(aware(&group(everywhere, &["r0", "r1"])), Some(false));
        // The members' racks host no partition at all: off.
        assert_eq!(
            aware(&group(&[&["r0"], &["r1"]], &["r2", "r3"])),
            Some(false)
        );
        // Partitions without rack information, members with racks: off.
        assert_eq!(aware(&group(&[&[], &[]], &["r0", "r1"])), Some(false));
    }

    #[test]
    fn subscriber_racks_lists_each_topics_member_racks_once() {
        let g = GroupSubscription::new()
            .with_topic("a", 1)
            .with_topic("b", 1)
            .with_member(MemberSubscription::new("c0", ["a", "b"]).with_rack("r1"))
            .with_member(MemberSubscription::new("c1", ["a"]).with_rack("r0"))
            .with_member(MemberSubscription::new("c2", ["a"]).with_rack("r1"))
            .with_member(MemberSubscription::new("c3", ["b"]));
        let layout = Layout::build(&g).unwrap();
        let racks = Racks::build(&layout).unwrap();
        let (r1, r0) = (racks.member[0].unwrap(), racks.member[1].unwrap());
        let a = layout.topic_index(&"a".into()).unwrap() as usize;
        let b = layout.topic_index(&"b".into()).unwrap() as usize;
        let per_topic = subscriber_racks(&layout, &racks, &[0, 1, 2, 3]);
        let mut expected_a = vec![r0, r1];
        expected_a.sort_unstable();
        assert_eq!(per_topic[a], expected_a);
        assert_eq!(per_topic[b], [r1]);
        // Only the members given count.
        assert_eq!(subscriber_racks(&layout, &racks, &[1])[a], [r0]);
        assert!(subscriber_racks(&layout, &racks, &[1])[b].is_empty());
    }
}
