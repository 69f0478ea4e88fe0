//! The three-way consume benchmark (issue 27, point 7).
//!
//! `consume-peer` starts a real RocketMQ name server and broker on loopback (the transport's
//! test kit), preloads a 16-queue topic with 1 KiB messages, then, for each run, starts each
//! consumer as a child process of its own, in a fresh consumer group, from the first offset,
//! with a no-op listener, until it has seen every preloaded message:
//!
//! - `ours`: our `PushConsumer` over the `BrokerClient` message source;
//! - `raw`: a pull loop per queue on the same `BrokerClient` (pull, decode, nothing else);
//! - `rocketmq-rust`: rocketmq-rust's `DefaultMQPushConsumer` (`rocketmq-client-rust` 1.0.0),
//!   only in a build with the `peer` feature (off by default: it takes 20 to 30 minutes to build).
//! - `stream`: our `StreamConsumer` (the same pull loops, the stream in the listener's place).
//!
//! Each child reports its messages per second, its CPU time (`getrusage`) and its peak RSS; the
//! parent adds the broker's CPU time over the child's life (`/proc`) and the load average, and
//! prints one JSON line per run and a summary table (medians, with the spread over the runs).
//!
//! ```sh
//! cd benches/consume-peer && cargo run --release -- --messages 400000 --runs 3   # ours, raw
//! cd benches/consume-peer && cargo run --release --features peer -- --messages 400000 --runs 3
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
pub const CONSUMERS: [&str; 4] = ["ours", "raw", PEER, "stream"];

/// The peer's name on the command line; it exists only in a build with the `peer` feature.
pub const PEER: &str = "rocketmq-rust";

/// The peer's settings when `--peer` is not given (see `consumers::peer::PeerConfig`): its
/// defaults, with a metadata-I/O blocking lane deep enough for its 20 consume tasks.
pub const FAIR_PEER: &str = "lane-queue=64";

/// Whether this build has the peer (the `peer` feature: it compiles `rocketmq-client-rust`).
pub const HAS_PEER: bool = cfg!(feature = "peer");

/// The consumers this build can run: all four with the `peer` feature, else ours and raw.
pub fn available_consumers() -> Vec<String> {
    CONSUMERS
        .iter()
        .filter(|c| HAS_PEER || **c != PEER)
        .map(|c| c.to_string())
        .collect()
}

/// Why `--consumers` cannot list `name` in this build, if it cannot.
pub fn unavailable(name: &str) -> Option<String> {
    if !CONSUMERS.contains(&name) {
        return Some(format!(
            "--consumers: unknown consumer `{name}` (known: {CONSUMERS:?})"
        ));
    }
    if name == PEER && !HAS_PEER {
        return Some(format!(
            "--consumers: `{PEER}` needs a build with the peer: `cargo run --release --features peer -- ...` \
(it compiles rocketmq-client-rust 1.0.0, 20 to 30 minutes the first time)"
        ));
    }
    None
}

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
    /// The peer's settings (`--peer`), passed to its child; `None`: the fair default.
    pub peer: Option<String>,
    /// Messages per listener call, for ours and the peer (`--batch`; default 1, each library's).
    pub batch: Option<u32>,
    /// Messages per pull, for all three (`--pull`; default 32, each library's).
    pub pull: Option<u32>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            messages: 400_000,
            queues: 16,
            body_size: 1024,
            runs: 3,
            consumers: available_consumers(),
            timeout: Duration::from_secs(300),
            json: false,
            peer: None,
            batch: None,
            pull: None,
        }
    }
}

const USAGE: &str = "usage: consume-peer [--messages N] [--runs R] [--consumers ours,raw,rocketmq-rust] \
[--queues Q] [--body-size BYTES] [--timeout SECS] [--json] [--batch N] [--pull N] [--peer defaults|KEY=N,...]
       consume-peer child KIND --namesrv ADDR --topic T --group G --queues Q --per-queue P --body-size BYTES --timeout SECS [--batch N] [--pull N] [--peer ...]
--batch: messages per listener call (ours and the peer; default 1); --pull: messages per pull (all three; default 32)
--peer (with the `peer` feature): the peer's settings, `defaults` or keys lane, lane-queue, threads, batch, pull
       (default: lane-queue=64; see src/consumers/peer.rs)";

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

/// A number from 1 to 1,024 (a batch or pull size).
pub fn positive(name: &str, value: &str) -> Result<u32, String> {
    match number::<u32>(name, value)? {
        n @ 1..=1024 => Ok(n),
        _ => Err(format!("--{name}: `{value}` must be from 1 to 1024")),
    }
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
            "batch" => s.batch = Some(positive(name, value)?),
            "pull" => s.pull = Some(positive(name, value)?),
            "peer" => {
                #[cfg(feature = "peer")]
                consumers::peer::PeerConfig::parse(value)?;
                if !HAS_PEER {
                    return Err(
                        "--peer: this build has no peer: `cargo run --release --features peer -- ...`"
                            .to_string(),
                    );
                }
                s.peer = Some(value.to_string());
            }
            "consumers" => {
                s.consumers = value.split(',').map(str::to_string).collect();
                if let Some(why) = s.consumers.iter().find_map(|c| unavailable(c)) {
                    return Err(why);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_peer_is_run_only_by_a_build_that_has_it() {
        let defaults = parse(&[]).unwrap();
        let asked = parse(&args("--consumers ours,rocketmq-rust"));
        let with_peer = parse(&args("--peer defaults"));
        if HAS_PEER {
            assert_eq!(
                defaults.consumers,
                ["ours", "raw", "rocketmq-rust", "stream"]
            );
            assert_eq!(asked.unwrap().consumers, ["ours", "rocketmq-rust"]);
            assert_eq!(with_peer.unwrap().peer.as_deref(), Some("defaults"));
            assert!(parse(&args("--peer lane=0")).is_err());
        } else {
            assert_eq!(defaults.consumers, ["ours", "raw", "stream"]);
            assert!(asked.unwrap_err().contains("--features peer"));
            assert!(with_peer.unwrap_err().contains("--features peer"));
        }
        assert!(parse(&args("--consumers ours,java")).is_err());
    }

    #[test]
    fn batch_and_pull_are_from_1_to_1024() {
        let s = parse(&args("--batch 16 --pull 128")).unwrap();
        assert_eq!((s.batch, s.pull), (Some(16), Some(128)));
        assert!(parse(&args("--batch 0")).is_err());
        assert!(parse(&args("--pull 1025")).is_err());
    }
}
