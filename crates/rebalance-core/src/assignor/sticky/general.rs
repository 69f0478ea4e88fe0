//! Differing subscriptions: balance on per-(member, topic) counts, then pick the partitions.
//!
//! The state is one cell per subscription (member, topic) holding how many of the topic's
//! partitions the member gets, split by kind: owned and listed only by this member (`costly`:
//! moving one costs a revocation), owned but also listed by others (`cheap`: counted as moved
//! whoever gets it), not owned (`fresh`), and not owned but made up for a partition an older
//! generation of the member lost (`returned`: Kafka gave it back, so no chain passes it on until
//! the group is balanced in Kafka's sense; then it counts as fresh). Partitions are chosen only at
//! the end, so balancing never touches per-partition data.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Ctx;
use super::claims::CONFLICT;
use super::place::{Slot, place};
use super::previous::Debts;
use crate::assignor::layout::NONE;

#[derive(Clone, Copy, Default)]
struct Cell {
    costly: u32,
    cheap: u32,
    fresh: u32,
    returned: u32,
}

impl Cell {
    fn total(&self) -> u32 {
        self.costly + self.cheap + self.fresh + self.returned
    }
}

/// The subscriptions of the active members, indexed both ways.
struct Cells {
    /// `subs[sub_off[t]..sub_off[t + 1]]`: topic `t`'s subscribers in member-id order; the
    /// position in `subs` is also the cell's index.
    sub_off: Vec<u32>,
    subs: Vec<u32>,
    /// `by_member[range[m]]`: member `m`'s `(topic, cell)` pairs, by topic.
    range: Vec<(u32, u32)>,
    by_member: Vec<(u32, u32)>,
    cells: Vec<Cell>,
    load: Vec<u32>,
}

impl Cells {
    fn new(ctx: &Ctx<'_>) -> Cells {
        let layout = &ctx.layout;
        let topics = layout.topic_count();
        let mut sub_off = vec![0u32; topics + 1];
        for &m in &ctx.active {
            for &t in layout.subscription(m as usize) {
                sub_off[t as usize + 1] += 1;
            }
        }
        for t in 0..topics {
            sub_off[t + 1] += sub_off[t];
        }
        let edges = sub_off[topics] as usize;
        let mut fill = sub_off.clone();
        let mut subs = vec![0u32; edges];
        let mut range = vec![(0, 0); layout.members().len()];
        let mut by_member = Vec::with_capacity(edges);
        for &m in &ctx.active {
            let start = by_member.len() as u32;
            for &t in layout.subscription(m as usize) {
                let cell = fill[t as usize];
                fill[t as usize] += 1;
                subs[cell as usize] = m;
                by_member.push((t, cell));
            }
            range[m as usize] = (start, by_member.len() as u32);
        }
        Cells {
            sub_off,
            subs,
            range,
            by_member,
            cells: vec![Cell::default(); edges],
            load: vec![0; layout.members().len()],
        }
    }

    fn of_member(&self, m: u32) -> &[(u32, u32)] {
        let (s, e) = self.range[m as usize];
        &self.by_member[s as usize..e as usize]
    }

    fn cell(&self, m: u32, t: u32) -> Option<usize> {
        let list = self.of_member(m);
        let i = list.binary_search_by_key(&t, |&(t, _)| t).ok()?;
        Some(list[i].1 as usize)
    }

    fn subscribers(&self, t: usize) -> std::ops::Range<usize> {
        self.sub_off[t] as usize..self.sub_off[t + 1] as usize
    }

    /// Whether some member holding at least `load` partitions could pass one on (holds one
    /// nobody would lose): where a chain into a lighter member would have to start.
    fn giver_at_least(&self, load: u32) -> bool {
        (0..self.load.len() as u32).any(|m| {
            self.load[m as usize] >= load
                && self.of_member(m).iter().any(|&(_, c)| {
                    let cell = self.cells[c as usize];
                    cell.fresh + cell.cheap > 0
                })
        })
    }
}

pub(super) fn assign(ctx: &Ctx<'_>, owner: &mut [u32]) {
    let layout = &ctx.layout;
    let mut cells = Cells::new(ctx);

    // 1. Keep every owned partition that may be kept.
    let mut kept = vec![0u32; layout.topic_count()];
    for &m in &ctx.active {
        for &(t, g) in ctx.claims.owned_by(m) {
            if !ctx.claims.is_owner(g, m) || ctx.rack_mismatch(g, t, m) {
                continue;
            }
            let Some(c) = cells.cell(m, t) else { continue };
            if ctx.claims.costly(g) {
                cells.cells[c].costly += 1;
            } else {
                cells.cells[c].cheap += 1;
            }
            cells.load[m as usize] += 1;
            kept[t as usize] += 1;
        }
    }

    // 2. Free partitions to the least-loaded subscribers, most constrained topics first.
    let mut topics: Vec<usize> = (0..layout.topic_count()).collect();
    topics.sort_by_key(|&t| (cells.subscribers(t).len(), t));
    for &t in &topics {
        let free = layout.partition_count(t as u32) - kept[t];
        if free > 0 {
            water_fill(ctx, &mut cells, t, free);
        }
    }

    // 3. Move single partitions towards members with two or more fewer, settling first what
    // older generations lost (Kafka's previous-owner rule, made valid).
    let holds = |m: u32, t: u32, g: u32| {
        ctx.claims.is_owner(g, m) && cells.cell(m, t).is_some() && !ctx.rack_mismatch(g, t, m)
    };
    let mut debts = Debts::find(ctx, holds, &cells.load);
    let moves = balance(ctx, &mut cells, &mut debts);
    let previous_owner = |g: u32| debts.as_ref().and_then(|d| d.previous_owner(g));

    // 4. Counts to partitions.
    let members = layout.members().len();
    let mut cell_of = vec![NONE; members];
    let mut slot_of = vec![NONE; members];
    let mut free = Vec::new();
    let mut slots = Vec::new();
    for t in 0..layout.topic_count() {
        let subscribers = cells.subscribers(t);
        for c in subscribers.clone() {
            cell_of[cells.subs[c] as usize] = c as u32;
        }
        free.clear();
        for g in layout.offsets[t]..layout.offsets[t + 1] {
            let m = ctx.claims.claimant(g);
            if m < CONFLICT && cell_of[m as usize] != NONE && !ctx.rack_mismatch(g, t as u32, m) {
                let cell = &mut cells.cells[cell_of[m as usize] as usize];
                let count = if ctx.claims.costly(g) {
                    &mut cell.costly
                } else {
                    &mut cell.cheap
                };
                if *count > 0 {
                    *count -= 1;
                    owner[g as usize] = m;
                    continue;
                }
            }
            free.push((t as u32, g));
        }
        slots.clear();
        for c in subscribers.clone() {
            let cell = cells.cells[c];
            // Balancing ends after returned units were counted as fresh again.
            debug_assert_eq!(cell.costly + cell.cheap + cell.returned, 0);
            if cell.fresh > 0 {
                slots.push(Slot {
                    member: cells.subs[c],
                    want: cell.fresh,
                });
            }
        }
        place(ctx, &free, &mut slots, &mut slot_of, owner, previous_owner);
        for c in subscribers {
            cell_of[cells.subs[c] as usize] = NONE;
        }
    }
    tracing::trace!(moves, "general assignment balanced");
}

/// Gives `free` new partitions of topic `t` one by one to its least-loaded subscriber (ties by
/// member id), computed level by level instead of one at a time.
fn water_fill(ctx: &Ctx<'_>, cells: &mut Cells, t: usize, free: u32) {
    let mut level: Vec<(u32, u32, usize)> = cells
        .subscribers(t)
        .map(|c| {
            let m = cells.subs[c] as usize;
            (cells.load[m], ctx.rank[m], c)
        })
        .collect();
    if level.is_empty() {
        return;
    }
    level.sort_unstable();
    let n = level.len();
    let mut k = 1;
    let mut height = u64::from(level[0].0);
    let mut left = u64::from(free);
    while k < n {
        let need = (u64::from(level[k].0) - height) * k as u64;
        if left < need {
            break;
        }
        left -= need;
        height = u64::from(level[k].0);
        k += 1;
    }
    let step = left / k as u64;
    height += step;
    left -= step * k as u64;
    // The `left` lowest member ids among the raised ones get one more.
    let raised = &mut level[..k];
    raised.sort_unstable_by_key(|&(_, rank, _)| rank);
    for (i, &(load, _, c)) in raised.iter().enumerate() {
        let add = (height - u64::from(load)) as u32 + u32::from((i as u64) < left);
        cells.cells[c].fresh += add;
        cells.load[cells.subs[c] as usize] += add;
    }
}

/// Repeats passes over the members, most loaded first, moving one partition at a time from a
/// member to the least-loaded subscriber of its topic while that one has at least two fewer;
/// stops when a pass moves nothing, which is Kafka's notion of balanced. In a pass that starts
/// unbalanced, a member first settles what it can of the debts to older generations ([`pull`]).
/// Each move lowers the sum of squared loads, so this ends. Returns the number of moves.
fn balance(ctx: &Ctx<'_>, cells: &mut Cells, debts: &mut Option<Debts>) -> usize {
    let topics = ctx.layout.topic_count();
    // Per topic, its subscribers by (load, id), with stale entries skipped lazily.
    let mut heaps: Vec<Heap> = (0..topics)
        .map(|t| {
            cells
                .subscribers(t)
                .map(|c| {
                    let m = cells.subs[c];
                    Reverse((cells.load[m as usize], ctx.rank[m as usize], m))
                })
                .collect()
        })
        .collect();
    let mut search = ChainSearch::new(ctx.layout.members().len(), cells.subs.len());
    let mut total = 0;
    loop {
        let mut order = ctx.active.clone();
        order.sort_by_key(|&m| (Reverse(cells.load[m as usize]), ctx.rank[m as usize]));
        // Kafka applies its previous-owner rule only while the group is not balanced.
        let pulling = debts.as_ref().is_some_and(Debts::any)
            && order
                .iter()
                .any(|&h| best_move(cells, &mut heaps, h).is_some());
        if let (true, Some(d)) = (pulling, debts.as_mut()) {
            d.new_pass();
        }
        let mut moves = 0;
        for &h in &order {
            loop {
                if pulling
                    && let Some(d) = debts.as_mut()
                    && let Some(o) = pull(cells, d, &mut search, h)
                {
                    for m in [h, o] {
                        touched(&mut heaps, Some(d), cells, ctx, m);
                    }
                    moves += 1;
                    continue;
                }
                let Some(Move {
                    kind,
                    topic: t,
                    from,
                    to,
                }) = best_move(cells, &mut heaps, h)
                else {
                    break;
                };
                // Before taking an owned partition away, look for a chain of moves that only
                // hands on partitions nobody loses (h gives one to k, k gives one to l, ...).
                if kind == Kind::Costly {
                    let chain = search
                        .cheap_chain(cells, h, Goal::Lighter)
                        .map(|l| (h, l))
                        .or_else(|| search.cheap_chain_into(cells, to).map(|k| (k, to)));
                    if let Some((from, into)) = chain {
                        for m in [from, into] {
                            touched(&mut heaps, debts.as_mut(), cells, ctx, m);
                        }
                        moves += 1;
                        continue;
                    }
                }
                let Some(into) = cells.cell(to, t) else {
                    break;
                };
                let cell = &mut cells.cells[from];
                match kind {
                    Kind::Fresh => cell.fresh -= 1,
                    Kind::Cheap => cell.cheap -= 1,
                    Kind::Returned => cell.returned -= 1,
                    Kind::Costly => cell.costly -= 1,
                }
                cells.cells[into].fresh += 1;
                cells.load[h as usize] -= 1;
                cells.load[to as usize] += 1;
                for m in [h, to] {
                    touched(&mut heaps, debts.as_mut(), cells, ctx, m);
                }
                moves += 1;
            }
        }
        total += moves;
        if moves > 0 {
            continue;
        }
        // Balanced in Kafka's sense. Chains of moves can still even out members that share no
        // topic directly, and evenness is worth more than where a returned partition ends (only
        // debts make returned units: without them there is nothing to count again).
        if debts.is_some() {
            for cell in &mut cells.cells {
                cell.fresh += std::mem::take(&mut cell.returned);
            }
        }
        let min = order
            .iter()
            .map(|&m| cells.load[m as usize])
            .min()
            .unwrap_or(0);
        for &h in &order {
            if cells.load[h as usize] < min + 2 {
                break;
            }
            // Only chains that revoke nothing: balance beyond Kafka's notion is not worth an
            // owned partition (Kafka would not move it either).
            if let Some(l) = search.cheap_chain(cells, h, Goal::Lighter) {
                for m in [h, l] {
                    touched(&mut heaps, debts.as_mut(), cells, ctx, m);
                }
                moves += 1;
            }
        }
        total += moves;
        if moves == 0 {
            return total;
        }
    }
}

/// What a member gives up in a move: a partition it did not own, one it owned that others also
/// list (counted as moved whoever gets it), one it was given back as a previous owner (undoing
/// Kafka's return, but revoking nothing), or one only it owned (a revocation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Fresh,
    Cheap,
    Returned,
    Costly,
}

/// One partition of `topic` from the cell `from` of the member at hand to member `to`.
struct Move {
    kind: Kind,
    topic: u32,
    from: usize,
    to: u32,
}

/// The move member `h` should make, if some subscriber of one of its topics holds at least two
/// fewer partitions: the cheapest kind, then towards the least-loaded member, then by topic.
fn best_move(cells: &Cells, heaps: &mut [Heap], h: u32) -> Option<Move> {
    let load_h = cells.load[h as usize];
    let mut best: Option<(Kind, u32, Move)> = None;
    for &(t, c) in cells.of_member(h) {
        let cell = cells.cells[c as usize];
        if cell.total() == 0 {
            continue;
        }
        let Some((lmin, l)) = lightest(&mut heaps[t as usize], &cells.load) else {
            continue;
        };
        if lmin + 2 > load_h {
            continue;
        }
        let kind = if cell.fresh > 0 {
            Kind::Fresh
        } else if cell.cheap > 0 {
            Kind::Cheap
        } else if cell.returned > 0 {
            Kind::Returned
        } else {
            Kind::Costly
        };
        if best
            .as_ref()
            .is_none_or(|b| (kind, lmin, t) < (b.0, b.1, b.2.topic))
        {
            let m = Move {
                kind,
                topic: t,
                from: c as usize,
                to: l,
            };
            best = Some((kind, lmin, m));
        }
    }
    best.map(|(_, _, m)| m)
}

/// Kafka's previous-owner rule, made valid. Kafka hands a partition held by `h` back to its
/// previous owner `o` (an older generation's member that lost it) when `h` holds at least two
/// more than `o`, even when `o` no longer subscribes to its topic. Here, when `h` holds a
/// partition nobody would lose (not owned, or owned by several members) of a topic in which `o`
/// lost one, and `h` has at least two more than `o`, one partition's worth moves from `h` to
/// `o` along a chain in which every member hands the next a partition nobody would lose: straight
/// to `o` when `o` subscribes to a topic `h` can give, otherwise through members in between
/// (`h` gives to `w`, `w` gives `o` a partition of a topic `o` subscribes to). So it revokes
/// nothing Kafka's move would not. Each lost partition is made up for once, and what `o` gets
/// for it is `returned`: chains do not pass it on. Returns `o`.
fn pull(cells: &mut Cells, debts: &mut Debts, search: &mut ChainSearch, h: u32) -> Option<u32> {
    let load_h = cells.load[h as usize];
    let (s, e) = cells.range[h as usize];
    for i in s as usize..e as usize {
        let (t, c) = cells.by_member[i];
        let cell = cells.cells[c as usize];
        if cell.fresh + cell.cheap == 0 {
            continue;
        }
        let Some(o) = debts.lightest(t, &cells.load) else {
            continue;
        };
        if cells.load[o as usize] + 2 > load_h {
            continue;
        }
        if search.cheap_chain(cells, h, Goal::Member(o)).is_some() {
            // The last hop gave `o` a fresh partition: it is the one made up for, which later
            // chains must not hand on (that would undo the return and move one more).
            let (_, last) = search.parent[o as usize];
            if let Some(c) = cells.cell(o, last) {
                cells.cells[c].fresh -= 1;
                cells.cells[c].returned += 1;
            }
            debts.settle(o, t);
            tracing::trace!(from = h, to = o, topic = t, "made up for a lost partition");
            return Some(o);
        }
        debts.fail(o);
    }
    None
}

/// Per topic, its subscribers by (load, member id); entries whose load is out of date are
/// skipped when they surface.
type Heap = BinaryHeap<Reverse<(u32, u32, u32)>>;

/// Records member `m`'s new load.
fn touched(heaps: &mut [Heap], debts: Option<&mut Debts>, cells: &Cells, ctx: &Ctx<'_>, m: u32) {
    let entry = Reverse((cells.load[m as usize], ctx.rank[m as usize], m));
    for &(t, _) in cells.of_member(m) {
        heaps[t as usize].push(entry);
    }
    if let Some(d) = debts {
        d.loaded(ctx, m, &cells.load);
    }
}

fn lightest(heap: &mut Heap, load: &[u32]) -> Option<(u32, u32)> {
    while let Some(&Reverse((l, _, m))) = heap.peek() {
        if l == load[m as usize] {
            return Some((l, m));
        }
        heap.pop();
    }
    None
}

/// Where a chain of moves may end.
#[derive(Clone, Copy)]
enum Goal {
    /// At any member holding at least two fewer than the first.
    Lighter,
    /// At this member.
    Member(u32),
}

/// Breadth-first search for a chain of moves that lowers a member by one and raises another
/// (one holding at least two fewer, or a given one) by one, passing only partitions nobody would
/// lose (`fresh` or `cheap`). Members in the middle give one and take one. Bounded, so that it
/// stays cheap: each search expands at most [`LIMIT`](Self::LIMIT) members, and all the
/// searches of one assignment scan at most `budget` subscribers together.
struct ChainSearch {
    stamp: Vec<u32>,
    parent: Vec<(u32, u32)>,
    round: u32,
    queue: Vec<u32>,
    /// Subscriber scans left for every search of this assignment: a bound for groups where
    /// searches keep failing although a giver heavy enough exists (unreachable through the
    /// topics), which would otherwise cost up to `LIMIT` expansions per partition moved. Once
    /// spent, moves go directly. Far above what groups of ordinary shape use (tens of millions
    /// of scans at 300 members).
    budget: usize,
}

impl ChainSearch {
    /// How many members one search may expand.
    const LIMIT: usize = 512;

    /// A search over `members`, whose cells (member-topic pairs) number `cells`.
    fn new(members: usize, cells: usize) -> Self {
        Self {
            stamp: vec![0; members],
            parent: vec![(0, 0); members],
            round: 0,
            queue: Vec::new(),
            budget: cells.saturating_mul(1 << 12).max(1 << 28),
        }
    }

    /// Takes `scans` from the budget; false (and the budget spent) when it does not cover them.
    fn spend(&mut self, scans: usize) -> bool {
        if let Some(left) = self.budget.checked_sub(scans) {
            self.budget = left;
            #[cfg(test)]
            SCANNED.with(|n| n.set(n.get() + scans));
            return true;
        }
        if self.budget > 0 {
            tracing::debug!("chain searches spent their budget; the remaining moves go directly");
        }
        self.budget = 0;
        false
    }

    /// Applies the first chain found from `h` to `goal` and returns its last member.
    fn cheap_chain(&mut self, cells: &mut Cells, h: u32, goal: Goal) -> Option<u32> {
        self.round += 1;
        let round = self.round;
        let limit = cells.load[h as usize].checked_sub(2)?;
        let reached = |j: u32, load: u32| match goal {
            Goal::Lighter => load <= limit,
            Goal::Member(o) => j == o,
        };
        self.queue.clear();
        self.queue.push(h);
        self.stamp[h as usize] = round;
        let mut head = 0;
        let mut found = None;
        'search: while head < self.queue.len() && head < Self::LIMIT {
            let k = self.queue[head];
            head += 1;
            for &(t, c) in cells.of_member(k) {
                let cell = cells.cells[c as usize];
                if cell.fresh + cell.cheap == 0 {
                    continue;
                }
                let subscribers = cells.subscribers(t as usize);
                if !self.spend(subscribers.len()) {
                    break 'search;
                }
                for s in subscribers {
                    let j = cells.subs[s];
                    if self.stamp[j as usize] == round {
                        continue;
                    }
                    self.stamp[j as usize] = round;
                    self.parent[j as usize] = (k, t);
                    if reached(j, cells.load[j as usize]) {
                        found = Some(j);
                        break 'search;
                    }
                    self.queue.push(j);
                }
            }
        }
        let l = found?;
        let mut j = l;
        while j != h {
            let (k, t) = self.parent[j as usize];
            hand_over(cells, k, j, t)?;
            j = k;
        }
        finish_chain(cells, h, l);
        Some(l)
    }

    /// The same search backwards: a chain ending at `l` that starts at a member holding at
    /// least two more. Applies it and returns its first member.
    fn cheap_chain_into(&mut self, cells: &mut Cells, l: u32) -> Option<u32> {
        let wanted = cells.load[l as usize] + 2;
        // The chain must start at such a giver: without one, the search cannot succeed (a group
        // scaling out, where the members that could pass a partition on are all as light as
        // `l`, would otherwise search in vain before every move: tens of seconds at a few
        // thousand partitions).
        if !cells.giver_at_least(wanted) {
            return None;
        }
        self.round += 1;
        let round = self.round;
        self.queue.clear();
        self.queue.push(l);
        self.stamp[l as usize] = round;
        let mut head = 0;
        let mut found = None;
        'search: while head < self.queue.len() && head < Self::LIMIT {
            let j = self.queue[head];
            head += 1;
            for &(t, _) in cells.of_member(j) {
                let subscribers = cells.subscribers(t as usize);
                if !self.spend(subscribers.len()) {
                    break 'search;
                }
                for s in subscribers {
                    let k = cells.subs[s];
                    let cell = cells.cells[s];
                    if self.stamp[k as usize] == round || cell.fresh + cell.cheap == 0 {
                        continue;
                    }
                    self.stamp[k as usize] = round;
                    // `k` gives a partition of `t` to `j`.
                    self.parent[k as usize] = (j, t);
                    if cells.load[k as usize] >= wanted {
                        found = Some(k);
                        break 'search;
                    }
                    self.queue.push(k);
                }
            }
        }
        let h = found?;
        let mut k = h;
        while k != l {
            let (j, t) = self.parent[k as usize];
            hand_over(cells, k, j, t)?;
            k = j;
        }
        finish_chain(cells, h, l);
        Some(h)
    }
}

#[cfg(test)]
mod budget_tests {
    use super::ChainSearch;

    #[test]
    fn a_spent_budget_refuses_every_further_scan() {
        let mut search = ChainSearch::new(4, 0);
        assert_eq!(search.budget, 1 << 28, "a floor for small groups");
        search.budget = 10;
        assert!(search.spend(6));
        assert!(!search.spend(6), "only 4 left");
        assert_eq!(search.budget, 0);
        assert!(!search.spend(1));
        assert!(
            ChainSearch::new(4, 1 << 20).budget > 1 << 28,
            "grows with the cells"
        );
    }
}

#[cfg(test)]
thread_local! {
    /// Subscribers the chain searches scanned on this thread (for the tests of the budget).
    pub(super) static SCANNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One hop of a chain: `giver` hands one partition of topic `t` to `taker` (a fresh one when it
/// has one, else one nobody would lose).
fn hand_over(cells: &mut Cells, giver: u32, taker: u32, t: u32) -> Option<()> {
    let from = cells.cell(giver, t)?;
    let into = cells.cell(taker, t)?;
    let cell = &mut cells.cells[from];
    if cell.fresh > 0 {
        cell.fresh -= 1;
    } else {
        cell.cheap -= 1;
    }
    cells.cells[into].fresh += 1;
    Some(())
}

/// A chain from `h` to `l` moved one partition's worth of load between its ends.
fn finish_chain(cells: &mut Cells, h: u32, l: u32) {
    cells.load[h as usize] -= 1;
    cells.load[l as usize] += 1;
    tracing::trace!(from = h, to = l, "moved along a chain");
}
