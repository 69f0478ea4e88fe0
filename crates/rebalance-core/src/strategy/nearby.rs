//! `AllocateMachineRoomNearby`: consume in your own machine room first.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::plan::{Interner, Plan, distinct_members};
use super::{
    AllocateError, AllocateStrategy, StrategyRef, inner_allocates_nothing, validate, validate_group,
};
use crate::{ClientId, MessageQueue, java};

/// Tells which machine room a broker and a consumer are in.
pub trait MachineRoomResolver: Send + Sync + fmt::Debug {
    /// The room of a queue's broker; `None` or empty when unknown (an error for the strategy).
    ///
    /// It depends on the broker only: the strategy asks once for each run of consecutive queues
    /// with the same broker name and reuses the answer for the rest of the run.
    fn broker_room<'q>(&self, mq: &'q MessageQueue) -> Option<Cow<'q, str>>;
    /// The room of a consumer; `None` or empty when unknown (an error for the strategy).
    fn consumer_room<'c>(&self, cid: &'c ClientId) -> Option<Cow<'c, str>>;
}

/// The usual resolver: the text before the first `'@'` of the broker name or client id (the
/// whole string when it has none), so `room1@broker-a` is in `room1`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefixResolver;

fn prefix(s: &str) -> &str {
    s.split('@').next().unwrap_or_default()
}

impl MachineRoomResolver for PrefixResolver {
    fn broker_room<'q>(&self, mq: &'q MessageQueue) -> Option<Cow<'q, str>> {
        Some(Cow::Borrowed(prefix(&mq.broker_name)))
    }

    fn consumer_room<'c>(&self, cid: &'c ClientId) -> Option<Cow<'c, str>> {
        Some(Cow::Borrowed(prefix(cid)))
    }
}

/// Queues of a room are shared by that room's consumers (with the inner strategy); queues of
/// rooms without any consumer are shared by everyone, room by room.
///
/// A member's answer is its own room's part first, then its part of each consumer-less room in
/// room-name order (Java string order).
#[derive(Debug, Clone)]
pub struct MachineRoomNearby {
    inner: StrategyRef,
    resolver: Arc<dyn MachineRoomResolver>,
}

/// Items grouped by room, rooms in Java string order, items in input order.
struct Rooms<'s> {
    rooms: Vec<(Cow<'s, str>, Vec<u32>)>,
}

impl<'s> Rooms<'s> {
    /// Groups `items` by room. `same_room` says when an item is sure to be in the room of the
    /// item before it (the resolver is then not asked again).
    fn group<T: 's>(
        items: &'s [T],
        room_of: impl Fn(&'s T) -> Option<Cow<'s, str>>,
        same_room: impl Fn(&T, &T) -> bool,
        missing: impl Fn(&T) -> AllocateError,
    ) -> Result<Self, AllocateError> {
        let mut index: HashMap<Cow<'s, str>, usize> = HashMap::new();
        let mut rooms: Vec<(Cow<'s, str>, Vec<u32>)> = Vec::new();
        let mut last: Option<usize> = None;
        for (p, item) in items.iter().enumerate() {
            // `last` is set from the second item on, so `p - 1` is the item before.
            if let Some(slot) = last.filter(|_| same_room(&items[p - 1], item)) {
                rooms[slot].1.push(p as u32);
                continue;
            }
            let room = room_of(item)
                .filter(|r| !r.is_empty())
                .ok_or_else(|| missing(item))?;
            // Sorted input keeps a room's items together: skip the lookup while it repeats.
            let slot = match last {
                Some(slot) if rooms[slot].0 == room => slot,
                _ => *index.entry(room.clone()).or_insert_with(|| {
                    rooms.push((room, Vec::new()));
                    rooms.len() - 1
                }),
            };
            last = Some(slot);
            rooms[slot].1.push(p as u32);
        }
        rooms.sort_by(|a, b| java::compare_str(&a.0, &b.0));
        Ok(Self { rooms })
    }

    fn get(&self, room: &str) -> Option<&[u32]> {
        self.rooms
            .iter()
            .find(|(r, _)| r == room)
            .map(|(_, p)| p.as_slice())
    }
}

/// One room's part of the rule: the room's queues (positions in `mq_all`) and who shares them,
/// the room's own consumers (positions in `cid_all`), or everyone (`None`) when it has none.
struct Part<'r> {
    room: &'r str,
    queues: &'r [u32],
    consumers: Option<&'r [u32]>,
}

/// The rule, for `allocate` and `plan` alike: every room's part, rooms in Java string order.
fn parts<'r>(
    queue_rooms: &'r Rooms<'_>,
    consumer_rooms: &'r Rooms<'_>,
) -> impl Iterator<Item = Part<'r>> {
    queue_rooms.rooms.iter().map(|(room, queues)| Part {
        room,
        queues,
        consumers: consumer_rooms.get(room),
    })
}

/// The items at `positions`: a slice of `items` when the positions are consecutive (a room of
/// sorted input), a copy otherwise.
fn pick<'a, T: Clone>(items: &'a [T], positions: &[u32]) -> Cow<'a, [T]> {
    let contiguous = positions.first().is_some_and(|&first| {
        positions
            .iter()
            .enumerate()
            .all(|(k, &p)| p as usize == first as usize + k)
    });
    if contiguous {
        let start = positions[0] as usize;
        return Cow::Borrowed(&items[start..start + positions.len()]);
    }
    Cow::Owned(
        positions
            .iter()
            .map(|&p| items[p as usize].clone())
            .collect(),
    )
}

impl MachineRoomNearby {
    /// Wraps `inner` with the [`PrefixResolver`].
    pub fn new(inner: StrategyRef) -> Self {
        Self::with_resolver(inner, Arc::new(PrefixResolver))
    }

    /// Wraps `inner` with a resolver of your own.
    pub fn with_resolver(inner: StrategyRef, resolver: Arc<dyn MachineRoomResolver>) -> Self {
        Self { inner, resolver }
    }

    /// The wrapped strategy.
    pub fn inner(&self) -> &StrategyRef {
        &self.inner
    }

    fn rooms<'s>(
        &self,
        mq_all: &'s [MessageQueue],
        cid_all: &'s [ClientId],
    ) -> Result<(Rooms<'s>, Rooms<'s>), AllocateError> {
        // Queue rooms first: a queue error wins over a consumer error, as in Java.
        let queue_rooms = Rooms::group(
            mq_all,
            |mq| self.resolver.broker_room(mq),
            |a, b| Arc::ptr_eq(&a.broker_name, &b.broker_name) || a.broker_name == b.broker_name,
            |mq| AllocateError::NoRoomForQueue(mq.clone()),
        )?;
        let consumer_rooms = Rooms::group(
            cid_all,
            |cid| self.resolver.consumer_room(cid),
            |_, _| false,
            |cid| AllocateError::NoRoomForConsumer(cid.clone()),
        )?;
        Ok((queue_rooms, consumer_rooms))
    }
}

impl AllocateStrategy for MachineRoomNearby {
    fn name(&self) -> &str {
        "machine_room_nearby"
    }

    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        if validate(current, mq_all, cid_all)?.is_none() {
            return Ok(Vec::new());
        }
        let (queue_rooms, consumer_rooms) = self.rooms(mq_all, cid_all)?;
        let own_room = self
            .resolver
            .consumer_room(current)
            .filter(|r| !r.is_empty())
            .ok_or_else(|| AllocateError::NoRoomForConsumer(current.clone()))?;
        let parts: Vec<Part<'_>> = parts(&queue_rooms, &consumer_rooms).collect();
        let mut result = Vec::new();
        // Its own room's part first, then its part of each consumer-less room.
        let own = parts
            .iter()
            .find(|p| p.room == own_room && p.consumers.is_some());
        let orphans = parts.iter().filter(|p| p.consumers.is_none());
        for part in own.into_iter().chain(orphans) {
            let cids = part
                .consumers
                .map_or(Cow::Borrowed(cid_all), |c| pick(cid_all, c));
            result.extend(self.inner.allocate(
                group,
                current,
                &pick(mq_all, part.queues),
                &cids,
            )?);
        }
        Ok(result)
    }

    fn plan<'a>(
        &'a self,
        group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        validate_group(mq_all, cid_all)?;
        let (queue_rooms, consumer_rooms) = self.rooms(mq_all, cid_all)?;
        let members = distinct_members(cid_all, true);
        let slot: HashMap<&str, usize> = members
            .iter()
            .enumerate()
            .map(|(s, (_, c))| (c.as_str(), s))
            .collect();
        let mut own: Vec<Vec<u32>> = vec![Vec::new(); members.len()];
        let mut orphan: Vec<Vec<u32>> = vec![Vec::new(); members.len()];
        let mut interner = Interner::new(mq_all);
        for part in parts(&queue_rooms, &consumer_rooms) {
            let (cids, target) = match part.consumers {
                Some(c) => (pick(cid_all, c), &mut own),
                None => (Cow::Borrowed(cid_all), &mut orphan),
            };
            let room_mqs = pick(mq_all, part.queues);
            let room_plan = self.inner.plan(group, &room_mqs, &cids)?;
            for (cid, positions) in room_plan.positions() {
                if let Some(&s) = slot.get(cid.as_str()) {
                    let translated = interner.translate(&room_plan, part.queues, positions);
                    target[s].extend(translated);
                }
            }
        }
        let shares = members
            .into_iter()
            .zip(own.into_iter().zip(orphan))
            .map(|((_, cid), (mut mine, orphans))| {
                mine.extend(orphans);
                (cid.clone(), mine)
            })
            .collect();
        Ok(interner.finish(shares))
    }

    /// Every room's queues are shared with the inner strategy: nothing when it allocates
    /// nothing.
    fn allocates_nothing(&self) -> Option<String> {
        inner_allocates_nothing(&*self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Averagely;
    use crate::strategy::test_support::*;

    fn mq(broker: &str, id: i32) -> MessageQueue {
        MessageQueue::new("T", broker, id)
    }

    #[test]
    fn allocates_nothing_when_its_inner_strategy_does() {
        let empty_ring = Arc::new(crate::strategy::ConsistentHash::new(0).unwrap());
        assert_eq!(
            MachineRoomNearby::new(empty_ring)
                .allocates_nothing()
                .as_deref(),
            Some(
                "its inner strategy `consistent_hash` allocates nothing: `virtual_node_count` is \
                 0, so the hash ring has no points (give it 1 or more; the default is 10)"
            )
        );
        assert_eq!(
            MachineRoomNearby::new(Arc::new(Averagely)).allocates_nothing(),
            None
        );
    }

    #[test]
    fn own_room_first_then_orphan_rooms() {
        let s = MachineRoomNearby::new(Arc::new(Averagely));
        let mqs = vec![
            mq("a@b1", 0),
            mq("a@b1", 1),
            mq("b@b2", 0),
            mq("b@b2", 1),
            mq("c@b3", 0),
            mq("c@b3", 1),
        ];
        let cids = clients(&["a@1", "a@2", "b@1"]);
        let got = s.allocate("G", &cids[0], &mqs, &cids).unwrap();
        // room a shared by a@1, a@2; room c (no consumers) split by all three.
        assert_eq!(got, vec![mq("a@b1", 0), mq("c@b3", 0)]);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        for cid in &cids {
            assert_eq!(
                plan.share(cid).unwrap().to_vec(),
                s.allocate("G", cid, &mqs, &cids).unwrap()
            );
        }
    }

    #[test]
    fn rooms_apart_in_the_input_are_copied_and_give_the_same_plan() {
        let s = MachineRoomNearby::new(Arc::new(Averagely));
        // Not sorted: room a's queues are not next to each other.
        let mqs = vec![mq("a@b1", 0), mq("b@b2", 0), mq("a@b1", 1), mq("b@b2", 1)];
        let cids = clients(&["a@1", "b@1"]);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        assert_eq!(
            plan.share("a@1").unwrap().to_vec(),
            vec![mq("a@b1", 0), mq("a@b1", 1)]
        );
        for cid in &cids {
            assert_eq!(
                plan.share(cid).unwrap().to_vec(),
                s.allocate("G", cid, &mqs, &cids).unwrap()
            );
        }
        assert!(matches!(pick(&mqs, &[0, 2]), Cow::Owned(_)));
        assert!(matches!(pick(&mqs, &[1, 2, 3]), Cow::Borrowed(_)));
    }

    #[test]
    fn inner_answers_outside_the_input_keep_their_queues() {
        // `by_config` answers queues that are not in the input: the plan keeps them in its own
        // pool, and agrees with `allocate` for every member.
        let configured = vec![
            MessageQueue::new("Elsewhere", "x@b9", 7),
            MessageQueue::new("Elsewhere", "x@b9", 8),
        ];
        let inner: StrategyRef = Arc::new(crate::strategy::ByConfig::new(configured.clone()));
        let s = MachineRoomNearby::new(inner);
        let mqs = vec![mq("a@b1", 0), mq("b@b2", 0), mq("c@b3", 0)];
        let cids = clients(&["a@1", "b@1"]);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        for cid in &cids {
            let mine = s.allocate("G", cid, &mqs, &cids).unwrap();
            // Its own room's answer, then the consumer-less room c's.
            assert_eq!(mine, [&configured[..], &configured[..]].concat(), "{cid}");
            assert_eq!(plan.share(cid).unwrap().to_vec(), mine, "{cid}");
        }
    }

    #[test]
    fn missing_rooms_are_errors_queue_first() {
        let s = MachineRoomNearby::new(Arc::new(Averagely));
        let mqs = vec![mq("@b", 0)];
        let cids = clients(&["@1"]);
        assert_eq!(
            s.allocate("G", &cids[0], &mqs, &cids),
            Err(AllocateError::NoRoomForQueue(mqs[0].clone()))
        );
        let outsider = ClientId::from("z@9");
        assert!(s.allocate("G", &outsider, &mqs, &cids).unwrap().is_empty());
    }
}
