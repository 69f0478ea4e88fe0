//! The broadcast assignor: every member reads everything it subscribes to.

use super::assignment::PartitionRef;
use super::layout::Layout;
use super::{AssignError, GroupAssignment, GroupAssignor, GroupSubscription};

/// Every member gets every partition of every existing topic it subscribes to: the usual custom
/// assignor for fan-out, where each member must see every message. Owned partitions, racks and
/// instance ids play no part.
#[derive(Debug, Clone, Copy, Default)]
pub struct Broadcast;

impl GroupAssignor for Broadcast {
    fn name(&self) -> &str {
        "broadcast"
    }

    fn assign(&self, group: &GroupSubscription) -> Result<GroupAssignment, AssignError> {
        let layout = Layout::build(group)?;
        let lists = (0..layout.members().len())
            .map(|m| {
                layout
                    .subscription(m)
                    .iter()
                    .flat_map(|&t| {
                        (0..layout.partition_count(t)).map(move |p| PartitionRef {
                            topic: t,
                            partition: p as i32,
                        })
                    })
                    .collect()
            })
            .collect();
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
    fn everyone_gets_all_of_their_topics() {
        let g = group(
            &[("a", 2), ("b", 1), ("empty", 0)],
            &[
                ("c0", &["a", "b"]),
                ("c1", &["b", "missing", "empty"]),
                ("c2", &[]),
            ],
        );
        let a = Broadcast.assign(&g).unwrap();
        assert_eq!(lists(&a), ["c0: a-0 a-1 b-0", "c1: b-0", "c2:"]);
    }
}
