//! `rebalance simulate`: real runtime clients on the in-memory cluster and a scripted scenario,
//! on tokio's paused clock.

pub mod engine;
pub mod message_report;
pub mod picture;
pub mod report;
pub mod scenario;
pub mod shared_plans;
pub mod timeline;
pub mod traffic;

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_core::assignor::AssignorRegistry;
use rebalance_core::route::MAX_QUEUES_PER_BROKER;
use rebalance_core::strategy::{StrategyRegistry, UnknownParams};
use rebalance_runtime::allocation::Allocation;
use serde_json::{Value, json};

pub use self::engine::{Config, Outcome, simulate};
pub use self::message_report::MessageSummary;
pub use self::report::{Summary, summarize};
use self::scenario::{Action, Event};
pub use self::traffic::Traffic;
use crate::args::parse_param;
use crate::svg::{SvgFile, SvgFileError};
use crate::{limits, table};

/// The command's arguments.
///
/// Limits (checked before anything runs): at most 100,000 topics, 100,000 brokers per topic and
/// 1,000,000 topics × brokers; at most 10,000,000 queues in all (topics × queues) and 65,536 per
/// broker; at most 10,000 clients (the initial ones and those that join); a hash ring of at most
/// 20,000,000 points (clients × virtual nodes); a duration of at most 7 days (168h); with
/// `--produce`, at most 1,000,000 messages sent in all (rate × topics × duration).
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The allocation strategy: `averagely`, `averagely_by_circle`, `by_config`,
    /// `by_machine_room`, `consistent_hash`, `machine_room_nearby`, `designated`,
    /// `balanced_sticky` (with their `--param`s).
    #[arg(long, default_value = "averagely")]
    pub strategy: String,
    /// A Kafka-style group assignor (`range`, `roundrobin`, `sticky`, `cooperative_sticky`,
    /// `broadcast`) run leaderlessly, instead of the strategy.
    #[arg(long, conflicts_with = "strategy")]
    pub assignor: Option<String>,
    /// A strategy parameter, `key=value` (repeatable; a key the strategy does not read is
    /// ignored with a warning).
    #[arg(long = "param", value_parser = parse_param)]
    pub params: Vec<(String, Value)>,
    /// Topics (`topic-0`, `topic-1`, …), at most 100,000.
    #[arg(long, default_value_t = 1, value_parser = limits::count(0, limits::MAX_SIM_TOPICS))]
    pub topics: usize,
    /// Queues per topic, spread over its brokers (also `--queues-per-topic`; `produce-sim`'s
    /// `--queues` counts per broker instead). At most 10,000,000 over all topics, and 65,536 per
    /// broker.
    #[arg(long, visible_alias = "queues-per-topic", default_value_t = 8)]
    pub queues: i32,
    /// Brokers per topic, named `room{b mod 3}@broker-{b}`, from 1 to 100,000.
    #[arg(long, default_value_t = 2, value_parser = limits::count(1, limits::MAX_SIM_BROKERS))]
    pub brokers: usize,
    /// Clients at the start, numbered from 0 (at most 10,000 with the ones that join).
    #[arg(long, default_value_t = 3, value_parser = limits::count(0, limits::MAX_SIM_CLIENTS))]
    pub consumers: usize,
    /// Scripted events: `join@5s,leave:2@10s,crash:3@15s,ns-down@20s,ns-up@40s` (none later
    /// than --duration). `leave:i` and `crash:i` name client index i (the first clients are
    /// 0..N, each join takes the next index); `leave-client:i` is the same, spelled as in
    /// `compare`, whose `leave:i` is a position in the sorted member list instead.
    #[arg(long, default_value = "")]
    pub events: String,
    /// Simulated duration, at most 168h (7 days).
    #[arg(long, default_value = "60s", value_parser = limits::duration_up_to(limits::MAX_SIM_DURATION))]
    pub duration: Duration,
    /// Seeds the start-up jitter of the initial clients.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How long the group's membership must stay unchanged before a client runs the round a
    /// membership change asks for: `adaptive` (the consumers' default,
    /// `Intervals::adaptive_settle`), a fixed window (`Intervals::membership_settle`, e.g.
    /// `1s`, shorter than the members' 20 s rebalance interval), or `0s` (at once, as the Java
    /// client).
    #[arg(long, default_value = "adaptive", value_parser = parse_settle)]
    pub settle: SettleArg,
    /// JSON lines instead of a timeline.
    #[arg(long)]
    pub json: bool,
    /// Carries messages: each topic gets RATE messages per second (a decimal number, at most
    /// 1,000,000) until --duration, spread over its queues by the producer's round robin, and
    /// the clients are push consumers (starting from the first offset of a queue nobody
    /// committed). The run lasts --duration plus --drain, and the summary counts the messages.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub produce: Option<f64>,
    /// With --produce: how long the listener takes per message [default: 0s; at most 1h].
    #[arg(long, value_name = "D", value_parser = limits::duration_up_to(limits::MAX_SIM_CONSUME_TIME))]
    pub consume_time: Option<Duration>,
    /// With --produce: the first delivery of every Nth message sent fails (`ReconsumeLater`,
    /// or `Suspend` with --orderly) and is redelivered.
    #[arg(long, value_name = "N", value_parser = limits::count(1, usize::MAX))]
    pub fail_every: Option<usize>,
    /// With --produce: ordered consumption (queues locked, each consumed in order).
    #[arg(long)]
    pub orderly: bool,
    /// With --produce: the consumers' `exclusive_hand_off` (a queue's new owner waits until
    /// the old one has released it).
    #[arg(long)]
    pub exclusive_hand_off: bool,
    /// With --produce: how long consumers run after production stops, before the count
    /// [default: 60s; at most 168h].
    #[arg(long, value_name = "D", value_parser = limits::duration_up_to(limits::MAX_SIM_DURATION))]
    pub drain: Option<Duration>,
    /// With --produce: POP consumption (RocketMQ 5's server-side assignment in POP mode):
    /// every client pops every queue of each broker (one shared queue, id -1, per broker), and
    /// a message a client popped and did not acknowledge (it crashed) stays invisible for
    /// --pop-invisible-time before another client gets it. The same scenario is also run with
    /// client-side rebalance, and both message summaries are shown: the text output's last
    /// line, the JSON summary's `client_side_messages`. The drain defaults to 60 s plus the
    /// invisible time.
    #[arg(long)]
    pub pop: bool,
    /// With --pop: how long a popped message stays invisible to the other clients [default:
    /// 60s, the Java client's; at least 1s, at most 1h].
    #[arg(long, value_name = "D", value_parser = limits::duration_up_to(limits::MAX_SIM_CONSUME_TIME))]
    pub pop_invisible_time: Option<Duration>,
    /// With --json and --produce: one line per consumption, `{"t_ms", "client", "topic",
    /// "queue", "offset", "msg_id", "reconsume_times"}`, after the callback lines.
    #[arg(long)]
    pub messages_log: bool,
    /// Also draw the run to this SVG file: a row per queue, time across, each stretch in the
    /// colour of the client that held the queue, unowned stretches hatched in red, double
    /// ownership under a black bar, the scripted events on the time axis and, with --produce,
    /// the messages waiting. At most 40 rows (spread over the queues, with a note) and about
    /// 2 MB for any run. The file is created before the run, so a path that cannot be written
    /// fails at once; the output on standard output is the same with or without it.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// `simulate --settle`: the consumers' adaptive default, or a fixed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleArg {
    /// `adaptive`: `Intervals::adaptive_settle`, the consumers' default.
    Adaptive,
    /// A fixed `Intervals::membership_settle` (0: none, as the Java client).
    Fixed(Duration),
}

impl SettleArg {
    /// The fixed window, or `None` for the adaptive default.
    pub fn fixed(self) -> Option<Duration> {
        match self {
            SettleArg::Adaptive => None,
            SettleArg::Fixed(window) => Some(window),
        }
    }
}

/// Parses `--settle`: `adaptive` or a duration up to the longest simulation.
fn parse_settle(text: &str) -> Result<SettleArg, String> {
    if text.trim() == "adaptive" {
        return Ok(SettleArg::Adaptive);
    }
    limits::duration_up_to(limits::MAX_SIM_DURATION)(text)
        .map(SettleArg::Fixed)
        .map_err(|e| format!("{e} (or `adaptive`)"))
}

/// Parses `--produce`: a positive number of messages per second, at most 1,000,000.
fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of messages per second (e.g. 50 or 0.5)"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("`{text}`: the rate must be a positive number"));
    }
    if rate > limits::MAX_SIM_RATE {
        return Err(format!(
            "`{text}` is too high: at most {} messages per second",
            limits::MAX_SIM_RATE
        ));
    }
    Ok(rate)
}

/// The message traffic the arguments ask for, or why they cannot be used.
fn traffic(args: &SimulateArgs) -> Result<Option<Traffic>, SimulateError> {
    let bad = |m: String| Err(SimulateError::Arguments(m));
    let Some(rate) = args.produce else {
        let given = [
            ("--consume-time", args.consume_time.is_some()),
            ("--fail-every", args.fail_every.is_some()),
            ("--orderly", args.orderly),
            ("--exclusive-hand-off", args.exclusive_hand_off),
            ("--drain", args.drain.is_some()),
            ("--messages-log", args.messages_log),
            ("--pop", args.pop),
            ("--pop-invisible-time", args.pop_invisible_time.is_some()),
        ];
        return match given.iter().find(|(_, given)| *given) {
            Some((flag, _)) => bad(format!(
                "{flag} is about messages: add --produce RATE to carry messages"
            )),
            None => Ok(None),
        };
    };
    if args.messages_log && !args.json {
        return bad("--messages-log prints JSON lines: add --json".into());
    }
    if args.pop_invisible_time.is_some() && !args.pop {
        return bad("--pop-invisible-time is about POP: add --pop".into());
    }
    if args.pop && (args.orderly || args.exclusive_hand_off || args.assignor.is_some()) {
        return bad(
            "--pop is concurrent consumption with the brokers' assignment: it does not go with \
             --orderly, --exclusive-hand-off or --assignor (as in the Java client, ordered \
             consumers rebalance on the client)"
                .into(),
        );
    }
    let pop = if args.pop {
        let invisible = args.pop_invisible_time.unwrap_or(Duration::from_secs(60));
        if invisible < Duration::from_secs(1) {
            return bad(format!(
                "--pop-invisible-time {invisible:?}: at least 1s (the consumers extend it at three quarters)"
            ));
        }
        Some(invisible)
    } else {
        None
    };
    let total = Traffic::total(rate, args.topics, args.duration);
    if total > limits::MAX_SIM_MESSAGES {
        return bad(format!(
            "--produce {rate} on {} topic(s) for {:?} sends {total} messages; at most {} \
             (lower the rate or the duration)",
            args.topics,
            args.duration,
            limits::MAX_SIM_MESSAGES
        ));
    }
    Ok(Some(Traffic {
        rate,
        consume_time: args.consume_time.unwrap_or(Duration::ZERO),
        fail_every: args.fail_every.map(|n| n as u64),
        orderly: args.orderly,
        exclusive_hand_off: args.exclusive_hand_off,
        drain: args
            .drain
            .unwrap_or(Duration::from_secs(60) + pop.unwrap_or(Duration::ZERO)),
        pop,
    }))
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
    /// The `--svg` file could not be created or written.
    #[error(transparent)]
    Svg(#[from] SvgFileError),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl SimulateError {
    /// Whether the arguments are at fault (exit status 2) rather than the run (exit status 1):
    /// bad arguments, an event naming a client that is not running, or an `--svg` file that
    /// cannot be written.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SimulateError::Arguments(_)
                | SimulateError::Svg(_)
                | SimulateError::Sim(engine::SimError::NoSuchClient { .. })
        )
    }
}

/// Checks the sizes the arguments ask for, before anything is built.
fn check_sizes(args: &SimulateArgs, events: &[Event]) -> Result<(), SimulateError> {
    let bad = |m: String| Err(SimulateError::Arguments(m));
    // The members' own rule (their `start()` refuses it), said in the flag's words (found by
    // review: the run failed with exit 1 naming `membership_settle`).
    let wait = rebalance_runtime::config::Intervals::default().rebalance_wait;
    if let Some(settle) = args.settle.fixed().filter(|s| *s >= wait) {
        return bad(format!(
            "--settle {settle:?} must be shorter than the members' rebalance interval ({wait:?}): \
             a member would wait for its group longer than between its rounds"
        ));
    }
    if args.queues < 0 {
        return bad("--queues must not be negative".into());
    }
    if args.brokers == 0 {
        return bad("--brokers must be at least 1".into());
    }
    let queues = args.queues as usize;
    if args.topics.saturating_mul(queues) > limits::MAX_QUEUES {
        return bad(format!(
            "--topics {} x --queues {queues} is more than {} queues in all",
            args.topics,
            limits::MAX_QUEUES
        ));
    }
    let per_broker = queues.div_ceil(args.brokers);
    if per_broker > MAX_QUEUES_PER_BROKER as usize {
        return bad(format!(
            "--queues {queues} over --brokers {} puts {per_broker} queues on a broker; a \
             broker serves at most {MAX_QUEUES_PER_BROKER} (use more --brokers)",
            args.brokers
        ));
    }
    if args.topics.saturating_mul(args.brokers) > limits::MAX_SIM_ROUTE_ENTRIES {
        return bad(format!(
            "--topics {} x --brokers {} is more than {} route entries",
            args.topics,
            args.brokers,
            limits::MAX_SIM_ROUTE_ENTRIES
        ));
    }
    let joins = events.iter().filter(|e| e.action == Action::Join).count();
    let clients = args.consumers.saturating_add(joins);
    if clients > limits::MAX_SIM_CLIENTS {
        return bad(format!(
            "--consumers {} and {joins} join event(s) make {clients} clients; at most {}",
            args.consumers,
            limits::MAX_SIM_CLIENTS
        ));
    }
    if args.assignor.is_none() {
        let params = crate::args::params(&args.params);
        limits::check_ring(&args.strategy, &params, clients).map_err(SimulateError::Arguments)?;
    }
    if let Some(late) = events.iter().find(|e| e.at > args.duration) {
        return bad(format!(
            "--events: {:?} at {:?} comes after the end of the simulation (--duration {:?}); \
             it would never happen",
            late.action, late.at, args.duration
        ));
    }
    Ok(())
}

/// Builds the configuration from the arguments.
pub fn config(args: &SimulateArgs) -> Result<Config, SimulateError> {
    let events = scenario::parse_events(&args.events).map_err(SimulateError::Arguments)?;
    check_sizes(args, &events)?;
    let traffic = traffic(args)?;
    let params = crate::args::params(&args.params);
    // Built as the runtime's builder builds it, refusing parameters with which nobody would
    // get a queue; unknown keys are only warned about (see `warnings`).
    let allocation = match &args.assignor {
        Some(name) => Allocation::Assignor(
            AssignorRegistry::default()
                .build_for_runtime(name, &params, UnknownParams::Allow)
                .map_err(|e| SimulateError::Arguments(e.to_string()))?,
        ),
        None => Allocation::Strategy(
            StrategyRegistry::default()
                .build_for_runtime(&args.strategy, &params, UnknownParams::Allow)
                .map_err(|e| SimulateError::Arguments(e.to_string()))?,
        ),
    };
    Ok(Config {
        allocation,
        topics: args.topics,
        queues: args.queues,
        brokers: args.brokers,
        consumers: args.consumers,
        events,
        duration: args.duration,
        seed: args.seed,
        settle: args.settle.fixed(),
        traffic,
    })
}

/// What the arguments ask for that will be ignored: `--param` keys the strategy (or assignor)
/// does not read.
pub fn warnings(args: &SimulateArgs) -> Vec<String> {
    let params = crate::args::params(&args.params);
    match &args.assignor {
        Some(name) => limits::unknown_param_warnings(name, true, &params),
        None => limits::unknown_param_warnings(&args.strategy, false, &params),
    }
}

/// Runs the command (and draws the run to `--svg`).
pub fn run(args: &SimulateArgs, out: &mut impl Write) -> Result<Summary, SimulateError> {
    let config = config(args)?;
    let svg = args.svg.as_deref().map(SvgFile::open).transpose()?;
    let outcome = match simulate(&config) {
        Ok(outcome) => outcome,
        Err(e) => {
            if let Some(svg) = svg {
                svg.abandon();
            }
            return Err(e.into());
        }
    };
    let summary = summarize(&outcome);
    if let Some(svg) = svg {
        svg.write(&picture::draw(&config, &outcome, &summary))?;
    }
    let client_side = client_side_messages(&config)?;
    if args.json {
        write_json(
            &config,
            &outcome,
            &summary,
            args.messages_log,
            client_side.as_ref(),
            out,
        )?;
    } else {
        write_text(&config, &outcome, &summary, out)?;
        if let Some(pulled) = &client_side {
            write_comparison(&outcome, pulled, out)?;
        }
    }
    Ok(summary)
}

/// With POP: the message summary of the same scenario run with client-side rebalance.
fn client_side_messages(config: &Config) -> Result<Option<MessageSummary>, SimulateError> {
    let Some(traffic) = config.traffic.filter(|t| t.pop.is_some()) else {
        return Ok(None);
    };
    let pulled = Config {
        traffic: Some(Traffic {
            pop: None,
            ..traffic
        }),
        ..config.clone()
    };
    let outcome = simulate(&pulled)?;
    Ok(outcome.messages.as_ref().map(MessageSummary::of))
}

/// The POP run's messages beside client-side rebalance's on the same scenario, a line of text
/// (JSON: the summary's `client_side_messages`).
fn write_comparison(
    outcome: &Outcome,
    pulled: &MessageSummary,
    out: &mut impl Write,
) -> io::Result<()> {
    let popped = outcome
        .messages
        .as_ref()
        .map(MessageSummary::of)
        .unwrap_or_default();
    writeln!(
        out,
        "pop against client-side rebalance on the same scenario: max delay {} ms against {} ms, \
         duplicates {} against {}, lost {} against {}",
        popped.max_delay_ms,
        pulled.max_delay_ms,
        popped.duplicates,
        pulled.duplicates,
        popped.lost,
        pulled.lost
    )
}

fn triples(queues: &[MessageQueue]) -> Vec<Value> {
    queues.iter().map(MessageQueue::to_json_triple).collect()
}

/// One line per callback and one per scripted event (`{"t_ms", "scenario": "leave:2"}`, in
/// time order among the callbacks, as the timeline shows them), one per consumption (with
/// `messages_log`, when the run carried messages; in time order, then by client, queue and
/// offset), one per client, then the summary (with `"messages"` when the run carried messages,
/// and with POP `"client_side_messages"`, those of the same scenario with client-side
/// rebalance, `client_side`).
pub fn write_json(
    config: &Config,
    outcome: &Outcome,
    summary: &Summary,
    messages_log: bool,
    client_side: Option<&MessageSummary>,
    out: &mut impl Write,
) -> io::Result<()> {
    let scenario_line = |e: &scenario::Event| json!({"t_ms": e.at.as_millis() as u64, "scenario": e.action.to_string()});
    let mut events = config.events.iter().peekable();
    for r in &outcome.records {
        while let Some(e) = events.next_if(|e| e.at.as_millis() as u64 <= r.t_ms) {
            writeln!(out, "{}", scenario_line(e))?;
        }
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
    for e in events {
        writeln!(out, "{}", scenario_line(e))?;
    }
    if let (true, Some(messages)) = (messages_log, &outcome.messages) {
        let mut deliveries: Vec<_> = messages.deliveries.iter().collect();
        // Deliveries of one instant finish in an order the consumers' tasks decide: sort them
        // fully, so that the same seed prints the same lines.
        deliveries.sort_by(|a, b| {
            (a.t_ms, &a.client, &a.queue, a.offset, a.reconsume_times).cmp(&(
                b.t_ms,
                &b.client,
                &b.queue,
                b.offset,
                b.reconsume_times,
            ))
        });
        for d in deliveries {
            let line = json!({
                "t_ms": d.t_ms,
                "client": d.client.as_str(),
                "topic": d.topic,
                "queue": d.queue.to_json_triple(),
                "offset": d.offset,
                "msg_id": d.msg_id,
                "reconsume_times": d.reconsume_times,
            });
            writeln!(out, "{line}")?;
        }
    }
    for c in &outcome.clients {
        let line = json!({
            "client": c.client.as_str(),
            "index": c.index,
            "status": c.status.as_str(),
            "owned": triples(&c.owned),
            "started_ms": c.started_ms,
        });
        writeln!(out, "{line}")?;
    }
    let mut line = json!({"summary": {
        "converged": summary.converged,
        "double_owned_queue_ms": summary.double_owned_queue_ms,
        "unowned_queue_ms": summary.unowned_queue_ms,
        "moves": summary.moves,
        "rounds": summary.rounds,
    }});
    if let Some(messages) = &outcome.messages {
        line["summary"]["messages"] = MessageSummary::of(messages).to_json();
    }
    if let Some(pulled) = client_side {
        line["summary"]["client_side_messages"] = pulled.to_json();
    }
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
        config.brokers,
        config.consumers,
        config.allocation.name()
    )?;
    let mut events = config.events.iter().peekable();
    for r in &outcome.records {
        while let Some(e) = events.next_if(|e| e.at.as_millis() as u64 <= r.t_ms) {
            writeln!(out, "[{:>9.3}s] --- {}", e.at.as_secs_f64(), e.action)?;
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
        writeln!(out, "[{:>9.3}s] --- {}", e.at.as_secs_f64(), e.action)?;
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
    )?;
    if let Some(messages) = &outcome.messages {
        let m = MessageSummary::of(messages);
        writeln!(
            out,
            "messages: produced: {}  consumed: {}  unique: {}  duplicates: {}  lost: {}  retried: {}  dead-lettered: {}  max delay: {} ms",
            m.produced,
            m.consumed,
            m.unique,
            m.duplicates,
            m.lost,
            m.retried,
            m.dead_lettered,
            m.max_delay_ms
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<SimulateArgs, clap::Error> {
        crate::test_args::parse("simulate", extra)
    }

    fn refusal(extra: &[&str]) -> String {
        match config(&args(extra).unwrap()) {
            Err(SimulateError::Arguments(m)) => m,
            other => panic!("{extra:?}: {other:?}"),
        }
    }

    #[test]
    fn limits_allow_big_groups_and_refuse_just_above() {
        // Far above the benchmark sizes: 10,000,000 queues, 2,000 clients on balanced_sticky.
        let big = [
            "--strategy",
            "balanced_sticky",
            "--topics",
            "1000",
            "--queues",
            "10000",
            "--brokers",
            "1000",
            "--consumers",
            "2000",
            "--duration",
            "168h",
            "--events",
            "join@168h",
        ];
        let c = config(&args(&big).unwrap()).unwrap();
        assert_eq!((c.topics, c.queues, c.consumers), (1000, 10000, 2000));
        assert!(
            refusal(&["--topics", "1001", "--queues", "10000", "--brokers", "1000"])
                .contains("10000000 queues in all")
        );
        assert!(refusal(&["--topics", "11", "--brokers", "100000"]).contains("route entries"));
        assert!(
            refusal(&["--queues", "131073", "--brokers", "2"]).contains("65537 queues on a broker")
        );
        assert!(
            refusal(&["--consumers", "10000", "--events", "join@1s"]).contains("10001 clients")
        );
        assert!(refusal(&["--queues=-1"]).contains("--queues must not be negative"));
        assert!(args(&["--duration", "169h"]).is_err());
        assert!(args(&["--brokers", "0"]).is_err());
    }
}
