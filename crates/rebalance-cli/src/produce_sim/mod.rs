//! `rebalance produce-sim`: simulated messages through the producer's queue selector, with slow
//! and failing brokers, on tokio's paused clock, once without and once with latency fault
//! avoidance.
//!
//! Every message is sent like the Java producer sends it: the selector picks a queue, the send
//! takes its broker's latency (`--latency`, or the `--slow-broker` latency), a `--fail-broker`
//! fails after that latency, and a failed attempt is retried up to `--retries` times (2) with
//! the failed broker skipped. Every attempt is reported to the selector.
//!
//! Output (text): the scenario, a table with one row per broker and one per queue (attempts and
//! deliveries without and with avoidance), and a comparison of the two runs.
//!
//! Output (`--json`), one JSON object per line:
//! - one line per broker and run: `{"avoidance": bool, "broker": name, "slow_ms": n|null,
//!   "failing": bool, "attempts": n, "delivered": n, "failed": n}`;
//! - one line per queue and run: `{"avoidance": bool, "broker": name, "queue": id,
//!   "attempts": n, "delivered": n}` (queue lines are the ones with a `queue` field);
//! - the last line: `{"summary": {"messages", "brokers", "queues_per_broker", "retries",
//!   "without_avoidance": RUN, "with_avoidance": RUN}}` where `RUN` is `{"delivered", "lost",
//!   "attempts", "failing_hits", "slow_hits", "elapsed_ms", "mean_send_ms"}`.

pub mod engine;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::time::Duration;

use serde_json::{Value, json};

pub use self::engine::{Config, Counts, EngineError, Outcome, simulate};
use crate::{limits, table};

/// The command's arguments.
///
/// Limits (checked before anything runs): at most 65,536 brokers × queues; latencies and the
/// interval at most 1 hour; at most 10,000,000 messages, 100 retries and 100,000,000 attempts
/// (messages × (retries + 1)).
#[derive(Debug, clap::Args)]
pub struct ProduceSimArgs {
    /// Brokers, named `broker-0`, `broker-1`, … (brokers × queues at most 65,536).
    #[arg(long, default_value_t = 4)]
    pub brokers: usize,
    /// Write queues per broker (also `--queues-per-broker`; `simulate`'s `--queues` counts per
    /// topic instead).
    #[arg(long, visible_alias = "queues-per-broker", default_value_t = 4)]
    pub queues: i32,
    /// A slow broker and its latency, `NAME:LATENCY_MS` (repeatable; at most 3600000 ms).
    #[arg(long = "slow-broker", value_parser = parse_slow_broker)]
    pub slow_brokers: Vec<(String, Duration)>,
    /// A broker whose sends fail (repeatable).
    #[arg(long = "fail-broker")]
    pub fail_brokers: Vec<String>,
    /// Messages to send, one after another (at most 10,000,000).
    #[arg(long, default_value_t = 1000, value_parser = parse_messages)]
    pub messages: u64,
    /// The latency of the other brokers (at most 1h).
    #[arg(long, default_value = "5ms", value_parser = limits::duration_up_to(limits::MAX_PRODUCE_DELAY))]
    pub latency: Duration,
    /// Retries after a failed attempt (at most 100).
    #[arg(long, default_value_t = 2, value_parser = limits::count(0, limits::MAX_RETRIES))]
    pub retries: usize,
    /// The pause between messages (at most 1h).
    #[arg(long, default_value = "0ms", value_parser = limits::duration_up_to(limits::MAX_PRODUCE_DELAY))]
    pub interval: Duration,
    /// JSON lines instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--messages`: at most [`MAX_MESSAGES`](limits::MAX_MESSAGES).
fn parse_messages(text: &str) -> Result<u64, String> {
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number"))?;
    if n > limits::MAX_MESSAGES {
        return Err(format!("must be at most {}", limits::MAX_MESSAGES));
    }
    Ok(n)
}

/// Parses `NAME:LATENCY_MS` (at most one hour).
pub fn parse_slow_broker(text: &str) -> Result<(String, Duration), String> {
    let (name, ms) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("`{text}` is not NAME:LATENCY_MS"))?;
    let ms: u64 = ms
        .trim()
        .parse()
        .map_err(|_| format!("`{text}`: `{ms}` is not a number of milliseconds"))?;
    if name.is_empty() {
        return Err(format!("`{text}` has no broker name"));
    }
    let latency = Duration::from_millis(ms);
    if latency > limits::MAX_PRODUCE_DELAY {
        return Err(format!(
            "`{text}`: the latency must be at most {} ms",
            limits::MAX_PRODUCE_DELAY.as_millis()
        ));
    }
    Ok((name.to_string(), latency))
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum ProduceSimError {
    /// Bad arguments.
    #[error("{0}")]
    Arguments(String),
    /// The simulation failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl ProduceSimError {
    /// Whether the arguments are at fault (exit status 2) rather than the run (exit status 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, ProduceSimError::Arguments(_))
    }
}

/// The most brokers times queues the command accepts.
const MAX_QUEUES: usize = 1 << 16;

/// Builds the configuration from the arguments.
pub fn config(args: &ProduceSimArgs) -> Result<Config, ProduceSimError> {
    let bad = |m: String| ProduceSimError::Arguments(m);
    if args.brokers == 0 {
        return Err(bad("--brokers must be at least 1".into()));
    }
    if args.queues < 1 {
        return Err(bad("--queues must be at least 1".into()));
    }
    if args.brokers.saturating_mul(args.queues as usize) > MAX_QUEUES {
        return Err(bad(format!(
            "--brokers x --queues must be at most {MAX_QUEUES}"
        )));
    }
    let delays = args.slow_brokers.iter().map(|(_, d)| d);
    if [&args.latency, &args.interval]
        .into_iter()
        .chain(delays)
        .any(|d| *d > limits::MAX_PRODUCE_DELAY)
    {
        return Err(bad(format!(
            "--latency, --interval and --slow-broker latencies must be at most {:?}",
            limits::MAX_PRODUCE_DELAY
        )));
    }
    if args.messages > limits::MAX_MESSAGES || args.retries > limits::MAX_RETRIES {
        return Err(bad(format!(
            "at most {} --messages and {} --retries",
            limits::MAX_MESSAGES,
            limits::MAX_RETRIES
        )));
    }
    let attempts = args.messages.saturating_mul(args.retries as u64 + 1);
    if attempts > limits::MAX_ATTEMPTS {
        return Err(bad(format!(
            "--messages {} with --retries {} allows {attempts} send attempts; at most {}",
            args.messages,
            args.retries,
            limits::MAX_ATTEMPTS
        )));
    }
    let known = |name: &str| {
        name.strip_prefix("broker-")
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n < args.brokers && format!("broker-{n}") == name)
    };
    let unknown = |name: &str| {
        bad(format!(
            "unknown broker `{name}` (the brokers are broker-0 to broker-{})",
            args.brokers - 1
        ))
    };
    let mut slow = BTreeMap::new();
    for (name, latency) in &args.slow_brokers {
        if !known(name) {
            return Err(unknown(name));
        }
        slow.insert(name.clone(), *latency);
    }
    let mut failing = BTreeSet::new();
    for name in &args.fail_brokers {
        if !known(name) {
            return Err(unknown(name));
        }
        failing.insert(name.clone());
    }
    Ok(Config {
        brokers: args.brokers,
        queues: args.queues,
        slow,
        failing,
        messages: args.messages,
        latency: args.latency,
        retries: args.retries,
        interval: args.interval,
    })
}

/// Runs the command; returns the runs without and with avoidance.
pub fn run(args: &ProduceSimArgs, out: &mut impl Write) -> Result<[Outcome; 2], ProduceSimError> {
    let config = config(args)?;
    let outcomes = simulate(&config)?;
    if args.json {
        write_json(&config, &outcomes, out)?;
    } else {
        write_text(&config, &outcomes, out)?;
    }
    Ok(outcomes)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run_summary(config: &Config, o: &Outcome) -> Value {
    let mean = if config.messages == 0 {
        0.0
    } else {
        ms(o.send_time) / config.messages as f64
    };
    json!({
        "delivered": o.delivered,
        "lost": o.lost,
        "attempts": o.attempts(),
        "failing_hits": o.failing_hits,
        "slow_hits": o.slow_hits,
        "elapsed_ms": o.elapsed.as_millis() as u64,
        "mean_send_ms": (mean * 1000.0).round() / 1000.0,
    })
}

/// One line per broker and run, one per queue and run, then the summary (see the module
/// documentation).
pub fn write_json(
    config: &Config,
    outcomes: &[Outcome; 2],
    out: &mut impl Write,
) -> io::Result<()> {
    for o in outcomes {
        for (b, (name, queues)) in o.queues.iter().enumerate() {
            let total = o.broker_counts(b);
            let line = json!({
                "avoidance": o.avoidance,
                "broker": name,
                "slow_ms": config.slow.get(name).map(|d| d.as_millis() as u64),
                "failing": config.failing.contains(name),
                "attempts": total.attempts,
                "delivered": total.delivered,
                "failed": total.attempts - total.delivered,
            });
            writeln!(out, "{line}")?;
            for (id, c) in queues.iter().enumerate() {
                let line = json!({
                    "avoidance": o.avoidance,
                    "broker": name,
                    "queue": id,
                    "attempts": c.attempts,
                    "delivered": c.delivered,
                });
                writeln!(out, "{line}")?;
            }
        }
    }
    let [without, with] = outcomes;
    let line = json!({"summary": {
        "messages": config.messages,
        "brokers": config.brokers,
        "queues_per_broker": config.queues,
        "retries": config.retries,
        "without_avoidance": run_summary(config, without),
        "with_avoidance": run_summary(config, with),
    }});
    writeln!(out, "{line}")
}

/// The scenario, a table per broker and queue, and the comparison of the two runs.
pub fn write_text(
    config: &Config,
    outcomes: &[Outcome; 2],
    out: &mut impl Write,
) -> io::Result<()> {
    let [without, with] = outcomes;
    writeln!(
        out,
        "{} message(s) to {} broker(s) x {} queue(s), latency {} ms, up to {} retries",
        config.messages,
        config.brokers,
        config.queues,
        ms(config.latency),
        config.retries
    )?;
    let slow: Vec<String> = config
        .slow
        .iter()
        .map(|(n, d)| format!("{n} ({} ms)", ms(*d)))
        .collect();
    let failing: Vec<&str> = config.failing.iter().map(String::as_str).collect();
    writeln!(
        out,
        "slow: {}   failing: {}\n",
        if slow.is_empty() {
            "none".into()
        } else {
            slow.join(", ")
        },
        if failing.is_empty() {
            "none".into()
        } else {
            failing.join(", ")
        }
    )?;
    let mut rows = Vec::new();
    for (b, (name, queues)) in without.queues.iter().enumerate() {
        let note = match (config.slow.get(name), config.failing.contains(name)) {
            (Some(d), true) => format!("slow {} ms, failing", ms(*d)),
            (Some(d), false) => format!("slow {} ms", ms(*d)),
            (None, true) => "failing".into(),
            (None, false) => String::new(),
        };
        let (a, w) = (without.broker_counts(b), with.broker_counts(b));
        rows.push(vec![
            name.clone(),
            "all".into(),
            a.attempts.to_string(),
            a.delivered.to_string(),
            w.attempts.to_string(),
            w.delivered.to_string(),
            note,
        ]);
        for (id, a) in queues.iter().enumerate() {
            let w = with.queues[b].1.get(id).copied().unwrap_or_default();
            rows.push(vec![
                String::new(),
                id.to_string(),
                a.attempts.to_string(),
                a.delivered.to_string(),
                w.attempts.to_string(),
                w.delivered.to_string(),
                String::new(),
            ]);
        }
    }
    table::write(
        out,
        &[
            "broker",
            "queue",
            "sent (no avoidance)",
            "delivered",
            "sent (avoidance)",
            "delivered",
            "",
        ],
        rows,
    )?;
    writeln!(out)?;
    let (sw, sa) = (run_summary(config, without), run_summary(config, with));
    let row =
        |label: &str, key: &str| vec![label.to_string(), sw[key].to_string(), sa[key].to_string()];
    let mut rows = vec![
        row("delivered", "delivered"),
        row("lost", "lost"),
        row("attempts", "attempts"),
        row("attempts on failing brokers", "failing_hits"),
        row("attempts on slow brokers", "slow_hits"),
        row("mean send time per message (ms)", "mean_send_ms"),
    ];
    rows.push(vec![
        "simulated time (s)".into(),
        format!("{:.3}", without.elapsed.as_secs_f64()),
        format!("{:.3}", with.elapsed.as_secs_f64()),
    ]);
    table::write(out, &["", "without avoidance", "with avoidance"], rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ProduceSimArgs {
        crate::test_args::parse("produce-sim", extra).unwrap()
    }

    #[test]
    fn slow_broker_values() {
        assert_eq!(
            parse_slow_broker("broker-1:2000"),
            Ok(("broker-1".into(), Duration::from_secs(2)))
        );
        assert!(parse_slow_broker("broker-1").is_err());
        assert!(parse_slow_broker("broker-1:fast").is_err());
        assert!(parse_slow_broker(":10").is_err());
    }

    #[test]
    fn unknown_brokers_and_empty_clusters_are_refused() {
        for bad in [
            &["--slow-broker", "broker-9:100"][..],
            &["--fail-broker", "broker-x"],
            &["--fail-broker", "broker-01"],
            &["--brokers", "0"],
            &["--queues", "0"],
            &["--brokers", "1000", "--queues", "1000"],
        ] {
            assert!(
                matches!(config(&args(bad)), Err(ProduceSimError::Arguments(_))),
                "{bad:?}"
            );
        }
        let c = config(&args(&[
            "--slow-broker",
            "broker-3:700",
            "--fail-broker",
            "broker-0",
        ]))
        .unwrap();
        assert_eq!(c.latency_of("broker-3"), Duration::from_millis(700));
        assert_eq!(c.latency_of("broker-2"), Duration::from_millis(5));
        assert!(c.failing.contains("broker-0"));
    }

    #[test]
    fn limits_allow_long_runs_and_refuse_endless_ones() {
        let c = config(&args(&["--messages", "10000000", "--retries", "9"])).unwrap();
        assert_eq!((c.messages, c.retries), (10_000_000, 9));
        assert!(matches!(
            config(&args(&["--messages", "10000000", "--retries", "10"])),
            Err(ProduceSimError::Arguments(m)) if m.contains("110000000 send attempts")
        ));
        let c = config(&args(&[
            "--latency",
            "1h",
            "--interval",
            "3600s",
            "--slow-broker",
            "broker-1:3600000",
        ]))
        .unwrap();
        assert_eq!(c.latency_of("broker-1"), Duration::from_secs(3600));
        assert!(parse_slow_broker("broker-1:3600001").is_err());
        assert!(parse_messages("10000001").is_err());
    }

    #[test]
    fn text_output_names_every_broker_and_both_runs() {
        let mut out = Vec::new();
        let a = args(&[
            "--messages",
            "40",
            "--brokers",
            "2",
            "--queues",
            "2",
            "--slow-broker",
            "broker-1:1000",
        ]);
        run(&a, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("40 message(s) to 2 broker(s) x 2 queue(s)"),
            "{text}"
        );
        assert!(
            text.contains("slow: broker-1 (1000 ms)   failing: none"),
            "{text}"
        );
        assert!(text.contains("slow 1000 ms"), "{text}");
        let slow_row = text
            .lines()
            .find(|l| l.starts_with("attempts on slow brokers"))
            .unwrap();
        let cells: Vec<&str> = slow_row.split_whitespace().collect();
        assert_eq!(cells[cells.len() - 2..], ["20", "1"], "{text}");
    }
}
