//! `AllocateMachineRoomNearby`'s older sibling `AllocateMessageQueueByMachineRoom`.

use std::collections::HashSet;
use std::sync::Arc;

use super::plan::Plan;
use super::{AllocateError, AllocateStrategy, positional};
use crate::{ClientId, MessageQueue};

/// Only queues of brokers named `room@broker` whose room is configured, divided among all
/// members; the leftover queues at the end of that list go one each to the first members.
///
/// Broker names are split like Java's `String.split("@")` and must have exactly two fields.
/// Consumer ids are never inspected: every member shares the filtered list.
#[derive(Debug, Clone)]
pub struct ByMachineRoom {
    rooms: Arc<HashSet<String>>,
}

impl ByMachineRoom {
    /// A strategy consuming the brokers of `rooms` (exact, case-sensitive names).
    pub fn new<I, S>(rooms: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            rooms: Arc::new(rooms.into_iter().map(Into::into).collect()),
        }
    }

    fn eligible(&self, mq: &MessageQueue) -> bool {
        room(&mq.broker_name).is_some_and(|r| self.rooms.contains(r))
    }

    /// Positions (in `mq_all`) of the eligible queues. Queues of one broker usually come
    /// together, so the broker name is examined once per run of queues sharing it.
    fn filter(&self, mq_all: &[MessageQueue]) -> Vec<u32> {
        let mut last: Option<(&Arc<str>, bool)> = None;
        (0..mq_all.len() as u32)
            .filter(|&p| {
                let broker = &mq_all[p as usize].broker_name;
                match last {
                    Some((b, ok)) if Arc::ptr_eq(b, broker) => ok,
                    _ => {
                        let ok = self.eligible(&mq_all[p as usize]);
                        last = Some((broker, ok));
                        ok
                    }
                }
            })
            .collect()
    }
}

/// The room of a broker name when Java's `brokerName.split("@")` gives exactly two fields (the
/// first), without building the fields: trailing empty fields are dropped, so what remains
/// after trimming trailing `@` must contain exactly one `@`.
fn room(broker: &str) -> Option<&str> {
    let trimmed = broker.trim_end_matches('@');
    let (room, rest) = trimmed.split_once('@')?;
    (!rest.contains('@')).then_some(room)
}

/// Positions in the filtered list for the member at position `i` of `n`.
fn share(filtered: &[u32], n: usize, i: usize) -> impl Iterator<Item = usize> + '_ {
    let m = filtered.len() / n;
    let r = filtered.len() % n;
    let tail = (i < r).then(|| filtered[m * n + i]);
    filtered[i * m..i * m + m]
        .iter()
        .copied()
        .chain(tail)
        .map(|p| p as usize)
}

impl AllocateStrategy for ByMachineRoom {
    fn name(&self) -> &str {
        "by_machine_room"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        let filtered = self.filter(mq_all);
        positional::allocate(current, mq_all, cid_all, |n, i| share(&filtered, n, i))
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        let filtered = self.filter(mq_all);
        positional::plan(mq_all, cid_all, |n, i| share(&filtered, n, i))
    }

    /// No room, or only rooms holding an '@' (a broker `room@broker` has a room without one):
    /// no queue is eligible.
    fn allocates_nothing(&self) -> Option<String> {
        if self.rooms.is_empty() {
            return Some("`consumer_idcs` names no machine room, so no queue is eligible".into());
        }
        self.rooms.iter().all(|r| r.contains('@')).then(|| {
            "every room of `consumer_idcs` holds an '@', so none matches a broker named \
             `room@broker` and no queue is eligible"
                .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::test_support::*;

    #[test]
    fn leftovers_come_from_the_tail() {
        let mqs: Vec<MessageQueue> = (0..11)
            .map(|i| MessageQueue::new("T", "roomA@b", i))
            .collect();
        let cids = clients(&["c0", "c1", "c2", "c3"]);
        let s = ByMachineRoom::new(["roomA"]);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        let got: Vec<Vec<i32>> = plan.iter().map(|(_, sh)| ids(&sh.to_vec())).collect();
        assert_eq!(
            got,
            [vec![0, 1, 8], vec![2, 3, 9], vec![4, 5, 10], vec![6, 7]]
        );
        for cid in &cids {
            assert_eq!(
                s.allocate("G", cid, &mqs, &cids).unwrap(),
                plan.share(cid).unwrap().to_vec(),
                "{cid}"
            );
        }
    }

    proptest::proptest! {
        /// The filter reuses a broker's answer along a run of queues sharing the broker's
        /// string; it must agree with asking every queue, whether or not equal names share one.
        #[test]
        fn filter_agrees_with_asking_every_queue(
            picks in proptest::collection::vec((0usize..4, proptest::bool::ANY), 0..24),
        ) {
            let names = ["roomA@b1", "roomB@b2", "roomA@b3", "plain"];
            let shared: Vec<Arc<str>> = names.iter().map(|&n| Arc::from(n)).collect();
            let mqs: Vec<MessageQueue> = picks
                .iter()
                .enumerate()
                .map(|(i, &(b, share))| {
                    let broker = if share { shared[b].clone() } else { Arc::from(names[b]) };
                    MessageQueue::new("T", broker, i as i32)
                })
                .collect();
            let s = ByMachineRoom::new(["roomA"]);
            let expected: Vec<u32> = (0..mqs.len() as u32)
                .filter(|&p| s.eligible(&mqs[p as usize]))
                .collect();
            proptest::prop_assert_eq!(s.filter(&mqs), expected);
        }
    }

    #[test]
    fn no_eligible_room_says_it_allocates_nothing() {
        let none: [&str; 0] = [];
        assert_eq!(
            ByMachineRoom::new(none).allocates_nothing().as_deref(),
            Some("`consumer_idcs` names no machine room, so no queue is eligible")
        );
        assert_eq!(
            ByMachineRoom::new(["roomA@broker-a", "@"])
                .allocates_nothing()
                .as_deref(),
            Some(
                "every room of `consumer_idcs` holds an '@', so none matches a broker named \
                 `room@broker` and no queue is eligible"
            )
        );
        // One usable room is enough; the empty room is one (brokers named `@broker`).
        assert_eq!(
            ByMachineRoom::new(["roomA@broker-a", "roomB"]).allocates_nothing(),
            None
        );
        assert_eq!(ByMachineRoom::new([""]).allocates_nothing(), None);
    }

    #[test]
    fn room_agrees_with_java_split() {
        for name in [
            "roomA@b1",
            "roomA@b1@",
            "roomA@b1@@",
            "@b4",
            "roomA@",
            "roomA@b@x",
            "roomA@@b",
            "@",
            "@@",
            "",
            "plain",
            "a@b@",
            "@a@",
        ] {
            let fields = crate::java::split(name, '@');
            let expected = (fields.len() == 2).then(|| fields[0]);
            assert_eq!(room(name), expected, "{name:?}");
        }
    }

    #[test]
    fn java_split_rules_decide_eligibility() {
        let s = ByMachineRoom::new(["roomA", ""]);
        let eligible = |b: &str| s.eligible(&MessageQueue::new("T", b, 0));
        assert!(eligible("roomA@b1"));
        assert!(eligible("roomA@b1@"));
        assert!(eligible("@b4"));
        assert!(!eligible("roomA@"));
        assert!(!eligible("roomA@b@x"));
        assert!(!eligible("roomA@@b"));
        assert!(!eligible("@"));
        assert!(!eligible(""));
        assert!(!eligible("plain"));
    }
}
