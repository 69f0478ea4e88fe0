//! `rebalance simulate`: real runtime clients on the in-memory cluster and a scripted scenario,
//! on tokio's paused clock.

pub mod engine;
pub mod report;
pub mod scenario;

use std::io::{self, Write};
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_core::assignor::AssignorRegistry;
use rebalance_core::strategy::StrategyRegistry;
use rebalance_runtime::Allocation;
use serde_json::{Value, json};

pub use self::engine::{Config, Outcome, simulate};
pub use self::report::{Summary, summarize};
use crate::args::{parse_duration, parse_param};
use crate::table;

/// The command's arguments.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The allocation strategy.
    #[arg(long, default_value = "averagely")]
    pub strategy: String,
    /// A Kafka-style group assignor (`range`, `roundrobin`, `sticky`, `cooperative_sticky`,
    /// `broadcast`) run leaderlessly, instead of the strategy.
    #[arg(long, conflicts_with = "strategy")]
    pub assignor: Option<String>,
    /// A strategy parameter, `key=value` (repeatable).
    #[arg(long = "param", value_parser = parse_param)]
    pub params: Vec<(String, Value)>,
    /// Topics (`topic-0`, `topic-1`, …).
    #[arg(long, default_value_t = 1)]
    pub topics: usize,
    /// Queues per topic.
    #[arg(long, default_value_t = 8)]
    pub queues: i32,
    /// Brokers per topic, named `room{b mod 3}@broker-{b}`.
    #[arg(long, default_value_t = 2)]
    pub brokers: usize,
    /// Clients at the start, numbered from 0.
    #[arg(long, default_value_t = 3)]
    pub consumers: usize,
    /// Scripted events: `join@5s,leave:2@10s,crash:3@15s,ns-down@20s,ns-up@40s`.
    #[arg(long, default_value = "")]
    pub events: String,
    /// Simulated duration.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Seeds the start-up jitter of the initial clients.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// JSON lines instead of a timeline.
    #[arg(long)]
    pub json: bool,
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// Bad arguments.
    #[error("{0}")]
    Arguments(String),
    /// The simulation failed.
    #[error(transparent)]
    Sim(#[from] engine::SimError),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Builds the configuration from the arguments.
pub fn config(args: &SimulateArgs) -> Result<Config, SimulateError> {
    let params = crate::args::params(&args.params);
    let allocation = match &args.assignor {
        Some(name) => Allocation::Assignor(
            AssignorRegistry::default()
                .build(name, &params)
                .map_err(|e| SimulateError::Arguments(e.to_string()))?,
        ),
        None => Allocation::Strategy(
            StrategyRegistry::default()
                .build(&args.strategy, &params)
                .map_err(|e| SimulateError::Arguments(e.to_string()))?,
        ),
    };
    if args.queues < 0 {
        return Err(SimulateError::Arguments(
            "--queues must not be negative".into(),
        ));
    }
    Ok(Config {
        allocation,
        topics: args.topics,
        queues: args.queues,
        brokers: args.brokers,
        consumers: args.consumers,
        events: scenario::parse_events(&args.events).map_err(SimulateError::Arguments)?,
        duration: args.duration,
        seed: args.seed,
    })
}

/// Runs the command.
pub fn run(args: &SimulateArgs, out: &mut impl Write) -> Result<Summary, SimulateError> {
    let config = config(args)?;
    let outcome = simulate(&config)?;
    let summary = summarize(&outcome);
    if args.json {
        write_json(&outcome, &summary, out)?;
    } else {
        write_text(&config, &outcome, &summary, out)?;
    }
    Ok(summary)
}

fn triples(queues: &[MessageQueue]) -> Vec<Value> {
    queues.iter().map(MessageQueue::to_json_triple).collect()
}

/// One line per callback, one per client, then the summary.
pub fn write_json(outcome: &Outcome, summary: &Summary, out: &mut impl Write) -> io::Result<()> {
    for r in &outcome.records {
        let mut line = json!({
            "t_ms": r.t_ms,
            "client": r.client.as_str(),
            "event": match r.change { engine::Change::Added => "added", engine::Change::Removed(_) => "removed" },
            "topic": r.topic,
            "queues": triples(&r.queues),
        });
        if let engine::Change::Removed(reason) = r.change {
            line["reason"] = json!(reason.as_str());
        }
        writeln!(out, "{line}")?;
    }
    for c in &outcome.clients {
        let line = json!({
            "client": c.client.as_str(),
            "index": c.index,
            "status": c.status.as_str(),
            "owned": triples(&c.owned),
        });
        writeln!(out, "{line}")?;
    }
    let line = json!({"summary": {
        "converged": summary.converged,
        "double_owned_queue_ms": summary.double_owned_queue_ms,
        "unowned_queue_ms": summary.unowned_queue_ms,
        "moves": summary.moves,
        "rounds": summary.rounds,
    }});
    writeln!(out, "{line}")
}

/// A readable timeline and the summary.
pub fn write_text(
    config: &Config,
    outcome: &Outcome,
    summary: &Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    writeln!(
        out,
        "{} topic(s) x {} queues on {} broker(s), {} consumer(s), allocation {}",
        config.topics,
        config.queues,
        config.brokers.max(1),
        config.consumers,
        config.allocation.name()
    )?;
    let mut events = config.events.iter().peekable();
    for r in &outcome.records {
        while let Some(e) = events.next_if(|e| e.at.as_millis() as u64 <= r.t_ms) {
            writeln!(out, "[{:>9.3}s] --- {:?}", e.at.as_secs_f64(), e.action)?;
        }
        let what = match &r.change {
            engine::Change::Added => "+".to_string(),
            engine::Change::Removed(reason) => format!("- ({reason})"),
        };
        writeln!(
            out,
            "[{:>9.3}s] {}  {what} {}",
            r.t_ms as f64 / 1000.0,
            r.client,
            table::compact_queues(&r.queues)
        )?;
    }
    for e in events {
        writeln!(out, "[{:>9.3}s] --- {:?}", e.at.as_secs_f64(), e.action)?;
    }
    writeln!(out)?;
    let rows = outcome.clients.iter().map(|c| {
        vec![
            c.index.to_string(),
            c.client.to_string(),
            c.status.as_str().to_string(),
            c.owned.len().to_string(),
            c.rounds.to_string(),
        ]
    });
    table::write(out, &["index", "client", "status", "owned", "rounds"], rows)?;
    writeln!(
        out,
        "\nconverged: {}  double-owned: {} queue-ms  unowned: {} queue-ms  moves: {}  rounds: {}",
        summary.converged,
        summary.double_owned_queue_ms,
        summary.unowned_queue_ms,
        summary.moves,
        summary.rounds
    )
}
