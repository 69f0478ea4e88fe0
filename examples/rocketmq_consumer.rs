//! Joins a consumer group on a real RocketMQ cluster and prints the queues this client is given
//! and loses, until Ctrl-C; then shuts down cleanly (releases its queues, unregisters).
//!
//! ```sh
//! cargo run --example rocketmq_consumer -- --namesrv 127.0.0.1:9876 --group G --topic T \
//!     [--tags "TagA || TagB"] [--strategy NAME] [--param key=value]... [--client-id ID] \
//!     [--rebalance-interval 2s] [--no-retry-topic] [--json]
//! ```
//!
//! The client also takes its share of the group's retry topic `%RETRY%G`, as the Java client
//! does, unless `--no-retry-topic` is given (decide it for the whole group). `--tags` is the
//! tag expression the broker filters the topic's messages by (`*`, every tag, by default).
//!
//! `--param` gives the strategy its parameters, as `rebalance simulate` does (the value is JSON
//! when it parses as JSON, a string otherwise): `--strategy by_machine_room --param
//! consumer_idcs=room1`, `--strategy designated --param consumers=10.0.0.1,10.0.0.2`. Logs go
//! to standard error (`RUST_LOG`, `warn` by default), so standard output holds only the
//! callbacks; an error is printed in words and the exit status is 1.
//!
//! With `--json`, one line per callback, shaped like `rebalance simulate --json`'s:
//! `{"t_ms": ..., "client": ..., "event": "added" | "removed", "topic": ..., "queues": [[topic, broker, queue_id], ...]}`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clap::Parser;
use rebalance::core::strategy::Params;
use rebalance::runtime::{ListenerError, config::Intervals, default_client_id};
use rebalance::{ClientId, Consumer, MessageQueue, QueueLease, QueueListener, RemovedQueue};
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use serde_json::{Value, json};
use tokio::time::Instant;

#[derive(Parser)]
#[command(about = "Join a RocketMQ consumer group and print this client's queue changes")]
struct Args {
    /// Name server addresses, `host:port;host:port`.
    #[arg(long)]
    namesrv: String,
    /// The consumer group.
    #[arg(long)]
    group: String,
    /// The topic to subscribe.
    #[arg(long)]
    topic: String,
    /// The tags consumed from the topic: `*`, or tags separated by `||`.
    #[arg(long, default_value = "*")]
    tags: String,
    /// Leave the group's retry topic alone (every member of the group should say the same).
    #[arg(long)]
    no_retry_topic: bool,
    /// The allocation strategy (`averagely`, `consistent_hash`, …).
    #[arg(long, default_value = "averagely")]
    strategy: String,
    /// A strategy parameter, `key=value` (repeatable), e.g. `consumer_idcs=room1`.
    #[arg(long = "param", value_parser = parse_param)]
    params: Vec<(String, Value)>,
    /// This client's id (default: ip@pid@nanos).
    #[arg(long)]
    client_id: Option<String>,
    /// The wait between balanced rounds (the Java client's 20 s by default).
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    rebalance_interval: Duration,
    /// One JSON line per callback.
    #[arg(long)]
    json: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, scale) = match text.strip_suffix("ms") {
        Some(n) => (n, 0.001),
        None => (text.strip_suffix('s').unwrap_or(text), 1.0),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 2s, 500ms)"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|e| e.to_string())
}

/// `key=value`; the value is JSON when it parses as JSON, a string otherwise.
fn parse_param(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not key=value"))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.trim().to_string(), value))
}

struct Printer {
    client: String,
    epoch: Instant,
    json: bool,
}

impl Printer {
    fn print(
        &self,
        event: &str,
        topic: &str,
        queues: impl Iterator<Item = MessageQueue>,
        note: &str,
    ) {
        let queues: Vec<MessageQueue> = queues.collect();
        let t_ms = self.epoch.elapsed().as_millis() as u64;
        if self.json {
            let triples: Vec<_> = queues.iter().map(MessageQueue::to_json_triple).collect();
            let line = json!({"t_ms": t_ms, "client": self.client, "event": event, "topic": topic, "queues": triples});
            println!("{line}");
        } else {
            let names: Vec<String> = queues
                .iter()
                .map(|q| format!("{}#{}", q.broker_name, q.queue_id))
                .collect();
            println!(
                "[{:>8.3}s] {event} {} queue(s) of {topic}: {} {note}",
                t_ms as f64 / 1000.0,
                names.len(),
                names.join(" ")
            );
        }
    }
}

#[async_trait]
impl QueueListener for Printer {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.print("added", topic, queues.iter().map(|l| l.queue().clone()), "");
        Ok(())
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        let reason = queues.first().map_or("", |r| r.reason.as_str());
        self.print(
            "removed",
            topic,
            queues.iter().map(|r| r.queue.clone()),
            &format!("({reason})"),
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // Logs on standard error, never mixed with the callbacks on standard output.
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocketmq_consumer: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let params: Params = args.params.iter().cloned().collect();
    let name_server = NameServerClient::from_addresses(&args.namesrv)?;
    let brokers = BrokerClient::new(name_server.clone());
    let builder = Consumer::builder(args.group.as_str())
        .subscribe_tags(args.topic.as_str(), &args.tags)?
        .consume_retry_topic(!args.no_retry_topic)
        .strategy_named(&args.strategy, &params)?
        .intervals(Intervals {
            rebalance_wait: args.rebalance_interval,
            ..Intervals::default()
        })
        .name_server(Arc::new(name_server))
        .directory(Arc::new(brokers.clone()))
        .offset_store(Arc::new(brokers.clone()))
        .locker(Arc::new(brokers));
    let client_id = args
        .client_id
        .map_or_else(default_client_id, ClientId::from);
    let builder = builder.client_id(client_id.clone());
    let printer = Arc::new(Printer {
        client: client_id.to_string(),
        epoch: Instant::now(),
        json: args.json,
    });
    let consumer = builder.listener(printer).start().await?;
    let mut interrupted = false;
    if !args.json {
        println!(
            "{} started in {} on {} ({}) (Ctrl-C to leave)",
            consumer.client_id(),
            args.group,
            args.topic,
            args.tags
        );
        // `start` succeeds whatever the servers say; the first round tells whether the
        // consumer reached them.
        let mut rounds = consumer.rounds();
        tokio::select! {
            first = rounds.wait_for(|r| r.round >= 1) => match first {
                Ok(report) if report.balanced => println!("first round done: balanced"),
                Ok(report) => {
                    let why: Vec<_> = report.topics.iter().filter_map(|t| t.unbalanced.as_ref()).collect();
                    println!("first round done, not balanced (tried again every second): {why:?}");
                }
                Err(_) => {}
            },
            _ = tokio::signal::ctrl_c() => interrupted = true,
        }
    }
    if !interrupted {
        tokio::signal::ctrl_c().await?;
    }
    if !args.json {
        println!("leaving: releasing queues and unregistering…");
    }
    consumer.shutdown().await;
    Ok(())
}
