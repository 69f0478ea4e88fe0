//! One consumer run, in a process of its own: start the consumer, wait until it has seen every
//! preloaded message, print one JSON line with what it cost, and exit at once (no shutdown: the
//! group is fresh and never used again).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::consumers::{ours, peer, raw, stream};
use crate::measure::own_usage;
use crate::tally::Tally;
use crate::{number, pairs};

struct Args {
    kind: String,
    namesrv: String,
    topic: String,
    group: String,
    queues: u32,
    per_queue: u64,
    body_size: usize,
    timeout: Duration,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let (kind, rest) = args.split_first().ok_or("child: which consumer?")?;
    let mut a = Args {
        kind: kind.clone(),
        namesrv: String::new(),
        topic: String::new(),
        group: String::new(),
        queues: 0,
        per_queue: 0,
        body_size: 0,
        timeout: Duration::from_secs(300),
    };
    for (name, value) in pairs(rest)? {
        match name {
            "namesrv" => a.namesrv = value.to_string(),
            "topic" => a.topic = value.to_string(),
            "group" => a.group = value.to_string(),
            "queues" => a.queues = number(name, value)?,
            "per-queue" => a.per_queue = number(name, value)?,
            "body-size" => a.body_size = number(name, value)?,
            "timeout" => a.timeout = Duration::from_secs(number(name, value)?),
            _ => return Err(format!("child: unknown option --{name}")),
        }
    }
    if a.namesrv.is_empty() || a.topic.is_empty() || a.group.is_empty() || a.per_queue == 0 {
        return Err("child: --namesrv, --topic, --group and --per-queue are required".into());
    }
    Ok(a)
}

pub fn main(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let args = parse(args)?;
    // Our consumer and the raw loop run on tokio's default multi-threaded runtime (one worker
    // per CPU); rocketmq-rust builds its own runtime of that size, and only waits here.
    let runtime = if args.kind == "rocketmq-rust" {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    let line = runtime.block_on(run(&args))?;
    println!("{line}");
    // Exit now: neither a shutdown nor the runtimes' teardown is part of the measure, and a
    // client that hangs in its shutdown must not hang the benchmark.
    std::process::exit(if line["complete"] == true { 0 } else { 1 });
}

async fn run(args: &Args) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let tally = Arc::new(Tally::new(args.queues, args.per_queue, args.body_size));
    let before = own_usage()?;
    let started = Instant::now();
    // Whatever keeps the consumer alive until the process exits.
    let _running: Box<dyn std::any::Any> = match args.kind.as_str() {
        "ours" => {
            Box::new(ours::start(&args.namesrv, &args.topic, &args.group, tally.clone()).await?)
        }
        "raw" => {
            Box::new(raw::start(&args.namesrv, &args.topic, &args.group, tally.clone()).await?)
        }
        "stream" => {
            Box::new(stream::start(&args.namesrv, &args.topic, &args.group, tally.clone()).await?)
        }
        "rocketmq-rust" => {
            Box::new(peer::start(&args.namesrv, &args.topic, &args.group, tally.clone()).await?)
        }
        other => return Err(format!("child: unknown consumer `{other}`").into()),
    };
    let complete = tokio::time::timeout(args.timeout, tally.complete())
        .await
        .is_ok();
    let done = Instant::now();
    let after = own_usage()?;
    let messages = tally.unique();
    let elapsed = done.duration_since(started).as_secs_f64();
    let first = tally
        .first()
        .map(|f| f.duration_since(started).as_secs_f64());
    let steady = tally.first().map(|f| done.duration_since(f).as_secs_f64());
    let cpu = after.cpu().saturating_sub(before.cpu()).as_secs_f64();
    let per_second = |seconds: f64| (seconds > 0.0).then(|| messages as f64 / seconds);
    Ok(serde_json::json!({
        "consumer": args.kind,
        "complete": complete,
        "messages": messages,
        "expected": tally.expected(),
        "deliveries": tally.deliveries(),
        "unexpected": tally.unexpected(),
        "elapsed_s": elapsed,
        "first_message_s": first,
        "steady_s": steady,
        "msgs_per_s": per_second(elapsed),
        "steady_msgs_per_s": steady.and_then(per_second),
        "cpu_s": cpu,
        "user_s": after.user.saturating_sub(before.user).as_secs_f64(),
        "sys_s": after.system.saturating_sub(before.system).as_secs_f64(),
        "cpu_s_per_million": (messages > 0).then(|| cpu * 1e6 / messages as f64),
        "max_rss_mib": after.max_rss_kib as f64 / 1024.0,
    }))
}
