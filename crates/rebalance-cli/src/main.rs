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
        Command::Bench(args) => run_bench(&args),
        Command::Compare(args) => run_compare(&args),
        Command::Allocate { file, pretty } => run_allocate(file, pretty),
        Command::Assign { file, pretty } => run_assign(file, pretty),
        Command::Simulate(args) => run_simulate(&args),
        Command::Plan(args) => run_plan(&args),
        Command::ProduceSim(args) => run_produce_sim(&args),
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

fn run_simulate(args: &sim::SimulateArgs) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    match sim::run(args, &mut out) {
        Ok(_) => {
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(sim::SimulateError::Io(e)) => Err(e),
        Err(e) => {
            out.flush()?;
            eprintln!("rebalance simulate: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

fn run_produce_sim(args: &produce_sim::ProduceSimArgs) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    match produce_sim::run(args, &mut out) {
        Ok(_) => {
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(produce_sim::ProduceSimError::Io(e)) => Err(e),
        Err(e) => {
            out.flush()?;
            eprintln!("rebalance produce-sim: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

fn run_plan(args: &plan::PlanArgs) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    match plan::run(args, &mut out) {
        Ok(()) => {
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(plan::RunError::Io(e)) => Err(e),
        Err(plan::RunError::Plan(e)) => {
            eprintln!("rebalance plan: {e}");
            Ok(ExitCode::from(2))
        }
    }
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

fn run_bench(args: &bench::BenchArgs) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    match bench::run(args, &mut out) {
        Ok(()) => {
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(bench::BenchError::Io(e)) => Err(e),
        Err(e) => {
            eprintln!("rebalance bench: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

fn run_compare(args: &compare::CompareArgs) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    match compare::run(args, &mut out) {
        Ok(_) => {
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(compare::CompareError::Io(e)) => Err(e),
        Err(e) => {
            out.flush()?;
            eprintln!("rebalance compare: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
