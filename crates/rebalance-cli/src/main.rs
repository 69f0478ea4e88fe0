//! `rebalance`: plan, simulate and benchmark coordinator-free consumer groups.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rebalance_cli::{allocate, assign, describe, jsonl, plan, produce_sim, send, sim};
use rebalance_cli::{bench, compare};
use rebalance_core::assignor::AssignorRegistry;
use rebalance_core::strategy::StrategyRegistry;

#[derive(Parser)]
#[command(
    name = "rebalance",
    version,
    about = "Plan, simulate and benchmark coordinator-free consumer groups"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run RocketMQ allocation cases (JSON Lines, one case per line) and print every member's share.
    ///
    /// A case: {"id": ..., "strategy": NAME, "params": {...}, "group": G, "mq_all": [[topic,
    /// broker, queue_id], ...], "cid_all": [id, ...], "extra_cids": [id, ...]} (params, group and
    /// extra_cids optional). The answer is exactly the Java client's for the lists as given; what
    /// a runtime would never do (unknown parameter keys, parameters with which nobody gets a
    /// queue, a repeated consumer id, unsorted lists) adds a "warnings" array to the case's line
    /// and a warning on standard error.
    ///
    /// Each answer is written out (flushed) as soon as its case is done. A line that cannot be
    /// answered gets an error line naming it, and the run goes on; the exit status is then 1.
    Allocate {
        /// The cases; standard input when absent or `-`.
        file: Option<PathBuf>,
        /// Print a table per case instead of JSON lines.
        #[arg(long)]
        pretty: bool,
        /// Answer every member with its own `allocate` call (what each client of a group runs)
        /// instead of the group's one-pass plan; the answers are the same.
        #[arg(long)]
        each_member: bool,
    },
    /// Run real runtime clients on the in-memory cluster through a scripted scenario, on a
    /// simulated clock, and report what happened.
    ///
    /// Limits (checked before anything runs): at most 100,000 topics, 100,000 brokers per topic
    /// and 1,000,000 topics x brokers; at most 10,000,000 queues in all (topics x queues) and
    /// 65,536 per broker; at most 10,000 clients (the initial ones and those that join); a hash
    /// ring of at most 20,000,000 points (clients x virtual nodes); a duration of at most 168h.
    Simulate(sim::SimulateArgs),
    /// Send simulated messages through the producer's queue selector with slow and failing
    /// brokers, on a simulated clock, without and with latency fault avoidance, and report where
    /// they went.
    ///
    /// Limits (checked before anything runs): at most 65,536 brokers x queues; latencies and the
    /// interval at most 1h; at most 10,000,000 messages, 100 retries and 100,000,000 send
    /// attempts (messages x (retries + 1)).
    ProduceSim(produce_sim::ProduceSimArgs),
    /// Ask a RocketMQ name server and broker for a topic's queues and a group's members, and
    /// print the whole group's current plan.
    ///
    /// The strategy is built before any server is asked, so a bad name or parameter fails at
    /// once.
    Plan(plan::PlanArgs),
    /// Describe a consumer group's real state from a RocketMQ cluster: one row per queue with
    /// the owner the strategy predicts, the member(s) that claim it (their running info, asked
    /// through a broker), the committed offset, the broker's max offset and the lag; queues
    /// claimed twice or by nobody and members whose fingerprints differ are flagged. A column
    /// the servers cannot fill is reported with the reason.
    Describe(describe::DescribeArgs),
    /// Run Kafka-style group assignment cases (JSON Lines, one case per line) and print every
    /// member's partitions.
    ///
    /// Limits per case: partition counts from 0 to 2,147,483,647 per topic and at most
    /// 10,000,000 partitions in all; with `broadcast`, at most 10,000,000 member-partition pairs.
    /// A case above them gets an error line. Each answer is written out (flushed) as soon as its
    /// case is done; a line that cannot be answered gets an error line naming it, and the run
    /// goes on; the exit status is then 1.
    Assign {
        /// The cases; standard input when absent or `-`.
        file: Option<PathBuf>,
        /// Print a table per case instead of JSON lines.
        #[arg(long)]
        pretty: bool,
    },
    /// Time a strategy or an assignor on the workloads of the Java reference timings.
    ///
    /// Limits (checked before anything is built): at most 10,000,000 queues and 1,000,000
    /// consumers; a hash ring of at most 20,000,000 points (consumers x virtual nodes); at most
    /// 1,000,000 topics, 1,000,000 members and 10,000,000 partitions in all (topics x
    /// partitions); for `broadcast`, at most 100,000,000 member-partition pairs; 1 to 1,000 runs.
    Bench(bench::BenchArgs),
    /// Compare strategies: balance, and queues moved when members join and leave.
    ///
    /// Output, per strategy and event: spread (largest share minus smallest share, in queues),
    /// max/mean (largest share over the mean share), moved (queues whose owner changed) and the
    /// minimum any balanced plan would move. Events: `leave:i` is the member at position i of
    /// the current sorted list; `leave-client:i` is client number i, as `simulate`'s `leave:i`.
    ///
    /// Limits (checked before anything is built): at most 10,000,000 queues, 1,000,000 members
    /// (with the ones that join), a hash ring of at most 20,000,000 points (members x virtual
    /// nodes: balanced_sticky has 128 per member, consistent_hash 10) and 1,000,000 samples.
    Compare(compare::CompareArgs),
    /// Send messages to a topic of a real RocketMQ cluster: bodies `{prefix}{i}` (`msg-0`,
    /// `msg-1`, ...), queues chosen by the producer's round robin with latency fault
    /// avoidance, or by the hash of `--ordered-by`.
    ///
    /// With `--json`, one line per message stored, flushed:
    /// `{"msg_id", "topic", "broker", "queue", "offset", "body"}`. A message that cannot be
    /// sent (after the retries) is reported on standard error and the run goes on; the exit
    /// status is then 1. Limits: at most 100,000,000 messages, 100 retries, a rate up to
    /// 1,000,000 per second.
    Send(send::SendArgs),
    /// Run the installed RocketMQ name server and broker(s) on 127.0.0.1, to try the consumer
    /// and these commands on a real cluster: `up` starts them and prints their addresses (the
    /// name server on 127.0.0.1:9876 by default), Ctrl-C or `down` stops them.
    ///
    /// The servers are `rocketmq-namesrv-rust` and `rocketmq-broker-rust` 1.0.0, looked up in
    /// `$ROCKETMQ_SERVERS_DIR/bin` (default `~/.cache/rocketmq-servers-1.0.0/bin`); when they
    /// are missing, `up` says how to install them. Their configs, stores and logs live in the
    /// directory `--dir` names (default: `rebalance-local-cluster` in the temporary directory),
    /// with the state file `down` and `status` read. The servers never outlive the `up` that
    /// started them, however it ends.
    #[cfg(feature = "local-cluster")]
    LocalCluster {
        #[command(subcommand)]
        command: rebalance_cli::local_cluster::LocalClusterCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => {
            warn("bench", bench::warnings(&args));
            to_stdout("bench", |out| bench::run(&args, out))
        }
        Command::Compare(args) => {
            warn("compare", compare::warnings(&args));
            to_stdout("compare", |out| compare::run(&args, out))
        }
        Command::Allocate {
            file,
            pretty,
            each_member,
        } => {
            let method = if each_member {
                allocate::Method::EachMember
            } else {
                allocate::Method::Plan
            };
            batch("allocate", run_allocate(file, pretty, method))
        }
        Command::Assign { file, pretty } => batch("assign", run_assign(file, pretty)),
        Command::Simulate(args) => {
            warn("simulate", sim::warnings(&args));
            to_stdout("simulate", |out| sim::run(&args, out))
        }
        Command::Plan(args) => {
            warn("plan", plan::warnings(&args));
            to_stdout("plan", |out| plan::run(&args, out))
        }
        Command::Describe(args) => {
            warn("describe", describe::warnings(&args));
            to_stdout("describe", |out| {
                describe::run(&args, out, &mut io::stderr())
            })
        }
        Command::Send(args) => to_stdout("send", |out| send::run(&args, out, &mut io::stderr())),
        Command::ProduceSim(args) => to_stdout("produce-sim", |out| produce_sim::run(&args, out)),
        #[cfg(feature = "local-cluster")]
        Command::LocalCluster { command } => to_stdout("local-cluster", |out| {
            rebalance_cli::local_cluster::run(&command, out, &mut io::stderr())
        }),
    };
    match result {
        Ok(code) => code,
        // Standard output failed: a failure of the run, not of the arguments.
        Err(e) => {
            eprintln!("rebalance: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Exit status 2 for errors in the arguments (as clap uses for its own), 1 for failures of the
/// run (a server unreachable, a file unreadable midway, output failing).
fn failure_code(usage: bool) -> ExitCode {
    if usage {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}

/// Prints a command's warnings (arguments it accepts but ignores) on standard error.
fn warn(name: &str, warnings: Vec<String>) {
    for w in warnings {
        eprintln!("rebalance {name}: warning: {w}");
    }
}

/// The outcome of a JSON Lines command: a run that stopped is reported with the command's
/// name, exit status 2 for a file that cannot be opened, 1 for input or output failing midway.
fn batch(name: &str, result: Result<ExitCode, jsonl::BatchError>) -> io::Result<ExitCode> {
    match result {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("rebalance {name}: {e}");
            Ok(failure_code(e.is_usage()))
        }
    }
}

fn run_allocate(
    file: Option<PathBuf>,
    pretty: bool,
    method: allocate::Method,
) -> Result<ExitCode, jsonl::BatchError> {
    let input = jsonl::open_input(file.as_deref())?;
    let registry = StrategyRegistry::default();
    let stdout = io::stdout().lock();
    let summary = jsonl::run_lines_with(
        input,
        io::BufWriter::new(stdout),
        style(pretty),
        |_, case, buf| {
            let answer = allocate::answer_with(case, &registry, method)?;
            for w in &answer.warnings {
                eprintln!("rebalance allocate: warning: case {}: {w}", answer.id);
            }
            if pretty {
                answer.write_pretty(buf)?;
            } else {
                answer.write_json(buf)?;
            }
            Ok(())
        },
    )
    .map_err(|e| e.reading(jsonl::input_name(file.as_deref())))?;
    Ok(exit_code(summary))
}

fn run_assign(file: Option<PathBuf>, pretty: bool) -> Result<ExitCode, jsonl::BatchError> {
    let input = jsonl::open_input(file.as_deref())?;
    let registry = AssignorRegistry::default();
    let stdout = io::stdout().lock();
    let summary = jsonl::run_lines_with(
        input,
        io::BufWriter::new(stdout),
        style(pretty),
        |line, case, buf| {
            let answer = assign::answer(line, case, &registry)?;
            if pretty {
                answer.write_pretty(buf)?;
            } else {
                answer.write_json(buf)?;
            }
            Ok(())
        },
    )
    .map_err(|e| e.reading(jsonl::input_name(file.as_deref())))?;
    Ok(exit_code(summary))
}

/// Bad lines as JSON among JSON answers, as text among `--pretty` tables.
fn style(pretty: bool) -> jsonl::ErrorStyle {
    if pretty {
        jsonl::ErrorStyle::Text
    } else {
        jsonl::ErrorStyle::Json
    }
}

fn exit_code(summary: jsonl::Summary) -> ExitCode {
    if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

type Stdout = io::BufWriter<io::StdoutLock<'static>>;

/// The errors of a command that writes to standard output, split into "standard output failed"
/// (the program ends) and the command's own failure (reported, exit status 2 when the
/// arguments are at fault, 1 otherwise).
trait CommandError: std::fmt::Display + Sized {
    fn into_io(self) -> Result<io::Error, Self>;
    fn is_usage(&self) -> bool;
}

macro_rules! command_error {
    ($($ty:ty => $io:path),* $(,)?) => {$(
        impl CommandError for $ty {
            fn into_io(self) -> Result<io::Error, Self> {
                match self {
                    $io(e) => Ok(e),
                    other => Err(other),
                }
            }
            fn is_usage(&self) -> bool {
                <$ty>::is_usage(self)
            }
        }
    )*};
}

command_error! {
    sim::SimulateError => sim::SimulateError::Io,
    produce_sim::ProduceSimError => produce_sim::ProduceSimError::Io,
    plan::RunError => plan::RunError::Io,
    bench::BenchError => bench::BenchError::Io,
    compare::CompareError => compare::CompareError::Io,
    send::SendError => send::SendError::Io,
    describe::DescribeError => describe::DescribeError::Io,
}

#[cfg(feature = "local-cluster")]
command_error! {
    rebalance_cli::local_cluster::LocalClusterError => rebalance_cli::local_cluster::LocalClusterError::Io,
}

/// Runs a command writing to (buffered) standard output.
fn to_stdout<T, E: CommandError>(
    name: &str,
    run: impl FnOnce(&mut Stdout) -> Result<T, E>,
) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let result = run(&mut out);
    out.flush()?;
    match result.map_err(CommandError::into_io) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(Ok(e)) => Err(e),
        Err(Err(e)) => {
            eprintln!("rebalance {name}: {e}");
            Ok(failure_code(e.is_usage()))
        }
    }
}
