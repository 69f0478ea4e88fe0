//! One consumer run, in a process of its own: start the consumer, wait until it has seen every
//! preloaded message, print one JSON line with what it cost, and exit at once (no shutdown: the
//! group is fresh and never used again).

use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "peer")]
use crate::consumers::peer;
use crate::consumers::{ours, raw, stream};
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
    /// The peer's configuration (`--peer`), for the peer only.
    peer: Option<String>,
    /// Messages per listener call (`--batch`), messages per pull (`--pull`).
    batch: Option<u32>,
    pull: Option<u32>,
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
        peer: None,
        batch: None,
        pull: None,
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
            "peer" => a.peer = Some(value.to_string()),
            "batch" => a.batch = Some(crate::positive(name, value)?),
            "pull" => a.pull = Some(crate::positive(name, value)?),
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
    let runtime = if args.kind == crate::PEER {
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
        "ours" => Box::new(
            ours::start(
                &args.namesrv,
                &args.topic,
                &args.group,
                (args.batch, args.pull),
                tally.clone(),
            )
            .await?,
        ),
        "raw" => Box::new(
            raw::start(
                &args.namesrv,
                &args.topic,
                &args.group,
                args.pull,
                tally.clone(),
            )
            .await?,
        ),
        #[cfg(feature = "peer")]
        crate::PEER => {
            let mut config =
                peer::PeerConfig::parse(args.peer.as_deref().unwrap_or(crate::FAIR_PEER))?;
            // `--batch` and `--pull` apply unless `--peer` sets its own.
            config.batch = config.batch.or(args.batch);
            config.pull = config.pull.or(args.pull);
            Box::new(
                peer::start(
                    &args.namesrv,
                    &args.topic,
                    &args.group,
                    &config,
                    tally.clone(),
                )
                .await?,
            )
        }
        "stream" => {
            Box::new(stream::start(&args.namesrv, &args.topic, &args.group, tally.clone()).await?)
        }
        other => {
            let why = crate::unavailable(other)
                .unwrap_or_else(|| format!("child: unknown consumer `{other}`"));
            return Err(why.into());
        }
    };
    let (complete, last_progress) = wait(&tally, args.timeout).await;
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
        "redelivered": tally.redelivered(),
        "elapsed_s": elapsed,
        "first_message_s": first,
        // When the count of distinct messages last grew (to within PROGRESS_TICK): for a run
        // cut short by --timeout, when it stopped making progress.
        "last_progress_s": last_progress.map(|t| t.duration_since(started).as_secs_f64()),
        "steady_s": steady,
        "msgs_per_s": per_second(elapsed),
        "steady_msgs_per_s": steady.and_then(per_second),
        "cpu_s": cpu,
        "user_s": after.user.saturating_sub(before.user).as_secs_f64(),
        "sys_s": after.system.saturating_sub(before.system).as_secs_f64(),
        "cpu_s_per_million": (messages > 0).then(|| cpu * 1e6 / messages as f64),
        "max_rss_mib": after.max_rss_kib as f64 / 1024.0,
        // A thread that parks and is woken again costs two switches and a system call or two:
        // counted, unlike CPU time, the same on a busy machine as on a quiet one.
        "context_switches_per_thousand": (messages > 0).then(|| {
            after.switches.saturating_sub(before.switches) as f64 * 1e3 / messages as f64
        }),
        "peer_config": (args.kind == crate::PEER)
            .then(|| args.peer.as_deref().unwrap_or(crate::FAIR_PEER)),
        "batch": args.batch.unwrap_or(1),
        "pull": args.pull.unwrap_or(32),
    }))
}

/// How often [`wait`] looks at the count of distinct messages.
const PROGRESS_TICK: Duration = Duration::from_millis(50);

/// Waits until every expected message was seen or `timeout` passed; says which, and when the
/// count of distinct messages last grew (looked at every [`PROGRESS_TICK`], nothing per message).
async fn wait(tally: &Tally, timeout: Duration) -> (bool, Option<Instant>) {
    let deadline = tokio::time::Instant::now() + timeout;
    let complete = tally.complete();
    tokio::pin!(complete);
    let mut tick = tokio::time::interval(PROGRESS_TICK);
    let (mut seen, mut last_progress) = (0, None);
    loop {
        tokio::select! {
            () = &mut complete => return (true, Some(Instant::now())),
            () = tokio::time::sleep_until(deadline) => return (false, last_progress),
            _ = tick.tick() => {
                let now = tally.unique();
                if now > seen {
                    (seen, last_progress) = (now, Some(Instant::now()));
                }
            }
        }
    }
}
