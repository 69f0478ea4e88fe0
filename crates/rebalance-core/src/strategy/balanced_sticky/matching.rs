//! Deferred acceptance on the ring: the unique stable matching of queues to members.

use std::collections::BinaryHeap;

use super::ring::Ring;

/// A member's hold on a queue, ordered by how much the member wants it (smaller is better):
/// the clockwise distance from the queue to the member's point, then the queue's position.
type Claim = (u64, u32);

/// Assigns every queue (by its ring position `points[i]`, its first ring point `starts[i]`, see
/// [`first_points`]) to a member, each member `m` taking at
/// most `caps[m]` queues (the capacities must add up to at least the number of queues; when they
/// add up to exactly that, every member is full). Returns each member's queue positions,
/// ascending.
///
/// Queues propose in ring order (clockwise from their position, each member at its first point
/// after the queue); a full member keeps the closest queues and turns the farthest away, which
/// goes on walking. The result is the stable matching for the preference "closer is better" on
/// both sides, which is unique because both sides rank pairs by the same key
/// `(distance, queue, member)`.
pub(crate) fn assign(ring: &Ring, points: &[u64], starts: &[u32], caps: &[u32]) -> Vec<Vec<u32>> {
    let n = caps.len();
    // No member (every id in the list was empty): nobody to give anything to.
    if n == 0 || points.is_empty() || ring.len() == 0 {
        return vec![Vec::new(); n];
    }
    debug_assert!(
        caps.iter().map(|&c| c as usize).sum::<usize>() >= points.len(),
        "capacities must hold every queue"
    );
    let mut held: Vec<BinaryHeap<Claim>> = caps
        .iter()
        .map(|&c| BinaryHeap::with_capacity(c as usize + 1))
        .collect();
    let ring_len = ring.len();
    let mut cursor: Vec<u32> = starts.to_vec();
    // Queues still looking for a member, proposed last-in first-out (the result does not depend
    // on the order).
    let mut free: Vec<u32> = (0..points.len() as u32).rev().collect();
    while let Some(q) = free.pop() {
        let origin = points[q as usize];
        let mut at = cursor[q as usize] as usize;
        let mut placed = false;
        // Every queue finds a place within one turn: the capacities add up to the queues and
        // this one is not placed, so some member has room (members never lose a place once full).
        for _ in 0..ring_len {
            let (position, m) = (ring.positions[at], ring.owners[at]);
            at += 1;
            if at == ring_len {
                at = 0;
            }
            let claim = (position.wrapping_sub(origin), q);
            let heap = &mut held[m as usize];
            let cap = caps[m as usize] as usize;
            if heap.len() < cap {
                heap.push(claim);
                placed = true;
                break;
            }
            // A member seen again (a later point, or after being turned away) compares a larger
            // distance than its first point and turns the queue away again.
            if cap > 0 && heap.peek().is_some_and(|&worst| claim < worst) {
                heap.push(claim);
                if let Some((_, loser)) = heap.pop() {
                    free.push(loser);
                }
                placed = true;
                break;
            }
        }
        debug_assert!(placed, "queue {q} found no member within one turn");
        if !placed {
            tracing::error!(
                queue = q,
                "balanced_sticky: a queue found no member (a bug)"
            );
        }
        cursor[q as usize] = at as u32;
    }
    // Shares in queue order, without sorting each one.
    let mut owner = vec![u32::MAX; points.len()];
    for (m, heap) in held.iter().enumerate() {
        for &(_, q) in heap.iter() {
            owner[q as usize] = m as u32;
        }
    }
    let mut shares: Vec<Vec<u32>> = held.iter().map(|h| Vec::with_capacity(h.len())).collect();
    for (q, &m) in owner.iter().enumerate() {
        if let Some(share) = shares.get_mut(m as usize) {
            share.push(q as u32);
        }
    }
    shares
}

/// The ring point each queue starts its walk at: the first at or after its position.
pub(crate) fn first_points(ring: &Ring, points: &[u64]) -> Vec<u32> {
    if ring.len() == 0 {
        return vec![0; points.len()];
    }
    points
        .iter()
        .map(|&p| ring.first_at_or_after(p) as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientId;
    use proptest::prelude::*;

    /// Each member's distance from `origin`: clockwise to its first point at or after it.
    fn distances(ring: &Ring, origin: u64, members: usize) -> Vec<u64> {
        let mut d = vec![u64::MAX; members];
        for (&position, &m) in ring.positions.iter().zip(&ring.owners) {
            let m = m as usize;
            d[m] = d[m].min(position.wrapping_sub(origin));
        }
        d
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The module's promise, checked from its definition rather than from the walk: every
        /// queue is placed once, no member holds more than its capacity, and no queue and member
        /// would both rather be together (the queue prefers the closer member, ties by member
        /// index as on the ring; the member prefers the smaller claim `(distance, queue)`).
        #[test]
        fn the_matching_is_stable_and_within_capacities(
            n in 1usize..10,
            virtual_nodes in 1usize..5,
            points in prop::collection::vec(any::<u64>(), 1..50),
            rotation in 0usize..10,
        ) {
            let members: Vec<ClientId> = (0..n).map(|i| ClientId::from(format!("10.0.0.{i}@1"))).collect();
            let ring = Ring::build(&members, virtual_nodes);
            let q = points.len();
            let caps: Vec<u32> = if q < n {
                vec![1; n]
            } else {
                (0..n)
                    .map(|m| (q / n) as u32 + u32::from((m + rotation) % n < q % n))
                    .collect()
            };
            let shares = assign(&ring, &points, &first_points(&ring, &points), &caps);

            let mut owner = vec![None; q];
            for (m, share) in shares.iter().enumerate() {
                prop_assert!(share.len() <= caps[m] as usize, "member {m} over capacity");
                prop_assert!(share.windows(2).all(|w| w[0] < w[1]), "share not ascending");
                for &queue in share {
                    prop_assert!(owner[queue as usize].replace(m).is_none(), "queue {queue} placed twice");
                }
            }
            let owner: Vec<usize> = owner.into_iter().map(|o| o.expect("every queue placed")).collect();
            let dist: Vec<Vec<u64>> = points.iter().map(|&p| distances(&ring, p, n)).collect();
            for queue in 0..q {
                let m = owner[queue];
                for other in (0..n).filter(|&o| o != m) {
                    if (dist[queue][other], other) >= (dist[queue][m], m) {
                        continue; // the queue does not prefer `other`
                    }
                    let claim = (dist[queue][other], queue);
                    let held = &shares[other];
                    let full = held.len() == caps[other] as usize;
                    let all_better = held
                        .iter()
                        .all(|&h| (dist[h as usize][other], h as usize) < claim);
                    prop_assert!(
                        full && all_better,
                        "queue {queue} (held by {m}) and member {other} would both rather be together"
                    );
                }
            }
        }
    }
}
