//! What the builder refuses when the allocation is named: parameters the strategy or assignor
//! does not read (unless allowed) and values with which the consumer would consume nothing.

use rebalance_core::strategy::Params;
use rebalance_runtime::{Consumer, ConsumerError};

/// serde_json's `Value`, named through `Params` (the runtime does not depend on serde_json).
type Value = <Params as std::ops::Index<&'static str>>::Output;

/// One parameter.
fn param(key: &str, value: impl Into<Value>) -> Params {
    let mut p = Params::new();
    p.insert(key.to_string(), value.into());
    p
}

fn strategy_error(name: &str, params: &Params) -> String {
    match Consumer::builder("G").strategy_named(name, params) {
        Err(e @ ConsumerError::Strategy(_)) => e.to_string(),
        Err(other) => panic!("{name}: not a strategy error: {other}"),
        Ok(_) => panic!("{name} {params:?} was accepted"),
    }
}

#[test]
fn a_consistent_hash_ring_without_points_is_refused() {
    assert_eq!(
        strategy_error("consistent_hash", &param("virtual_node_count", 0)),
        "strategy `consistent_hash` would allocate nothing to anybody: `virtual_node_count` is 0, \
         so the hash ring has no points (give it 1 or more; the default is 10)"
    );
    let one = param("virtual_node_count", 1);
    assert!(
        Consumer::builder("G")
            .strategy_named("consistent_hash", &one)
            .is_ok()
    );
}

#[test]
fn every_strategy_that_would_allocate_nothing_is_refused() {
    let empty_list = Vec::<String>::new;
    for (name, params) in [
        ("by_machine_room", param("consumer_idcs", "")),
        ("by_config", param("message_queue_list", empty_list())),
    ] {
        let err = strategy_error(name, &params);
        assert!(err.contains("would allocate nothing"), "{name}: {err}");
    }
}

#[test]
fn unknown_keys_are_refused_unless_allowed() {
    let typo = param("virtual_nodes", 20);
    assert_eq!(
        strategy_error("consistent_hash", &typo),
        "strategy `consistent_hash` has no parameter `virtual_nodes` (it reads \
         virtual_node_count, hash_function); a misspelled name would leave the default in place"
    );
    assert!(
        Consumer::builder("G")
            .allow_unknown_params(true)
            .strategy_named("consistent_hash", &typo)
            .is_ok()
    );
    // Allowing unknown keys does not allow a ring without points.
    let zero = param("virtual_node_count", 0);
    assert!(
        Consumer::builder("G")
            .allow_unknown_params(true)
            .strategy_named("consistent_hash", &zero)
            .is_err()
    );
    match Consumer::builder("G").assignor_named("range", &typo) {
        Err(e @ ConsumerError::Assignor(_)) => assert_eq!(
            e.to_string(),
            "assignor `range` has no parameter `virtual_nodes` (the built-in assignors take none)"
        ),
        other => panic!("expected an assignor error, got {:?}", other.err()),
    }
    assert!(
        Consumer::builder("G")
            .allow_unknown_params(true)
            .assignor_named("range", &typo)
            .is_ok()
    );
}

#[test]
fn errors_read_as_sentences() {
    let err = strategy_error("consistent_hash", &param("virtual_node_count", -1));
    assert_eq!(
        err,
        "parameter `virtual_node_count` of strategy `consistent_hash` must be from 0 to 65536, \
         not -1 (the Java client says \"illegal virtualNodeCnt :-1\")"
    );
    let err = strategy_error("nope", &Params::new());
    assert!(err.starts_with("unknown strategy `nope` (known: "), "{err}");
}

#[test]
fn interval_errors_are_not_prefixed_with_their_field_name() {
    use rebalance_runtime::config::IntervalsError;
    let err = ConsumerError::from(IntervalsError::Zero("rebalance_min"));
    assert_eq!(
        err.to_string(),
        "the interval `rebalance_min` is zero; every interval must be longer than zero"
    );
}
