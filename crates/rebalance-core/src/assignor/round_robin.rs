//! Kafka's round robin assignor.

use super::assignment::PartitionRef;
use super::layout::{self, Layout};
use super::range::subscribers_in_order;
use super::{AssignError, GroupAssignment, GroupAssignor, GroupSubscription};

/// Kafka's `RoundRobinAssignor`: all members sorted once (static members first, by instance id,
/// then by member id); every partition of every subscribed topic (topics sorted, partitions
/// ascending) goes to the next member in a circle that subscribes to its topic. Members skipped
/// on the way get nothing to make up for it. Racks are ignored.
///
/// Runs in O(partitions + subscriptions): within a topic the circle visits exactly the topic's
/// subscribers in order, so only the starting point is searched.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobin;

impl GroupAssignor for RoundRobin {
    fn name(&self) -> &str {
        "roundrobin"
    }

    fn assign(&self, group: &GroupSubscription) -> Result<GroupAssignment, AssignError> {
        if group.members.is_empty() {
            return Err(AssignError::NoMembers {
                kafka: "IllegalArgumentException: CircularIterator can only be used on non-empty lists",
            });
        }
        let layout = Layout::build(group)?;
        let order = layout::by_member_info(layout.members());
        let rank = layout::ranks(&order);
        // Each topic's subscribers as positions in the circle, ascending.
        let circle: Vec<Vec<u32>> = subscribers_in_order(&layout, &order)
            .into_iter()
            .map(|members| members.into_iter().map(|m| rank[m as usize]).collect())
            .collect();
        let mut lists: Vec<Vec<PartitionRef>> = vec![Vec::new(); order.len()];
        let mut cursor = 0u32;
        for (t, positions) in circle.iter().enumerate() {
            let n = layout.partition_count(t as u32);
            if positions.is_empty() || n == 0 {
                continue;
            }
            let mut k = positions.partition_point(|&p| p < cursor);
            if k == positions.len() {
                k = 0;
            }
            for p in 0..n {
                let m = order[positions[k] as usize] as usize;
                lists[m].push(PartitionRef {
                    topic: t as u32,
                    partition: p as i32,
                });
                cursor = positions[k] + 1;
                k += 1;
                if k == positions.len() {
                    k = 0;
                }
            }
        }
        Ok(GroupAssignment::from_member_lists(
            layout.topic_table(),
            layout.member_ids(),
            lists,
            false,
        ))
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
        let a = RoundRobin.assign(&g).unwrap();
        assert_eq!(lists(&a), ["c0: t0-0 t0-2 t1-1", "c1: t0-1 t1-0 t1-2"]);
    }

    #[test]
    fn uneven_subscriptions_skip_without_compensation() {
        // The javadoc's 1 / 1 / 4 example.
        let g = group(
            &[("t0", 1), ("t1", 2), ("t2", 3)],
            &[
                ("c0", &["t0"]),
                ("c1", &["t0", "t1"]),
                ("c2", &["t0", "t1", "t2"]),
            ],
        );
        let a = RoundRobin.assign(&g).unwrap();
        assert_eq!(
            lists(&a),
            ["c0: t0-0", "c1: t1-0", "c2: t1-1 t2-0 t2-1 t2-2"]
        );
    }

    #[test]
    fn no_members_is_kafkas_error() {
        let err = RoundRobin.assign(&group(&[("t", 1)], &[])).unwrap_err();
        assert!(
            err.java_message()
                .starts_with("IllegalArgumentException: CircularIterator")
        );
    }
}
