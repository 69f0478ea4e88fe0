//! [`Plan`]: every member's share of a topic, computed in one call.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::{ClientId, MessageQueue};

/// The whole group's allocation: every distinct member of `cid_all` with its share, in the order
/// the members first appear.
///
/// Shares are kept as positions into a pool of queues (normally the `mq_all` the plan was
/// computed from, borrowed), so a plan over 100,000 queues costs 4 bytes per queue and no string
/// copies. A member whose id is empty is left out when the strategy would refuse it (see
/// [`AllocateError::EmptyCurrentCid`](crate::AllocateError::EmptyCurrentCid)).
///
/// ```
/// use rebalance_core::{ClientId, MessageQueue, strategy::{AllocateStrategy, Averagely}};
///
/// let queues: Vec<MessageQueue> = (0..5).map(|i| MessageQueue::new("T", "b", i)).collect();
/// let members: Vec<ClientId> = ["c0", "c1"].into_iter().map(ClientId::from).collect();
/// let plan = Averagely.plan("G", &queues, &members).unwrap();
/// let sizes: Vec<usize> = plan.iter().map(|(_, share)| share.len()).collect();
/// assert_eq!(sizes, [3, 2]);
/// assert_eq!(plan.share("c1").unwrap().to_vec(), queues[3..].to_vec());
/// ```
#[derive(Clone)]
pub struct Plan<'a> {
    pool: Cow<'a, [MessageQueue]>,
    /// How many leading pool entries are the input `mq_all`, position for position.
    base_len: usize,
    shares: Vec<(ClientId, Vec<u32>)>,
}

impl<'a> Plan<'a> {
    /// A plan whose positions refer to `mq_all` itself.
    pub fn over_input(mq_all: &'a [MessageQueue], shares: Vec<(ClientId, Vec<u32>)>) -> Self {
        Self {
            pool: Cow::Borrowed(mq_all),
            base_len: mq_all.len(),
            shares,
        }
    }

    /// A plan whose positions refer to a pool of the strategy's own, unrelated to the input.
    pub fn over_pool(pool: Cow<'a, [MessageQueue]>, shares: Vec<(ClientId, Vec<u32>)>) -> Self {
        Self {
            pool,
            base_len: 0,
            shares,
        }
    }

    /// Builds a plan from explicit queue lists (what a strategy's `allocate` returns), mapping
    /// queues of `mq_all` to positions and keeping any other queue in an extra pool.
    pub fn from_lists(
        mq_all: &'a [MessageQueue],
        lists: impl IntoIterator<Item = (ClientId, Vec<MessageQueue>)>,
    ) -> Self {
        let mut interner = Interner::new(mq_all);
        let shares = lists
            .into_iter()
            .map(|(cid, queues)| {
                let share = queues.iter().map(|mq| interner.position(mq)).collect();
                (cid, share)
            })
            .collect();
        interner.finish(shares)
    }

    /// The number of members in the plan.
    pub fn len(&self) -> usize {
        self.shares.len()
    }

    /// Whether the plan has no member.
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// The members and their shares, in the order the members first appear in `cid_all`.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&ClientId, Share<'_>)> + '_ {
        self.shares.iter().map(|(cid, positions)| {
            (
                cid,
                Share {
                    pool: &self.pool,
                    positions,
                },
            )
        })
    }

    /// One member's share (a linear search over the members).
    pub fn share(&self, cid: &str) -> Option<Share<'_>> {
        self.iter().find(|(c, _)| c.as_str() == cid).map(|(_, s)| s)
    }

    /// The members and their shares as owned lists.
    pub fn to_lists(&self) -> Vec<(ClientId, Vec<MessageQueue>)> {
        self.iter()
            .map(|(cid, share)| (cid.clone(), share.to_vec()))
            .collect()
    }

    /// How many queues the plan hands out in all (a queue given to two members counts twice).
    pub fn assigned_count(&self) -> usize {
        self.shares.iter().map(|(_, s)| s.len()).sum()
    }

    pub(crate) fn base_len(&self) -> usize {
        self.base_len
    }

    pub(crate) fn pool(&self) -> &[MessageQueue] {
        &self.pool
    }

    pub(crate) fn positions(&self) -> impl Iterator<Item = (&ClientId, &[u32])> {
        self.shares.iter().map(|(c, p)| (c, p.as_slice()))
    }

    /// The same pool with other shares (used by wrappers that filter members).
    pub(crate) fn with_shares(self, shares: Vec<(ClientId, Vec<u32>)>) -> Self {
        Self { shares, ..self }
    }

    /// Takes the shares out, by member.
    pub(crate) fn take_shares(&mut self) -> Vec<(ClientId, Vec<u32>)> {
        std::mem::take(&mut self.shares)
    }
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(cid, share)| (cid, share.to_vec())))
            .finish()
    }
}

/// One member's share within a [`Plan`].
#[derive(Clone, Copy)]
pub struct Share<'p> {
    pool: &'p [MessageQueue],
    positions: &'p [u32],
}

impl<'p> Share<'p> {
    /// The number of queues.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether the share is empty.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The queues, in the strategy's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'p MessageQueue> + 'p {
        let pool = self.pool;
        self.positions.iter().map(move |&p| &pool[p as usize])
    }

    /// The queues as an owned list.
    pub fn to_vec(&self) -> Vec<MessageQueue> {
        self.iter().cloned().collect()
    }
}

impl fmt::Debug for Share<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Maps queues to pool positions: queues of the input by their (first) position, any other queue
/// to an extra entry after the input.
pub(crate) struct Interner<'a> {
    base: &'a [MessageQueue],
    index: Option<HashMap<&'a MessageQueue, u32>>,
    extras: Vec<MessageQueue>,
    extra_index: HashMap<MessageQueue, u32>,
}

impl<'a> Interner<'a> {
    pub(crate) fn new(base: &'a [MessageQueue]) -> Self {
        Self {
            base,
            index: None,
            extras: Vec::new(),
            extra_index: HashMap::new(),
        }
    }

    pub(crate) fn position(&mut self, mq: &MessageQueue) -> u32 {
        let base = self.base;
        let index = self.index.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity(base.len());
            for (i, q) in base.iter().enumerate() {
                map.entry(q).or_insert(i as u32);
            }
            map
        });
        if let Some(&p) = index.get(mq) {
            return p;
        }
        let next = (base.len() + self.extras.len()) as u32;
        *self.extra_index.entry(mq.clone()).or_insert_with(|| {
            self.extras.push(mq.clone());
            next
        })
    }

    /// Translates positions of a plan computed over a sub-list (`local_to_base[i]` = the input
    /// position of the sub-list's entry `i`) into positions of the input.
    pub(crate) fn translate(
        &mut self,
        plan: &Plan<'_>,
        local_to_base: &[u32],
        positions: &[u32],
    ) -> Vec<u32> {
        positions
            .iter()
            .map(|&p| {
                let p = p as usize;
                if p < plan.base_len() {
                    local_to_base[p]
                } else {
                    self.position(&plan.pool()[p])
                }
            })
            .collect()
    }

    pub(crate) fn finish(self, shares: Vec<(ClientId, Vec<u32>)>) -> Plan<'a> {
        if self.extras.is_empty() {
            return Plan::over_input(self.base, shares);
        }
        let mut pool = self.base.to_vec();
        pool.extend(self.extras);
        Plan {
            pool: Cow::Owned(pool),
            base_len: self.base.len(),
            shares,
        }
    }
}

/// The distinct members of `cid_all` with the position of their first occurrence, optionally
/// without the empty id.
pub(crate) fn distinct_members(cid_all: &[ClientId], skip_empty: bool) -> Vec<(usize, &ClientId)> {
    let keep = |c: &ClientId| !(skip_empty && c.is_empty());
    // Sorted input (the normal case) is distinct when strictly increasing in any total order.
    if cid_all.windows(2).all(|w| w[0].as_str() < w[1].as_str()) {
        return cid_all
            .iter()
            .enumerate()
            .filter(|(_, c)| keep(c))
            .collect();
    }
    let mut seen = HashSet::with_capacity(cid_all.len());
    cid_all
        .iter()
        .enumerate()
        .filter(|(_, c)| seen.insert(c.as_str()) && keep(c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mqs(n: i32) -> Vec<MessageQueue> {
        (0..n).map(|i| MessageQueue::new("T", "b", i)).collect()
    }

    #[test]
    fn debug_shows_each_member_with_its_queues() {
        let base = mqs(3);
        let plan = Plan::over_input(
            &base,
            vec![
                (ClientId::from("a"), vec![2, 0]),
                (ClientId::from("b"), vec![]),
            ],
        );
        let a = vec![base[2].clone(), base[0].clone()];
        assert_eq!(format!("{:?}", plan.share("a").unwrap()), format!("{a:?}"));
        assert_eq!(
            format!("{plan:?}"),
            format!(
                "{{{:?}: {a:?}, {:?}: []}}",
                ClientId::from("a"),
                ClientId::from("b")
            )
        );
    }

    #[test]
    fn from_lists_keeps_foreign_queues() {
        let base = mqs(3);
        let foreign = MessageQueue::new("Other", "x", 7);
        let second = MessageQueue::new("Other", "x", 8);
        let lists = [
            (ClientId::from("a"), vec![base[2].clone(), foreign.clone()]),
            (
                ClientId::from("b"),
                vec![foreign.clone(), base[0].clone(), second.clone()],
            ),
            (ClientId::from("c"), vec![second, foreign]),
        ];
        let plan = Plan::from_lists(&base, lists.clone());
        assert_eq!(plan.share("b").unwrap().to_vec(), lists[1].1);
        assert_eq!(plan.assigned_count(), 7);
        assert_eq!((plan.len(), plan.is_empty()), (3, false));
        assert_eq!(plan.to_lists(), lists);
        let empty = Plan::from_lists(&base, []);
        assert!(empty.is_empty() && empty.to_lists().is_empty());
    }

    #[test]
    fn distinct_members_keep_first_positions() {
        let ids: Vec<ClientId> = ["b", "a", "b", "", "c"]
            .into_iter()
            .map(ClientId::from)
            .collect();
        let got: Vec<(usize, &str)> = distinct_members(&ids, true)
            .into_iter()
            .map(|(i, c)| (i, c.as_str()))
            .collect();
        assert_eq!(got, [(0, "b"), (1, "a"), (4, "c")]);
        assert_eq!(distinct_members(&ids, false).len(), 4);
    }

    proptest::proptest! {
        /// The shortcut for strictly increasing (sorted, distinct) input gives what the general
        /// path gives: each id once, at its first position, the empty one left out on request.
        #[test]
        fn distinct_members_agree_with_a_plain_scan(
            names in proptest::collection::vec("[ab]{0,2}", 0..6),
            sorted in proptest::bool::ANY,
            skip_empty in proptest::bool::ANY,
        ) {
            let mut ids: Vec<ClientId> = names.into_iter().map(ClientId::from).collect();
            if sorted {
                ids.sort();
            }
            let expected: Vec<(usize, &str)> = ids
                .iter()
                .enumerate()
                .filter(|&(i, id)| !ids[..i].contains(id))
                .filter(|(_, id)| !(skip_empty && id.is_empty()))
                .map(|(i, id)| (i, id.as_str()))
                .collect();
            let got: Vec<(usize, &str)> = distinct_members(&ids, skip_empty)
                .into_iter()
                .map(|(i, c)| (i, c.as_str()))
                .collect();
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn sorted_members_with_a_repeat_are_still_distinct() {
        // The usual input is sorted, where a repeated id sits right after itself.
        let ids: Vec<ClientId> = ["a", "a", "b", "c", "c"]
            .into_iter()
            .map(ClientId::from)
            .collect();
        let got: Vec<(usize, &str)> = distinct_members(&ids, false)
            .into_iter()
            .map(|(i, c)| (i, c.as_str()))
            .collect();
        assert_eq!(got, [(0, "a"), (2, "b"), (3, "c")]);
    }
}
