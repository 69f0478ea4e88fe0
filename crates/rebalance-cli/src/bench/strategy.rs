//! `rebalance bench --strategy`: one allocation for one consumer (`allocate_shared`, what the
//! runtime calls every round) and the whole group's plan, on the Java
//! reference workload.

use std::time::Instant;

use rebalance_core::strategy::{Params, StrategyRegistry};
use rebalance_core::{AllocateError, ClientId, MessageQueue};
use serde_json::{Value, json};

use super::BenchError;
use super::timing::{Measured, Sampling, measure, median, round3};
use crate::{limits, workload};

/// The group name passed to the strategies (only logs use it).
const GROUP: &str = "bench";
/// Fresh strategy values timed for the cold plan (fewer when one call is slow).
const COLD_RUNS: usize = 3;

/// A strategy benchmark case.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyCase {
    /// The strategy's registered name.
    pub strategy: String,
    /// Its parameters; see [`with_reference_params`] for the defaults filled in.
    pub params: Params,
    /// Queues of the topic.
    pub queues: usize,
    /// Consumers of the group.
    pub consumers: usize,
    /// Exactly this many samples of each measurement, or fitted into about a second.
    pub runs: Option<usize>,
}

/// What a strategy benchmark measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyResult {
    /// The case.
    pub case: StrategyCase,
    /// One `allocate_shared` (the call a client makes every round) for the consumer at position
    /// N/2 (median, µs).
    pub single: Measured,
    /// The whole group's plan (median, µs), on a strategy value that has seen the inputs before.
    pub plan: Measured,
    /// The whole group's plan on freshly built strategy values (median of up to 3, µs): what
    /// the first round costs when a strategy keeps results between rounds.
    pub cold_plan_us: f64,
    /// How many fresh strategy values `cold_plan_us` is the median of (3, or 1 when a plan
    /// takes over 2 s).
    pub cold_runs: usize,
    /// Queues in the plan (a check that it covered the topic).
    pub assigned: usize,
    /// Queues the timed single allocation gave the consumer at position N/2.
    pub single_assigned: usize,
}

/// Fills in the parameters the Java reference timings used when the case does not name them:
/// `by_machine_room` consumes rooms `room0,room1`; `by_config` is configured with the first
/// ceil(Q/N) queues.
pub fn with_reference_params(
    strategy: &str,
    mut params: Params,
    mq_all: &[MessageQueue],
    consumers: usize,
) -> Params {
    match strategy {
        "by_machine_room" | "MACHINE_ROOM" => {
            params
                .entry("consumer_idcs")
                .or_insert_with(|| json!("room0,room1"));
        }
        "by_config" | "CONFIG" => {
            params.entry("message_queue_list").or_insert_with(|| {
                let n = mq_all.len().div_ceil(consumers.max(1));
                Value::Array(mq_all[..n].iter().map(|q| q.to_json_triple()).collect())
            });
        }
        _ => {}
    }
    params
}

/// Checks a case's sizes and runs before anything is built (the command line checks them too;
/// a case built in code is checked here).
fn check(case: &StrategyCase) -> Result<(), BenchError> {
    if case.queues == 0 || case.consumers == 0 {
        return Err(BenchError::Arguments(
            "--queues and --consumers must be at least 1".into(),
        ));
    }
    if case.queues > limits::MAX_QUEUES || case.consumers > limits::MAX_CONSUMERS {
        return Err(BenchError::Arguments(format!(
            "at most {} --queues and {} --consumers",
            limits::MAX_QUEUES,
            limits::MAX_CONSUMERS
        )));
    }
    super::check_runs(case.runs)?;
    limits::check_ring(&case.strategy, &case.params, case.consumers).map_err(BenchError::Arguments)
}

/// Runs a strategy benchmark case.
pub fn run(case: &StrategyCase, registry: &StrategyRegistry) -> Result<StrategyResult, BenchError> {
    check(case)?;
    let mq_all = workload::queues(case.queues);
    let cid_all = workload::client_ids(case.consumers);
    let params =
        with_reference_params(&case.strategy, case.params.clone(), &mq_all, case.consumers);
    let build = || registry.build(&case.strategy, &params);
    let strategy = build()?;
    let current: &ClientId = &cid_all[case.consumers / 2];
    let allocate_error = |e: AllocateError| BenchError::Allocate(case.strategy.clone(), e);

    let mut cold = Vec::with_capacity(COLD_RUNS);
    let mut assigned = 0;
    for _ in 0..COLD_RUNS {
        let fresh = build()?;
        let start = Instant::now();
        let plan = fresh
            .plan(GROUP, &mq_all, &cid_all)
            .map_err(allocate_error)?;
        cold.push(start.elapsed().as_secs_f64() * 1e6);
        assigned = plan.assigned_count();
        drop(plan);
        if cold[0] > 2e6 {
            break;
        }
    }
    let plan = measure(Sampling::within_a_second(9, case.runs), || {
        strategy
            .plan(GROUP, &mq_all, &cid_all)
            .map(|p| p.assigned_count())
    })
    .map_err(allocate_error)?;
    let single = measure(Sampling::within_a_second(15, case.runs), || {
        strategy.allocate_shared(GROUP, current, &mq_all, &cid_all)
    })
    .map_err(allocate_error)?;
    let single_assigned = strategy
        .allocate_shared(GROUP, current, &mq_all, &cid_all)
        .map_err(allocate_error)?
        .len();
    Ok(StrategyResult {
        case: StrategyCase {
            params,
            ..case.clone()
        },
        single,
        plan,
        cold_runs: cold.len(),
        cold_plan_us: median(&mut cold),
        assigned,
        single_assigned,
    })
}

impl StrategyResult {
    /// The JSON line: `{"strategy", "queues", "consumers", "single_us", "plan_us", "runs"}`,
    /// then `cold_plan_us`, `cold_runs`, `single_runs`, `assigned`, `single_assigned` and
    /// `params`.
    pub fn to_json(&self) -> Value {
        json!({
            "strategy": self.case.strategy,
            "queues": self.case.queues,
            "consumers": self.case.consumers,
            "single_us": round3(self.single.median_us),
            "plan_us": round3(self.plan.median_us),
            "runs": self.plan.runs,
            "cold_plan_us": round3(self.cold_plan_us),
            "cold_runs": self.cold_runs,
            "single_runs": self.single.runs,
            "assigned": self.assigned,
            "single_assigned": self.single_assigned,
            "params": shown_params(&self.case.params),
        })
    }

    /// One line for people.
    pub fn to_text(&self) -> String {
        format!(
            "{} queues={} consumers={}: allocate {} (median of {}), plan {} (median of {}), first plan {}",
            self.case.strategy,
            self.case.queues,
            self.case.consumers,
            human(self.single.median_us),
            self.single.runs,
            human(self.plan.median_us),
            self.plan.runs,
            human(self.cold_plan_us),
        )
    }
}

/// The parameters as echoed in the JSON line: a long list is summarized by its length.
fn shown_params(params: &Params) -> Value {
    let shown: Params = params
        .iter()
        .map(|(k, v)| match v {
            Value::Array(items) if items.len() > 8 => {
                (k.clone(), json!(format!("<{} items>", items.len())))
            }
            _ => (k.clone(), v.clone()),
        })
        .collect();
    Value::Object(shown)
}

/// `12.3 µs`, `4.56 ms`, `1.23 s`.
pub fn human(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.2} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else {
        format!("{:.2} s", us / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_params_are_filled_in_only_when_missing() {
        let mq = workload::queues(10);
        let p = with_reference_params("by_config", Params::new(), &mq, 3);
        assert_eq!(p["message_queue_list"].as_array().unwrap().len(), 4);
        let mut long = Params::new();
        long.insert("message_queue_list".into(), json!(vec![1; 20]));
        assert_eq!(shown_params(&long)["message_queue_list"], "<20 items>");
        let p = with_reference_params("by_machine_room", Params::new(), &mq, 3);
        assert_eq!(p["consumer_idcs"], "room0,room1");
        let mut given = Params::new();
        given.insert("consumer_idcs".into(), json!("room2"));
        let p = with_reference_params("by_machine_room", given, &mq, 3);
        assert_eq!(p["consumer_idcs"], "room2");
    }

    #[test]
    fn a_small_case_runs_and_reports_every_field() {
        let case = StrategyCase {
            strategy: "averagely".into(),
            params: Params::new(),
            queues: 64,
            consumers: 8,
            runs: Some(3),
        };
        let r = run(&case, &StrategyRegistry::default()).unwrap();
        assert_eq!(r.assigned, 64);
        let v = r.to_json();
        for key in [
            "strategy",
            "queues",
            "consumers",
            "single_us",
            "plan_us",
            "runs",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        assert_eq!(v["runs"], 3);
        assert_eq!(v["single_runs"], 3);
        assert_eq!(v["cold_runs"], 3);
        // Plans of 64 queues take microseconds: neither 0 nor about a second (the elapsed
        // seconds, not scaled to µs, or shifted by a million).
        let cold = v["cold_plan_us"].as_f64().unwrap();
        assert!(cold > 0.0 && cold < 100_000.0, "{cold}");
        assert_eq!(
            r.to_text(),
            format!(
                "averagely queues=64 consumers=8: allocate {} (median of 3), plan {} (median of 3), first plan {}",
                human(r.single.median_us),
                human(r.plan.median_us),
                human(r.cold_plan_us)
            )
        );
    }

    #[test]
    fn the_single_allocation_is_the_one_of_the_consumer_at_position_n_over_2() {
        // averagely, 10 queues over 4: shares 3, 3, 2, 2; position 2 gets 2.
        let case = StrategyCase {
            strategy: "averagely".into(),
            params: Params::new(),
            queues: 10,
            consumers: 4,
            runs: Some(1),
        };
        let r = run(&case, &StrategyRegistry::default()).unwrap();
        assert_eq!(r.single_assigned, 2);
        assert_eq!(r.to_json()["single_assigned"], 2);
        assert_eq!(r.assigned, 10);
    }

    #[test]
    fn the_json_line_echoes_the_reference_params_used() {
        let case = StrategyCase {
            strategy: "by_machine_room".into(),
            params: Params::new(),
            queues: 32,
            consumers: 4,
            runs: Some(1),
        };
        let v = run(&case, &StrategyRegistry::default()).unwrap().to_json();
        assert_eq!(v["params"]["consumer_idcs"], "room0,room1");
    }

    #[test]
    fn long_lists_are_summarized_from_nine_items() {
        let shown = |n: usize| {
            let mut p = Params::new();
            p.insert("list".into(), json!(vec![1; n]));
            shown_params(&p)["list"].clone()
        };
        assert_eq!(shown(8), json!(vec![1; 8]));
        assert_eq!(shown(9), json!("<9 items>"));
    }

    #[test]
    fn times_read_in_the_unit_that_fits() {
        assert_eq!(human(12.3), "12.30 µs");
        assert_eq!(human(999.99), "999.99 µs");
        assert_eq!(human(1_000.0), "1.00 ms");
        assert_eq!(human(4_560.0), "4.56 ms");
        assert_eq!(human(999_990.0), "999.99 ms");
        assert_eq!(human(1_000_000.0), "1.00 s");
        assert_eq!(human(1_230_000.0), "1.23 s");
    }

    #[test]
    fn sizes_and_runs_are_checked_before_anything_is_built() {
        let base = StrategyCase {
            strategy: "averagely".into(),
            params: Params::new(),
            queues: 8,
            consumers: 2,
            runs: Some(1),
        };
        let refusal = |case: StrategyCase| match check(&case) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("accepted: {case:?}"),
        };
        for empty in [
            StrategyCase {
                queues: 0,
                ..base.clone()
            },
            StrategyCase {
                consumers: 0,
                ..base.clone()
            },
        ] {
            assert!(refusal(empty).contains("at least 1"));
        }
        for too_many in [
            StrategyCase {
                queues: limits::MAX_QUEUES + 1,
                ..base.clone()
            },
            StrategyCase {
                consumers: limits::MAX_CONSUMERS + 1,
                ..base.clone()
            },
        ] {
            assert!(refusal(too_many).starts_with("at most"));
        }
        for (queues, consumers) in [(limits::MAX_QUEUES, 2), (8, limits::MAX_CONSUMERS)] {
            let at_the_limits = StrategyCase {
                queues,
                consumers,
                ..base.clone()
            };
            assert!(check(&at_the_limits).is_ok(), "{at_the_limits:?}");
            for runs in [0, limits::MAX_RUNS + 1] {
                let case = StrategyCase {
                    runs: Some(runs),
                    ..at_the_limits.clone()
                };
                assert!(refusal(case).starts_with("--runs must be from 1 to 1000"));
            }
        }
        // `run` checks first.
        let empty = StrategyCase { queues: 0, ..base };
        match run(&empty, &StrategyRegistry::default()) {
            Err(e) => assert!(e.to_string().contains("at least 1"), "{e}"),
            Ok(_) => panic!("accepted: {empty:?}"),
        }
    }
}
