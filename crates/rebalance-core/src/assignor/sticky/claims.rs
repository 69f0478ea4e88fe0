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

pub(super) struct Claims {
    /// Per partition: the member with the unique newest claim, [`CONFLICT`], or [`NONE`].
    pub claim: Vec<u32>,
    /// Per partition: how many members list it (saturating at 2).
    pub listers: Vec<u8>,
    /// Per member: `(topic, partition)` pairs it lists, in `owned[off[m]..off[m + 1]]`.
    off: Vec<u32>,
    owned: Vec<(u32, u32)>,
}

impl Claims {
    pub fn resolve(layout: &Layout<'_>) -> Claims {
        let total = layout.total() as usize;
        let mut claim = vec![NONE; total];
        let mut best = vec![0i32; total];
        let mut listers = vec![0u8; total];
        let members = layout.members();
        let mut off = Vec::with_capacity(members.len() + 1);
        off.push(0);
        let mut owned = Vec::with_capacity(members.iter().map(|m| m.owned.len()).sum());
        for (m, sub) in members.iter().enumerate() {
            let m = m as u32;
            let generation = sub.generation.unwrap_or(-1);
            // Owned lists come sorted by topic: look each topic up once.
            let mut last: Option<(&str, Option<u32>)> = None;
            for tp in &sub.owned {
                let t = match last {
                    Some((name, t))
                        if std::ptr::eq(name, tp.topic.as_str()) || name == tp.topic.as_str() =>
                    {
                        t
                    }
                    _ => {
                        let t = layout.topic_index(&tp.topic);
                        last = Some((tp.topic.as_str(), t));
                        t
                    }
                };
                let Some(t) = t else { continue };
                let Some(g) = layout.global(t, tp.partition) else {
                    continue;
                };
                let gi = g as usize;
                let current = claim[gi];
                if current == m {
                    continue; // listed twice by the same member
                }
                owned.push((t, g));
                listers[gi] = listers[gi].saturating_add(1).min(2);
                if current == NONE || generation > best[gi] {
                    claim[gi] = m;
                    best[gi] = generation;
                } else if generation == best[gi] {
                    claim[gi] = CONFLICT;
                }
            }
            off.push(owned.len() as u32);
        }
        Claims {
            claim,
            listers,
            off,
            owned,
        }
    }

    /// The `(topic, partition)` pairs member `m` lists.
    pub fn owned_by(&self, m: u32) -> &[(u32, u32)] {
        &self.owned[self.off[m as usize] as usize..self.off[m as usize + 1] as usize]
    }

    /// Whether `m` holds the valid claim on `g`.
    pub fn is_owner(&self, g: u32, m: u32) -> bool {
        self.claim[g as usize] == m
    }

    /// Whether moving `g` away from its listers costs a revocation that could be avoided: it is
    /// listed by exactly one member. A partition listed by several members counts as moved
    /// whoever gets it.
    pub fn costly(&self, g: u32) -> bool {
        self.listers[g as usize] == 1
    }

    /// Whether giving `g` to `m` must wait for another member to revoke it (cooperative): some
    /// member lists it, and `m` does not hold the valid claim.
    pub fn must_wait(&self, g: u32, m: u32) -> bool {
        self.listers[g as usize] > 0 && self.claim[g as usize] != m
    }
}
