use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;
use crate::assignor::test_support::{group, lists};
use crate::assignor::{MemberSubscription, TopicPartition};

type Owned = HashMap<String, BTreeSet<(String, i32)>>;

fn as_sets(a: &GroupAssignment) -> Owned {
    a.iter()
        .map(|(m, p)| {
            let set = p.iter().map(|(t, p)| (t.to_string(), p)).collect();
            (m.to_string(), set)
        })
        .collect()
}

fn sizes(a: &GroupAssignment) -> Vec<usize> {
    a.iter().map(|(_, p)| p.len()).collect()
}

/// Every existing subscribed partition to exactly one subscriber (or held back, when
/// `pending_ok`), nothing else.
fn assert_valid(g: &GroupSubscription, a: &GroupAssignment) {
    let mut seen = BTreeSet::new();
    for (m, list) in a.iter() {
        let sub = &g.members.iter().find(|s| s.member_id == *m).unwrap().topics;
        for (t, p) in list.iter() {
            assert!(
                sub.iter().any(|s| s == t),
                "{m} got {t}-{p} without subscribing"
            );
            assert!(p >= 0 && (p as u32) < g.partitions_per_topic[t]);
            assert!(seen.insert((t.to_string(), p)), "{t}-{p} twice");
        }
    }
    for (t, p) in a.pending_revocation().iter() {
        assert!(
            seen.insert((t.to_string(), p)),
            "{t}-{p} pending and assigned"
        );
    }
    for (t, &n) in &g.partitions_per_topic {
        if g.members.iter().any(|m| m.topics.iter().any(|s| s == t)) {
            for p in 0..n as i32 {
                assert!(seen.contains(&(t.to_string(), p)), "{t}-{p} unassigned");
            }
        }
    }
}

/// Kafka's notion of balance.
fn assert_balanced(g: &GroupSubscription, a: &GroupAssignment) {
    let sets = as_sets(a);
    for x in &g.members {
        for y in &g.members {
            let (lx, ly) = (&sets[x.member_id.as_str()], &sets[y.member_id.as_str()]);
            if ly.len() >= lx.len() + 2 {
                assert!(
                    !ly.iter()
                        .any(|(t, _)| x.topics.iter().any(|s| s == t.as_str())),
                    "{} ({}) could take from {} ({})",
                    x.member_id,
                    lx.len(),
                    y.member_id,
                    ly.len()
                );
            }
        }
    }
}

/// Feeds a result back as owned partitions at `generation`.
fn owning(mut g: GroupSubscription, a: &GroupAssignment, generation: i32) -> GroupSubscription {
    for m in &mut g.members {
        if let Some(list) = a.get(&m.member_id) {
            m.owned = list.to_vec();
            m.generation = Some(generation);
        }
    }
    g
}

/// Makes member `i` of `g` list `owned`, reported at `generation`.
fn claim<P: Into<TopicPartition>>(
    g: &mut GroupSubscription,
    i: usize,
    owned: impl IntoIterator<Item = P>,
    generation: i32,
) {
    g.members[i] = g.members[i]
        .clone()
        .with_owned(owned)
        .with_generation(generation);
}

fn moved(g: &GroupSubscription, a: &GroupAssignment) -> usize {
    let sets = as_sets(a);
    g.members
        .iter()
        .flat_map(|m| m.owned.iter().map(move |tp| (m, tp)))
        .filter(|(m, tp)| {
            !sets[m.member_id.as_str()].contains(&(tp.topic.to_string(), tp.partition))
        })
        .count()
}

#[test]
fn initial_assignment_is_balanced() {
    let g = group(
        &[("t0", 3), ("t1", 3)],
        &[("c0", &["t0", "t1"]), ("c1", &["t0", "t1"])],
    );
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(sizes(&a), [3, 3]);
}

#[test]
fn member_leaving_moves_nothing_at_moderate_scale() {
    // 100 topics x 1,000 partitions over 1,000 members; one leaves.
    let topics: Vec<String> = (0..100).map(|i| format!("topic-{i:03}")).collect();
    let mut g = GroupSubscription::new();
    for t in &topics {
        g = g.with_topic(t.as_str(), 1000);
    }
    let shared: std::sync::Arc<[crate::assignor::Topic]> =
        topics.iter().map(|t| t.as_str().into()).collect();
    for i in 0..1000 {
        g.members.push(MemberSubscription::with_shared_topics(
            format!("consumer-{i}"),
            shared.clone(),
        ));
    }
    for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
        let initial = assignor.assign(&g).unwrap();
        assert!(sizes(&initial).iter().all(|&s| s == 100));
        let mut left = owning(g.clone(), &initial, 1);
        left.members.remove(500);
        let a = assignor.assign(&left).unwrap();
        assert_valid(&left, &a);
        assert_eq!(moved(&left, &a), 0, "{}", assignor.name());
        assert!(a.pending_revocation().is_empty());
        let s = sizes(&a);
        assert_eq!((s.iter().min(), s.iter().max()), (Some(&100), Some(&101)));
        assert_eq!(s.iter().filter(|&&x| x == 101).count(), 100);
    }
}

#[test]
fn same_generation_double_claim_frees_the_partition() {
    let mut g = group(
        &[("a", 6)],
        &[("c0", &["a"]), ("c1", &["a"]), ("c2", &["a"])],
    );
    claim(&mut g, 0, [("a", 0), ("a", 1)], 3);
    claim(&mut g, 1, [("a", 0), ("a", 2)], 3);
    claim(&mut g, 2, [("a", 3)], 3);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(sizes(&a), [2, 2, 2]);
    assert_eq!(moved(&g, &a), 1, "only a-0 changes hands");
    let c = CooperativeSticky.assign(&g).unwrap();
    assert_eq!(
        c.pending_revocation().to_vec(),
        [TopicPartition::new("a", 0)],
        "both claimants must revoke a-0 first"
    );
    let sets = as_sets(&c);
    assert!(sets["c0"].contains(&("a".into(), 1)) && sets["c1"].contains(&("a".into(), 2)));
}

#[test]
fn higher_generation_wins_and_is_not_held_back() {
    let mut g = group(&[("a", 4)], &[("c0", &["a"]), ("c1", &["a"])]);
    claim(&mut g, 0, [("a", 0), ("a", 1), ("a", 2)], 3);
    claim(&mut g, 1, [("a", 0)], 4);
    let a = CooperativeSticky.assign(&g).unwrap();
    assert_eq!(lists(&a), ["c0: a-1 a-2", "c1: a-0 a-3"]);
    assert!(a.pending_revocation().is_empty());
}

#[test]
fn the_newest_claim_wins_whatever_the_order_of_the_claims() {
    // Generations 5, 5 and 7 on a-0, in every order of the members: the generation-7 member
    // keeps it (Kafka's result depends on its hash-map order here).
    let claims = [("c0", 5), ("c1", 5), ("c2", 7)];
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let members: Vec<(&str, &[&str])> =
            order.iter().map(|&i| (claims[i].0, &["a"][..])).collect();
        let mut g = group(&[("a", 3)], &members);
        for (slot, &i) in order.iter().enumerate() {
            claim(&mut g, slot, [("a", 0)], claims[i].1);
        }
        for a in [
            Sticky.assign(&g).unwrap(),
            CooperativeSticky.assign(&g).unwrap(),
        ] {
            assert_valid(&g, &a);
            assert!(
                as_sets(&a)["c2"].contains(&("a".into(), 0)),
                "{order:?}: {:?}",
                lists(&a)
            );
            assert!(a.pending_revocation().is_empty(), "{order:?}");
        }
    }
}

/// c0 reads t1, c1 t0 and t1, c2 and c3 t1; c1 (generation 5) holds all of t0 (10 partitions)
/// and of t1 (`t1` partitions), c0 (generation 5) nothing. c2 and c3 list nothing yet.
fn one_holds_all_group(t1: u32) -> GroupSubscription {
    let mut g = group(
        &[("t0", 10), ("t1", t1)],
        &[
            ("c0", &["t1"]),
            ("c1", &["t0", "t1"]),
            ("c2", &["t1"]),
            ("c3", &["t1"]),
        ],
    );
    claim(&mut g, 0, Vec::<(&str, i32)>::new(), 5);
    let t0 = (0..10).map(|p| ("t0", p));
    claim(&mut g, 1, t0.chain((0..t1 as i32).map(|p| ("t1", p))), 5);
    g
}

#[test]
fn a_partition_a_newer_generation_took_goes_back_to_its_previous_owner() {
    // c1 (generation 5) holds all of t0 and t1-0, which c2 (generation 4) listed before. The
    // group is not balanced (c1 holds 11, c0 and c2 none), so Kafka hands t1-0 back to c2, its
    // previous owner, rather than to c0, which comes first among the least loaded; c2 listed
    // t1-0 too, so that moves one partition where c0 would move two. A member that listed it
    // at an older generation still (c3, generation 3) has the weaker claim.
    for older in [None, Some(3)] {
        let mut g = one_holds_all_group(1);
        claim(&mut g, 2, [("t1", 0)], 4);
        claim(&mut g, 3, older.map(|_| ("t1", 0)), older.unwrap_or(5));
        let a = Sticky.assign(&g).unwrap();
        assert_valid(&g, &a);
        assert_eq!(
            lists(&a),
            [
                "c0:",
                "c1: t0-0 t0-1 t0-2 t0-3 t0-4 t0-5 t0-6 t0-7 t0-8 t0-9",
                "c2: t1-0",
                "c3:",
            ],
            "{older:?}"
        );
    }
}

#[test]
fn each_previous_owner_is_made_up_for_each_partition_it_lost_once() {
    // c1 (generation 5) holds everything; c2 (generation 4) listed t1-0 and t1-1, c3 t1-2. Kafka
    // hands t1-0 and t1-1 back to c2 and t1-2 to c3 while c1 holds at least two more than them,
    // and the last partition of t1 to c0 by balance: c2 ends with two, c0 and c3 with one.
    let mut g = one_holds_all_group(4);
    claim(&mut g, 2, [("t1", 0), ("t1", 1)], 4);
    claim(&mut g, 3, [("t1", 2)], 4);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(
        lists(&a),
        [
            "c0: t1-3",
            "c1: t0-0 t0-1 t0-2 t0-3 t0-4 t0-5 t0-6 t0-7 t0-8 t0-9",
            "c2: t1-0 t1-1",
            "c3: t1-2",
        ]
    );
}

#[test]
fn a_pass_that_only_made_up_for_losses_still_counts_as_progress() {
    // c1 and c2 report no generation and c0 generation 0, so c1 is the previous owner of t2-2,
    // which it lost by no longer reading t2. Everyone keeps what it lists otherwise, and the free
    // partitions leave 7/4/7. The first pass makes up for t2-2: c0 hands c1 a partition of t1
    // (6/5/7). That pass moved something, so the passes go on, and then a chain evens out c2
    // and c1, which share no topic, through c0: 6/6/6. Taking the pass for a quiet one leaves
    // 6/5/7.
    let mut g = group(
        &[("t1", 7), ("t2", 11)],
        &[("c0", &["t1", "t2"]), ("c1", &["t1"]), ("c2", &["t2"])],
    );
    claim(&mut g, 0, [("t2", 7), ("t1", 2), ("t2", 3)], 0);
    g.members[1] = g.members[1].clone().with_owned([("t2", 2), ("t1", 0)]);
    g.members[2] = g.members[2].clone().with_owned([("t2", 1)]);
    for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
        let a = assignor.assign(&g).unwrap();
        assert_valid(&g, &a);
        let target = if a.pending_revocation().is_empty() {
            a
        } else {
            assignor.assign(&owning(g.clone(), &a, 1)).unwrap()
        };
        assert_eq!(
            sizes(&target),
            [6, 6, 6],
            "{}: {:?}",
            assignor.name(),
            lists(&target)
        );
    }
}

#[test]
fn members_without_subscriptions_get_nothing() {
    // Kafka gives c3 partitions when it comes first in hash order.
    let g = group(&[("a", 6)], &[("c3", &[]), ("c0", &["a"]), ("c1", &["a"])]);
    let a = Sticky.assign(&g).unwrap();
    assert_eq!(sizes(&a), [0, 3, 3]);
    let g = group(&[("a", 1)], &[("c0", &["missing"]), ("c1", &["a"])]);
    assert_eq!(sizes(&CooperativeSticky.assign(&g).unwrap()), [0, 1]);
}

/// Distinct existing partitions that some member lists but does not get (the vectors' `moved`).
fn moved_partitions(g: &GroupSubscription, a: &GroupAssignment) -> usize {
    let sets = as_sets(a);
    let lost: BTreeSet<(String, i32)> = g
        .members
        .iter()
        .flat_map(|m| m.owned.iter().map(move |tp| (m, tp)))
        .filter(|(_, tp)| {
            g.partitions_per_topic
                .get(&tp.topic)
                .is_some_and(|&n| tp.partition >= 0 && (tp.partition as u32) < n)
        })
        .filter(|(m, tp)| {
            !sets[m.member_id.as_str()].contains(&(tp.topic.to_string(), tp.partition))
        })
        .map(|(_, tp)| (tp.topic.to_string(), tp.partition))
        .collect();
    lost.len()
}

/// The `rule_prev_generation_unsubscribed` vector: X (generation 1) owned a-0 and now subscribes
/// to `b` only; Y (generation 2) owns all of `a`; Z (generation 2) owns nothing. `x_owns` and
/// `z_owns` replace X's and Z's owned lists, `x_generation` X's generation.
fn stale_owner_group(
    x_owns: &[(&str, i32)],
    x_generation: i32,
    z_owns: &[(&str, i32)],
) -> GroupSubscription {
    let mut g = group(
        &[("a", 4), ("b", 2)],
        &[("X", &["b"]), ("Y", &["a", "b"]), ("Z", &["a", "b"])],
    );
    claim(&mut g, 0, x_owns.iter().copied(), x_generation);
    claim(&mut g, 1, [("a", 0), ("a", 1), ("a", 2), ("a", 3)], 2);
    claim(&mut g, 2, z_owns.iter().copied(), 2);
    g
}

#[test]
fn unsubscribed_partitions_are_never_handed_back() {
    // Kafka's general path gives a-0 back to X, which no longer subscribes to `a`.
    let g = stale_owner_group(&[("a", 0)], 1, &[]);
    for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
        let a = assignor.assign(&g).unwrap();
        assert_valid(&g, &a);
        assert!(a.get("X").unwrap().iter().all(|(t, _)| t == "b"));
    }
}

#[test]
fn an_older_generation_that_lost_an_unsubscribed_partition_is_made_up_for_through_a_chain() {
    // Kafka moves a-0 from Y (4) back to X (1), then a-1 from Y to Z: 2/2/2, two moved. The
    // valid analog: Y gives a-0 to Z, Z gives b-1 to X; then Y gives Z one more.
    let g = stale_owner_group(&[("a", 0)], 1, &[]);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(sizes(&a), [2, 2, 2]);
    assert_eq!(lists(&a)[0], "X: b-0 b-1");
    let y = &as_sets(&a)["Y"];
    assert!(y.iter().all(|(t, p)| t == "a" && *p > 0), "{y:?}");
    assert_eq!(moved_partitions(&g, &a), 2, "no more than Kafka's two");

    // Cooperative: Z's two partitions of `a` wait for Y; the next round completes the target
    // without revoking anything.
    let round1 = CooperativeSticky.assign(&g).unwrap();
    assert_valid(&g, &round1);
    assert_eq!(round1.pending_revocation().len(), 2);
    assert!(round1.get("Z").unwrap().is_empty());
    let g2 = owning(g.clone(), &round1, 3);
    let round2 = CooperativeSticky.assign(&g2).unwrap();
    assert!(round2.pending_revocation().is_empty());
    assert_eq!(moved(&g2, &round2), 0);
    assert_eq!(round2, a);
}

#[test]
fn without_a_loss_in_an_older_generation_balance_is_not_bought_with_a_revocation() {
    // The same group where X, still of an older generation, lost nothing: Kafka stops at 1/3/2
    // (X cannot take a partition of `a`), and so do we, rather than revoke one more of Y's.
    for x_generation in [1, -1] {
        let g = stale_owner_group(&[], x_generation, &[]);
        let a = Sticky.assign(&g).unwrap();
        assert_valid(&g, &a);
        assert_balanced(&g, &a);
        assert_eq!(sizes(&a), [1, 3, 2]);
        assert_eq!(moved_partitions(&g, &a), 1);
    }
}

#[test]
fn making_up_for_a_loss_passes_only_partitions_nobody_loses() {
    // Z owns b-1 alone: reaching X would revoke it, more than Kafka's move of a-0 revokes, so X
    // stays at one partition and only a-0 changes hands.
    let g = stale_owner_group(&[("a", 0)], 1, &[("b", 1)]);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_balanced(&g, &a);
    assert_eq!(lists(&a), ["X: b-0", "Y: a-1 a-2 a-3", "Z: a-0 b-1"]);
    assert_eq!(moved_partitions(&g, &a), 1);
}

#[test]
fn the_extra_slot_spares_a_partition_only_its_member_lists() {
    // 7 partitions over 3 members: 2 each and one extra. c0 and c1 could each keep 3, but c0's
    // a-5 is also listed (by c2, an older generation), so it counts as moved whoever gets it:
    // the extra goes to c1, which would otherwise revoke a partition only it lists, and c0
    // gives up a-5 rather than one of its own.
    let mut g = group(
        &[("a", 7)],
        &[("c0", &["a"]), ("c1", &["a"]), ("c2", &["a"])],
    );
    claim(&mut g, 0, [("a", 3), ("a", 4), ("a", 5)], 2);
    claim(&mut g, 1, [("a", 0), ("a", 1), ("a", 2)], 2);
    claim(&mut g, 2, [("a", 5)], 1);
    let a = Sticky.assign(&g).unwrap();
    assert_eq!(lists(&a), ["c0: a-3 a-4", "c1: a-0 a-1 a-2", "c2: a-5 a-6"]);
}

#[test]
fn members_sharing_no_topic_are_evened_out_through_a_chain() {
    // X reads b, Z reads a, Y both. Kafka's notion of balance stops at 5/4/3 (X and Z share no
    // topic); a chain of partitions nobody owned (X gives Y one of b, Y gives Z one of a) makes
    // it 4/4/4.
    let g = group(
        &[("a", 4), ("b", 8)],
        &[("X", &["b"]), ("Y", &["a", "b"]), ("Z", &["a"])],
    );
    for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
        let a = assignor.assign(&g).unwrap();
        assert_valid(&g, &a);
        assert_eq!(sizes(&a), [4, 4, 4], "{}", assignor.name());
    }
}

#[test]
fn chains_even_out_members_three_apart() {
    // X reads b, Y b and c, W c and a, Z a; they hold 6/5/4/3, which is balanced in Kafka's
    // sense (neighbours differ by one). O, an older member that reads nothing now, listed every
    // partition, so handing any on revokes nothing, and chains of such hand-overs (X to Y to W,
    // Y to W to Z) bring the spread from 3 down to 1.
    let mut g = group(
        &[("a", 5), ("b", 8), ("c", 5)],
        &[
            ("X", &["b"]),
            ("Y", &["b", "c"]),
            ("W", &["a", "c"]),
            ("Z", &["a"]),
            ("O", &[]),
        ],
    );
    claim(&mut g, 0, (0..6).map(|p| ("b", p)), 2);
    claim(
        &mut g,
        1,
        [("b", 6), ("b", 7), ("c", 0), ("c", 1), ("c", 2)],
        2,
    );
    claim(&mut g, 2, [("c", 3), ("c", 4), ("a", 0), ("a", 1)], 2);
    claim(&mut g, 3, [("a", 2), ("a", 3), ("a", 4)], 2);
    let everything = [("a", 5), ("b", 8), ("c", 5)]
        .into_iter()
        .flat_map(|(t, n)| (0..n).map(move |p| (t, p)));
    claim(&mut g, 4, everything, 1);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    let s = sizes(&a);
    let (min, max) = (s[..4].iter().min().unwrap(), s[..4].iter().max().unwrap());
    assert!(max - min <= 1, "{:?}", lists(&a));
    assert_eq!(
        moved_partitions(&g, &a),
        18,
        "only O's, as when stopping at 6/5/4/3"
    );
}

#[test]
fn balance_hands_on_what_moves_anyway_before_what_only_its_holder_lists() {
    // c0 holds a-0..2, which only it lists, and b-0..2, which O (an older member that reads
    // nothing now) listed too: b's count as moved whoever gets them. c1 joins; c0 gives it the
    // three b's and keeps the a's, so only the b's move. (z only makes the subscriptions differ.)
    let mut g = group(
        &[("a", 3), ("b", 3), ("z", 1)],
        &[
            ("c0", &["a", "b"]),
            ("c1", &["a", "b"]),
            ("cz", &["z"]),
            ("O", &[]),
        ],
    );
    claim(
        &mut g,
        0,
        [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)],
        2,
    );
    claim(&mut g, 2, [("z", 0)], 2);
    claim(&mut g, 3, [("b", 0), ("b", 1), ("b", 2)], 1);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(
        lists(&a),
        ["c0: a-0 a-1 a-2", "c1: b-0 b-1 b-2", "cz: z-0", "O:"]
    );
    assert_eq!(moved_partitions(&g, &a), 3);
}

#[test]
fn a_chain_of_hand_overs_spares_a_revocation() {
    // X holds a-0 and a-1, which only it lists, and b-0 and b-1, which O (an older member that
    // reads nothing now) listed too. Y (a, c) and Z (b, c) get one c each. X first hands Z a b;
    // then only Y, of a, is two below it. Rather than revoke an a, X hands Z its other b and Z
    // hands Y its c: 2/2/2 with only the b's moved, which count as moved whoever gets them.
    let mut g = group(
        &[("a", 2), ("b", 2), ("c", 2)],
        &[
            ("X", &["a", "b"]),
            ("Y", &["a", "c"]),
            ("Z", &["b", "c"]),
            ("O", &[]),
        ],
    );
    claim(&mut g, 0, [("a", 0), ("a", 1), ("b", 0), ("b", 1)], 2);
    claim(&mut g, 3, [("b", 0), ("b", 1)], 1);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(lists(&a), ["X: a-0 a-1", "Y: c-0 c-1", "Z: b-0 b-1", "O:"]);
    assert_eq!(moved_partitions(&g, &a), 2);
}

#[test]
fn a_chain_into_the_lighter_member_spares_a_revocation() {
    // H holds all of t, which only it lists; K holds all of u, which O (an older member that
    // reads nothing now) listed too. L reads both and holds nothing. H comes first and has only
    // t to give: rather than revoke two t's, it has K hand L two u's (which count as moved
    // whoever gets them), and revokes one t only when K is no longer two above L.
    let mut g = group(
        &[("t", 4), ("u", 4)],
        &[("H", &["t"]), ("K", &["u"]), ("L", &["t", "u"]), ("O", &[])],
    );
    claim(&mut g, 0, (0..4).map(|p| ("t", p)), 2);
    claim(&mut g, 1, (0..4).map(|p| ("u", p)), 2);
    claim(&mut g, 3, (0..4).map(|p| ("u", p)), 1);
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_eq!(
        lists(&a),
        ["H: t-0 t-1 t-2", "K: u-0 u-1", "L: t-3 u-2 u-3", "O:"]
    );
    assert_eq!(moved_partitions(&g, &a), 5, "O's u's and one t");
}

#[test]
fn chain_searches_that_cannot_succeed_are_not_run() {
    // 20 members own 5 topics of 400 partitions; 180 join, the last also reading a topic of one
    // partition, so subscriptions differ (the general path). Nearly every move revokes a
    // partition, and no chain can spare it: the members that could pass one on are all as light
    // as the one to fill. Each search used to expand up to 512 members before failing: about
    // 3 x 10^8 scans here, seconds of CPU (tens of seconds at 1,000 members).
    let topics: Vec<String> = (0..5).map(|t| format!("t{t}")).collect();
    let all: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| (0..400).map(move |p| (t.clone(), p)))
        .collect();
    let mut g = GroupSubscription::new().with_topic("extra", 1);
    for t in &topics {
        g = g.with_topic(t.as_str(), 400);
    }
    for i in 0..200 {
        let mut reads = topics.clone();
        if i == 199 {
            reads.push("extra".into());
        }
        let mut member = MemberSubscription::new(format!("m{i:03}"), reads);
        if i < 20 {
            let mine = all
                .iter()
                .skip(i)
                .step_by(20)
                .map(|(t, p)| (t.as_str(), *p));
            member = member.with_owned(mine).with_generation(3);
        }
        g = g.with_member(member);
    }
    general::SCANNED.with(|n| n.set(0));
    let a = Sticky.assign(&g).unwrap();
    let scanned = general::SCANNED.with(|n| n.get());
    assert_valid(&g, &a);
    assert_balanced(&g, &a);
    assert!(scanned <= 100_000, "{scanned} scans");
    // The old members keep what any balanced plan lets them keep: 10 each, and 11 for the
    // one member that 2,001 partitions over 200 give an extra one.
    assert_eq!(moved(&g, &a), 2_000 - (20 * 10 + 1));
}

#[test]
fn a_pass_of_chains_alone_still_counts_as_progress() {
    // P holds all of t, which X also reads; X holds a-0 and a-1, which only it lists, and b-0
    // and b-1, which O (an older member that reads nothing now) listed too, as it listed Z's c's.
    // P and X start at 4, so P has nobody to give to. X then hands on its b's through two
    // chains (X to Z to Y) rather than revoke an a, and drops to 2: now P is two above X. No
    // chain of hand-overs reaches X from a member two above it, so a further pass has P give
    // X a t.
    let mut g = group(
        &[("a", 2), ("b", 2), ("c", 3), ("t", 4)],
        &[
            ("P", &["t"]),
            ("X", &["a", "b", "t"]),
            ("Y", &["a", "c"]),
            ("Z", &["b", "c"]),
            ("O", &[]),
        ],
    );
    claim(&mut g, 0, (0..4).map(|p| ("t", p)), 2);
    claim(&mut g, 1, [("a", 0), ("a", 1), ("b", 0), ("b", 1)], 2);
    claim(&mut g, 3, [("c", 0), ("c", 1), ("c", 2)], 2);
    claim(
        &mut g,
        4,
        [("b", 0), ("b", 1), ("c", 0), ("c", 1), ("c", 2)],
        1,
    );
    let a = Sticky.assign(&g).unwrap();
    assert_valid(&g, &a);
    assert_balanced(&g, &a);
    assert_eq!(
        lists(&a),
        [
            "P: t-0 t-1 t-2",
            "X: a-0 a-1 t-3",
            "Y: c-1 c-2",
            "Z: b-0 b-1 c-0",
            "O:"
        ]
    );
    assert_eq!(moved_partitions(&g, &a), 6, "what O listed, and t-3");
}

#[test]
fn nonexistent_owned_partitions_are_ignored() {
    let mut g = group(
        &[("a", 3), ("b", 2)],
        &[("c0", &["a", "b"]), ("c1", &["a", "b"])],
    );
    claim(&mut g, 0, [("a", 0), ("a", 7), ("gone", 1)], 3);
    claim(&mut g, 1, [("b", 0), ("a", -1)], 3);
    for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
        let a = assignor.assign(&g).unwrap();
        assert_valid(&g, &a);
        let sets = as_sets(&a);
        assert!(sets["c0"].contains(&("a".into(), 0)) && sets["c1"].contains(&("b".into(), 0)));
    }
}

#[test]
fn no_members_is_kafkas_error_and_duplicates_are_refused() {
    let err = Sticky.assign(&group(&[("t", 1)], &[])).unwrap_err();
    assert_eq!(err.java_message(), "ArithmeticException: / by zero");
    let err = Sticky
        .assign(&group(&[("t", 1)], &[("a", &["t"]), ("a", &["t"])]))
        .unwrap_err();
    assert_eq!(err, AssignError::DuplicateMember("a".into()));
}

#[test]
fn rack_aware_mode_aligns_free_partitions_and_gives_up_misplaced_ones() {
    let mut g = group(&[("a", 4)], &[("c0", &["a"]), ("c1", &["a"])])
        .with_partition_racks("a", [["r0"], ["r1"], ["r0"], ["r1"]]);
    g.members[0].rack = Some("r1".into());
    g.members[1].rack = Some("r0".into());
    let a = Sticky.assign(&g).unwrap();
    assert_eq!(lists(&a), ["c0: a-1 a-3", "c1: a-0 a-2"]);
    // c0 owns a-0 (on r0 only): it gives it up to c1, which sits on r0.
    claim(&mut g, 0, [("a", 0), ("a", 1)], 1);
    let a = Sticky.assign(&g).unwrap();
    assert_eq!(lists(&a), ["c0: a-1 a-3", "c1: a-0 a-2"]);
}

#[test]
fn cooperative_round_one_is_the_sticky_target_minus_transfers() {
    let mut g = group(&[("t", 10)], &[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
    claim(&mut g, 0, (0..5).map(|p| ("t", p)), 1);
    claim(&mut g, 1, (5..10).map(|p| ("t", p)), 1);
    let target = Sticky.assign(&g).unwrap();
    let round1 = CooperativeSticky.assign(&g).unwrap();
    assert_valid(&g, &round1);
    assert!(
        round1.get("c").unwrap().is_empty(),
        "c's partitions all come from a or b"
    );
    assert_eq!(
        round1.pending_revocation().len(),
        target.get("c").unwrap().len()
    );
    // Round two: a and b revoked; c gets them, nothing else moves.
    let g2 = owning(g.clone(), &round1, 2);
    let round2 = CooperativeSticky.assign(&g2).unwrap();
    assert_eq!(moved(&g2, &round2), 0);
    assert!(round2.pending_revocation().is_empty());
    assert_eq!(round2, target);
}

fn arb_group(identical: bool) -> impl Strategy<Value = GroupSubscription> {
    let topics = proptest::collection::vec(0u32..12, 1..5);
    (topics, 1usize..9, any::<u64>()).prop_map(move |(counts, members, seed)| {
        let mut state = seed | 1;
        let mut rnd = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n.max(1)
        };
        let names: Vec<String> = (0..counts.len()).map(|i| format!("t{i}")).collect();
        let mut g = GroupSubscription::new();
        for (t, &n) in names.iter().zip(&counts) {
            g = g.with_topic(t.as_str(), n);
        }
        for i in 0..members {
            let topics: Vec<&str> = if identical {
                names.iter().map(String::as_str).collect()
            } else {
                names
                    .iter()
                    .map(String::as_str)
                    .filter(|_| rnd(3) > 0)
                    .collect()
            };
            // Owned: random partitions of random topics, some claimed twice, some stale.
            let owned: Vec<(&str, i32)> = (0..rnd(8))
                .map(|_| {
                    let t = rnd(names.len() as u64) as usize;
                    (names[t].as_str(), rnd(u64::from(counts[t]) + 1) as i32)
                })
                .collect();
            let mut m = MemberSubscription::new(format!("c{i}"), topics).with_owned(owned);
            if rnd(4) > 0 {
                m.generation = Some(rnd(3) as i32);
            }
            g.members.push(m);
        }
        g
    })
}

/// Keeps only listings that will be kept: existing, subscribed by the lister, listed once.
fn uncontested(mut g: GroupSubscription) -> GroupSubscription {
    let mut seen = BTreeSet::new();
    for m in &mut g.members {
        let topics = m.topics.clone();
        let counts = &g.partitions_per_topic;
        m.owned.retain(|tp| {
            topics.iter().any(|t| t == &tp.topic)
                && counts
                    .get(&tp.topic)
                    .is_some_and(|&n| tp.partition >= 0 && (tp.partition as u32) < n)
                && seen.insert((tp.topic.to_string(), tp.partition))
        });
    }
    g
}

/// A settled group (everyone owning its last assignment at generation 5) in which one or two
/// members fell behind: they report generation 4, some of what they list was meanwhile given to
/// others (who list it at generation 5), and their subscriptions changed.
fn arb_stale_group() -> impl Strategy<Value = GroupSubscription> {
    (arb_group(false), any::<u64>()).prop_map(|(g, seed)| {
        let mut state = seed | 1;
        let mut rnd = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n.max(1)
        };
        let settled = Sticky.assign(&g).unwrap();
        let mut g = owning(g, &settled, 5);
        let names: Vec<String> = g
            .partitions_per_topic
            .keys()
            .map(|t| t.to_string())
            .collect();
        let n = g.members.len();
        for _ in 0..1 + rnd(2) {
            let stale = rnd(n as u64) as usize;
            g.members[stale].generation = Some(4);
            for tp in g.members[stale].owned.clone() {
                if rnd(3) == 0 {
                    let other = rnd(n as u64) as usize;
                    if other != stale {
                        g.members[other].owned.push(tp);
                    }
                }
            }
            let mut topics: Vec<String> = g.members[stale]
                .topics
                .iter()
                .map(|t| t.to_string())
                .collect();
            if rnd(2) == 0 && !topics.is_empty() {
                topics.remove(rnd(topics.len() as u64) as usize);
            }
            if rnd(3) == 0 {
                let t = &names[rnd(names.len() as u64) as usize];
                if !topics.contains(t) {
                    topics.push(t.clone());
                }
            }
            g.members[stale].topics = topics.into_iter().map(Into::into).collect();
        }
        g
    })
}

proptest! {
    #[test]
    fn generations_matter_only_when_an_older_member_lost_something(g in arb_group(false)) {
        // Nobody loses a listed partition, so nobody is owed one: the result must not depend
        // on who reported which generation.
        let g = uncontested(g);
        let newest = g.members.iter().filter_map(|m| m.generation).max().unwrap_or(0);
        let mut same = g.clone();
        for m in &mut same.members {
            m.generation = Some(newest);
        }
        for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
            prop_assert_eq!(assignor.assign(&g).unwrap(), assignor.assign(&same).unwrap());
        }
    }

    #[test]
    fn members_of_an_older_generation_valid_balanced_and_converging(g in arb_stale_group()) {
        let a = Sticky.assign(&g).unwrap();
        assert_valid(&g, &a);
        assert_balanced(&g, &a);
        let mut current = g.clone();
        let mut round = CooperativeSticky.assign(&current).unwrap();
        assert_valid(&current, &round);
        let mut rounds = 1;
        while !round.pending_revocation().is_empty() {
            prop_assert!(rounds < 4, "still revoking after {rounds} rounds");
            current = owning(current, &round, 5 + rounds);
            round = CooperativeSticky.assign(&current).unwrap();
            rounds += 1;
        }
        assert_valid(&current, &round);
        assert_balanced(&current, &round);
    }

    #[test]
    fn identical_subscriptions_valid_balanced_and_sticky(g in arb_group(true)) {
        let a = Sticky.assign(&g).unwrap();
        assert_valid(&g, &a);
        let s = sizes(&a);
        prop_assert!(s.iter().max().unwrap() - s.iter().min().unwrap() <= 1);
        // A member keeps at least min(its valid owned, its fair share).
        let total: u32 = g.partitions_per_topic.values().sum();
        let fair = (total as usize) / g.members.len();
        let claims = valid_claims(&g);
        let sets = as_sets(&a);
        for m in &g.members {
            let mine: Vec<_> = claims.iter().filter(|(_, o)| *o == m.member_id.as_str()).map(|(tp, _)| tp).collect();
            let kept = mine.iter().filter(|tp| sets[m.member_id.as_str()].contains(*tp)).count();
            prop_assert!(kept >= mine.len().min(fair), "{} kept {kept} of {}", m.member_id, mine.len());
        }
    }

    #[test]
    fn differing_subscriptions_valid_and_balanced(g in arb_group(false)) {
        for assignor in [&Sticky as &dyn GroupAssignor, &CooperativeSticky] {
            let a = assignor.assign(&g).unwrap();
            assert_valid(&g, &a);
        }
        let a = Sticky.assign(&g).unwrap();
        assert_balanced(&g, &a);
        // A valid balanced assignment fed back stays exactly as it is.
        let again = Sticky.assign(&owning(g.clone(), &a, 7)).unwrap();
        prop_assert_eq!(&again, &a);
        // Cooperative: members revoke what was held back and rejoin; within a few rounds
        // nothing waits any more, and the result is valid and balanced.
        let mut current = g.clone();
        let mut round = CooperativeSticky.assign(&current).unwrap();
        let mut rounds = 1;
        while !round.pending_revocation().is_empty() {
            prop_assert!(rounds < 4, "still revoking after {rounds} rounds");
            current = owning(current, &round, 7 + rounds);
            round = CooperativeSticky.assign(&current).unwrap();
            rounds += 1;
        }
        assert_valid(&current, &round);
        assert_balanced(&current, &round);
    }
}

/// Partitions with a valid claim (unique highest generation, existing, subscribed) and the
/// claimant.
fn valid_claims(g: &GroupSubscription) -> Vec<((String, i32), String)> {
    let mut best: HashMap<(String, i32), (i32, Option<String>)> = HashMap::new();
    for m in &g.members {
        let generation = m.generation.unwrap_or(-1);
        let mut mine = BTreeSet::new();
        for tp in &m.owned {
            let key = (tp.topic.to_string(), tp.partition);
            if !mine.insert(key.clone()) {
                continue;
            }
            let subscribed = m.topics.iter().any(|t| t == &tp.topic);
            let exists = g
                .partitions_per_topic
                .get(&tp.topic)
                .is_some_and(|&n| tp.partition >= 0 && (tp.partition as u32) < n);
            if !exists {
                continue;
            }
            let who = subscribed.then(|| m.member_id.to_string());
            match best.get_mut(&key) {
                None => {
                    best.insert(key, (generation, who));
                }
                Some((g0, w)) if generation > *g0 => {
                    *g0 = generation;
                    *w = who;
                }
                Some((g0, w)) if generation == *g0 => *w = None,
                Some(_) => {}
            }
        }
    }
    best.into_iter()
        .filter_map(|(tp, (_, w))| w.map(|w| (tp, w)))
        .collect()
}
