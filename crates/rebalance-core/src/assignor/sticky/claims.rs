//! Who owns what: every member's owned partitions checked against each other.
//!
//! A partition listed by several members goes to the member with the highest generation; when
//! the highest generation is shared, nobody's claim is valid and the partition is free (Kafka's
//! rule). Listings of partitions that do not exist (unknown topic, number out of range) are
//! ignored: such a partition cannot be consumed, so it is never handed back (Kafka keeps an
//! out-of-range partition in its general path and fails in its constrained path).

use crate::assignor::layout::{Layout, NONE};

/// The claim marker for a partition whose newest claim is shared by several members.
pub(super) const CONFLICT: u32 = NONE - 1;

/// Entries of the direct-mapped cache of topic string addresses.
const RECENT_TOPICS: usize = 4096;

/// What is known about one partition's claims. Kept together so that resolving a million owned
/// partitions touches one cache line per partition, not three.
#[derive(Clone, Copy)]
struct Claim {
    /// The member with the unique newest claim, [`CONFLICT`], or [`NONE`].
    claimant: u32,
    /// The newest generation seen.
    best: i32,
    /// How many members list it (saturating at 2).
    listers: u8,
}

pub(super) struct Claims {
    per_partition: Vec<Claim>,
    /// Per member: `(topic, partition)` pairs it lists, in `owned[off[m]..off[m + 1]]`.
    off: Vec<u32>,
    owned: Vec<(u32, u32)>,
}

impl Claims {
    pub fn resolve(layout: &Layout<'_>) -> Claims {
        let total = layout.total() as usize;
        let mut per_partition = vec![
            Claim {
                claimant: NONE,
                best: 0,
                listers: 0,
            };
            total
        ];
        let members = layout.members();
        let mut off = Vec::with_capacity(members.len() + 1);
        off.push(0);
        let mut owned = Vec::with_capacity(members.iter().map(|m| m.owned.len()).sum());
        // Owned lists name a topic many times, usually through a few shared strings: remember
        // the index of recently seen string addresses (a miss falls back to the layout, which
        // looks up by address, then by name).
        let mut recent = vec![(0usize, NONE); RECENT_TOPICS];
        for (m, sub) in members.iter().enumerate() {
            let m = m as u32;
            let generation = sub.generation.unwrap_or(-1);
            for tp in &sub.owned {
                let addr = tp.topic.addr();
                let slot = &mut recent[(addr >> 4) % RECENT_TOPICS];
                let t = if slot.0 == addr && addr != 0 {
                    Some(slot.1).filter(|&t| t != NONE)
                } else {
                    let t = layout.topic_index(&tp.topic);
                    *slot = (addr, t.unwrap_or(NONE));
                    t
                };
                let Some(t) = t else { continue };
                let Some(g) = layout.global(t, tp.partition) else {
                    continue;
                };
                let c = &mut per_partition[g as usize];
                if c.claimant == m {
                    continue; // listed twice by the same member
                }
                owned.push((t, g));
                c.listers = c.listers.saturating_add(1).min(2);
                if c.claimant == NONE || generation > c.best {
                    c.claimant = m;
                    c.best = generation;
                } else if generation == c.best {
                    c.claimant = CONFLICT;
                }
            }
            off.push(owned.len() as u32);
        }
        Claims {
            per_partition,
            off,
            owned,
        }
    }

    /// The member with the unique newest claim on `g`, [`CONFLICT`], or [`NONE`].
    pub fn claimant(&self, g: u32) -> u32 {
        self.per_partition[g as usize].claimant
    }

    /// The `(topic, partition)` pairs member `m` lists.
    pub fn owned_by(&self, m: u32) -> &[(u32, u32)] {
        &self.owned[self.off[m as usize] as usize..self.off[m as usize + 1] as usize]
    }

    /// Whether `m` holds the valid claim on `g`.
    pub fn is_owner(&self, g: u32, m: u32) -> bool {
        self.claimant(g) == m
    }

    /// Whether moving `g` away from its listers costs a revocation that could be avoided: it is
    /// listed by exactly one member. A partition listed by several members counts as moved
    /// whoever gets it.
    pub fn costly(&self, g: u32) -> bool {
        self.per_partition[g as usize].listers == 1
    }

    /// Whether giving `g` to `m` must wait for another member to revoke it (cooperative): some
    /// member lists it, and `m` does not hold the valid claim.
    pub fn must_wait(&self, g: u32, m: u32) -> bool {
        let c = &self.per_partition[g as usize];
        c.listers > 0 && c.claimant != m
    }
}
