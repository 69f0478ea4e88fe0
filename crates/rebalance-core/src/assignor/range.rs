//! Kafka's range assignor, with the rack-aware passes of KIP-881.

use std::collections::HashMap;

use super::assignment::PartitionRef;
use super::layout::{self, Layout};
use super::racks::Racks;
use super::{AssignError, GroupAssignment, GroupAssignor, GroupSubscription};

/// Kafka's `RangeAssignor`: each topic on its own, its subscribers (static members first, by
/// instance id, then by member id) take contiguous blocks, the first `P mod C` one partition
/// more.
///
/// With racks (KIP-881), topics that need rack awareness, and groups of co-partitioned topics,
/// first give members partitions hosted on their rack within the same per-topic quotas; the
/// ordinary pass then fills the rest. Results equal Kafka's, except that members with equal
/// instance ids (which Kafka leaves in hash-map order) are ordered by member id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range;

impl GroupAssignor for Range {
    fn name(&self) -> &str {
        "range"
    }

    fn assign(&self, group: &GroupSubscription) -> Result<GroupAssignment, AssignError> {
        let layout = Layout::build(group)?;
        let order = layout::by_member_info(layout.members());
        let subscribers = subscribers_in_order(&layout, &order);
        let mut lists: Vec<Vec<PartitionRef>> = vec![Vec::new(); layout.members().len()];
        let racks = Racks::build(&layout);
        let rack_aware = racks.as_ref().is_some_and(|r| {
            (0..layout.topic_count()).any(|t| topic_needs_racks(&layout, r, &subscribers[t], t))
        });
        match racks {
            Some(racks) if rack_aware => {
                tracing::debug!("range: rack-aware assignment");
                assign_rack_aware(&layout, &racks, &subscribers, &mut lists);
            }
            _ => assign_plain(&layout, &subscribers, &mut lists),
        }
        Ok(GroupAssignment::from_member_lists(
            layout.topic_table(),
            layout.member_ids(),
            lists,
            rack_aware,
        ))
    }
}

/// Each topic's subscribers, in `order`.
pub(super) fn subscribers_in_order(layout: &Layout<'_>, order: &[u32]) -> Vec<Vec<u32>> {
    let mut subscribers = vec![Vec::new(); layout.topic_count()];
    for &m in order {
        for &t in layout.subscription(m as usize) {
            subscribers[t as usize].push(m);
        }
    }
    subscribers
}

fn topic_partitions(layout: &Layout<'_>, t: usize) -> std::ops::Range<u32> {
    layout.offsets[t]..layout.offsets[t + 1]
}

fn topic_needs_racks(layout: &Layout<'_>, racks: &Racks, subscribers: &[u32], t: usize) -> bool {
    racks.rack_aware(subscribers.iter().copied(), topic_partitions(layout, t))
}

fn assign_plain(layout: &Layout<'_>, subscribers: &[Vec<u32>], lists: &mut [Vec<PartitionRef>]) {
    for (t, members) in subscribers.iter().enumerate() {
        let n = layout.partition_count(t as u32);
        let c = members.len() as u32;
        if c == 0 {
            continue;
        }
        let (q, r) = (n / c, n % c);
        for (i, &m) in members.iter().enumerate() {
            let i = i as u32;
            let start = q * i + i.min(r);
            let len = q + u32::from(i < r);
            lists[m as usize].extend((start..start + len).map(|p| PartitionRef {
                topic: t as u32,
                partition: p as i32,
            }));
        }
    }
}

/// Kafka's `TopicAssignmentState`: one topic's quotas and what is still free.
struct TopicState<'s> {
    t: u32,
    members: &'s [u32],
    quota: u32,
    extras_left: u32,
    assigned: Vec<u32>,
    taken: Vec<bool>,
    unassigned: u32,
    cursor: u32,
}

impl<'s> TopicState<'s> {
    fn new(t: u32, n: u32, members: &'s [u32]) -> Self {
        let c = members.len() as u32;
        Self {
            t,
            members,
            quota: n.checked_div(c).unwrap_or(0),
            extras_left: n.checked_rem(c).unwrap_or(0),
            assigned: vec![0; members.len()],
            taken: vec![false; n as usize],
            unassigned: n,
            cursor: 0,
        }
    }

    fn max_assignable(&self, pos: usize) -> u32 {
        (self.quota + u32::from(self.extras_left > 0)).saturating_sub(self.assigned[pos])
    }

    fn assign(&mut self, pos: usize, partitions: &[u32], lists: &mut [Vec<PartitionRef>]) {
        let m = self.members[pos] as usize;
        for &p in partitions {
            self.taken[p as usize] = true;
            lists[m].push(PartitionRef {
                topic: self.t,
                partition: p as i32,
            });
        }
        self.unassigned -= partitions.len() as u32;
        self.assigned[pos] += partitions.len() as u32;
        if self.assigned[pos] > self.quota {
            self.extras_left = self.extras_left.saturating_sub(1);
        }
    }

    /// Kafka's `assignRanges`: members in order take the lowest free partitions they may take.
    fn assign_ranges(
        &mut self,
        may_assign: impl Fn(u32, u32) -> bool,
        lists: &mut [Vec<PartitionRef>],
        buf: &mut Vec<u32>,
    ) {
        for pos in 0..self.members.len() {
            if self.unassigned == 0 {
                break;
            }
            let limit = self.max_assignable(pos) as usize;
            buf.clear();
            let m = self.members[pos];
            let mut p = self.cursor;
            while buf.len() < limit && (p as usize) < self.taken.len() {
                if !self.taken[p as usize] && may_assign(m, p) {
                    buf.push(p);
                }
                p += 1;
            }
            if !buf.is_empty() {
                self.assign(pos, buf, lists);
            }
            while (self.cursor as usize) < self.taken.len() && self.taken[self.cursor as usize] {
                self.cursor += 1;
            }
        }
    }
}

fn assign_rack_aware(
    layout: &Layout<'_>,
    racks: &Racks,
    subscribers: &[Vec<u32>],
    lists: &mut [Vec<PartitionRef>],
) {
    let mut states: Vec<TopicState<'_>> = subscribers
        .iter()
        .enumerate()
        .map(|(t, members)| TopicState::new(t as u32, layout.partition_count(t as u32), members))
        .collect();
    let base = |t: u32| layout.offsets[t as usize];
    // A member without a rack matches every partition.
    let racks_match = |m: u32, t: u32, p: u32| racks.member_hosts(m, base(t) + p).unwrap_or(true);

    // Topics with the same subscribers (hence the same racks) and partition count are
    // co-partitioned. Kafka keys on the partition-rack map's size, which is 0 for topics whose
    // subscribers have no rack: those never take part.
    // Keyed by (subscribers, partition count).
    type Key<'k> = (&'k [u32], u32);
    let mut groups: HashMap<Key<'_>, Vec<usize>> = HashMap::new();
    for (t, members) in subscribers.iter().enumerate() {
        if members.iter().any(|&m| racks.member[m as usize].is_some()) {
            let n = layout.partition_count(t as u32);
            groups.entry((members, n)).or_default().push(t);
        }
    }
    let mut groups: Vec<(Key<'_>, Vec<usize>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, topics)| topics[0]);
    let mut buf = Vec::new();
    for ((members, n), topics) in &groups {
        if topics.len() > 1 {
            let mut remaining: Vec<usize> = (0..members.len()).collect();
            for p in 0..*n {
                let found = remaining.iter().position(|&pos| {
                    topics.iter().all(|&t| {
                        racks_match(members[pos], t as u32, p) && states[t].max_assignable(pos) > 0
                    })
                });
                let Some(i) = found else { continue };
                let pos = remaining[i];
                for &t in topics {
                    states[t].assign(pos, &[p], lists);
                }
                if topics.iter().all(|&t| states[t].max_assignable(pos) == 0) {
                    remaining.remove(i);
                    if remaining.is_empty() {
                        break;
                    }
                }
            }
        } else {
            let t = topics[0];
            if topic_needs_racks(layout, racks, members, t) {
                let tt = t as u32;
                states[t].assign_ranges(|m, p| racks_match(m, tt, p), lists, &mut buf);
            }
        }
    }
    for state in &mut states {
        state.assign_ranges(|_, _| true, lists, &mut buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::test_support::{group, lists};

    #[test]
    fn javadoc_example() {
        let g = group(
            &[("t0", 3), ("t1", 3)],
            &[("c0", &["t0", "t1"]), ("c1", &["t0", "t1"])],
        );
        let a = Range.assign(&g).unwrap();
        assert_eq!(lists(&a), ["c0: t0-0 t0-1 t1-0 t1-1", "c1: t0-2 t1-2"]);
    }

    #[test]
    fn static_members_come_first_per_topic() {
        let mut g = group(&[("t", 5)], &[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
        g.members[2].group_instance_id = Some("i0".into());
        let a = Range.assign(&g).unwrap();
        assert_eq!(lists(&a), ["a: t-2 t-3", "b: t-4", "c: t-0 t-1"]);
    }

    /// `g` with its members on `racks`, in member order.
    fn on_racks<const N: usize>(mut g: GroupSubscription, racks: [&str; N]) -> GroupSubscription {
        assert_eq!(g.members.len(), N, "one rack per member");
        for (member, rack) in g.members.iter_mut().zip(racks) {
            member.rack = Some(rack.into());
        }
        g
    }

    #[test]
    fn rack_pass_prefers_local_partitions() {
        let g = group(&[("a", 4)], &[("c0", &["a"]), ("c1", &["a"])])
            .with_partition_racks("a", [["r0"], ["r1"], ["r0"], ["r1"]]);
        let g = on_racks(g, ["r1", "r0"]);
        let a = Range.assign(&g).unwrap();
        assert_eq!(lists(&a), ["c0: a-1 a-3", "c1: a-0 a-2"]);
    }

    /// The last extra partition goes to the member that first takes more than its quota, not
    /// to the first that reaches it: c0 reaches its quota of 2 on its rack, and c1 may still take
    /// 3, so no partition is left over.
    #[test]
    fn reaching_the_quota_on_the_rack_keeps_the_extra_partition_available() {
        let g = group(&[("a", 5)], &[("c0", &["a"]), ("c1", &["a"])])
            .with_partition_racks("a", [["r0"], ["r0"], ["r1"], ["r1"], ["r1"]]);
        let g = on_racks(g, ["r0", "r1"]);
        let a = Range.assign(&g).unwrap();
        assert_eq!(lists(&a), ["c0: a-0 a-1", "c1: a-2 a-3 a-4"]);
    }

    /// Co-partitioned topics (same subscribers, same partition count) go to a member together.
    /// c0 is at its quota on r0 when c1 takes the only extra partition; a later r0 partition then
    /// waits for the ordinary pass (which gives it to c2) instead of putting c0 over its quota.
    #[test]
    fn a_co_partitioned_member_at_its_quota_takes_no_more_once_the_extras_are_gone() {
        let racks = [["r0"], ["r0"], ["r1"], ["r1"], ["r1"], ["r0"], ["r2"]];
        let g = group(
            &[("x", 7), ("y", 7)],
            &[
                ("c0", &["x", "y"]),
                ("c1", &["x", "y"]),
                ("c2", &["x", "y"]),
            ],
        )
        .with_partition_racks("x", racks)
        .with_partition_racks("y", racks);
        let g = on_racks(g, ["r0", "r1", "r2"]);
        let a = Range.assign(&g).unwrap();
        assert_eq!(
            lists(&a),
            [
                "c0: x-0 x-1 y-0 y-1",
                "c1: x-2 x-3 x-4 y-2 y-3 y-4",
                "c2: x-5 x-6 y-5 y-6"
            ]
        );
    }

    /// Topics whose Java (UTF-16) order differs from their byte order: U+1F600 sorts before
    /// U+E000 in Java, after it in UTF-8. Each topic's racks must still be found.
    #[test]
    fn racks_are_found_whatever_the_topic_order() {
        let (emoji, private) = ("\u{1F600}", "\u{E000}");
        let g = group(
            &[(emoji, 2), (private, 2)],
            &[("c0", &[emoji, private]), ("c1", &[emoji, private])],
        )
        .with_partition_racks(emoji, [["r1"], ["r0"]])
        .with_partition_racks(private, [["r1"], ["r0"]]);
        let g = on_racks(g, ["r0", "r1"]);
        let a = Range.assign(&g).unwrap();
        let mine = |m: &str| -> Vec<String> {
            lists(&a)
                .into_iter()
                .find(|l| l.starts_with(m))
                .unwrap()
                .split(' ')
                .skip(1)
                .map(String::from)
                .collect()
        };
        assert_eq!(mine("c0:"), [format!("{emoji}-1"), format!("{private}-1")]);
        assert_eq!(mine("c1:"), [format!("{emoji}-0"), format!("{private}-0")]);
    }
}
