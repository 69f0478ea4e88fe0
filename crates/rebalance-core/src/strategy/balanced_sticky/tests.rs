use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

pub(super) fn queues(brokers: usize, per_broker: i32) -> Vec<MessageQueue> {
    let mut v: Vec<MessageQueue> = (0..brokers)
        .flat_map(|b| {
            (0..per_broker).map(move |i| MessageQueue::new("T", format!("broker-{b}"), i))
        })
        .collect();
    v.sort();
    v
}

pub(super) fn member(i: u32) -> ClientId {
    ClientId::from(format!("10.0.{}.{}@{}", i / 250, i % 250, 9000 + i))
}

pub(super) fn members(ids: impl IntoIterator<Item = u32>) -> Vec<ClientId> {
    let mut v: Vec<ClientId> = ids.into_iter().map(member).collect();
    v.sort();
    v.dedup();
    v
}

/// queue -> owner, checking on the way that no queue has two owners.
pub(super) fn owners(plan: &Plan<'_>) -> HashMap<MessageQueue, ClientId> {
    let mut owner = HashMap::new();
    for (cid, share) in plan.iter() {
        for mq in share.iter() {
            assert!(
                owner.insert(mq.clone(), cid.clone()).is_none(),
                "{mq:?} twice"
            );
        }
    }
    owner
}

/// The fewest queues any balanced plan over `after` must move from `before` (see
/// `rebalance compare`): the departed members' queues, plus what remaining members must give up
/// when the larger targets go to the members holding the most.
fn min_moves(before: &HashMap<MessageQueue, ClientId>, after: &[ClientId], total: usize) -> usize {
    let mut sizes: HashMap<&ClientId, usize> = after.iter().map(|c| (c, 0)).collect();
    let mut orphaned = 0;
    for owner in before.values() {
        match sizes.get_mut(owner) {
            Some(s) => *s += 1,
            None => orphaned += 1,
        }
    }
    let mut sizes: Vec<usize> = sizes.into_values().collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let (base, extra) = (total / after.len(), total % after.len());
    orphaned
        + sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| s.saturating_sub(base + usize::from(i < extra)))
            .sum::<usize>()
}

pub(super) fn moved(
    a: &HashMap<MessageQueue, ClientId>,
    b: &HashMap<MessageQueue, ClientId>,
) -> usize {
    a.iter().filter(|(q, o)| b.get(*q) != Some(*o)).count()
}

#[test]
fn fewer_queues_than_members_gives_at_most_one_each() {
    let mqs = queues(1, 3);
    let cids = members(0..7);
    let s = BalancedSticky::default();
    let plan = s.plan("G", &mqs, &cids).unwrap();
    assert_eq!(plan.len(), 7);
    assert_eq!(owners(&plan).len(), 3);
    assert!(plan.iter().all(|(_, s)| s.len() <= 1));
}

#[test]
fn a_repeated_id_in_a_sorted_member_list_is_one_member() {
    let mqs = queues(2, 4);
    let mut distinct = members(0..3);
    distinct.sort();
    let mut cids = distinct.clone();
    cids.insert(1, cids[0].clone());
    let s = BalancedSticky::default();
    let plan = s.plan("G", &mqs, &cids).unwrap();
    assert_eq!(plan.len(), 3, "{plan:?}");
    assert_eq!(
        plan.to_lists(),
        s.plan("G", &mqs, &distinct).unwrap().to_lists()
    );
    let mut taken: Vec<MessageQueue> = distinct
        .iter()
        .flat_map(|c| s.allocate("G", c, &mqs, &cids).unwrap())
        .collect();
    taken.sort();
    assert_eq!(taken, mqs, "every queue once");
}

#[test]
fn empty_and_repeated_ids_are_ignored_and_errors_follow_java() {
    let mqs = queues(2, 4);
    let mut cids = members(0..3);
    cids.insert(0, ClientId::from(""));
    cids.push(cids[1].clone());
    let s = BalancedSticky::default();
    let plan = s.plan("G", &mqs, &cids).unwrap();
    assert_eq!(plan.len(), 3);
    assert_eq!(plan.assigned_count(), 8);
    assert_eq!(
        s.allocate("G", &"".into(), &mqs, &cids),
        Err(AllocateError::EmptyCurrentCid)
    );
    assert_eq!(
        s.allocate("G", &cids[1], &[], &cids),
        Err(AllocateError::EmptyQueues)
    );
    assert!(
        s.allocate("G", &"outsider".into(), &mqs, &cids)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_member_list_of_empty_ids_only_plans_nothing_instead_of_panicking() {
    // The broker's member list is outside input: a list whose only id is empty leaves no member,
    // and a plan over it must simply be empty (the matching's capacity check used to fire first).
    let mqs = queues(1, 2);
    let cids = vec![ClientId::from(""), ClientId::from("")];
    let s = BalancedSticky::default();
    let plan = s.plan("G", &mqs, &cids).unwrap();
    assert!(plan.is_empty());
    assert_eq!(plan.assigned_count(), 0);
    let weighted = BalancedSticky::default().with_weights(|_: &ClientId| 2);
    assert!(weighted.plan("G", &mqs, &cids).unwrap().is_empty());
}

#[test]
fn remembered_rings_give_the_same_plan_as_a_fresh_strategy() {
    let shared = BalancedSticky::default();
    let groups = [
        members(0..10),
        members(0..11),
        members(1..11),
        members(0..10),
    ];
    // Queue lists are remembered too: another list (of the same length or not) is not
    // mistaken for a remembered one.
    let other_topic: Vec<MessageQueue> = queues(7, 16)
        .iter()
        .map(|q| MessageQueue::new("U", q.broker_name.clone(), q.queue_id))
        .collect();
    for mqs in [queues(7, 16), queues(5, 16), other_topic, queues(7, 16)] {
        for cids in &groups {
            let warm = shared.plan("G", &mqs, cids).unwrap().to_lists();
            let cold = BalancedSticky::default()
                .plan("G", &mqs, cids)
                .unwrap()
                .to_lists();
            assert_eq!(warm, cold);
        }
    }
    assert_eq!(shared.rings.len(), 3);
}

#[test]
fn a_clone_keeps_the_node_count_and_the_weights() {
    assert_eq!(
        BalancedSticky::new(0).virtual_nodes(),
        1,
        "at least one point"
    );
    let heavy = member(0);
    let s =
        BalancedSticky::new(16).with_weights(move |c: &ClientId| if *c == heavy { 3 } else { 1 });
    let copy = s.clone();
    assert_eq!(copy.virtual_nodes(), 16);
    let (mqs, cids) = (queues(3, 8), members(0..4));
    let plan = copy.plan("G", &mqs, &cids).unwrap();
    assert_eq!(
        plan.to_lists(),
        s.plan("G", &mqs, &cids).unwrap().to_lists()
    );
    assert_eq!(
        plan.share(&member(0)).unwrap().len(),
        12,
        "weight 3 of 6 takes half"
    );
}

#[test]
fn a_leave_moves_far_fewer_queues_than_averagely() {
    use crate::strategy::Averagely;
    let mqs = queues(63, 16);
    let before_ids = members(0..40);
    let mut after_ids = before_ids.clone();
    after_ids.remove(3);
    let s = BalancedSticky::default();
    let ours = moved(
        &owners(&s.plan("G", &mqs, &before_ids).unwrap()),
        &owners(&s.plan("G", &mqs, &after_ids).unwrap()),
    );
    let theirs = moved(
        &owners(&Averagely.plan("G", &mqs, &before_ids).unwrap()),
        &owners(&Averagely.plan("G", &mqs, &after_ids).unwrap()),
    );
    assert!(
        ours * 4 < theirs,
        "balanced_sticky moved {ours}, averagely {theirs}"
    );
}

prop_compose! {
    fn group()(brokers in 1usize..12, per in 1i32..17, n in 1u32..60, offset in 0u32..1000)
        -> (Vec<MessageQueue>, Vec<ClientId>) {
        (queues(brokers, per), members(offset..offset + n))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn disjoint_cover_with_spread_at_most_one((mqs, cids) in group(), vnodes in 1usize..40) {
        let s = BalancedSticky::new(vnodes);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        let owner = owners(&plan);
        prop_assert_eq!(owner.len(), mqs.len());
        let sizes: Vec<usize> = plan.iter().map(|(_, s)| s.len()).collect();
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "sizes {:?}", sizes);
    }

    #[test]
    fn deterministic_whatever_the_member_order((mqs, cids) in group(), seed in any::<u64>()) {
        let (s1, s2) = (BalancedSticky::default(), BalancedSticky::default());
        let a = s1.plan("G", &mqs, &cids).unwrap();
        let mut shuffled = cids.clone();
        let len = shuffled.len();
        for i in (1..len).rev() {
            let j = (hashing::mix64(seed ^ i as u64) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        let b = s2.plan("G", &mqs, &shuffled).unwrap();
        prop_assert_eq!(owners(&a), owners(&b));
        for cid in &cids {
            prop_assert_eq!(
                a.share(cid).unwrap().to_vec(),
                BalancedSticky::default().allocate("G", cid, &mqs, &cids).unwrap()
            );
        }
    }

    /// One member joins or leaves: the departed member's queues, or the joiner's share, must
    /// move; beyond that, each capacity that changes starts one rejection chain. The bound
    /// (a few shares beyond three times the minimum) catches a plan that reshuffles; the
    /// average is checked in `moves_about_twice_the_minimum_on_random_groups`.
    #[test]
    fn a_join_or_leave_moves_few_queues((mqs, cids) in group(), join in any::<bool>(), pick in any::<prop::sample::Index>()) {
        prop_assume!(cids.len() >= 2);
        let s = BalancedSticky::default();
        let mut after = cids.clone();
        if join {
            after.push(ClientId::from("joiner@1"));
            after.sort();
        } else {
            after.remove(pick.index(after.len()));
        }
        let before = owners(&s.plan("G", &mqs, &cids).unwrap());
        let now = owners(&s.plan("G", &mqs, &after).unwrap());
        let minimum = min_moves(&before, &after, mqs.len());
        let got = moved(&before, &now);
        prop_assert!(got >= minimum);
        let share = mqs.len().div_ceil(cids.len().min(after.len()));
        prop_assert!(got <= 3 * minimum + 4 * share + 4, "moved {} minimum {} share {}", got, minimum, share);
    }
}

/// Over random groups and single joins and leaves, the queues moved add up to less than two and
/// a half times the minimum (measured: about 2 on random groups of 8 to 10,000 queues and 2 to
/// 500 members, see `BENCHMARKS.md`),
/// where averagely moves more than five times the minimum.
#[test]
fn moves_about_twice_the_minimum_on_random_groups() {
    use crate::strategy::Averagely;
    let (ours, theirs) = (BalancedSticky::default(), Averagely);
    let (mut moved_ours, mut moved_theirs, mut minimum) = (0, 0, 0);
    let mut seed = 7u64;
    let mut draw = |n: u64| {
        seed = hashing::mix64(seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
        seed % n
    };
    for k in 0..60 {
        let mqs = queues(1 + draw(60) as usize, 16);
        let n = 2 + draw(120) as u32;
        let cids = members(0..n);
        let mut after = cids.clone();
        if k % 2 == 0 {
            after.push(ClientId::from("joiner@1"));
            after.sort();
        } else {
            after.remove(draw(n as u64) as usize);
        }
        let before = owners(&ours.plan("G", &mqs, &cids).unwrap());
        let now = owners(&ours.plan("G", &mqs, &after).unwrap());
        minimum += min_moves(&before, &after, mqs.len());
        moved_ours += moved(&before, &now);
        moved_theirs += moved(
            &owners(&theirs.plan("G", &mqs, &cids).unwrap()),
            &owners(&theirs.plan("G", &mqs, &after).unwrap()),
        );
    }
    assert!(
        moved_ours * 2 < minimum * 5,
        "balanced_sticky moved {moved_ours} for a minimum of {minimum}"
    );
    assert!(
        moved_theirs > minimum * 5,
        "averagely moved {moved_theirs} for a minimum of {minimum} (balanced_sticky {moved_ours})"
    );
}

#[test]
fn the_ring_never_exceeds_its_total_of_points() {
    let most = BalancedSticky::new(65_536);
    let max = BalancedSticky::MAX_RING_POINTS;
    assert_eq!(most.points_per_member(1), 65_536);
    assert_eq!(most.points_per_member(64), 65_536);
    assert_eq!(most.points_per_member(65), max / 65);
    assert_eq!(most.points_per_member(2_000), 2_097);
    assert!(2_000 * most.points_per_member(2_000) <= max);
    assert_eq!(
        most.points_per_member(max + 1),
        1,
        "at least one point each"
    );
    // The default is untouched up to 32,768 members.
    let default = BalancedSticky::default();
    assert_eq!(default.points_per_member(32_768), 128);
    assert_eq!(default.points_per_member(32_769), 127);
    // What is built follows it.
    let small = BalancedSticky::new(1_000_000);
    let ring = small.ring(&members(0..8));
    assert_eq!(ring.positions.len(), max / 8 * 8);
}
