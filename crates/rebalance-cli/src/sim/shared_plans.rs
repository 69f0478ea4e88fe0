//! [`SharedPlans`]: one plan per distinct input for every simulated client, where each real
//! client would compute its own share.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rebalance_core::strategy::{AllocateError, AllocateStrategy};
use rebalance_core::{ClientId, MessageQueue, StrategyRef};
use rebalance_runtime::RouteShare;

/// Plans kept: the inputs the clients of a simulation see at about the same time (during churn
/// some clients still see the previous member list).
const PLANS_KEPT: usize = 8;

/// The whole group's plan for one input.
struct Entry {
    group: String,
    /// The queue list planned: the clients' own list when it comes from the cluster's
    /// [`RouteShare`] (found by address then), else a copy (compared queue by queue).
    queues: Arc<[MessageQueue]>,
    members: Vec<ClientId>,
    /// Each member's share, in the strategy's order; `None` when the plan failed (each client
    /// then asks the strategy itself, which gives it its own answer or error).
    shares: Option<HashMap<ClientId, Arc<[MessageQueue]>>>,
}

impl Entry {
    fn matches(&self, group: &str, queues: &[MessageQueue], members: &[ClientId]) -> bool {
        let same_queues = (std::ptr::eq(self.queues.as_ptr(), queues.as_ptr())
            && self.queues.len() == queues.len())
            || *self.queues == *queues;
        self.group == group && self.members == members && same_queues
    }
}

/// A strategy that answers every client from one plan of the whole group per distinct input
/// (group, queues, members), computed with the strategy's own [`AllocateStrategy::plan`].
///
/// Every strategy's `allocate_shared` is exactly its share of `plan` (the core's agreement
/// tests check it), so each client gets the answer it would compute alone; what changes is
/// that 2,000 clients seeing the same group compute one plan, not 2,000. Only the simulator
/// uses it: a real process runs one client, which computes its own share.
pub struct SharedPlans {
    inner: StrategyRef,
    routes: RouteShare,
    plans: Mutex<VecDeque<Arc<Entry>>>,
}

impl SharedPlans {
    /// Wraps `inner`; `routes` is the cluster's route share, whose queue lists the clients
    /// hold, so that a plan is found by the list's address.
    pub fn new(inner: StrategyRef, routes: RouteShare) -> Self {
        Self {
            inner,
            routes,
            plans: Mutex::new(VecDeque::with_capacity(PLANS_KEPT)),
        }
    }

    fn find(
        &self,
        group: &str,
        queues: &[MessageQueue],
        members: &[ClientId],
    ) -> Option<Arc<Entry>> {
        let plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        plans
            .iter()
            .find(|e| e.matches(group, queues, members))
            .cloned()
    }

    /// Plans `queues` for `members` and keeps the plan.
    fn plan(&self, group: &str, queues: &[MessageQueue], members: &[ClientId]) -> Arc<Entry> {
        let shares = self.inner.plan(group, queues, members).ok().map(|plan| {
            plan.iter()
                .map(|(cid, share)| (cid.clone(), share.to_vec().into()))
                .collect()
        });
        let held = queues
            .first()
            .and_then(|q| self.routes.queues(&q.topic))
            .filter(|list| {
                std::ptr::eq(list.as_ptr(), queues.as_ptr()) && list.len() == queues.len()
            });
        let entry = Arc::new(Entry {
            group: group.to_string(),
            queues: held.unwrap_or_else(|| queues.into()),
            members: members.to_vec(),
            shares,
        });
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        plans.push_front(entry.clone());
        plans.truncate(PLANS_KEPT);
        entry
    }
}

impl std::fmt::Debug for SharedPlans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPlans")
            .field("inner", &self.inner.name())
            .finish_non_exhaustive()
    }
}

impl AllocateStrategy for SharedPlans {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        self.allocate_shared(group, current, mq_all, cid_all)
            .map(|share| share.to_vec())
    }

    fn allocate_shared(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Arc<[MessageQueue]>, AllocateError> {
        let entry = match self.find(group, mq_all, cid_all) {
            Some(entry) => entry,
            None => self.plan(group, mq_all, cid_all),
        };
        match entry.shares.as_ref().and_then(|s| s.get(current)) {
            Some(share) => Ok(share.clone()),
            // Not planned (a failed plan, or a member the plan leaves out): the strategy's own
            // answer for this client.
            None => self.inner.allocate_shared(group, current, mq_all, cid_all),
        }
    }

    /// The same answers as the strategy it wraps, so the same verdict.
    fn allocates_nothing(&self) -> Option<String> {
        self.inner.allocates_nothing()
    }

    fn plan<'a>(
        &'a self,
        group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<rebalance_core::strategy::Plan<'a>, AllocateError> {
        self.inner.plan(group, mq_all, cid_all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebalance_core::strategy::{Params, StrategyRegistry};

    fn queues(n: i32) -> Vec<MessageQueue> {
        (0..n).map(|i| MessageQueue::new("T", "b", i)).collect()
    }

    fn members(n: usize) -> Vec<ClientId> {
        let mut ids: Vec<ClientId> = (0..n).map(|i| ClientId::from(format!("c{i:03}"))).collect();
        ids.sort();
        ids
    }

    #[test]
    fn every_client_gets_the_strategys_own_answer() {
        for name in [
            "averagely",
            "consistent_hash",
            "balanced_sticky",
            "averagely_by_circle",
        ] {
            let inner = StrategyRegistry::default()
                .build(name, &Params::new())
                .unwrap();
            let shared = SharedPlans::new(inner.clone(), RouteShare::new());
            for (q, n) in [(10, 3), (3, 5), (100, 7)] {
                let (mq, ids) = (queues(q), members(n));
                for id in &ids {
                    let alone = inner.allocate_shared("G", id, &mq, &ids).unwrap();
                    let from_plan = shared.allocate_shared("G", id, &mq, &ids).unwrap();
                    assert_eq!(*alone, *from_plan, "{name} {q}x{n} {id}");
                }
                // A client the directory does not list gets what the strategy gives it.
                let stranger = ClientId::from("zz");
                assert_eq!(
                    inner.allocate("G", &stranger, &mq, &ids),
                    shared.allocate("G", &stranger, &mq, &ids),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn one_plan_serves_every_client_of_an_input() {
        let inner = StrategyRegistry::default()
            .build("averagely", &Params::new())
            .unwrap();
        let shared = SharedPlans::new(inner, RouteShare::new());
        let (mq, ids) = (queues(12), members(4));
        let a = shared.allocate_shared("G", &ids[0], &mq, &ids).unwrap();
        let again = shared.allocate_shared("G", &ids[0], &mq, &ids).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "answered from the kept plan");
        assert_eq!(shared.plans.lock().unwrap().len(), 1);
        // Another member list is another plan; the first one is still kept.
        let fewer = &ids[..3];
        let b = shared.allocate_shared("G", &ids[0], &mq, fewer).unwrap();
        assert_eq!(b.len(), 4);
        assert_eq!(shared.plans.lock().unwrap().len(), 2);
        let c = shared.allocate_shared("G", &ids[0], &mq, &ids).unwrap();
        assert!(Arc::ptr_eq(&a, &c));
    }
}
