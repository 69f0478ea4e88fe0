//! `rebalance compare`: how balanced each strategy's plans are, and how many queues each moves
//! when members join and leave, against the fewest any balanced plan would have to move.
//!
//! `rebalance compare --queues Q --consumers N --events "join,leave:3,join,leave:0"
//! [--strategies a,b,...] [--seed S] [--json] [--svg FILE]` starts from N members (ids built as
//! in `rebalance bench`), applies the events one after another (`join` adds a member with a fresh
//! id, `leave:i` removes the member at position `i` of the current sorted list, `leave-client:i`
//! client number `i` as `rebalance simulate`'s `leave:i` does, `leave` a member picked with the
//! seed) and prints, for every strategy, the spread after each event and the queues moved
//! against the minimum (see [`metrics::min_moves`]).
//!
//! - **spread**: the largest share minus the smallest share, in queues (0 or 1 is as even as
//!   the queues allow);
//! - **max/mean** (`max_over_mean`): the largest share over the mean share (1.0 is even);
//! - **moved**: queues whose owner changed with the event; **min_moves**: the fewest any
//!   balanced plan would have moved.
//!
//! JSON lines: `{"strategy", "event", "spread", "max_over_mean",
//! "moved", "min_moves", ...}`. `--svg FILE` writes a chart of both.
//!
//! `--sample K` instead draws K random groups (Q uniform in 8..=queues, N in 2..=consumers), each
//! with one join or leave (alternately), and prints each strategy's total queues moved against
//! the total minimum, overall and by queues per member.

pub mod events;
pub mod metrics;
pub mod svg;

use std::io::Write;
use std::path::PathBuf;

use rebalance_core::strategy::{Params, StrategyRef, StrategyRegistry};
use rebalance_core::{AllocateError, ClientId, MessageQueue};
use serde_json::{Value, json};

use crate::rng::SplitMix64;
use crate::svg::{SvgFile, SvgFileError};
use crate::{limits, table, workload};
use events::{Event, Members, parse_events};
use metrics::Owners;

/// The strategies compared when none are named: those that divide every queue among the
/// members with default parameters.
pub const DEFAULT_STRATEGIES: [&str; 5] = [
    "averagely",
    "averagely_by_circle",
    "consistent_hash",
    "machine_room_nearby",
    "balanced_sticky",
];

/// The command's arguments.
///
/// Limits (checked before anything is built): at most 10,000,000 queues, 1,000,000 members
/// (with the ones that join), a hash ring of at most 20,000,000 points (members × virtual nodes:
/// `balanced_sticky` has 128 per member, `consistent_hash` 10) and 1,000,000 samples.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// Queues of the topic (with --sample: the largest number drawn), from 1 to 10,000,000.
    #[arg(long, value_parser = limits::count(1, limits::MAX_QUEUES))]
    pub queues: usize,
    /// Members at the start (with --sample: the largest number drawn), from 1 to 1,000,000.
    #[arg(long, value_parser = limits::count(1, limits::MAX_CONSUMERS))]
    pub consumers: usize,
    /// Events applied in turn: `join`, `leave:i` (position in the current sorted list, also
    /// `leave-position:i`), `leave-client:i` (client number i, counting the first members 0..N
    /// and joiners on from N, like `rebalance simulate`'s `leave:i`), `leave` (random).
    #[arg(long)]
    pub events: Option<String>,
    /// Strategies to compare, comma separated (default: averagely, averagely_by_circle,
    /// consistent_hash, machine_room_nearby, balanced_sticky).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// Seeds random choices (`leave` without a position, --sample).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG chart of moves and spread to this file (created before the comparison
    /// runs, so a path that cannot be written fails at once).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Instead of one group and a list of events, draw this many random groups (at most
    /// 1,000,000) with one join or leave each and print totals.
    #[arg(long, value_parser = limits::count(0, limits::MAX_SAMPLES))]
    pub sample: Option<usize>,
}

/// What the arguments ask for that will be ignored: `--svg` with `--sample` (the chart shows
/// the events of one group).
pub fn warnings(args: &CompareArgs) -> Vec<String> {
    match (&args.svg, args.sample) {
        (Some(path), Some(_)) => vec![format!(
            "--svg {}: no chart is drawn with --sample; ignored",
            path.display()
        )],
        _ => Vec::new(),
    }
}

/// Why the comparison failed.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Bad arguments.
    #[error("{0}")]
    Arguments(String),
    /// A strategy could not be built.
    #[error(transparent)]
    Strategy(#[from] rebalance_core::strategy::StrategyConfigError),
    /// A strategy refused the inputs.
    #[error("strategy `{0}` failed: {1}")]
    Allocate(String, AllocateError),
    /// The `--svg` file could not be created or written.
    #[error("--svg `{}`: {source}", path.display())]
    Svg {
        /// The file named with `--svg`.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Output failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl CompareError {
    /// Whether the arguments are at fault (exit status 2, including an `--svg` file that cannot
    /// be written) rather than the run (exit status 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CompareError::Arguments(_) | CompareError::Strategy(_) | CompareError::Svg { .. }
        )
    }
}

/// One strategy's state after one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The strategy.
    pub strategy: String,
    /// 0 for the start, then 1, 2, ... per event.
    pub step: usize,
    /// `start`, `join`, `leave:i`.
    pub event: String,
    /// Members after the event.
    pub members: usize,
    /// Largest share minus smallest share, in queues.
    pub spread: usize,
    /// Largest share over the mean share.
    pub max_over_mean: f64,
    /// Queues whose owner changed with the event.
    pub moved: usize,
    /// The fewest queues a balanced plan would have moved.
    pub min_moves: usize,
}

impl Row {
    /// The JSON line.
    pub fn to_json(&self, queues: usize) -> Value {
        json!({
            "strategy": self.strategy,
            "event": self.event,
            "spread": self.spread,
            "max_over_mean": (self.max_over_mean * 1000.0).round() / 1000.0,
            "moved": self.moved,
            "min_moves": self.min_moves,
            "step": self.step,
            "members": self.members,
            "queues": queues,
        })
    }
}

/// One strategy's totals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    /// The strategy.
    pub strategy: String,
    /// Queues moved over all events.
    pub moved: usize,
    /// The minimum over all events.
    pub min_moves: usize,
    /// The largest spread seen.
    pub worst_spread: usize,
    /// The largest max/mean seen.
    pub worst_max_over_mean: f64,
}

impl Summary {
    fn add(&mut self, row: &Row) {
        self.moved += row.moved;
        self.min_moves += row.min_moves;
        self.worst_spread = self.worst_spread.max(row.spread);
        self.worst_max_over_mean = self.worst_max_over_mean.max(row.max_over_mean);
    }

    /// Moved over minimum, or `None` when the minimum is 0.
    pub fn ratio(&self) -> Option<f64> {
        (self.min_moves > 0).then(|| self.moved as f64 / self.min_moves as f64)
    }

    /// `2.31x`, or `-` without a minimum.
    pub fn ratio_text(&self) -> String {
        self.ratio()
            .map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"))
    }
}

fn strategy_names(args: &CompareArgs) -> Vec<String> {
    if args.strategies.is_empty() {
        DEFAULT_STRATEGIES.iter().map(|s| s.to_string()).collect()
    } else {
        args.strategies
            .iter()
            .map(|s| s.trim().to_string())
            .collect()
    }
}

fn strategies(args: &CompareArgs) -> Result<Vec<(String, StrategyRef)>, CompareError> {
    let registry = StrategyRegistry::default();
    strategy_names(args)
        .into_iter()
        .map(|name| {
            let s = registry.build(&name, &Params::new())?;
            Ok((name, s))
        })
        .collect()
}

fn plan_owners(
    name: &str,
    strategy: &StrategyRef,
    queues: &[MessageQueue],
    members: &[ClientId],
) -> Result<Owners, CompareError> {
    let plan = strategy
        .plan("compare", queues, members)
        .map_err(|e| CompareError::Allocate(name.to_string(), e))?;
    Ok(metrics::owners(&plan, queues))
}

/// Refuses sizes above the limits of [`limits`] before anything is built.
fn check_sizes(args: &CompareArgs, joins: usize) -> Result<(), CompareError> {
    let bad = |m: String| Err(CompareError::Arguments(m));
    if args.queues == 0 || args.consumers == 0 {
        return bad("--queues and --consumers must be at least 1".into());
    }
    if args.queues > limits::MAX_QUEUES {
        return bad(format!("--queues must be at most {}", limits::MAX_QUEUES));
    }
    let members = args.consumers.saturating_add(joins);
    if members > limits::MAX_CONSUMERS {
        return bad(format!(
            "--consumers {} and {joins} join(s) make {members} members; at most {}",
            args.consumers,
            limits::MAX_CONSUMERS
        ));
    }
    if args.sample.is_some_and(|k| k > limits::MAX_SAMPLES) {
        return bad(format!("--sample must be at most {}", limits::MAX_SAMPLES));
    }
    for name in strategy_names(args) {
        limits::check_ring(&name, &Params::new(), members).map_err(CompareError::Arguments)?;
    }
    Ok(())
}

impl From<SvgFileError> for CompareError {
    fn from(e: SvgFileError) -> Self {
        CompareError::Svg {
            path: e.path,
            source: e.source,
        }
    }
}

/// Runs the comparison the arguments describe and writes it to `out` (and the chart to
/// `--svg`).
pub fn run(args: &CompareArgs, out: &mut dyn Write) -> Result<Vec<Summary>, CompareError> {
    if let Some(samples) = args.sample {
        check_sizes(args, 1)?;
        return sample(args, samples, out);
    }
    let events =
        parse_events(args.events.as_deref().ok_or_else(|| {
            CompareError::Arguments("--events is required (or --sample K)".into())
        })?)
        .map_err(CompareError::Arguments)?;
    let joins = events.iter().filter(|e| **e == Event::Join).count();
    check_sizes(args, joins)?;
    let svg = args.svg.as_deref().map(SvgFile::open).transpose()?;
    match compare(args, &events, out) {
        Ok((rows, summaries)) => {
            if let Some(svg) = svg {
                let title = format!(
                    "{} queues, {} members, events {}",
                    args.queues,
                    args.consumers,
                    args.events.as_deref().unwrap_or_default()
                );
                svg.write(&svg::chart(&title, &rows, &summaries))?;
            }
            Ok(summaries)
        }
        Err(e) => {
            if let Some(svg) = svg {
                svg.abandon();
            }
            Err(e)
        }
    }
}

/// Applies the events to every strategy and writes the table or JSON lines.
fn compare(
    args: &CompareArgs,
    events: &[Event],
    out: &mut dyn Write,
) -> Result<(Vec<Row>, Vec<Summary>), CompareError> {
    let strategies = strategies(args)?;
    let queues = workload::queues(args.queues);

    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    for (name, strategy) in &strategies {
        let mut summary = Summary {
            strategy: name.clone(),
            ..Summary::default()
        };
        // The member lists after each event are the same for every strategy (same events, same
        // seed); they are replayed per strategy rather than all kept in memory.
        let mut members = Members::new(args.consumers);
        let mut rng = SplitMix64::new(args.seed);
        let mut previous: Option<Owners> = None;
        for step in 0..=events.len() {
            let event = match step.checked_sub(1).map(|i| events[i]) {
                None => "start".to_string(),
                Some(event) => {
                    let what = members
                        .apply(event, &mut rng)
                        .map_err(CompareError::Arguments)?;
                    match event {
                        Event::Join => "join".to_string(),
                        Event::Leave(_) | Event::LeaveClient(_) => {
                            what.split(' ').next().unwrap_or("leave").to_string()
                        }
                    }
                }
            };
            let ids = members.ids();
            let owners = plan_owners(name, strategy, &queues, ids)?;
            let balance = metrics::balance(&owners, ids);
            let (moved, min_moves) = match &previous {
                Some(before) => (
                    metrics::moved(before, &owners),
                    metrics::min_moves(before, ids),
                ),
                None => (0, 0),
            };
            let row = Row {
                strategy: name.clone(),
                step,
                event,
                members: ids.len(),
                spread: balance.spread,
                max_over_mean: balance.max_over_mean,
                moved,
                min_moves,
            };
            summary.add(&row);
            rows.push(row);
            previous = Some(owners);
        }
        summaries.push(summary);
    }

    if args.json {
        for row in &rows {
            writeln!(out, "{}", row.to_json(args.queues))?;
        }
    } else {
        write_table(out, &rows, &summaries)?;
    }
    Ok((rows, summaries))
}

/// What the columns mean, printed under the tables.
pub const LEGEND: &str = "spread: largest share minus smallest share, in queues (0 or 1 is as \
even as the queues allow); max/mean: largest share over the mean share (1.000 is even); moved: \
queues whose owner changed with the event; minimum: the fewest any balanced plan would move";

fn write_table(out: &mut dyn Write, rows: &[Row], summaries: &[Summary]) -> std::io::Result<()> {
    table::write(
        out,
        &[
            "strategy", "step", "event", "members", "spread", "max/mean", "moved", "minimum",
        ],
        rows.iter().map(|r| {
            vec![
                r.strategy.clone(),
                r.step.to_string(),
                r.event.clone(),
                r.members.to_string(),
                r.spread.to_string(),
                format!("{:.3}", r.max_over_mean),
                r.moved.to_string(),
                r.min_moves.to_string(),
            ]
        }),
    )?;
    writeln!(out)?;
    table::write(
        out,
        &[
            "strategy",
            "moved",
            "minimum",
            "moved/minimum",
            "worst spread",
            "worst max/mean",
        ],
        summaries.iter().map(|s| {
            vec![
                s.strategy.clone(),
                s.moved.to_string(),
                s.min_moves.to_string(),
                s.ratio_text(),
                s.worst_spread.to_string(),
                format!("{:.3}", s.worst_max_over_mean),
            ]
        }),
    )?;
    writeln!(out, "\n{LEGEND}")
}

/// Queues-per-member regimes of the `--sample` report.
const REGIMES: [(&str, f64); 4] = [
    ("<4", 4.0),
    ("4-16", 16.0),
    ("16-64", 64.0),
    (">=64", f64::INFINITY),
];

/// Sample `k`'s group and event: `8..=queues` queues, `2..=consumers` members, a join for even
/// `k` and a leave for odd `k`.
fn draw(args: &CompareArgs, k: usize, rng: &mut SplitMix64) -> (usize, usize, Event) {
    let q = 8 + rng.below((args.queues - 7) as u64) as usize;
    let n = 2 + rng.below((args.consumers - 1) as u64) as usize;
    let event = if k.is_multiple_of(2) {
        Event::Join
    } else {
        Event::Leave(None)
    };
    (q, n, event)
}

/// The [`REGIMES`] entry of `q` queues over `n` members.
fn regime(q: usize, n: usize) -> usize {
    REGIMES
        .iter()
        .position(|&(_, upper)| (q as f64 / n as f64) < upper)
        .unwrap_or(REGIMES.len() - 1)
}

fn sample(
    args: &CompareArgs,
    samples: usize,
    out: &mut dyn Write,
) -> Result<Vec<Summary>, CompareError> {
    if args.queues < 8 || args.consumers < 2 {
        return Err(CompareError::Arguments(
            "--sample needs --queues of at least 8 and --consumers of at least 2".into(),
        ));
    }
    let strategies = strategies(args)?;
    let mut rng = SplitMix64::new(args.seed);
    let mut totals: Vec<Summary> = strategies
        .iter()
        .map(|(name, _)| Summary {
            strategy: name.clone(),
            ..Summary::default()
        })
        .collect();
    let mut regimes: Vec<Vec<Summary>> =
        vec![vec![Summary::default(); REGIMES.len()]; strategies.len()];
    for k in 0..samples {
        let (q, n, event) = draw(args, k, &mut rng);
        let queues = workload::queues(q);
        let mut members = Members::new(n);
        let before_ids = members.ids().to_vec();
        members
            .apply(event, &mut rng)
            .map_err(CompareError::Arguments)?;
        let regime = regime(q, n);
        for (s, (name, strategy)) in strategies.iter().enumerate() {
            let before = plan_owners(name, strategy, &queues, &before_ids)?;
            let after = plan_owners(name, strategy, &queues, members.ids())?;
            let balance = metrics::balance(&after, members.ids());
            let row = Row {
                strategy: name.clone(),
                step: k + 1,
                event: event.to_string(),
                members: members.ids().len(),
                spread: balance.spread,
                max_over_mean: balance.max_over_mean,
                moved: metrics::moved(&before, &after),
                min_moves: metrics::min_moves(&before, members.ids()),
            };
            totals[s].add(&row);
            regimes[s][regime].add(&row);
        }
    }
    for (s, total) in totals.iter().enumerate() {
        let by_regime: serde_json::Map<String, Value> = REGIMES
            .iter()
            .zip(&regimes[s])
            .map(|(&(label, _), r)| {
                (
                    label.to_string(),
                    json!({"moved": r.moved, "min_moves": r.min_moves, "ratio": r.ratio().map(|x| (x * 1000.0).round() / 1000.0)}),
                )
            })
            .collect();
        if args.json {
            writeln!(
                out,
                "{}",
                json!({
                    "strategy": total.strategy,
                    "samples": samples,
                    "moved": total.moved,
                    "min_moves": total.min_moves,
                    "ratio": total.ratio().map(|x| (x * 1000.0).round() / 1000.0),
                    "worst_spread": total.worst_spread,
                    "by_queues_per_member": by_regime,
                    "max_queues": args.queues,
                    "max_consumers": args.consumers,
                    "seed": args.seed,
                })
            )?;
        }
    }
    if !args.json {
        let mut header = vec![
            "strategy".to_string(),
            "moved".into(),
            "minimum".into(),
            "moved/minimum".into(),
            "worst spread".into(),
        ];
        header.extend(REGIMES.iter().map(|(label, _)| format!("Q/N {label}")));
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        table::write(
            out,
            &header,
            totals.iter().zip(&regimes).map(|(t, r)| {
                let mut row = vec![
                    t.strategy.clone(),
                    t.moved.to_string(),
                    t.min_moves.to_string(),
                    t.ratio_text(),
                    t.worst_spread.to_string(),
                ];
                row.extend(r.iter().map(Summary::ratio_text));
                row
            }),
        )?;
    }
    Ok(totals)
}

#[cfg(test)]
mod tests;
