//! `rebalance bench`: time a strategy or an assignor on the workloads of the Java reference
//! timings (see [`workload`](crate::workload)), so the figures compare with Java's
//! (`BENCHMARKS.md`).
//!
//! - `rebalance bench --strategy NAME [--param key=value]... --queues Q --consumers N [--json]`:
//!   after a warm-up, the median of several runs of one `allocate` for the consumer at position
//!   N/2 and of the whole group's plan. JSON: `{"strategy", "queues", "consumers", "single_us",
//!   "plan_us", "runs", ...}`.
//! - `rebalance bench --assignor NAME --topics T --partitions P --members M --scenario
//!   initial|member_left [--json]`: the median time of one assignment. JSON: `{"assignor",
//!   "topics", "partitions", "members", "scenario", "median_us", "moved", ...}`.

pub mod assignor;
pub mod strategy;
pub mod timing;

use std::io::Write;

use rebalance_core::AllocateError;
use rebalance_core::assignor::{AssignError, AssignorConfigError, AssignorRegistry};
use rebalance_core::strategy::{StrategyConfigError, StrategyRegistry};
use serde_json::Value;

pub use assignor::{AssignorCase, AssignorResult, Scenario};
pub use strategy::{StrategyCase, StrategyResult};

use crate::args::{params, parse_param};
use crate::limits;

/// The command's arguments.
///
/// Limits (checked before anything is built): at most 10,000,000 queues and 1,000,000
/// consumers; a hash ring of at most 20,000,000 points (consumers × virtual nodes); at most
/// 1,000,000 topics, 1,000,000 members and 10,000,000 partitions in all (topics × partitions);
/// for `broadcast`, at most 100,000,000 member-partition pairs; 1 to 1,000 runs.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["strategy", "assignor"])))]
pub struct BenchArgs {
    /// Time a per-topic allocation strategy (with --queues and --consumers): `averagely`,
    /// `averagely_by_circle`, `by_config`, `by_machine_room`, `consistent_hash`,
    /// `machine_room_nearby`, `designated`, `balanced_sticky`.
    #[arg(long)]
    pub strategy: Option<String>,
    /// A strategy parameter, `key=value` (repeatable; a key the strategy does not read is
    /// ignored with a warning).
    #[arg(long = "param", value_parser = parse_param, conflicts_with = "assignor")]
    pub params: Vec<(String, Value)>,
    /// Queues of the topic (strategy), from 1 to 10,000,000.
    #[arg(long, conflicts_with = "assignor", value_parser = limits::count(1, limits::MAX_QUEUES))]
    pub queues: Option<usize>,
    /// Consumers of the group (strategy), from 1 to 1,000,000.
    #[arg(long, conflicts_with = "assignor", value_parser = limits::count(1, limits::MAX_CONSUMERS))]
    pub consumers: Option<usize>,
    /// Time a group assignor (with --topics, --partitions, --members): `range`, `roundrobin`,
    /// `sticky`, `cooperative_sticky`, `broadcast`.
    #[arg(long)]
    pub assignor: Option<String>,
    /// Topics (assignor), from 1 to 1,000,000.
    #[arg(long, conflicts_with = "strategy", value_parser = limits::count(1, limits::MAX_TOPICS))]
    pub topics: Option<usize>,
    /// Partitions per topic (assignor), at most 10,000,000 over all topics.
    #[arg(long, conflicts_with = "strategy", value_parser = parse_partitions)]
    pub partitions: Option<u32>,
    /// Members (assignor), from 1 to 1,000,000.
    #[arg(long, conflicts_with = "strategy", value_parser = limits::count(1, limits::MAX_CONSUMERS))]
    pub members: Option<usize>,
    /// What to time (assignor): `initial`, the first assignment, or `member_left`, the one
    /// after consumer-{M/2} left.
    #[arg(long, value_enum, default_value_t = Scenario::Initial, conflicts_with = "strategy")]
    pub scenario: Scenario,
    /// Seeds the topic names (assignor).
    #[arg(long, default_value_t = crate::workload::DEFAULT_TOPIC_SEED)]
    pub seed: u64,
    /// Exactly this many timed runs, from 1 to 1,000 (default: as many as fit in about a
    /// second, 3 at least).
    #[arg(long, value_parser = limits::count(1, limits::MAX_RUNS))]
    pub runs: Option<usize>,
    /// One JSON line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--partitions`: from 1 to 10,000,000.
fn parse_partitions(text: &str) -> Result<u32, String> {
    let n = limits::count(1, limits::MAX_QUEUES)(text)?;
    u32::try_from(n).map_err(|_| format!("must be at most {}", limits::MAX_QUEUES))
}

/// Refuses `--runs 0` or more than [`MAX_RUNS`](limits::MAX_RUNS) (for cases built without the
/// command line).
fn check_runs(runs: Option<usize>) -> Result<(), BenchError> {
    match runs {
        Some(r) if r == 0 || r > limits::MAX_RUNS => Err(BenchError::Arguments(format!(
            "--runs must be from 1 to {}",
            limits::MAX_RUNS
        ))),
        _ => Ok(()),
    }
}

/// What the arguments ask for that will be ignored: `--param` keys the strategy does not read.
pub fn warnings(args: &BenchArgs) -> Vec<String> {
    match &args.strategy {
        Some(name) => limits::unknown_param_warnings(name, false, &params(&args.params)),
        None => Vec::new(),
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad or missing arguments.
    #[error("{0}")]
    Arguments(String),
    /// The strategy could not be built.
    #[error(transparent)]
    Strategy(#[from] StrategyConfigError),
    /// The assignor could not be built.
    #[error(transparent)]
    Assignor(#[from] AssignorConfigError),
    /// The strategy refused the workload.
    #[error("strategy `{0}` failed: {1}")]
    Allocate(String, AllocateError),
    /// The assignor refused the workload.
    #[error("assignor `{0}` failed: {1}")]
    Assign(String, AssignError),
    /// Writing the result failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl BenchError {
    /// Whether the arguments are at fault (exit status 2) rather than the run (exit status 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BenchError::Arguments(_) | BenchError::Strategy(_) | BenchError::Assignor(_)
        )
    }
}

/// Runs the benchmark the arguments name and writes its result to `out`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), BenchError> {
    let missing = |what: &str| BenchError::Arguments(format!("{what} is required"));
    let (json, text) = if let Some(name) = &args.strategy {
        let case = StrategyCase {
            strategy: name.clone(),
            params: params(&args.params),
            queues: args.queues.ok_or_else(|| missing("--queues"))?,
            consumers: args.consumers.ok_or_else(|| missing("--consumers"))?,
            runs: args.runs,
        };
        let result = strategy::run(&case, &StrategyRegistry::default())?;
        (result.to_json(), result.to_text())
    } else if let Some(name) = &args.assignor {
        let case = AssignorCase {
            assignor: name.clone(),
            topics: args.topics.ok_or_else(|| missing("--topics"))?,
            partitions: args.partitions.ok_or_else(|| missing("--partitions"))?,
            members: args.members.ok_or_else(|| missing("--members"))?,
            scenario: args.scenario,
            seed: args.seed,
            runs: args.runs,
        };
        let result = assignor::run(&case, &AssignorRegistry::default())?;
        (result.to_json(), result.to_text())
    } else {
        return Err(missing("--strategy or --assignor"));
    };
    if args.json {
        writeln!(out, "{json}")?;
    } else {
        writeln!(out, "{text}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_from_1_to_the_limit() {
        for fine in [None, Some(1), Some(limits::MAX_RUNS)] {
            assert!(check_runs(fine).is_ok(), "{fine:?}");
        }
        for refused in [Some(0), Some(limits::MAX_RUNS + 1)] {
            let err = check_runs(refused).unwrap_err();
            assert_eq!(err.to_string(), "--runs must be from 1 to 1000");
        }
    }
}
