//! The three-way consume benchmark (issue 27, point 7).
//!
//! `consume-peer` starts a real RocketMQ name server and broker on loopback (the transport's
//! test kit), preloads a 16-queue topic with 1 KiB messages, then, for each run, starts each
//! consumer as a child process of its own, in a fresh consumer group, from the first offset,
//! with a no-op listener, until it has seen every preloaded message:
//!
//! - `ours`: our `PushConsumer` over the `BrokerClient` message source;
//! - `raw`: a pull loop per queue on the same `BrokerClient` (pull, decode, nothing else);
//! - `rocketmq-rust`: rocketmq-rust's `DefaultMQPushConsumer` (`rocketmq-client-rust` 1.0.0);
//! - `stream`: our `StreamConsumer` (the same pull loops, the stream in the listener's place).
//!
//! Each child reports its messages per second, its CPU time (`getrusage`) and its peak RSS; the
//! parent adds the broker's CPU time over the child's life (`/proc`) and the load average, and
//! prints one JSON line per run and a summary table (medians, with the spread over the runs).
//!
//! ```sh
//! cd benches/consume-peer && cargo run --release -- --messages 400000 --runs 3
//! ```

mod child;
mod consumers;
mod measure;
mod preload;
mod report;
mod tally;

use std::process::ExitCode;
use std::time::Duration;

/// The consumers, in the order a run starts them (each run starts one later than the last).
pub const CONSUMERS: [&str; 4] = ["ours", "raw", "rocketmq-rust", "stream"];

/// The benchmark's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub messages: u64,
    pub queues: u32,
    pub body_size: usize,
    pub runs: u32,
    pub consumers: Vec<String>,
    pub timeout: Duration,
    pub json: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            messages: 400_000,
            queues: 16,
            body_size: 1024,
            runs: 3,
            consumers: CONSUMERS.iter().map(|c| c.to_string()).collect(),
            timeout: Duration::from_secs(300),
            json: false,
        }
    }
}

const USAGE: &str = "usage: consume-peer [--messages N] [--runs R] [--consumers ours,raw,rocketmq-rust] \
[--queues Q] [--body-size BYTES] [--timeout SECS] [--json]
       consume-peer child KIND --namesrv ADDR --topic T --group G --queues Q --per-queue P --body-size BYTES --timeout SECS";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().map(String::as_str) == Some("child") {
        child::main(&args[1..])
    } else {
        match parse(&args) {
            Ok(settings) => report::main(&settings),
            Err(e) => {
                eprintln!("consume-peer: {e}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consume-peer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The value of each `--name value` pair, in order.
pub fn pairs(args: &[String]) -> Result<Vec<(&str, &str)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(name) = it.next() {
        let name = name
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument `{name}`"))?;
        if name == "json" {
            out.push((name, ""));
            continue;
        }
        let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
        out.push((name, value.as_str()));
    }
    Ok(out)
}

pub fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("--{name}: `{value}` is not a valid number"))
}

fn parse(args: &[String]) -> Result<Settings, String> {
    let mut s = Settings::default();
    for (name, value) in pairs(args)? {
        match name {
            "messages" => s.messages = number(name, value)?,
            "runs" => s.runs = number(name, value)?,
            "queues" => s.queues = number(name, value)?,
            "body-size" => s.body_size = number(name, value)?,
            "timeout" => s.timeout = Duration::from_secs(number(name, value)?),
            "json" => s.json = true,
            "consumers" => {
                s.consumers = value.split(',').map(str::to_string).collect();
                if let Some(unknown) = s
                    .consumers
                    .iter()
                    .find(|c| !CONSUMERS.contains(&c.as_str()))
                {
                    return Err(format!(
                        "--consumers: unknown consumer `{unknown}` (known: {CONSUMERS:?})"
                    ));
                }
            }
            _ => return Err(format!("unknown option --{name}")),
        }
    }
    if s.queues == 0 || s.messages < u64::from(s.queues) || s.runs == 0 || s.consumers.is_empty() {
        return Err("--queues, --runs and --consumers must not be zero or empty, and --messages at least --queues".into());
    }
    if s.messages % u64::from(s.queues) != 0 {
        return Err(format!(
            "--messages ({}) must be a multiple of --queues ({})",
            s.messages, s.queues
        ));
    }
    Ok(s)
}
