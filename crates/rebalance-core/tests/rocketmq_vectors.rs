//! Every RocketMQ reference vector (recorded from the Java client, `tests/data/rocketmq-allocate.jsonl`
//! at the workspace root) against the strategies themselves: for every queried id, the same
//! queues in the same order, or exactly the error Java threw. Three ways of asking: the group's
//! one-pass `plan`, one `allocate` call per member, and `allocate_shared` (what a runtime asks).

use std::collections::HashSet;

use rebalance_core::strategy::{Params, StrategyConfigError, StrategyRegistry};
use rebalance_core::{AllocateError, ClientId, MessageQueue};
use serde_json::{Map, Value};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/rocketmq-allocate.jsonl"
);

/// How a member's share is asked for.
#[derive(Debug, Clone, Copy)]
enum Ask {
    Plan,
    Allocate,
    AllocateShared,
}

fn queues(case: &Value, key: &str) -> Vec<MessageQueue> {
    case[key]
        .as_array()
        .unwrap_or_else(|| panic!("{}: `{key}` is not a list", case["id"]))
        .iter()
        .map(|v| MessageQueue::from_json(v).unwrap_or_else(|| panic!("bad queue {v}")))
        .collect()
}

fn ids(case: &Value, key: &str) -> Vec<ClientId> {
    case[key]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|v| ClientId::from(v.as_str().expect("a client id is a string")))
                .collect()
        })
        .unwrap_or_default()
}

/// The case's answer in the vectors' form: (`expected`, `errors`), each an object by client id.
fn answer(case: &Value, registry: &StrategyRegistry, ask: Ask) -> (Value, Value) {
    let name = case["strategy"].as_str().expect("strategy");
    let params: Params = case["params"].as_object().cloned().unwrap_or_default();
    let group = case["group"].as_str().unwrap_or_default();
    let mq_all = queues(case, "mq_all");
    let cid_all = ids(case, "cid_all");
    let mut seen = HashSet::new();
    let queried: Vec<ClientId> = cid_all
        .iter()
        .chain(&ids(case, "extra_cids"))
        .filter(|c| seen.insert(c.to_string()))
        .cloned()
        .collect();
    let results: Vec<(ClientId, Result<Vec<MessageQueue>, AllocateError>)> =
        match registry.build(name, &params) {
            // Java's constructor throws: every call reports it.
            Err(StrategyConfigError::Rejected(e)) => {
                queried.into_iter().map(|c| (c, Err(e.clone()))).collect()
            }
            Err(e) => panic!("{}: {e}", case["id"]),
            Ok(strategy) => {
                let plan = match ask {
                    Ask::Plan => strategy.plan(group, &mq_all, &cid_all).ok(),
                    _ => None,
                };
                queried
                    .into_iter()
                    .map(|cid| {
                        let result = match (ask, plan.as_ref().and_then(|p| p.share(&cid))) {
                            (Ask::Plan, Some(share)) => Ok(share.to_vec()),
                            (Ask::AllocateShared, _) => strategy
                                .allocate_shared(group, &cid, &mq_all, &cid_all)
                                .map(|s| s.to_vec()),
                            // Ids the plan leaves out (the empty one, outsiders) and errors.
                            _ => strategy.allocate(group, &cid, &mq_all, &cid_all),
                        };
                        (cid, result)
                    })
                    .collect()
            }
        };
    let mut expected = Map::new();
    let mut errors = Map::new();
    for (cid, result) in results {
        match result {
            Ok(share) => {
                let triples = share.iter().map(MessageQueue::to_json_triple).collect();
                expected.insert(cid.to_string(), Value::Array(triples));
            }
            Err(e) => {
                errors.insert(cid.to_string(), Value::from(e.java_message()));
            }
        }
    }
    (Value::Object(expected), Value::Object(errors))
}

fn matches_every_java_vector(ask: Ask) {
    let text = std::fs::read_to_string(VECTORS).expect("the RocketMQ vectors");
    let registry = StrategyRegistry::default();
    let mut failures = Vec::new();
    let mut count = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).expect("a vector is JSON");
        let (expected, errors) = answer(&case, &registry, ask);
        if case["expected"] != expected || case["errors"] != errors {
            failures.push(format!(
                "{}: expected {} errors {}, got {expected} errors {errors}",
                case["id"], case["expected"], case["errors"]
            ));
        }
        count += 1;
    }
    assert!(count > 300, "only {count} vectors read");
    assert!(
        failures.is_empty(),
        "{ask:?}: {} of {count} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn plans_match_every_java_vector() {
    matches_every_java_vector(Ask::Plan);
}

#[test]
fn each_members_allocate_matches_every_java_vector() {
    matches_every_java_vector(Ask::Allocate);
}

/// What a runtime asks every round.
#[test]
fn each_members_shared_answer_matches_every_java_vector() {
    matches_every_java_vector(Ask::AllocateShared);
}
