//! Only designated clients consume.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::plan::{Plan, distinct_members};
use super::{
    AllocateError, AllocateStrategy, StrategyRef, inner_allocates_nothing, validate, validate_group,
};
use crate::{ClientId, MessageQueue};

/// Lets only designated clients consume: the wrapped strategy divides the queues among the
/// designated members present, and every other member gets nothing.
///
/// An entry designates a client when it equals the client id or the part of the id before the
/// first `'@'` (the client's address in RocketMQ's `ip@instance` ids). When no designated
/// client is present, everybody consumes (and a warning says so), so that a configuration mistake
/// never leaves a topic unconsumed.
///
/// ```
/// use std::sync::Arc;
/// use rebalance_core::{ClientId, MessageQueue, strategy::{AllocateStrategy, Averagely, Designated}};
///
/// let strategy = Designated::new(Arc::new(Averagely), ["10.0.0.2"]);
/// let queues: Vec<MessageQueue> = (0..4).map(|i| MessageQueue::new("T", "b", i)).collect();
/// let members: Vec<ClientId> = ["10.0.0.1@1", "10.0.0.2@1"].into_iter().map(ClientId::from).collect();
/// assert!(strategy.allocate("G", &members[0], &queues, &members).unwrap().is_empty());
/// assert_eq!(strategy.allocate("G", &members[1], &queues, &members).unwrap().len(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct Designated {
    inner: StrategyRef,
    designated: Arc<HashSet<String>>,
}

impl Designated {
    /// Wraps `inner`, designating the given client addresses or ids.
    pub fn new<I, S>(inner: StrategyRef, designated: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            inner,
            designated: Arc::new(designated.into_iter().map(Into::into).collect()),
        }
    }

    /// Whether `cid` is designated.
    pub fn is_designated(&self, cid: &ClientId) -> bool {
        self.designated.contains(cid.as_str()) || self.designated.contains(cid.prefix())
    }

    /// The members that consume: the designated ones, or everyone when none is present.
    fn consumers(&self, group: &str, cid_all: &[ClientId]) -> Vec<ClientId> {
        let chosen: Vec<ClientId> = cid_all
            .iter()
            .filter(|c| self.is_designated(c))
            .cloned()
            .collect();
        if chosen.is_empty() {
            tracing::warn!(
                group,
                designated = ?self.designated,
                "no designated consumer is in the group; every member consumes"
            );
            return cid_all.to_vec();
        }
        chosen
    }
}

impl AllocateStrategy for Designated {
    fn name(&self) -> &str {
        "designated"
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
        let consumers = self.consumers(group, cid_all);
        if !consumers.contains(current) {
            return Ok(Vec::new());
        }
        self.inner.allocate(group, current, mq_all, &consumers)
    }

    /// The inner strategy's plan over the designated members, and nothing for the others. An
    /// error of the inner strategy fails the whole plan, although [`allocate`](Self::allocate)
    /// for a member that is not designated still returns `Ok` (nothing): a plan has no place
    /// for an error that only some members get.
    fn plan<'a>(
        &'a self,
        group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        validate_group(mq_all, cid_all)?;
        let consumers = self.consumers(group, cid_all);
        let mut inner = self.inner.plan(group, mq_all, &consumers)?;
        // By id, not by position: the inner plan may list members ours leaves out (an empty id,
        // which `by_config` keeps).
        let mut consuming: HashMap<ClientId, Vec<u32>> = inner.take_shares().into_iter().collect();
        let shares = distinct_members(cid_all, true)
            .into_iter()
            .map(|(_, cid)| (cid.clone(), consuming.remove(cid).unwrap_or_default()))
            .collect();
        Ok(inner.with_shares(shares))
    }

    /// The consuming members (the designated ones, or everyone) share with the inner strategy:
    /// nothing when it allocates nothing.
    fn allocates_nothing(&self) -> Option<String> {
        inner_allocates_nothing(&*self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Averagely;
    use crate::strategy::test_support::*;

    #[test]
    fn designated_members_share_everything() {
        let s = Designated::new(Arc::new(Averagely), ["10.0.0.2", "10.0.0.4@x"]);
        let cids = clients(&["10.0.0.1@x", "10.0.0.2@x", "10.0.0.3@x", "10.0.0.4@x"]);
        let mqs = queues(5);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        let sizes: Vec<usize> = plan.iter().map(|(_, sh)| sh.len()).collect();
        assert_eq!(sizes, [0, 3, 0, 2]);
        for cid in &cids {
            assert_eq!(
                plan.share(cid).unwrap().to_vec(),
                s.allocate("G", cid, &mqs, &cids).unwrap()
            );
        }
    }

    #[test]
    fn plan_agrees_with_allocate_when_the_inner_plan_keeps_an_empty_id() {
        // `by_config`'s plan keeps a member whose id is empty (Java's by-config never checks
        // ids); ours leaves it out, so matching the inner shares by position gave every member
        // after it nothing, while `allocate` gives each the configured list.
        let configured = vec![MessageQueue::new("T", "broker-a", 0)];
        let inner: StrategyRef = Arc::new(crate::strategy::ByConfig::new(configured.clone()));
        let mqs = queues(2);
        let cids = clients(&["", "a", "b"]); // sorted: the empty id comes first
        for designated in [vec!["nobody"], vec!["a", "b", ""]] {
            let s = Designated::new(inner.clone(), designated.clone());
            let plan = s.plan("G", &mqs, &cids).unwrap();
            for cid in &cids[1..] {
                assert_eq!(
                    s.allocate("G", cid, &mqs, &cids).unwrap(),
                    configured,
                    "{designated:?}: {cid}"
                );
                assert_eq!(
                    plan.share(cid).unwrap().to_vec(),
                    configured,
                    "{designated:?}: {cid}"
                );
            }
        }
    }

    #[test]
    fn allocates_nothing_when_its_inner_strategy_does() {
        let empty: StrategyRef = Arc::new(crate::strategy::ByConfig::new(Vec::new()));
        assert_eq!(
            Designated::new(empty, ["a"]).allocates_nothing().as_deref(),
            Some(
                "its inner strategy `by_config` allocates nothing: `message_queue_list` is \
                 empty, so this client takes no queue"
            )
        );
        // Through two wrappers, each named.
        let none: [&str; 0] = [];
        let rooms: StrategyRef = Arc::new(crate::strategy::ByMachineRoom::new(none));
        let nearby: StrategyRef = Arc::new(crate::strategy::MachineRoomNearby::new(rooms));
        assert_eq!(
            Designated::new(nearby, ["a"])
                .allocates_nothing()
                .as_deref(),
            Some(
                "its inner strategy `machine_room_nearby` allocates nothing: its inner strategy \
                 `by_machine_room` allocates nothing: `consumer_idcs` names no machine room, so \
                 no queue is eligible"
            )
        );
        // Nobody designated is everybody consuming, not nobody.
        assert_eq!(
            Designated::new(Arc::new(Averagely), none).allocates_nothing(),
            None
        );
    }

    #[test]
    fn falls_back_to_everyone() {
        let s = Designated::new(Arc::new(Averagely), ["nobody"]);
        let cids = clients(&["a", "b"]);
        let mqs = queues(4);
        assert_eq!(s.plan("G", &mqs, &cids).unwrap().assigned_count(), 4);
        assert_eq!(s.allocate("G", &cids[1], &mqs, &cids).unwrap().len(), 2);
    }
}
