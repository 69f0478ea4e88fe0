//! `balanced_sticky`: shares within one queue of each other, and few queues moved when a member
//! joins or leaves, with no coordinator and no memory of earlier rounds.
//!
//! # The algorithm
//! 1. **Ring.** Every member puts `virtual_nodes` points (default 128; fewer when the ring would
//!    pass [`MAX_RING_POINTS`](BalancedSticky::MAX_RING_POINTS) in all) on a 64-bit ring, every
//!    queue one point (the hashes are spelled out in `hashing.rs`: FNV-1a over the UTF-8 id, or
//!    over `topic 0xFF broker 0xFF queue_id`, finished with SplitMix64's mixer). A queue's
//!    *distance* to a member is the clockwise distance from the queue's point to the member's
//!    first point after it.
//! 2. **Capacities.** With `Q` queues and `N` members, every member may take `Q div N` queues,
//!    and the first `Q mod N` members in a fixed order (a hash of the id, the same in every group
//!    and independent of who else is present) one more. With fewer queues than members, every
//!    member may take one (nobody has to hold any, so whoever ends up empty, shares still differ
//!    by at most one). With [weights](BalancedSticky::with_weights), a member's capacity is its
//!    quota `Q * w / W` rounded down, and the queues left over go one each to the first members
//!    in the same order whose quota is not whole (`capacity.rs`).
//! 3. **Matching.** Queues are matched to members by deferred acceptance: a queue proposes to the
//!    members in order of distance; a member holds the closest queues up to its capacity and
//!    turns the farthest away, which goes on proposing. The result is the *stable* matching: no
//!    queue and member would both rather be together than with what they have.
//!
//! # Why it is correct (proof sketch)
//! - **A pure function.** Both sides rank every queue-member pair by the same key (distance, then
//!   queue position, then member), so the stable matching is unique (pairs can be taken greedily
//!   in key order, and any stable matching must contain each greedy pair in turn); deferred
//!   acceptance finds it whatever order queues propose in. The inputs are the sorted queue list
//!   and the distinct member ids, so every client computes the same plan.
//! - **Disjoint cover, spread ≤ 1.** Capacities add up to `Q` (to `N > Q` when there are fewer
//!   queues than members). A queue that is turned away keeps walking the ring; it cannot be
//!   turned away by everyone, because a member that turns a queue away is full and stays full,
//!   and not all members can be full while a queue is unplaced. So every queue ends with exactly
//!   one member; when capacities add up to `Q` every member is exactly at its capacity, `Q div N`
//!   or `Q div N + 1`, and otherwise every member holds 0 or 1.
//! - **Which members get the extra queue is stable.** The capacity order does not depend on the
//!   group, so the members with an extra queue after a join or leave that keeps `Q div N` are a
//!   subset (after a join) or superset (after a leave) of those before: no remaining member
//!   must grow when someone joins, nor shrink when someone leaves.
//! - **Movement.** When a member leaves, the old matching without it still fits the new
//!   capacities (they only grow), and deferred acceptance can resume from it: the departed
//!   member's queues propose on, and so does any queue that prefers a member whose capacity
//!   grew. Each proposal either takes a free place or displaces a farther queue, which proposes
//!   on in turn (a rejection chain); a chain ends at a member with room, and there are exactly
//!   as many new places as queues to place. So the queues that move are the departed member's,
//!   plus those displaced along the chains; a join is the same in reverse (the joiner's
//!   capacity, and the shrinking ones, start the chains). Chains are short when members hold
//!   many queues, longer when they hold a few and most members are full.
//!   Measured with `rebalance compare --sample 1000 --queues 10000 --consumers 500` (random
//!   groups with `Q` in 8..=10,000 and `N` in 2..=500, one join or leave each): the queues moved
//!   add up to about 2 times the minimum (the departed member's share, or `Q div (N+1)` for a
//!   joiner): 2.17 with seed 1, 1.97 with seed 2. By queues per member: 1.3 to 1.4 times when
//!   members hold 64 queues or more, about 3.4 times at 16 to 64, 4.5 at 4 to 16, 5.6 below 4;
//!   averagely moves 33 times the minimum on the same events. Shares always differ by at most one.
//!
//! - **Weights.** The proof above only uses that the capacities add up to `Q`, so it holds for
//!   weighted capacities too: every member ends exactly at its quota rounded down or up. The ring
//!   is the same as without weights (giving heavier members more ring points was measured and
//!   moved no fewer queues), so only the capacities depend on them.
//!
//! # Limits
//! A stateless strategy cannot always move only the minimum: keeping every queue with its member
//! while others come and go forces each queue to rank the members in a fixed order (a
//! rendezvous-style rule), and then the departed member's queues land on the others at random
//! rather than exactly where capacity was freed. Even with the best possible choice of who gets
//! the extra queue, that randomness alone costs about 1.2 times the minimum on the groups above
//! (1.45 to 1.55 times when members hold 1 to 64 queues). Any strategy that, like this one, gives
//! the extra queues in a fixed order moves at least 1.25 times the minimum on pairs of leaves
//! where members hold fewer than `N / 2` queues. For stateless strategies in general there is
//! no such proof: a local search over the plans of small groups (a table of one plan per member
//! subset) found none below 1.7 times with about 40 members and 20 queues each, which is evidence,
//! not a bound. The proof and the search are in `BENCHMARKS.md`.
//!
//! ```
//! use rebalance_core::{ClientId, MessageQueue, strategy::{AllocateStrategy, BalancedSticky}};
//!
//! let queues: Vec<MessageQueue> = (0..10).map(|i| MessageQueue::new("T", "broker-a", i)).collect();
//! let members: Vec<ClientId> = ["c0", "c1", "c2"].into_iter().map(ClientId::from).collect();
//! let strategy = BalancedSticky::default();
//! let plan = strategy.plan("G", &queues, &members).unwrap();
//! let mut sizes: Vec<usize> = plan.iter().map(|(_, share)| share.len()).collect();
//! sizes.sort();
//! assert_eq!(sizes, [3, 3, 4]);
//! ```

mod capacity;
mod hashing;
mod matching;
mod ring;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod weighted_tests;

use std::sync::Arc;

use super::memo::Memo;
use super::plan::{Plan, distinct_members};
use super::{AllocateError, AllocateStrategy, validate, validate_group};
use crate::{ClientId, MessageQueue};
use ring::Ring;

/// How many member lists (and queue lists) a strategy value remembers.
const MEMO_ENTRIES: usize = 4;

/// A remembered ring with a remembered queue list's positions.
type RingAndPositions = (Arc<Ring>, Arc<Vec<u64>>);

/// A member's weight (see [`BalancedSticky::with_weights`]).
type WeightFn = dyn Fn(&ClientId) -> u32 + Send + Sync;

/// Balanced (shares differ by at most one) and sticky (few queues move on a join or leave)
/// without coordination; see the [module docs](self) for the algorithm and its guarantees.
///
/// The value remembers the ring of the last few member lists and the positions of the last few
/// queue lists (compared exactly, so a remembered result is only reused for identical inputs);
/// it is `Send + Sync` and meant to be shared.
pub struct BalancedSticky {
    virtual_nodes: usize,
    weight: Option<Arc<WeightFn>>,
    rings: Memo<[ClientId], Ring>,
    positions: Memo<[MessageQueue], Vec<u64>>,
    /// Each queue's first ring point, for a remembered (ring, queue list) pair. The key holds
    /// both `Arc`s, so comparing them by address is exact.
    starts: Memo<RingAndPositions, Vec<u32>>,
}

impl BalancedSticky {
    /// The default number of ring points per member.
    pub const DEFAULT_VIRTUAL_NODES: usize = 128;

    /// The most points the ring has in all (2^22, about 200 MB while it is built): with more
    /// members than `MAX_RING_POINTS / virtual_nodes`, each gets `MAX_RING_POINTS / N` points
    /// (at least one). Every client of a group sees the same `N`, so all still agree. Without
    /// it, `virtual_nodes` at its maximum (65,536) on a group of 2,000 would build a ring of
    /// 131 million points (about 6 GB) at every change of the member list.
    pub const MAX_RING_POINTS: usize = 1 << 22;

    /// A strategy with `virtual_nodes` ring points per member (at least 1).
    pub fn new(virtual_nodes: usize) -> Self {
        Self {
            virtual_nodes: virtual_nodes.max(1),
            weight: None,
            rings: Memo::new(MEMO_ENTRIES),
            positions: Memo::new(MEMO_ENTRIES),
            starts: Memo::new(MEMO_ENTRIES),
        }
    }

    /// The number of ring points per member, as configured (see
    /// [`MAX_RING_POINTS`](Self::MAX_RING_POINTS) for large groups).
    pub fn virtual_nodes(&self) -> usize {
        self.virtual_nodes
    }

    /// The ring points each of `members` members gets.
    fn points_per_member(&self, members: usize) -> usize {
        self.virtual_nodes
            .min(Self::MAX_RING_POINTS / members.max(1))
            .max(1)
    }

    /// Shares in proportion to `weight(member)` instead of equal ones: every member's share is
    /// its quota `Q * w / W` (`W` the group's total weight) rounded down or up, and a member of
    /// weight 0 takes nothing (unless every member weighs 0: then all weigh the same). Equal
    /// weights give exactly the plan of the unweighted strategy.
    ///
    /// Like the member list, the weights must be the same on every client of the group, or
    /// their plans disagree: derive them from the id (an instance name that carries the size of
    /// the machine, say) or from configuration that every client shares. The function is asked
    /// for every member each round, so a weight may change over time; plans change with it.
    ///
    /// ```
    /// use rebalance_core::{ClientId, MessageQueue, strategy::{AllocateStrategy, BalancedSticky}};
    ///
    /// let queues: Vec<MessageQueue> = (0..12).map(|i| MessageQueue::new("T", "broker-a", i)).collect();
    /// let members: Vec<ClientId> = ["big", "small-1", "small-2"].into_iter().map(ClientId::from).collect();
    /// let strategy = BalancedSticky::default()
    ///     .with_weights(|cid: &ClientId| if cid.as_str() == "big" { 2 } else { 1 });
    /// let plan = strategy.plan("G", &queues, &members).unwrap();
    /// assert_eq!(plan.share(&members[0]).unwrap().len(), 6);
    /// assert_eq!(plan.share(&members[1]).unwrap().len(), 3);
    /// ```
    pub fn with_weights(
        mut self,
        weight: impl Fn(&ClientId) -> u32 + Send + Sync + 'static,
    ) -> Self {
        self.weight = Some(Arc::new(weight));
        self
    }

    /// The members' weights, or `None` when they all weigh the same.
    fn weights(&self, members: &[ClientId]) -> Option<Vec<u32>> {
        let weight = self.weight.as_ref()?;
        let weights: Vec<u32> = members.iter().map(|m| weight(m)).collect();
        let first = *weights.first()?;
        if weights.iter().all(|&w| w == first) {
            None
        } else {
            Some(weights)
        }
    }

    fn ring(&self, members: &[ClientId]) -> Arc<Ring> {
        self.rings.get_or_insert_with(
            |key| key == members,
            || {
                let points = self.points_per_member(members.len());
                (members.into(), Ring::build(members, points))
            },
        )
    }

    fn positions(&self, mq_all: &[MessageQueue]) -> Arc<Vec<u64>> {
        self.positions.get_or_insert_with(
            |key| key == mq_all,
            || (mq_all.into(), hashing::queue_points(mq_all)),
        )
    }

    /// Every member's share (positions into `mq_all`), members distinct and non-empty, in the
    /// order they first appear.
    fn shares(&self, mq_all: &[MessageQueue], cid_all: &[ClientId]) -> Vec<(ClientId, Vec<u32>)> {
        let members: Vec<ClientId> = distinct_members(cid_all, true)
            .into_iter()
            .map(|(_, c)| c.clone())
            .collect();
        let ring = self.ring(&members);
        let positions = self.positions(mq_all);
        let starts = self.starts.get_or_insert_with(
            |(r, p)| Arc::ptr_eq(r, &ring) && Arc::ptr_eq(p, &positions),
            || {
                let starts = matching::first_points(&ring, &positions);
                (Arc::new((ring.clone(), positions.clone())), starts)
            },
        );
        let weights = self.weights(&members);
        let caps = capacity::capacities(&ring.rank_order, weights.as_deref(), mq_all.len());
        let shares = matching::assign(&ring, &positions, &starts, &caps);
        tracing::trace!(
            queues = mq_all.len(),
            members = members.len(),
            weighted = weights.is_some(),
            "balanced_sticky plan"
        );
        members.into_iter().zip(shares).collect()
    }
}

impl Default for BalancedSticky {
    fn default() -> Self {
        Self::new(Self::DEFAULT_VIRTUAL_NODES)
    }
}

impl Clone for BalancedSticky {
    /// A strategy with the same parameters (and weights) and nothing remembered yet.
    fn clone(&self) -> Self {
        Self {
            weight: self.weight.clone(),
            ..Self::new(self.virtual_nodes)
        }
    }
}

impl std::fmt::Debug for BalancedSticky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BalancedSticky")
            .field("virtual_nodes", &self.virtual_nodes)
            .field("weighted", &self.weight.is_some())
            .finish_non_exhaustive()
    }
}

impl AllocateStrategy for BalancedSticky {
    fn name(&self) -> &str {
        "balanced_sticky"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        if validate(current, mq_all, cid_all)?.is_none() {
            return Ok(Vec::new());
        }
        let share = self
            .shares(mq_all, cid_all)
            .into_iter()
            .find(|(cid, _)| cid == current)
            .map(|(_, share)| share)
            .unwrap_or_default();
        Ok(share
            .into_iter()
            .map(|p| mq_all[p as usize].clone())
            .collect())
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        validate_group(mq_all, cid_all)?;
        Ok(Plan::over_input(mq_all, self.shares(mq_all, cid_all)))
    }
}
