//! Handing free partitions to members with room, keeping what can be kept.

use std::collections::{HashMap, VecDeque};

use super::Ctx;
use super::claims::CONFLICT;
use crate::assignor::layout::NONE;

/// A member with room for `want` more partitions.
pub(super) struct Slot {
    pub member: u32,
    pub want: u32,
}

/// Gives every `(topic, partition)` of `free` to a slot with room, in this order of preference:
/// back to the partition's claimant, else to its `previous_owner` (an older generation's member
/// that lost it; both when not on the wrong rack), to a member on a rack hosting it (rack-aware
/// mode), back to its claimant anyway, then round robin over the slots in their order. The
/// slots' total room must equal `free.len()`.
///
/// `slot_of` is scratch space indexed by member, all [`NONE`] on entry and on return.
pub(super) fn place(
    ctx: &Ctx<'_>,
    free: &[(u32, u32)],
    slots: &mut [Slot],
    slot_of: &mut [u32],
    owner: &mut [u32],
    previous_owner: impl Fn(u32) -> Option<u32>,
) {
    for (i, s) in slots.iter().enumerate() {
        slot_of[s.member as usize] = i as u32;
    }
    let with_room = |m: u32, slots: &[Slot], slot_of: &[u32]| -> Option<usize> {
        let i = slot_of[m as usize];
        (i != NONE && slots[i as usize].want > 0).then_some(i as usize)
    };
    let claimant_slot = |g: u32, slots: &[Slot], slot_of: &[u32]| -> Option<usize> {
        let m = ctx.claims.claimant(g);
        (m < CONFLICT).then(|| with_room(m, slots, slot_of))?
    };
    let mut give = |i: usize, g: u32, slots: &mut [Slot]| {
        owner[g as usize] = slots[i].member;
        slots[i].want -= 1;
    };

    // 1. Home, where the claimant may keep it, or back to its previous owner.
    let mut left = Vec::with_capacity(free.len());
    for &(t, g) in free {
        let home = [Some(ctx.claims.claimant(g)), previous_owner(g)]
            .into_iter()
            .flatten()
            .filter(|&m| m < CONFLICT)
            .filter_map(|m| with_room(m, slots, slot_of))
            .find(|&i| !ctx.rack_mismatch(g, t, slots[i].member));
        match home {
            Some(i) => give(i, g, slots),
            None => left.push((t, g)),
        }
    }
    // 2. Rack-local.
    if let Some(racks) = &ctx.racks {
        let mut queues: HashMap<u32, VecDeque<usize>> = HashMap::new();
        for (i, s) in slots.iter().enumerate() {
            if let (true, Some(r)) = (s.want > 0, racks.member[s.member as usize]) {
                queues.entry(r).or_default().push_back(i);
            }
        }
        if !queues.is_empty() {
            let mut rest = Vec::with_capacity(left.len());
            'partitions: for &(t, g) in &left {
                for r in racks.of(g) {
                    let Some(queue) = queues.get_mut(r) else {
                        continue;
                    };
                    while let Some(i) = queue.pop_front() {
                        if slots[i].want == 0 {
                            continue;
                        }
                        give(i, g, slots);
                        if slots[i].want > 0 {
                            queue.push_back(i);
                        }
                        continue 'partitions;
                    }
                }
                rest.push((t, g));
            }
            left = rest;
        }
    }
    // 3. Home anyway (a partition given up for its rack that no local member could take).
    let mut rest = Vec::with_capacity(left.len());
    for &(t, g) in &left {
        match claimant_slot(g, slots, slot_of) {
            Some(i) => give(i, g, slots),
            None => rest.push((t, g)),
        }
    }
    // 4. Round robin.
    let mut ring: VecDeque<usize> = (0..slots.len()).filter(|&i| slots[i].want > 0).collect();
    for &(_, g) in &rest {
        let Some(i) = ring.pop_front() else {
            debug_assert!(false, "more free partitions than room");
            break;
        };
        give(i, g, slots);
        if slots[i].want > 0 {
            ring.push_back(i);
        }
    }
    for s in slots.iter() {
        slot_of[s.member as usize] = NONE;
    }
}
