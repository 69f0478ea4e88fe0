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
