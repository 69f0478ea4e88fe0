//! Identical subscriptions: fixed quotas, owned partitions kept up to them.

use std::cmp::Reverse;

use super::Ctx;
use super::place::{Slot, place};
use crate::assignor::layout::NONE;

/// Every active member subscribes to every topic. Sizes end at `P div N` or one more, exactly
/// `P mod N` members at the larger size, chosen among those that would otherwise give up owned
/// partitions; members give up the partitions other members also list first. The number of
/// owned partitions that change hands is the minimum any balanced result allows.
pub(super) fn assign(ctx: &Ctx<'_>, owner: &mut [u32]) {
    let active = &ctx.active;
    let n = active.len() as u32;
    if n == 0 {
        return;
    }
    let total = ctx.layout.total();
    let (min_quota, extras) = (total / n, total % n);
    let max_quota = min_quota + u32::from(extras > 0);
    let keepable =
        |m: u32, t: u32, g: u32| ctx.claims.is_owner(g, m) && !ctx.rack_mismatch(g, t, m);

    // How much each member could keep, and how much of that only it lists.
    let mut keep = vec![0u32; active.len()];
    let mut costly = vec![0u32; active.len()];
    for (i, &m) in active.iter().enumerate() {
        for &(t, g) in ctx.claims.owned_by(m) {
            if keepable(m, t, g) {
                keep[i] += 1;
                costly[i] += u32::from(ctx.claims.costly(g));
            }
        }
    }
    // The extra slots: first to members that would give up a partition only they list, then to
    // those that would give up any owned partition, then by member id (`active` is in id order).
    let mut by_need: Vec<usize> = (0..active.len()).collect();
    by_need.sort_by_key(|&i| {
        (
            Reverse(costly[i] >= max_quota),
            Reverse(keep[i].min(max_quota)),
        )
    });
    let mut quota = vec![min_quota; active.len()];
    for &i in by_need.iter().take(extras as usize) {
        quota[i] = max_quota;
    }

    let mut slots = Vec::with_capacity(active.len());
    let mut shed = 0usize;
    let mut candidates: Vec<(bool, u32)> = Vec::new();
    for (i, &m) in active.iter().enumerate() {
        let owned = ctx.claims.owned_by(m);
        if keep[i] <= quota[i] {
            for &(t, g) in owned {
                if keepable(m, t, g) {
                    owner[g as usize] = m;
                }
            }
        } else {
            // Keep the partitions only this member lists first, lowest numbers first.
            candidates.clear();
            candidates.extend(
                owned
                    .iter()
                    .filter(|&&(t, g)| keepable(m, t, g))
                    .map(|&(_, g)| (!ctx.claims.costly(g), g)),
            );
            candidates.sort_unstable();
            for &(_, g) in &candidates[..quota[i] as usize] {
                owner[g as usize] = m;
            }
            shed += (keep[i] - quota[i]) as usize;
        }
        let kept = keep[i].min(quota[i]);
        slots.push(Slot {
            member: m,
            want: quota[i] - kept,
        });
    }

    let layout = &ctx.layout;
    let mut free = Vec::new();
    for t in 0..layout.topic_count() {
        for g in layout.offsets[t]..layout.offsets[t + 1] {
            if owner[g as usize] == NONE {
                free.push((t as u32, g));
            }
        }
    }
    tracing::trace!(
        min_quota,
        max_quota,
        extras,
        shed,
        free = free.len(),
        "constrained quotas"
    );
    let mut slot_of = vec![NONE; layout.members().len()];
    place(ctx, &free, &mut slots, &mut slot_of, owner, |_| None);
}
