//! Kafka's previous-owner rule (`prevAssignment`), reduced to what the count-based balance needs.
//!
//! Kafka remembers, for each partition listed by a member whose generation is below the group's
//! highest, that member as the partition's *previous owner* (the highest such generation wins;
//! Kafka breaks ties by hash order, this module by member id).
//! While the group is not balanced, a partition held by a member with at least two more
//! partitions than its previous owner goes back to that owner, whether or not the owner still
//! subscribes to its topic. Here the partitions a previous owner lost are counted per (owner,
//! topic) as *debts*; the balance loop settles a debt with a valid move towards the owner (see
//! `general::pull`). When partitions are finally chosen, an owed partition goes back to its
//! previous owner whenever that member has room for one of its topic, as Kafka's rule moves that
//! very partition (see `place`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Ctx;

/// Partitions of `topic` whose previous owner `member` does not hold them.
struct Debt {
    member: u32,
    topic: u32,
    remaining: u32,
}

/// Per topic, its debtors by (load, member id); an entry names a debt and is skipped when the
/// debtor's load has changed since or the debt is settled.
type Heap = BinaryHeap<Reverse<(u32, u32, u32)>>;

pub(super) struct Debts {
    /// Sorted by (member, topic).
    debts: Vec<Debt>,
    /// `debts[of_member[m]..of_member[m + 1]]` are member `m`'s.
    of_member: Vec<u32>,
    /// Per topic, the members owed one of its partitions.
    by_topic: Vec<Heap>,
    /// Members whose debts could not be settled in the current pass, stamped with the pass.
    failed: Vec<u32>,
    pass: u32,
    /// Partitions still owed, over all debts.
    left: u64,
    /// `(partition, previous owner)` for every partition owed, by partition.
    owners: Vec<(u32, u32)>,
}

impl Debts {
    /// The debts of every active member with an older generation: the existing partitions it
    /// lists, of which it is the previous owner, and that it does not hold (`holds(m, t, g)`)
    /// after keeping what it may. `None` when there are none (always the case when every member
    /// reports the same generation).
    pub fn find(
        ctx: &Ctx<'_>,
        holds: impl Fn(u32, u32, u32) -> bool,
        load: &[u32],
    ) -> Option<Debts> {
        let members = ctx.layout.members();
        let generation = |m: usize| members[m].generation.unwrap_or(-1);
        let newest = (0..members.len()).map(generation).max()?;
        // (partition, newest generation first, member id, member, topic)
        let mut listed: Vec<(u32, Reverse<i32>, u32, u32, u32)> = Vec::new();
        for m in 0..members.len() {
            if generation(m) < newest {
                let (rank, newer) = (ctx.rank[m], Reverse(generation(m)));
                listed.extend(
                    ctx.claims
                        .owned_by(m as u32)
                        .iter()
                        .map(|&(t, g)| (g, newer, rank, m as u32, t)),
                );
            }
        }
        if listed.is_empty() {
            return None;
        }
        listed.sort_unstable();
        listed.dedup_by_key(|&mut (g, ..)| g);
        let subscribed = |m: u32| !ctx.layout.subscription(m as usize).is_empty();
        listed.retain(|&(g, _, _, m, t)| subscribed(m) && !holds(m, t, g));
        if listed.is_empty() {
            return None;
        }
        let owners = listed.iter().map(|&(g, _, _, m, _)| (g, m)).collect();
        let mut owed: Vec<(u32, u32)> = listed.into_iter().map(|(_, _, _, m, t)| (m, t)).collect();
        owed.sort_unstable();
        let mut debts: Vec<Debt> = Vec::new();
        for (member, topic) in owed {
            match debts.last_mut() {
                Some(d) if (d.member, d.topic) == (member, topic) => d.remaining += 1,
                _ => debts.push(Debt {
                    member,
                    topic,
                    remaining: 1,
                }),
            }
        }
        let mut of_member = vec![0u32; members.len() + 1];
        for d in &debts {
            of_member[d.member as usize + 1] += 1;
        }
        for m in 0..members.len() {
            of_member[m + 1] += of_member[m];
        }
        let mut debtors: Vec<u32> = debts.iter().map(|d| d.member).collect();
        debtors.dedup();
        let left = debts.iter().map(|d| u64::from(d.remaining)).sum();
        tracing::trace!(
            debtors = debtors.len(),
            partitions = left,
            "previous owners that lost partitions"
        );
        let mut this = Debts {
            debts,
            of_member,
            by_topic: (0..ctx.layout.topic_count()).map(|_| Heap::new()).collect(),
            failed: vec![0; members.len()],
            pass: 1,
            left,
            owners,
        };
        for m in debtors {
            this.loaded(ctx, m, load);
        }
        Some(this)
    }

    /// The previous owner of partition `g`, when it lost it.
    pub fn previous_owner(&self, g: u32) -> Option<u32> {
        let i = self.owners.binary_search_by_key(&g, |&(g, _)| g).ok()?;
        Some(self.owners[i].1)
    }

    /// Whether any debt is left.
    pub fn any(&self) -> bool {
        self.left > 0
    }

    /// Starts a balance pass: members that failed before may be tried again.
    pub fn new_pass(&mut self) {
        self.pass += 1;
    }

    /// Records member `m`'s new load.
    pub fn loaded(&mut self, ctx: &Ctx<'_>, m: u32, load: &[u32]) {
        let (s, e) = (
            self.of_member[m as usize] as usize,
            self.of_member[m as usize + 1] as usize,
        );
        for i in s..e {
            let d = &self.debts[i];
            if d.remaining > 0 {
                self.by_topic[d.topic as usize].push(Reverse((
                    load[m as usize],
                    ctx.rank[m as usize],
                    i as u32,
                )));
            }
        }
    }

    /// The least-loaded member owed a partition of `t`, unless it already failed in this pass.
    pub fn lightest(&mut self, t: u32, load: &[u32]) -> Option<u32> {
        let heap = &mut self.by_topic[t as usize];
        while let Some(&Reverse((l, _, i))) = heap.peek() {
            let d = &self.debts[i as usize];
            if d.remaining > 0 && load[d.member as usize] == l {
                return (self.failed[d.member as usize] != self.pass).then_some(d.member);
            }
            heap.pop();
        }
        None
    }

    /// Member `m` got a partition in place of one of `t`'s it lost.
    pub fn settle(&mut self, m: u32, t: u32) {
        let (s, e) = (
            self.of_member[m as usize] as usize,
            self.of_member[m as usize + 1] as usize,
        );
        let Ok(i) = self.debts[s..e].binary_search_by_key(&t, |d| d.topic) else {
            debug_assert!(false, "no debt of {t} to {m}");
            return;
        };
        let d = &mut self.debts[s + i];
        if d.remaining > 0 {
            d.remaining -= 1;
            self.left -= 1;
        }
    }

    /// Nothing valid reaches member `m` now; do not try again in this pass.
    pub fn fail(&mut self, m: u32) {
        self.failed[m as usize] = self.pass;
    }
}
