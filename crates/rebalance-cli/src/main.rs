//! `rebalance`: plan, simulate and benchmark coordinator-free consumer groups.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rebalance_cli::{allocate, assign, jsonl, plan, produce_sim, sim};
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
    Allocate {
        /// The cases; standard input when absent or `-`.
        file: Option<PathBuf>,
        /// Print a table per case instead of JSON lines.
        #[arg(long)]
        pretty: bool,
    },
    /// Run real runtime clients on the in-memory cluster through a scripted scenario, on a
    /// simulated clock, and report what happened.
    Simulate(sim::SimulateArgs),
    /// Send simulated messages through the producer's queue selector with slow and failing
    /// brokers, on a simulated clock, without and with latency fault avoidance, and report where
    /// they went.
    ProduceSim(produce_sim::ProduceSimArgs),
    /// Ask a RocketMQ name server and broker for a topic's queues and a group's members, and
    /// print the whole group's current plan.
    Plan(plan::PlanArgs),
    /// Run Kafka-style group assignment cases (JSON Lines, one case per line) and print every
    /// member's partitions.
    Assign {
        /// The cases; standard input when absent or `-`.
        file: Option<PathBuf>,
        /// Print a table per case instead of JSON lines.
        #[arg(long)]
        pretty: bool,
    },
    /// Time a strategy or an assignor on the workloads of the Java reference timings.
    Bench(bench::BenchArgs),
    /// Compare strategies: balance, and queues moved when members join and leave.
    Compare(compare::CompareArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => to_stdout("bench", |out| bench::run(&args, out)),
        Command::Compare(args) => to_stdout("compare", |out| compare::run(&args, out)),
        Command::Allocate { file, pretty } => run_allocate(file, pretty),
        Command::Assign { file, pretty } => run_assign(file, pretty),
        Command::Simulate(args) => to_stdout("simulate", |out| sim::run(&args, out)),
        Command::Plan(args) => to_stdout("plan", |out| plan::run(&args, out)),
        Command::ProduceSim(args) => to_stdout("produce-sim", |out| produce_sim::run(&args, out)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rebalance: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_allocate(file: Option<PathBuf>, pretty: bool) -> io::Result<ExitCode> {
    let input = jsonl::open_input(file.as_deref())?;
    let registry = StrategyRegistry::default();
    let stdout = io::stdout().lock();
    let summary = jsonl::run(input, io::BufWriter::new(stdout), |case, buf| {
        let answer = allocate::answer(case, &registry)?;
        if pretty {
            answer.write_pretty(buf)?;
        } else {
            answer.write_json(buf)?;
        }
        Ok(())
    })?;
    io::stderr().flush()?;
    Ok(exit_code(summary))
}

fn run_assign(file: Option<PathBuf>, pretty: bool) -> io::Result<ExitCode> {
    let input = jsonl::open_input(file.as_deref())?;
    let registry = AssignorRegistry::default();
    let stdout = io::stdout().lock();
    let summary = jsonl::run_lines(input, io::BufWriter::new(stdout), |line, case, buf| {
        let answer = assign::answer(line, case, &registry)?;
        if pretty {
            answer.write_pretty(buf)?;
        } else {
            answer.write_json(buf)?;
        }
        Ok(())
    })?;
    Ok(exit_code(summary))
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
/// (the program ends) and the command's own failure (reported, exit status 2).
trait CommandError: std::fmt::Display + Sized {
    fn into_io(self) -> Result<io::Error, Self>;
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
        }
    )*};
}

command_error! {
    sim::SimulateError => sim::SimulateError::Io,
    produce_sim::ProduceSimError => produce_sim::ProduceSimError::Io,
    plan::RunError => plan::RunError::Io,
    bench::BenchError => bench::BenchError::Io,
    compare::CompareError => compare::CompareError::Io,
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
            Ok(ExitCode::from(2))
        }
    }
}
