//! The members' ring and their order for the extra queue: everything that depends on the member
//! list alone, so it can be kept between rounds.

use super::hashing::{member_point, member_rank, member_seed};
use crate::ClientId;

/// `virtual_nodes` points per member on a 64-bit ring, and the capacity order.
#[derive(Debug)]
pub(crate) struct Ring {
    /// `(position, member index)`, sorted.
    pub points: Vec<(u64, u32)>,
    /// Member indices in the order that takes the `Q mod N` extra queues: by
    /// [`member_rank`], then by id (Java order) for the astronomically unlikely tie.
    pub rank_order: Vec<u32>,
}

impl Ring {
    /// Builds the ring of `members` (distinct, non-empty ids).
    pub fn build(members: &[ClientId], virtual_nodes: usize) -> Self {
        let seeds: Vec<u64> = members.iter().map(member_seed).collect();
        let mut points = Vec::with_capacity(members.len() * virtual_nodes);
        for (i, &seed) in seeds.iter().enumerate() {
            points.extend((0..virtual_nodes as u64).map(|k| (member_point(seed, k), i as u32)));
        }
        points.sort_unstable();
        let mut rank_order: Vec<u32> = (0..members.len() as u32).collect();
        rank_order.sort_by(|&a, &b| {
            member_rank(seeds[a as usize])
                .cmp(&member_rank(seeds[b as usize]))
                .then_with(|| members[a as usize].cmp(&members[b as usize]))
        });
        Self { points, rank_order }
    }

    /// Each member's capacity for `queues` queues: `queues / N`, plus one for the first
    /// `queues % N` members of [`rank_order`](Self::rank_order).
    pub fn capacities(&self, queues: usize) -> Vec<u32> {
        let n = self.rank_order.len();
        if n == 0 {
            return Vec::new();
        }
        let (base, extra) = ((queues / n) as u32, queues % n);
        let mut caps = vec![base; n];
        for &m in &self.rank_order[..extra] {
            caps[m as usize] += 1;
        }
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<ClientId> {
        names.iter().copied().map(ClientId::from).collect()
    }

    #[test]
    fn extra_queues_nest_as_members_come_and_go() {
        let all = ids(&["a", "b", "c", "d", "e", "f"]);
        let ring = Ring::build(&all, 4);
        assert_eq!(ring.points.len(), 24);
        assert!(ring.points.windows(2).all(|w| w[0] <= w[1]));
        // Whoever has the extra queue among the remaining members had it before a member left,
        // whenever the base share stays the same.
        let caps = ring.capacities(8); // 6 members: base 1, two extras
        let without_first = Ring::build(&all[1..], 4).capacities(8); // 5 members: base 1, three extras
        for (i, &cap) in caps.iter().enumerate().skip(1) {
            if cap == 2 {
                assert_eq!(without_first[i - 1], 2, "member {i} lost its extra");
            }
        }
        assert_eq!(caps.iter().sum::<u32>(), 8);
    }
}
