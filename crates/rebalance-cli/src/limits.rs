//! The largest inputs the commands accept.
//!
//! Every size a command builds in memory, and every simulated time or count it loops over, has
//! an upper bound, checked before anything is built: an absurd argument (a typo, an extra digit)
//! gets a clear error naming it instead of aborting the process on a failed allocation or
//! running for years. The bounds are far above the sizes of `BENCHMARKS.md` (1,000,000 queues,
//! 2,000 consumers, 1,000 topics × 1,000 partitions × 2,000 members) and each command's
//! `--help` states them.

use std::time::Duration;

use rebalance_core::strategy::{BalancedSticky, ConsistentHash, Params};
use serde_json::Value;

/// Queues of one topic (`bench`, `compare`), of a whole simulation (`simulate`: topics ×
/// queues), partitions of one case (`assign`) or of one workload (`bench --assignor`: topics ×
/// partitions).
pub const MAX_QUEUES: usize = 10_000_000;

/// Consumers or members of one group (`bench`, `compare`, with the members that join).
pub const MAX_CONSUMERS: usize = 1_000_000;

/// Topics of a `bench --assignor` workload.
pub const MAX_TOPICS: usize = 1_000_000;

/// Points on a hash ring: members × virtual nodes (`consistent_hash`'s `virtual_node_count`,
/// default 10; `balanced_sticky`'s `virtual_nodes`, default 128).
pub const MAX_RING_POINTS: usize = rebalance_core::strategy::ConsistentHash::MAX_RING_POINTS;

/// Member-partition pairs of one `assign` case with the `broadcast` assignor (every member gets
/// every partition it subscribes to, so the answer is this big).
pub const MAX_BROADCAST_PAIRS: usize = 10_000_000;

/// Member-partition pairs of a `bench --assignor broadcast` workload (only timed, not printed).
pub const MAX_BENCH_BROADCAST_PAIRS: usize = 100_000_000;

/// Runtime clients of one simulation (`simulate --consumers`, with the ones that join).
pub const MAX_SIM_CLIENTS: usize = 10_000;

/// Topics of one simulation.
pub const MAX_SIM_TOPICS: usize = 100_000;

/// Brokers per topic of one simulation.
pub const MAX_SIM_BROKERS: usize = 100_000;

/// Topics × brokers of one simulation (one route entry each).
pub const MAX_SIM_ROUTE_ENTRIES: usize = 1_000_000;

/// The simulated duration of `simulate` (7 days).
pub const MAX_SIM_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Messages one simulation may send (`simulate --produce`: rate × topics × duration).
pub const MAX_SIM_MESSAGES: f64 = 1_000_000.0;

/// Messages per second per topic of `simulate --produce`.
pub const MAX_SIM_RATE: f64 = 1_000_000.0;

/// The time a simulated listener takes per message (`simulate --consume-time`, 1 hour).
pub const MAX_SIM_CONSUME_TIME: Duration = Duration::from_secs(3600);

/// A latency or pause of `produce-sim` (1 hour).
pub const MAX_PRODUCE_DELAY: Duration = Duration::from_secs(3600);

/// Messages of `produce-sim`.
pub const MAX_MESSAGES: u64 = 10_000_000;

/// Retries after a failed send in `produce-sim`.
pub const MAX_RETRIES: usize = 100;

/// Send attempts `produce-sim` may make per run: messages × (retries + 1).
pub const MAX_ATTEMPTS: u64 = 100_000_000;

/// Timed runs of `bench --runs`.
pub const MAX_RUNS: usize = 1_000;

/// Random groups of `compare --sample`.
pub const MAX_SAMPLES: usize = 1_000_000;

/// A clap value parser for a whole number from `min` to `max`.
///
/// ```
/// let parse = rebalance_cli::limits::count(1, 10);
/// assert_eq!(parse("3"), Ok(3));
/// assert!(parse("0").unwrap_err().contains("at least 1"));
/// assert!(parse("11").unwrap_err().contains("at most 10"));
/// assert!(parse("-1").is_err());
/// ```
pub fn count(min: usize, max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |text| {
        let n: usize = text
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not a whole number from {min} to {max}"))?;
        if n < min {
            return Err(format!("must be at least {min}"));
        }
        if n > max {
            return Err(format!("must be at most {max}"));
        }
        Ok(n)
    }
}

/// A clap value parser for a duration (see [`parse_duration`](crate::args::parse_duration)) of
/// at most `max`.
///
/// ```
/// use std::time::Duration;
/// let parse = rebalance_cli::limits::duration_up_to(Duration::from_secs(60));
/// assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
/// assert!(parse("2m").unwrap_err().contains("at most 60s"));
/// ```
pub fn duration_up_to(max: Duration) -> impl Fn(&str) -> Result<Duration, String> + Clone {
    move |text| {
        let d = crate::args::parse_duration(text)?;
        if d > max {
            return Err(format!("`{text}` is too long: at most {max:?}"));
        }
        Ok(d)
    }
}

/// The points the hash ring of strategy `name` with `params` holds per member, when it has a
/// ring (a wrapping strategy's inner one included); `None` without a ring or when the parameter
/// is not a usable integer (building the strategy then reports it).
pub fn ring_points_per_member(name: &str, params: &Params) -> Option<usize> {
    let integer = |key: &str| -> Option<Option<usize>> {
        match params.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(Value::Number(n)) => n.as_u64().and_then(|n| usize::try_from(n).ok()).map(Some),
            Some(Value::String(s)) => s.trim().parse().ok().map(Some),
            Some(_) => None,
        }
    };
    match name {
        "consistent_hash" | "CONSISTENT_HASH" => Some(
            integer("virtual_node_count")?
                .unwrap_or(ConsistentHash::DEFAULT_VIRTUAL_NODES as usize),
        ),
        "balanced_sticky" => {
            Some(integer("virtual_nodes")?.unwrap_or(BalancedSticky::DEFAULT_VIRTUAL_NODES))
        }
        "machine_room_nearby" | "designated" => {
            let inner = match params.get("inner_strategy") {
                None | Some(Value::Null) => "averagely",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => return None,
            };
            let inner_params = match params.get("inner_params") {
                None | Some(Value::Null) => Params::new(),
                Some(Value::Object(o)) => o.clone(),
                Some(_) => return None,
            };
            ring_points_per_member(inner, &inner_params)
        }
        _ => None,
    }
}

/// Refuses a strategy whose hash ring for `members` members would exceed [`MAX_RING_POINTS`].
pub fn check_ring(name: &str, params: &Params, members: usize) -> Result<(), String> {
    let Some(per_member) = ring_points_per_member(name, params) else {
        return Ok(());
    };
    match per_member.checked_mul(members) {
        Some(points) if points <= MAX_RING_POINTS => Ok(()),
        _ => Err(format!(
            "strategy `{name}` would build a hash ring of {members} members x {per_member} \
             virtual nodes; at most {MAX_RING_POINTS} points are allowed (fewer members or \
             virtual nodes)"
        )),
    }
}

/// The parameter keys a built-in strategy reads (the core registry's list), or `None` for a
/// name it does not know.
pub fn strategy_param_keys(name: &str) -> Option<&'static [&'static str]> {
    rebalance_core::strategy::StrategyRegistry::default().param_keys(name)
}

/// Warnings for the `--param` keys that strategy `name` (or, with `assignor`, a group assignor,
/// which takes none) does not read: they are ignored, most likely misspelled.
pub fn unknown_param_warnings(name: &str, assignor: bool, params: &Params) -> Vec<String> {
    let known: &[&str] = if assignor {
        &[]
    } else {
        match strategy_param_keys(name) {
            Some(keys) => keys,
            None => return Vec::new(),
        }
    };
    let top: Vec<String> = params
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| {
            let what = if assignor { "assignor" } else { "strategy" };
            if known.is_empty() {
                format!("--param {k}: {what} `{name}` takes no parameters; ignored")
            } else {
                format!(
                    "--param {k}: {what} `{name}` does not read it (it reads {}); ignored",
                    known.join(", ")
                )
            }
        })
        .collect();
    if assignor {
        return top;
    }
    // The registry lists the top-level keys first, then those of a wrapper's `inner_params`.
    let nested = rebalance_core::strategy::StrategyRegistry::default()
        .unknown_params(name, params)
        .into_iter()
        .skip(top.len())
        .map(|e| format!("--param inner_params: {e}; ignored"));
    top.into_iter().chain(nested).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A strategy registered without its keys here would take any `--param` without a word.
    #[test]
    fn every_registered_strategy_lists_the_keys_it_reads() {
        let registry = rebalance_core::strategy::StrategyRegistry::default();
        for name in registry.names() {
            assert!(
                strategy_param_keys(name).is_some(),
                "`{name}` is not listed"
            );
        }
        assert_eq!(strategy_param_keys("no_such_strategy"), None);
    }

    fn params(v: Value) -> Params {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn rings_are_measured_through_wrappers() {
        assert_eq!(ring_points_per_member("averagely", &Params::new()), None);
        assert_eq!(
            ring_points_per_member("consistent_hash", &Params::new()),
            Some(10)
        );
        assert_eq!(
            ring_points_per_member("balanced_sticky", &params(json!({"virtual_nodes": "7"}))),
            Some(7)
        );
        let nearby = params(json!({"inner_strategy": "balanced_sticky",
                                   "inner_params": {"virtual_nodes": 65536}}));
        assert_eq!(
            ring_points_per_member("machine_room_nearby", &nearby),
            Some(65536)
        );
        assert!(check_ring("machine_room_nearby", &nearby, 2000).is_err());
        assert!(check_ring("balanced_sticky", &Params::new(), 2000).is_ok());
        let huge = params(json!({"virtual_node_count": i64::MAX}));
        let err = check_ring("consistent_hash", &huge, 2).unwrap_err();
        assert!(err.contains("at most 20000000 points"), "{err}");
        // Not an integer: left to the strategy's own error.
        assert!(
            check_ring(
                "consistent_hash",
                &params(json!({"virtual_node_count": -1})),
                2
            )
            .is_ok()
        );
    }

    #[test]
    fn unknown_keys_are_named_and_known_ones_are_not() {
        let p = params(json!({"virtual_node_count": 3, "virtual_nodes": 4}));
        let w = unknown_param_warnings("consistent_hash", false, &p);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("--param virtual_nodes:"), "{w:?}");
        let w = unknown_param_warnings("range", true, &params(json!({"x": 1})));
        assert!(w[0].contains("takes no parameters"), "{w:?}");
        assert!(unknown_param_warnings("my_own", false, &p).is_empty());
        assert!(unknown_param_warnings("averagely", false, &Params::new()).is_empty());
        let nested = params(json!({"inner_strategy": "consistent_hash",
                                   "inner_params": {"virtual_nodes": 4}}));
        assert_eq!(
            unknown_param_warnings("machine_room_nearby", false, &nested),
            [
                "--param inner_params: strategy `consistent_hash` has no parameter `virtual_nodes` \
              (it reads virtual_node_count, hash_function); a misspelled name would leave the \
              default in place; ignored"
            ]
        );
    }
}
