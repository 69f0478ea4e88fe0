//! The members' ring and their order for the extra queue: everything that depends on the member
//! list alone, so it can be kept between rounds.

use super::hashing::{member_point, member_rank, member_seed};
use crate::ClientId;

/// `virtual_nodes` points per member on a 64-bit ring, and the capacity order.
#[derive(Debug)]
pub(crate) struct Ring {
    /// Point positions, ascending (ties by member index).
    pub positions: Vec<u64>,
    /// The member index of each point.
    pub owners: Vec<u32>,
    /// `starts[b]` is the first point whose position's top `bucket_bits` bits are `>= b`: a
    /// lookup reads one small slice instead of binary-searching the whole ring.
    starts: Vec<u32>,
    bucket_bits: u32,
    /// Member indices in the order that takes the queues left over after whole shares: by
    /// [`member_rank`], then by id (Java order) for the astronomically unlikely tie.
    pub rank_order: Vec<u32>,
}

impl Ring {
    /// Builds the ring of `members` (distinct, non-empty ids).
    pub fn build(members: &[ClientId], virtual_nodes: usize) -> Self {
        let seeds: Vec<u64> = members.iter().map(member_seed).collect();
        let points: Vec<(u64, u32)> = seeds
            .iter()
            .enumerate()
            .flat_map(|(i, &seed)| {
                (0..virtual_nodes as u64).map(move |k| (member_point(seed, k), i as u32))
            })
            .collect();
        // Counting sort into buckets of about two points by the top bits, then each bucket on
        // its own: no comparison sort runs over the whole ring.
        let sort_bits = bits_for(points.len() / 2);
        let mut next = vec![0u32; (1 << sort_bits) + 1];
        for &(p, _) in &points {
            next[(p >> (64 - sort_bits)) as usize + 1] += 1;
        }
        for b in 1..next.len() {
            next[b] += next[b - 1];
        }
        let bucket_starts = next.clone();
        let mut sorted = vec![(0u64, 0u32); points.len()];
        for &(p, m) in &points {
            let slot = &mut next[(p >> (64 - sort_bits)) as usize];
            sorted[*slot as usize] = (p, m);
            *slot += 1;
        }
        for w in bucket_starts.windows(2) {
            if w[1] - w[0] > 1 {
                sorted[w[0] as usize..w[1] as usize].sort_unstable();
            }
        }
        let positions: Vec<u64> = sorted.iter().map(|&(p, _)| p).collect();
        let owners: Vec<u32> = sorted.iter().map(|&(_, m)| m).collect();
        // The lookup index: about 16 points (two cache lines) per bucket, so that it stays
        // small enough to remain in cache.
        let bucket_bits = bits_for(positions.len() / 16);
        let mut starts = Vec::with_capacity((1 << bucket_bits) + 1);
        let mut at = 0usize;
        for b in 0..=(1u64 << bucket_bits) {
            while at < positions.len() && (positions[at] >> (64 - bucket_bits)) < b {
                at += 1;
            }
            starts.push(at as u32);
        }
        let mut rank_order: Vec<u32> = (0..members.len() as u32).collect();
        rank_order.sort_by(|&a, &b| {
            member_rank(seeds[a as usize])
                .cmp(&member_rank(seeds[b as usize]))
                .then_with(|| members[a as usize].cmp(&members[b as usize]))
        });
        Self {
            positions,
            owners,
            starts,
            bucket_bits,
            rank_order,
        }
    }

    /// The number of points.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// The index of the first point at or after `position`, wrapping to 0 past the last.
    pub fn first_at_or_after(&self, position: u64) -> usize {
        let b = (position >> (64 - self.bucket_bits)) as usize;
        let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        let i = lo + self.positions[lo..hi].partition_point(|&p| p < position);
        if i == self.positions.len() { 0 } else { i }
    }
}

/// Bits of a bucket number for about `n` buckets (1 to 24).
fn bits_for(n: usize) -> u32 {
    (usize::BITS - n.leading_zeros()).clamp(1, 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<ClientId> {
        names.iter().copied().map(ClientId::from).collect()
    }

    #[test]
    fn lookups_agree_with_a_binary_search_of_the_whole_ring() {
        let ring = Ring::build(&ids(&["a", "b", "c"]), 50);
        let mut probes: Vec<u64> = ring.positions.clone();
        probes.extend(ring.positions.iter().map(|p| p.wrapping_add(1)));
        probes.extend([0, 1, u64::MAX, u64::MAX / 2]);
        for p in probes {
            let expected = ring.positions.partition_point(|&x| x < p) % ring.len();
            assert_eq!(ring.first_at_or_after(p), expected, "position {p}");
        }
    }
}
