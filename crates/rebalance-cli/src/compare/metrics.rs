//! What the comparison measures: balance of a plan, and queues moved between two plans against
//! the fewest a balanced plan could move.

use std::collections::HashMap;

use rebalance_core::{ClientId, Plan};

/// Who owns each queue position of the topic (`None`: nobody).
pub type Owners = Vec<Option<ClientId>>;

/// The owner of every position of a plan computed over `queues` queues. A position given to two
/// members (which no partitioning strategy does) keeps the first.
pub fn owners(plan: &Plan<'_>, queues: &[rebalance_core::MessageQueue]) -> Owners {
    let index: HashMap<&rebalance_core::MessageQueue, usize> =
        queues.iter().enumerate().map(|(i, q)| (q, i)).collect();
    let mut owner: Owners = vec![None; queues.len()];
    for (cid, share) in plan.iter() {
        for mq in share.iter() {
            if let Some(&i) = index.get(mq) {
                owner[i].get_or_insert_with(|| cid.clone());
            }
        }
    }
    owner
}

/// The balance of a plan over `members`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Balance {
    /// Largest share minus smallest share.
    pub spread: usize,
    /// Largest share over the mean share.
    pub max_over_mean: f64,
}

/// The balance of `owners` among `members` (members owning nothing count as 0).
pub fn balance(owners: &Owners, members: &[ClientId]) -> Balance {
    let mut sizes: HashMap<&ClientId, usize> = members.iter().map(|c| (c, 0)).collect();
    for o in owners.iter().flatten() {
        if let Some(s) = sizes.get_mut(o) {
            *s += 1;
        }
    }
    let max = sizes.values().copied().max().unwrap_or(0);
    let min = sizes.values().copied().min().unwrap_or(0);
    let mean = owners.len() as f64 / members.len().max(1) as f64;
    Balance {
        spread: max - min,
        max_over_mean: if mean > 0.0 { max as f64 / mean } else { 0.0 },
    }
}

/// Positions whose owner changed.
pub fn moved(before: &Owners, after: &Owners) -> usize {
    before.iter().zip(after).filter(|(a, b)| a != b).count()
}

/// The fewest queues that any plan over `members` with shares within one of each other must
/// move from `before`: every queue of a member that is gone (or of nobody), plus, for the
/// remaining members, what they hold beyond their target when the larger targets go to the
/// members holding the most. For a leave this is the departed member's share (when the others
/// were balanced); for a join, `Q div (N+1)`.
pub fn min_moves(before: &Owners, members: &[ClientId]) -> usize {
    if members.is_empty() {
        return before.len();
    }
    let mut sizes: HashMap<&ClientId, usize> = members.iter().map(|c| (c, 0)).collect();
    let mut orphaned = 0;
    for o in before {
        match o.as_ref().and_then(|o| sizes.get_mut(o)) {
            Some(s) => *s += 1,
            None => orphaned += 1,
        }
    }
    let mut sizes: Vec<usize> = sizes.into_values().collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let (base, extra) = (before.len() / members.len(), before.len() % members.len());
    orphaned
        + sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| s.saturating_sub(base + usize::from(i < extra)))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<ClientId> {
        (0..n).map(|i| ClientId::from(format!("c{i}"))).collect()
    }

    fn owned(ids: &[ClientId], pattern: &[usize]) -> Owners {
        pattern.iter().map(|&i| Some(ids[i].clone())).collect()
    }

    #[test]
    fn a_leave_must_move_the_departed_share() {
        let all = ids(3);
        let before = owned(&all, &[0, 0, 1, 1, 2, 2]);
        assert_eq!(min_moves(&before, &all[..2]), 2);
        assert_eq!(min_moves(&before, &all), 0);
    }

    #[test]
    fn a_join_must_move_the_joiners_floor() {
        let all = ids(3);
        let before = owned(&all, &[0, 0, 0, 1, 1, 1, 1]);
        // c2 just joined. 7 queues over 3: targets 3, 2, 2, the 3 for c1 (who holds the most):
        // c1 gives up 1 and c0 gives up 1, so the joiner gets floor(7/3) = 2.
        assert_eq!(min_moves(&before, &all), 2);
    }

    #[test]
    fn balance_and_moves() {
        let all = ids(2);
        let a = owned(&all, &[0, 0, 0, 1]);
        let b = owned(&all, &[0, 1, 0, 1]);
        assert_eq!(moved(&a, &b), 1);
        let bal = balance(&a, &all);
        assert_eq!(bal.spread, 2);
        assert_eq!(bal.max_over_mean, 1.5);
        assert_eq!(balance(&b, &all).spread, 0);
        // No queues: a ratio of 0, not the NaN that JSON cannot carry.
        assert_eq!(balance(&Vec::new(), &all).max_over_mean, 0.0);
    }
}
