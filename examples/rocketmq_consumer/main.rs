//! Joins a consumer group on a real RocketMQ cluster and prints the queues this client is given
//! and loses (and, with `--consume`, the messages it consumes), until Ctrl-C or SIGTERM; then
//! shuts down cleanly (releases its queues, unregisters).
//!
//! ```sh
//! cargo run --example rocketmq_consumer -- --namesrv 127.0.0.1:9876 --group G --topic T \
//!     [--tags "TagA || TagB"] [--strategy NAME] [--param key=value]... [--client-id ID] \
//!     [--rebalance-interval 2s] [--heartbeat-interval 30s] [--member-expiry 120s] \
//!     [--no-retry-topic] [--json] \
//!     [--consume [--api push|stream] [--orderly] [--consume-from last|first] \
//!      [--fail-every N | --fail-always] [--max-reconsume-times N] [--delay-level N] \
//!      [--exclusive-hand-off] [--consume-time 10ms] [--stall-after N] \
//!      [--queue-max-messages 1000] \
//!      [--pop [--pop-mode orderly|ordinary] [--pop-invisible-time 5s] [--pop-poll-time 5s]]] \
//!     [--server-assignment] [--server-strategy AVG|AVG_BY_CIRCLE] \
//!     [--broadcast [--offsets-dir DIR]] \
//!     [--access-key KEY --secret-key SECRET] [--namespace NS] \
//!     [--tls [--tls-ca ca.pem] [--tls-server-name NAME] [--tls-insecure]] [--metrics 127.0.0.1:9898] \
//!     [--connect-via ADVERTISED=ACTUAL]...
//! ```
//!
//! **Production clusters.** `--access-key` and `--secret-key` sign every request (ACL); the
//! secret may come from the environment variable `ROCKETMQ_SECRET_KEY` instead of the command
//! line, and is never printed. `--namespace NS` joins the group in the namespace `NS` (topics
//! and groups are `NS%name` on the servers; everything printed shows plain names). `--tls`
//! connects over TLS (the platform's roots), `--tls-ca FILE` trusts that PEM file's
//! certificates instead, `--tls-server-name NAME` checks the servers' certificates against
//! `NAME`, and `--tls-insecure` trusts any certificate (test clusters only); each implies
//! `--tls`. `--metrics ADDR` serves the runtime's metrics in the Prometheus text format at
//! `http://ADDR/metrics` (see `metrics_endpoint.rs`, and the table in
//! `docs/guide/production.md#metrics`).
//! `--connect-via ADVERTISED=ACTUAL` (repeatable, both `host:port`) dials a server at `ACTUAL`
//! when the route (or `--namesrv`) names it `ADVERTISED`: a broker behind NAT, port forwarding
//! or a sidecar registers an address this host cannot reach (`AddressMap`; TLS still checks
//! the advertised name).
//!
//! `--consume` consumes the messages with the runtime's push consumer, pulling them from the
//! brokers: concurrently, or each queue in order with `--orderly`. `--fail-every N` fails the
//! first delivery of every N-th message (it comes again through the retry topic; in order, the
//! queue is suspended and the batch tried again), `--fail-always` fails every delivery (each
//! message ends in the dead-letter topic `%DLQ%G`), `--max-reconsume-times` is how many
//! redeliveries a message gets before the dead-letter topic (16), `--delay-level` the delay
//! level of a redelivery (0, the default, lets the broker choose: 10 s for the first, then 30 s,
//! 1 min, ...; 1 is 1 s), `--consume-time` how long each message takes, and
//! `--exclusive-hand-off` makes a queue's next owner wait until this client has stopped
//! consuming it and committed, and `--stall-after N` makes the listener hang (never return) on
//! every call once N messages were consumed: a stuck application, whose buffers fill up to the
//! push consumer's limits while messages keep coming (`--queue-max-messages`, 1,000 per queue by
//! default). `--consume-from` says where a queue nobody has consumed yet
//! starts: at its end (`last`, the default, as the Java client), or at its oldest message
//! (`first`).
//!
//! `--api stream` consumes through the stream consumer (`StreamConsumer`: a `Stream` of
//! messages, each acknowledged, or handed back when it fails; with `--orderly`, a stream of each
//! queue's batches in order) instead of the push consumer's listener (`--api push`, the
//! default); everything else, the lines printed included, is the same.
//!
//! `--pop` (with `--consume`) consumes by POP (RocketMQ 5): the brokers assign the queues
//! (server-side assignment with `--server-strategy`, the group's mode set to POP at the
//! brokers), every member pops every queue of each broker (shown as queue id `-1`), and each
//! message is acknowledged once consumed; failures come back through the retry topic as with
//! pulls. `--pop-mode` is `orderly` (default: the POP the Rust broker 1.0 brings back when a
//! member dies with messages popped) or `ordinary` (the Java client's, which that broker never
//! brings back); `--pop-invisible-time` is how long popped messages stay invisible to the other
//! members (5 s by default, short because the Rust broker 1.0 gives an orderly-popped queue
//! one batch per invisible time; the consumer extends it for a batch consumed longer), and
//! `--pop-poll-time` how long the brokers may hold a pop. Every member of the group should use
//! `--pop`. With `--api stream`, the stream consumer pops (not with `--orderly`: an ordered
//! stream rebalances on the client). `--server-assignment` (without `--pop`) asks the brokers for the assignment in PULL
//! mode instead of running `--strategy` here; it mixes with members that run `averagely` (for
//! `AVG`) on their own.
//!
//! `--broadcast` joins the group in broadcasting mode: this client takes every queue of the
//! topic and keeps its own offsets, in memory (a restart starts each queue over at its
//! `--consume-from` position), or with `--offsets-dir DIR` in the file
//! `DIR/{group}/offsets.json`, in the Java client's format (`FileOffsetStore`), so that a
//! restart with the same directory resumes where the last run's offsets were persisted (every
//! 5 s, and at a clean shutdown). A file that cannot be read is an error before the consumer
//! starts. Pointing `DIR` at `~/.rocketmq_offsets/{ip}@DEFAULT` shares a Java broadcasting
//! consumer's file.
//!
//! `--heartbeat-interval` must stay well below the brokers' `channelExpiredTimeout` (120 s by
//! default): a client silent for longer is dropped from the group until its next heartbeat,
//! and the others take its queues meanwhile. `--member-expiry` is that timeout (say your
//! brokers' if it is not 120 s): a client none of whose heartbeats was accepted for that long
//! (it was frozen, or cut off from the brokers) stops consuming the queues it held, which the
//! others may have taken, and takes its share again once a heartbeat is accepted.
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
//! `{"t_ms": ..., "unix_us": ..., "client": ..., "event": "added" | "removed", "topic": ..., "queues": [[topic, broker, queue_id], ...]}`;
//! with `--consume`, the same lines from the changes of the assignment, and one line per message
//! consumed, written out as it is consumed:
//! `{"t_ms", "unix_us", "client", "event": "message", "topic", "broker", "queue", "offset", "msg_id", "body", "reconsume_times"}`
//! (`t_ms` is milliseconds since this process started; `unix_us` the wall clock, microseconds
//! since the Unix epoch, taken at the same moment: it orders the lines of several processes on
//! one machine as they happened, whenever each was read; `topic` is the message's: a redelivered one shows the topic it came from, while `broker`,
//! `queue` and `offset` say where it was pulled, the retry topic's queue). With server-side
//! assignment in POP mode an `added` line also has `"shared": [[topic, broker, queue_id], ...]`,
//! its queues that other members pop too.

mod metrics_endpoint;

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clap::Parser;
use futures_util::StreamExt;
use rebalance::core::strategy::{Params, build_strategy};
use rebalance::runtime::assignment::Assignment;
use rebalance::runtime::config::{ConsumeFrom, Intervals, MessageModel};
use rebalance::runtime::consume::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message, MessageStream,
    OrderedStream, OrderlyContext, OrderlyListener, OrderlyResult, PopMode, PopOptions,
    PushConsumer, PushConsumerHandle, StreamConsumer, StreamConsumerHandle,
};
use rebalance::runtime::{
    ListenerError, LocalOffsetStore, MemberOptions, OffsetStore, default_client_id,
};
use rebalance::{ClientId, Consumer, MessageQueue, QueueLease, QueueListener, RemovedQueue};
use rebalance_rocketmq::tls::TlsConfig;
use rebalance_rocketmq::{
    AddressMap, Credentials, FileOffsetStore, NameServerClient, Namespace, RocketMq,
};
use serde_json::{Value, json};
use tokio::sync::watch;
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
    /// The wait between heartbeats to the brokers (the Java client's 30 s by default).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    heartbeat_interval: Duration,
    /// How long the brokers keep a client they no longer hear from (their
    /// `channelExpiredTimeout`, 120 s by default).
    #[arg(long, value_parser = parse_duration, default_value = "120s")]
    member_expiry: Duration,
    /// One JSON line per callback (and per message consumed).
    #[arg(long)]
    json: bool,
    /// Consume the messages (a push consumer) and print each one consumed.
    #[arg(long)]
    consume: bool,
    /// With `--consume`: the push consumer's listener, or the stream consumer's stream.
    #[arg(long, requires = "consume", value_enum, default_value_t = Api::Push)]
    api: Api,
    /// With `--consume`: each queue in order (the queues are locked at the brokers).
    #[arg(long, requires = "consume")]
    orderly: bool,
    /// With `--consume`: fail the first delivery of every N-th message.
    #[arg(long, requires = "consume", value_parser = clap::value_parser!(u64).range(1..))]
    fail_every: Option<u64>,
    /// With `--consume`: fail every delivery (the messages end in the dead-letter topic).
    #[arg(long, requires = "consume", conflicts_with = "fail_every")]
    fail_always: bool,
    /// With `--consume`: redeliveries before the dead-letter topic.
    #[arg(long, requires = "consume", default_value_t = 16)]
    max_reconsume_times: i32,
    /// With `--consume`: the delay level of a failed message's redelivery (0: the broker's
    /// choice, 10 s for the first; 1: 1 s; 2: 5 s; 3: 10 s; ...).
    #[arg(long, requires = "consume", default_value_t = 0,
          value_parser = clap::value_parser!(i32).range(0..=18))]
    delay_level: i32,
    /// With `--consume`: where a queue without a committed offset starts.
    #[arg(long, requires = "consume", value_enum, default_value_t = StartAt::Last)]
    consume_from: StartAt,
    /// With `--consume`: a removed queue's next owner waits for this client's hand-off.
    #[arg(long, requires = "consume")]
    exclusive_hand_off: bool,
    /// With `--consume`: consume by POP, the brokers assigning the queues (server-side
    /// assignment); every member of the group should.
    #[arg(long, requires = "consume", conflicts_with_all = ["orderly", "broadcast", "exclusive_hand_off"])]
    pop: bool,
    /// With `--pop`: orderly POP (the one the Rust broker 1.0 brings back) or ordinary POP (the
    /// Java client's).
    #[arg(long, requires = "pop", value_enum, default_value_t = PopKind::Orderly)]
    pop_mode: PopKind,
    /// With `--pop`: how long popped messages stay invisible to the other members.
    #[arg(long, requires = "pop", value_parser = parse_duration, default_value = "5s")]
    pop_invisible_time: Duration,
    /// With `--pop`: how long the brokers may hold a pop when there is nothing to pop.
    #[arg(long, requires = "pop", value_parser = parse_duration, default_value = "5s")]
    pop_poll_time: Duration,
    /// The brokers allocate the queues (server-side assignment, PULL mode) instead of
    /// `--strategy` here.
    #[arg(long, conflicts_with_all = ["pop", "orderly", "broadcast"])]
    server_assignment: bool,
    /// With `--pop` or `--server-assignment`: the brokers' strategy.
    #[arg(long, default_value = "AVG")]
    server_strategy: String,
    /// With `--consume`: how long consuming each message takes (e.g. 10ms).
    #[arg(long, requires = "consume", value_parser = parse_duration, default_value = "0s")]
    consume_time: Duration,
    /// With `--consume`: once this many messages were consumed, every listener call hangs.
    #[arg(long, requires = "consume", value_name = "N")]
    stall_after: Option<u64>,
    /// With `--consume`: how many messages each queue may buffer (`queue_max_messages`).
    #[arg(long, requires = "consume", value_name = "N", default_value_t = ConsumeOptions::default().queue_max_messages)]
    queue_max_messages: usize,
    /// The ACL access key: every request is signed with it and the secret key.
    #[arg(long, value_name = "KEY", requires = "secret_key")]
    access_key: Option<String>,
    /// The ACL secret key (or from the ROCKETMQ_SECRET_KEY environment variable).
    #[arg(
        long,
        value_name = "SECRET",
        env = "ROCKETMQ_SECRET_KEY",
        hide_env_values = true
    )]
    secret_key: Option<Secret>,
    /// Joins the group in this namespace (`NS%topic`, `NS%group` on the servers).
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Connects over TLS (trusting the platform's root certificates).
    #[arg(long)]
    tls: bool,
    /// Trusts the PEM certificates of this file (implies --tls).
    #[arg(long, value_name = "PEM_FILE")]
    tls_ca: Option<PathBuf>,
    /// Checks the servers' certificates against this name (implies --tls).
    #[arg(long, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// Trusts any certificate: test clusters only (implies --tls).
    #[arg(long)]
    tls_insecure: bool,
    /// Serves the metrics in the Prometheus text format at this address (`host:port`).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Dials the server advertised as ADVERTISED (a broker's address in the route, or a name
    /// server's) at ACTUAL (repeatable): brokers behind NAT or port forwarding.
    #[arg(long = "connect-via", value_name = "ADVERTISED=ACTUAL", value_parser = parse_override)]
    connect_via: Vec<(String, String)>,
    /// Broadcasting: this client takes every queue, with offsets of its own (in memory, or in
    /// `--offsets-dir`).
    #[arg(long)]
    broadcast: bool,
    /// With `--broadcast`: keeps the offsets in `DIR/{group}/offsets.json` (the Java client's
    /// format), so that a restart resumes where the last run stopped.
    #[arg(long, value_name = "DIR", requires = "broadcast")]
    offsets_dir: Option<PathBuf>,
}

/// A secret whose `Debug` does not show it.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_string()))
    }
}

impl Args {
    /// The name server client: credentials, namespace and TLS as asked.
    fn name_server(&self) -> Result<NameServerClient, Box<dyn std::error::Error>> {
        let mut builder = NameServerClient::builder(&self.namesrv);
        if let Some(access_key) = &self.access_key {
            // `requires` makes clap check that a secret key is given (flag or environment).
            let secret = self.secret_key.as_ref().map_or("", |s| s.0.as_str());
            builder = builder.credentials(Credentials::new(access_key.clone(), secret)?);
        }
        if let Some(namespace) = &self.namespace {
            builder = builder.namespace(Namespace::new(namespace.clone())?);
        }
        for (advertised, actual) in &self.connect_via {
            builder = builder.connect_via(advertised.as_str(), actual.as_str());
        }
        if self.tls || self.tls_ca.is_some() || self.tls_server_name.is_some() || self.tls_insecure
        {
            let mut tls = TlsConfig::builder();
            if let Some(ca) = &self.tls_ca {
                tls = tls.ca_pem_file(ca.clone());
            }
            if let Some(name) = &self.tls_server_name {
                tls = tls.server_name(name.clone());
            }
            if self.tls_insecure {
                tls = tls.insecure_trust_any_certificate();
            }
            builder = builder.tls(tls.build()?);
        }
        Ok(builder.build()?)
    }
}

/// How `--consume` consumes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Api {
    /// The push consumer: a listener called with each batch.
    Push,
    /// The stream consumer: a stream of messages (or of ordered batches) acknowledged one by one.
    Stream,
}

/// Which POP.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PopKind {
    /// Orderly POP: a queue's batch at a time, brought back after the invisible time.
    Orderly,
    /// Ordinary POP (the Java client's).
    Ordinary,
}

/// Where a queue without a committed offset starts.
#[derive(Clone, Copy, clap::ValueEnum)]
enum StartAt {
    /// At its end: only messages sent from now on (the Java client's default).
    Last,
    /// At its oldest message still stored.
    First,
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
fn parse_override(text: &str) -> Result<(String, String), String> {
    AddressMap::parse_entry(text).map_err(|e| e.to_string())
}

fn parse_param(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not key=value"))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.trim().to_string(), value))
}

/// The wall clock in microseconds since the Unix epoch (0 for a clock set before it).
fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
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
        self.print_shared(event, topic, queues, &[], note);
    }

    /// [`print`](Self::print), saying which of the queues other members pop too.
    fn print_shared(
        &self,
        event: &str,
        topic: &str,
        queues: impl Iterator<Item = MessageQueue>,
        shared: &[MessageQueue],
        note: &str,
    ) {
        let queues: Vec<MessageQueue> = queues.collect();
        let (t_ms, unix_us) = (self.epoch.elapsed().as_millis() as u64, unix_us());
        if self.json {
            let triples: Vec<_> = queues.iter().map(MessageQueue::to_json_triple).collect();
            let mut line = json!({"t_ms": t_ms, "unix_us": unix_us, "client": self.client, "event": event, "topic": topic, "queues": triples});
            if !shared.is_empty() {
                let shared: Vec<_> = shared.iter().map(MessageQueue::to_json_triple).collect();
                line["shared"] = json!(shared);
            }
            println!("{line}");
        } else {
            let note = if shared.is_empty() {
                note.to_string()
            } else {
                format!("{note} (popped: shared with the other members)")
            };
            let note = note.as_str();
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

impl Printer {
    /// One line per message consumed (standard output is flushed at each line).
    fn message(&self, message: &Message) {
        let (t_ms, unix_us) = (self.epoch.elapsed().as_millis() as u64, unix_us());
        let queue = message.queue();
        let body = String::from_utf8_lossy(message.body());
        if self.json {
            let line = json!({"t_ms": t_ms, "unix_us": unix_us, "client": self.client, "event": "message",
                "topic": message.topic(), "broker": &*queue.broker_name, "queue": queue.queue_id,
                "offset": message.queue_offset(), "msg_id": message.msg_id(), "body": body,
                "reconsume_times": message.reconsume_times()});
            println!("{line}");
        } else {
            println!(
                "[{:>8.3}s] message {}@{}#{} offset {} {} (reconsumed {}): {body}",
                t_ms as f64 / 1000.0,
                message.topic(),
                queue.broker_name,
                queue.queue_id,
                message.queue_offset(),
                message.msg_id(),
                message.reconsume_times()
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
    let strategy = build_strategy(&args.strategy, &params)?;
    let cluster = RocketMq::from(args.name_server()?);
    // The endpoint is up before the consumer starts, so the first round is already seen.
    let _metrics = match args.metrics {
        Some(addr) => {
            let handle = metrics_endpoint::install()?;
            let listener = metrics_endpoint::bind(addr).await?;
            eprintln!(
                "rocketmq_consumer: metrics at http://{}/metrics",
                listener.local_addr()?
            );
            Some(AbortOnDrop(tokio::spawn(metrics_endpoint::serve(
                listener, handle,
            ))))
        }
        None => None,
    };
    // Broadcasting keeps offsets per client: in a file (opened now, so that one that cannot be
    // read stops us before the consumer starts) or in memory. Clustering: at the brokers.
    let (message_model, own_offsets): (MessageModel, Option<Arc<dyn OffsetStore>>) =
        if args.broadcast {
            let offsets: Arc<dyn OffsetStore> = match &args.offsets_dir {
                Some(dir) => {
                    // Keyed as a Java client in the namespace keys them (`NS%topic`).
                    let mut store = FileOffsetStore::in_dir(dir, &args.group)?;
                    if let Some(namespace) = &args.namespace {
                        store = store.with_namespace(Namespace::new(namespace.clone())?);
                    }
                    Arc::new(store)
                }
                None => Arc::new(LocalOffsetStore::new()),
            };
            (MessageModel::Broadcasting, Some(offsets))
        } else {
            (MessageModel::Clustering, None)
        };
    let client_id = args
        .client_id
        .clone()
        .map_or_else(default_client_id, ClientId::from);
    let printer = Arc::new(Printer {
        client: client_id.to_string(),
        epoch: Instant::now(),
        json: args.json,
    });
    // What both kinds of consumer share: the cluster, the strategy, the rounds, the id.
    let member = {
        let cluster = cluster.clone();
        let rebalance_wait = args.rebalance_interval;
        let heartbeat = args.heartbeat_interval;
        let member_expiry = args.member_expiry;
        let consume_from = match args.consume_from {
            StartAt::Last => ConsumeFrom::LastOffset,
            StartAt::First => ConsumeFrom::FirstOffset,
        };
        let retry = !args.no_retry_topic;
        let exclusive = args.exclusive_hand_off;
        let client_id = client_id.clone();
        let server = args
            .server_assignment
            .then(|| (Arc::new(cluster.clone()), args.server_strategy.clone()));
        move |member: MemberOptions| {
            let member = member
                .cluster(cluster)
                .consume_retry_topic(retry)
                .exclusive_hand_off(exclusive)
                .strategy(strategy);
            let member = match server {
                Some((source, strategy)) => member.server_assignment(source, strategy),
                None => member,
            };
            let member = member
                .consume_from(consume_from)
                .intervals(Intervals {
                    rebalance_wait,
                    heartbeat,
                    member_expiry,
                    ..Intervals::default()
                })
                .client_id(client_id);
            match own_offsets {
                Some(offsets) => member.offset_store(offsets),
                None => member,
            }
        }
    };
    let (consumer, running) = if args.consume {
        let mut options = ConsumeOptions::default();
        options.max_reconsume_times = args.max_reconsume_times;
        options.queue_max_messages = args.queue_max_messages;
        let handler = Arc::new(Handler {
            printer: printer.clone(),
            fail_every: args.fail_every,
            fail_always: args.fail_always,
            delay_level: args.delay_level,
            consume_time: args.consume_time,
            stall_after: args.stall_after,
            consumed: AtomicU64::new(0),
            first_deliveries: AtomicU64::new(0),
            failed: Mutex::new(HashSet::new()),
        });
        let pop_options = || {
            let mode = match args.pop_mode {
                PopKind::Orderly => PopMode::Orderly,
                PopKind::Ordinary => PopMode::Ordinary,
            };
            PopOptions::default()
                .with_strategy(args.server_strategy.clone())
                .with_mode(mode)
                .with_invisible_time(args.pop_invisible_time)
                .with_poll_time(args.pop_poll_time)
        };
        if args.api == Api::Stream {
            let mut builder = StreamConsumer::builder(args.group.as_str())
                .configure(member)
                .source(Arc::new(cluster.clone()))
                .message_model(message_model)
                .subscribe_tags(args.topic.as_str(), &args.tags)?
                .options(options);
            if args.pop {
                builder = builder.pop(cluster, pop_options());
            }
            let (handle, task) = if args.orderly {
                let stream = builder.start_ordered().await?;
                let handle = stream.handle().clone();
                (handle, tokio::spawn(handler.consume_batches(stream)))
            } else {
                let stream = builder.start().await?;
                let handle = stream.handle().clone();
                let concurrency = options.consume_concurrency;
                (
                    handle,
                    tokio::spawn(handler.consume_stream(stream, concurrency)),
                )
            };
            let consumer = handle.consumer().clone();
            tokio::spawn(print_changes(consumer.watch(), printer.clone()));
            (consumer, Running::Stream(handle, task))
        } else {
            let mut builder = PushConsumer::builder(args.group.as_str())
                .configure(member)
                .source(Arc::new(cluster.clone()))
                .message_model(message_model)
                .subscribe_tags(args.topic.as_str(), &args.tags)?
                .options(options);
            if args.pop {
                builder = builder.pop(cluster, pop_options());
            }
            let builder = if args.orderly {
                builder.orderly(handler)
            } else {
                builder.concurrently(handler)
            };
            let push = builder.start().await?;
            let consumer = push.consumer().clone();
            // The push consumer listens to the leases itself: print the assignment's changes.
            tokio::spawn(print_changes(consumer.watch(), printer.clone()));
            (consumer, Running::Push(push))
        }
    } else {
        let consumer = Consumer::builder(args.group.as_str())
            .configure(member)
            .message_model(message_model)
            .subscribe_tags(args.topic.as_str(), &args.tags)?
            .listener(printer)
            .start()
            .await?;
        (consumer, Running::Member)
    };
    let mut interrupted = false;
    if !args.json {
        println!(
            "{} started in {} on {} ({}) ({}Ctrl-C to leave)",
            consumer.client_id(),
            args.group,
            args.topic,
            args.tags,
            if args.consume { "consuming; " } else { "" }
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
            _ = stop_signal() => interrupted = true,
        }
    }
    if !interrupted {
        stop_signal().await?;
    }
    if !args.json {
        println!("leaving: releasing queues and unregistering…");
    }
    match running {
        Running::Push(push) => push.shutdown().await,
        Running::Stream(handle, task) => {
            // The stream ends as the shutdown begins; the messages being consumed finish.
            handle.shutdown().await;
            task.await?;
        }
        Running::Member => consumer.shutdown().await,
    }
    Ok(())
}

/// What runs: a push consumer, a stream consumer and the task consuming its stream, or a group
/// member that only prints its queues.
enum Running {
    Push(PushConsumerHandle),
    Stream(StreamConsumerHandle, tokio::task::JoinHandle<()>),
    Member,
}

/// Stops the metrics endpoint when the consumer is done.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

/// Prints the queues added and removed between successive assignments.
async fn print_changes(mut assignments: watch::Receiver<Arc<Assignment>>, printer: Arc<Printer>) {
    let mut held = Assignment::default();
    loop {
        let now = assignments.borrow_and_update().clone();
        let topics: BTreeSet<&String> = held.queues.keys().chain(now.queues.keys()).collect();
        for topic in topics {
            let before: BTreeSet<&MessageQueue> =
                held.queues.get(topic).into_iter().flatten().collect();
            let after: BTreeSet<&MessageQueue> =
                now.queues.get(topic).into_iter().flatten().collect();
            let added: Vec<MessageQueue> =
                after.difference(&before).map(|q| (*q).clone()).collect();
            let removed: Vec<MessageQueue> =
                before.difference(&after).map(|q| (*q).clone()).collect();
            if !added.is_empty() {
                let shared: Vec<MessageQueue> =
                    added.iter().filter(|q| now.is_shared(q)).cloned().collect();
                printer.print_shared("added", topic, added.into_iter(), &shared, "");
            }
            if !removed.is_empty() {
                printer.print("removed", topic, removed.into_iter(), "");
            }
        }
        held = (*now).clone();
        if assignments.changed().await.is_err() {
            return;
        }
    }
}

/// Consumes by printing each message, failing some first deliveries when asked to.
struct Handler {
    printer: Arc<Printer>,
    fail_every: Option<u64>,
    /// Every delivery fails.
    fail_always: bool,
    /// The delay level of the redeliveries (concurrent consumption).
    delay_level: i32,
    consume_time: Duration,
    /// Every call hangs once this many messages were consumed.
    stall_after: Option<u64>,
    /// Messages consumed so far.
    consumed: AtomicU64,
    /// First deliveries seen.
    first_deliveries: AtomicU64,
    /// Orderly: the messages failed once, delivered again by the same queue.
    failed: Mutex<HashSet<String>>,
}

impl Handler {
    /// Whether this delivery of `message` fails: every one with `--fail-always`, else the first
    /// delivery of every N-th message.
    fn fails(&self, message: &Message) -> bool {
        if self.fail_always {
            return true;
        }
        let Some(every) = self.fail_every else {
            return false;
        };
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if message.reconsume_times() > 0 || failed.remove(message.msg_id()) {
            return false;
        }
        let n = self.first_deliveries.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(every) {
            failed.insert(message.msg_id().to_string());
            return true;
        }
        false
    }

    /// Consumes `messages` up to the first that fails; returns how many were consumed. Hangs
    /// for good once `--stall-after` messages were consumed.
    async fn consume_until_failure(&self, messages: &[Message]) -> usize {
        if let Some(limit) = self.stall_after
            && self.consumed.load(Ordering::Relaxed) >= limit
        {
            std::future::pending::<()>().await;
        }
        for (i, message) in messages.iter().enumerate() {
            if self.fails(message) {
                return i;
            }
            if !self.consume_time.is_zero() {
                tokio::time::sleep(self.consume_time).await;
            }
            self.printer.message(message);
            self.consumed.fetch_add(1, Ordering::Relaxed);
        }
        messages.len()
    }
}

impl Handler {
    /// Consumes the stream, `concurrency` messages at once: each is consumed (printed) and
    /// acknowledged, or, when it fails, handed back with `--delay-level`.
    async fn consume_stream(self: Arc<Self>, stream: MessageStream, concurrency: usize) {
        stream
            .for_each_concurrent(concurrency, |message| {
                let handler = self.clone();
                async move {
                    if handler
                        .consume_until_failure(std::slice::from_ref(&*message))
                        .await
                        == 1
                    {
                        message.ack();
                    } else {
                        message.nack_with_delay_level(handler.delay_level).await;
                    }
                }
            })
            .await;
    }

    /// Consumes the ordered stream: each batch is committed, or suspended (tried again whole)
    /// when a message fails; batches of different queues at once.
    async fn consume_batches(self: Arc<Self>, stream: OrderedStream) {
        stream
            .for_each_concurrent(None, |batch| {
                let handler = self.clone();
                async move {
                    if handler.consume_until_failure(batch.messages()).await
                        == batch.messages().len()
                    {
                        batch.commit();
                    } else {
                        batch.suspend();
                    }
                }
            })
            .await;
    }
}

#[async_trait]
impl ConcurrentListener for Handler {
    async fn consume(
        &self,
        messages: &[Message],
        context: &mut ConcurrentContext,
    ) -> ConsumeResult {
        context.delay_level = self.delay_level;
        let consumed = self.consume_until_failure(messages).await;
        if consumed == messages.len() {
            ConsumeResult::Success
        } else if consumed == 0 {
            ConsumeResult::ReconsumeLater
        } else {
            // The ones consumed are acknowledged; the failed one and those after it are sent
            // back.
            context.ack_index = Some(consumed - 1);
            ConsumeResult::Success
        }
    }
}

#[async_trait]
impl OrderlyListener for Handler {
    async fn consume(&self, messages: &[Message], _context: &mut OrderlyContext) -> OrderlyResult {
        // A batch is retried whole: a failure after some messages consumes them again.
        if self.consume_until_failure(messages).await == messages.len() {
            OrderlyResult::Success
        } else {
            OrderlyResult::Suspend
        }
    }
}
