//! Every registered strategy on random groups: each member's `allocate_shared` (what a client
//! runs) is exactly its share of the one-pass `plan`, a fresh strategy value plans the same,
//! and the shares of the strategies that share a topic out are a partition of it.

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::json;

use super::{Params, StrategyRegistry};
use crate::{ClientId, MessageQueue};

/// (registered name, parameters, whether the shares cover every queue exactly once)
fn configurations() -> Vec<(&'static str, Params, bool)> {
    let params = |v: serde_json::Value| -> Params { serde_json::from_value(v).unwrap_or_default() };
    vec![
        ("averagely", Params::new(), true),
        ("averagely_by_circle", Params::new(), true),
        (
            "consistent_hash",
            params(json!({"virtual_node_count": 3})),
            true,
        ),
        ("machine_room_nearby", Params::new(), true),
        (
            "machine_room_nearby",
            params(json!({"inner_strategy": "averagely_by_circle"})),
            true,
        ),
        (
            "by_machine_room",
            params(json!({"consumer_idcs": "room0,room1"})),
            false,
        ),
        (
            "designated",
            params(json!({"consumers": ["room0@c1", "room2@c3", "nobody"]})),
            true,
        ),
        ("balanced_sticky", params(json!({"virtual_nodes": 4})), true),
        (
            "balanced_sticky",
            params(json!({"weights": {"room1@c0": 3, "room0@c2": 0}})),
            true,
        ),
    ]
}

/// Queues of topic T on brokers `room{r}@b{b}`; members `room{r}@c{i}`, distinct, sorted.
fn group() -> impl Strategy<Value = (Vec<MessageQueue>, Vec<ClientId>)> {
    let queues = prop::collection::btree_set((0..4u8, 0..3u8, 0..6i32), 1..40).prop_map(|set| {
        set.into_iter()
            .map(|(room, broker, id)| {
                MessageQueue::new("T", format!("room{room}@b{broker}").as_str(), id)
            })
            .collect::<Vec<_>>()
    });
    let members = prop::collection::btree_set((0..3u8, 0..12u8), 1..14).prop_map(|set| {
        let mut ids: Vec<ClientId> = set
            .into_iter()
            .map(|(room, i)| ClientId::from(format!("room{room}@c{i}")))
            .collect();
        ids.sort();
        ids
    });
    (queues, members)
}

proptest! {
    #[test]
    fn every_member_gets_its_share_of_the_plan((mq_all, cid_all) in group()) {
        let registry = StrategyRegistry::default();
        for (name, params, covers) in configurations() {
            let strategy = registry.build(name, &params).unwrap();
            let plan = strategy.plan("G", &mq_all, &cid_all);
            let fresh = registry.build(name, &params).unwrap();
            let again = fresh.plan("G", &mq_all, &cid_all);
            match (&plan, &again) {
                (Ok(p), Ok(q)) => {
                    let a: Vec<_> = p.iter().map(|(c, s)| (c.clone(), s.to_vec())).collect();
                    let b: Vec<_> = q.iter().map(|(c, s)| (c.clone(), s.to_vec())).collect();
                    prop_assert_eq!(a, b, "{} is not deterministic", name);
                }
                (Err(e), Err(f)) => prop_assert_eq!(e, f),
                _ => prop_assert!(false, "{name}: one plan failed, the other did not"),
            }
            let Ok(plan) = plan else {
                for cid in &cid_all {
                    let alone = strategy.allocate_shared("G", cid, &mq_all, &cid_all);
                    prop_assert!(alone.is_err() || name == "designated", "{name}: {cid} got {alone:?}");
                }
                continue;
            };
            let mut seen = BTreeSet::new();
            for cid in &cid_all {
                let share = plan.share(cid.as_str()).map(|s| s.to_vec()).unwrap_or_default();
                let alone = strategy.allocate_shared("G", cid, &mq_all, &cid_all).unwrap();
                prop_assert_eq!(&share, &alone.to_vec(), "{} for {}", name, cid);
                for q in share {
                    prop_assert!(seen.insert(q.clone()), "{name}: {q:?} twice");
                }
            }
            if covers {
                let all: BTreeSet<MessageQueue> = mq_all.iter().cloned().collect();
                prop_assert_eq!(seen, all, "{} leaves queues out", name);
            }
        }
    }
}
