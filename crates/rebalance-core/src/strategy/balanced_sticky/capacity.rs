//! How many queues each member may take: the same number (within one) for everyone, or a number
//! in proportion to the members' weights.

/// Each member's capacity for `queues` queues, by member index. `rank_order` is the fixed order
/// in which members take the queues left over after the whole shares
/// ([`Ring::rank_order`](super::ring::Ring)); `weights[i]` is member `i`'s weight (`None`: all
/// the same). The capacities add up to `queues`, except with equal weights and fewer queues
/// than members (see below).
///
/// - **Equal weights:** `queues / N` each, plus one for the first `queues % N` members of
///   `rank_order`. With fewer queues than members every member may take one: nobody has to
///   hold any, so shares differ by at most one whoever ends up empty, and a member that comes or
///   goes then moves only its own queue.
/// - **Weights:** member `i`'s quota is `queues * w_i / W` (`W` the sum of the weights). It gets
///   the whole part, and the leftover queues go one each to the first members of `rank_order`
///   whose quota is not whole. So every capacity is the quota rounded down or up, and a member
///   of weight 0 takes nothing.
pub(crate) fn capacities(rank_order: &[u32], weights: Option<&[u32]>, queues: usize) -> Vec<u32> {
    let n = rank_order.len();
    let total: u128 = weights.map_or(0, |w| w.iter().map(|&x| u128::from(x)).sum());
    let weights = match weights {
        Some(w) if total > 0 && w.len() == n => w,
        _ => return equal(rank_order, queues),
    };
    let queues_wide = queues as u128;
    let mut caps: Vec<u32> = weights
        .iter()
        .map(|&w| (queues_wide * u128::from(w) / total) as u32)
        .collect();
    let mut left = queues.saturating_sub(caps.iter().map(|&c| c as usize).sum());
    for &m in rank_order {
        if left == 0 {
            break;
        }
        let m = m as usize;
        if !(queues_wide * u128::from(weights[m])).is_multiple_of(total) {
            caps[m] += 1;
            left -= 1;
        }
    }
    debug_assert_eq!(
        left, 0,
        "the quotas' fractions add up to the leftover queues"
    );
    caps
}

fn equal(rank_order: &[u32], queues: usize) -> Vec<u32> {
    let n = rank_order.len();
    if n == 0 {
        return Vec::new();
    }
    if queues < n {
        return vec![1; n];
    }
    let (base, extra) = ((queues / n) as u32, queues % n);
    let mut caps = vec![base; n];
    for &m in &rank_order[..extra] {
        caps[m as usize] += 1;
    }
    caps
}

#[cfg(test)]
mod tests {
    use super::super::ring::Ring;
    use super::*;
    use crate::ClientId;

    fn ids(names: &[&str]) -> Vec<ClientId> {
        names.iter().copied().map(ClientId::from).collect()
    }

    #[test]
    fn extra_queues_nest_as_members_come_and_go() {
        let all = ids(&["a", "b", "c", "d", "e", "f"]);
        let order = |members: &[ClientId]| Ring::build(members, 4).rank_order;
        assert_eq!(
            capacities(&order(&all), None, 4),
            [1; 6],
            "fewer queues than members: one each at most"
        );
        let caps = capacities(&order(&all), None, 8); // 6 members: base 1, two extras
        // 5 members: base 1, three extras.
        let without_first = capacities(&order(&all[1..]), None, 8);
        // Whoever has the extra queue among the remaining members had it before a member left,
        // whenever the base share stays the same.
        for (i, &cap) in caps.iter().enumerate().skip(1) {
            if cap == 2 {
                assert_eq!(without_first[i - 1], 2, "member {i} lost its extra");
            }
        }
        assert_eq!(caps.iter().sum::<u32>(), 8);
    }

    #[test]
    fn weighted_capacities_round_each_quota_down_or_up() {
        // Weights 0, 1, 2, 3 over 10 queues: quotas 0, 1.67, 3.33, 5.
        let order = [3, 1, 0, 2];
        let caps = capacities(&order, Some(&[0, 1, 2, 3]), 10);
        assert_eq!(caps.iter().sum::<u32>(), 10);
        assert_eq!(caps[0], 0, "weight 0 takes nothing");
        assert_eq!(caps[3], 5, "a whole quota gets no leftover queue");
        // One leftover queue: member 3 comes first in the order but its quota is whole, so the
        // next one, member 1, takes it.
        assert_eq!((caps[1], caps[2]), (2, 3));
    }

    #[test]
    fn equal_or_missing_weights_fall_back_to_equal_shares() {
        let order = [2, 0, 1];
        let equal_shares = capacities(&order, None, 7);
        assert_eq!(equal_shares, [2, 2, 3]);
        assert_eq!(capacities(&order, Some(&[0, 0, 0]), 7), equal_shares);
        assert_eq!(
            capacities(&order, Some(&[1, 2]), 7),
            equal_shares,
            "length mismatch"
        );
        // Weights near u32::MAX do not overflow: quotas 500,000, 500,000 and 0.0001.
        let caps = capacities(&order, Some(&[u32::MAX, u32::MAX, 1]), 1_000_000);
        assert_eq!(caps.iter().sum::<u32>(), 1_000_000);
        assert!(caps[2] <= 1 && caps[0].abs_diff(caps[1]) <= 1, "{caps:?}");
    }
}
