//! `rebalance send`: sends messages to a topic of a real RocketMQ cluster, choosing queues with
//! the runtime's producer (round robin with latency fault avoidance, or by key for ordered
//! messages) and storing them with SEND_MESSAGE.
//!
//! Each message gets a unique id (`UNIQ_KEY`, stamped by `Message::new` as the Java producer
//! sets it, the same for each retry of the message), which consumers see as its id; `--json` prints one line per message stored:
//! `{"msg_id", "topic", "broker", "queue", "offset", "body"}`.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_rocketmq::producer::{
    Message, MessageSender, SendError as SendFailure, SendResult, SendStatus,
};
use rebalance_rocketmq::{AddressError, ClientConfig};
use rebalance_runtime::RemoteError;
use rebalance_runtime::producer::{
    Producer, ProducerError, ProducerHandle, SelectByHash, SelectError,
};
use serde::Serialize;
use tokio::time::{Instant, MissedTickBehavior};

use crate::args::parse_timeout;
use crate::connect::{ConnectArgs, ConnectError};

/// The most messages one run sends.
pub const MAX_COUNT: u64 = 100_000_000;
/// The highest rate, in messages per second.
pub const MAX_RATE: f64 = 1_000_000.0;
/// The lowest rate, in messages per second: one message a day (a slower pace is a period no
/// clock holds, `1e-300` one of 10^300 s).
pub const MIN_RATE: f64 = 1.0 / 86_400.0;

/// The command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SendArgs {
    /// The name server addresses, `host:port;host:port`.
    #[arg(long)]
    pub namesrv: String,
    /// The topic.
    #[arg(long)]
    pub topic: String,
    /// How many messages to send.
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// The tag of every message.
    #[arg(long)]
    pub tags: Option<String>,
    /// The keys of every message (space separated); `{i}` is replaced by the message's number.
    #[arg(long)]
    pub keys: Option<String>,
    /// Sends in order on one queue per key: the queue is chosen by the hash of this key (as the
    /// Java client's `SelectMessageQueueByHash`), and a failed send is retried on the same
    /// queue. `{i}` is replaced by the message's number (so `k{i}` spreads the messages).
    #[arg(long)]
    pub ordered_by: Option<String>,
    /// At most this many messages per second (default: as fast as the broker answers).
    #[arg(long)]
    pub rate: Option<f64>,
    /// The bodies are this prefix followed by the message's number, from 0.
    #[arg(long, default_value = "msg-")]
    pub body_prefix: String,
    /// One JSON line per message stored instead of a text line.
    #[arg(long)]
    pub json: bool,
    /// The producer group.
    #[arg(long, default_value = "rebalance-send")]
    pub group: String,
    /// How many times a failed send is tried again (on another broker when unordered). A
    /// message a broker refuses as such (MESSAGE_ILLEGAL…) is not tried again, as in Java.
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// How long each request to a server may take (more than zero).
    #[arg(long, default_value = "3s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Credentials, namespace and TLS.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Why the run failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// An argument is out of range.
    #[error("{0}")]
    Arguments(String),
    /// The name server list is unusable.
    #[error("--namesrv: {0}")]
    Address(#[from] AddressError),
    /// The producer could not start (the topic's route could not be fetched).
    #[error("producer: {0}")]
    Producer(#[from] ProducerError),
    /// The topic's route could not be fetched, or it has no queue to send to.
    #[error("topic: {0}")]
    Topic(SelectError),
    /// Some messages could not be sent (each was reported on standard error).
    #[error("{failed} of {count} messages could not be sent")]
    Failed {
        /// How many failed.
        failed: u64,
        /// How many were to be sent.
        count: u64,
    },
    /// Writing (or starting the runtime) failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The credentials, namespace or TLS flags are unusable.
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

impl SendError {
    /// Whether the arguments are at fault (exit status 2) rather than the run (1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SendError::Arguments(_) | SendError::Address(_) | SendError::Connect(_)
        )
    }
}

/// One line of `--json`: exactly these keys, in this order.
#[derive(Debug, Serialize)]
struct SentLine<'a> {
    msg_id: &'a str,
    topic: &'a str,
    broker: &'a str,
    queue: i32,
    /// `null` when the broker's answer did not say.
    offset: Option<i64>,
    body: &'a str,
    /// Present (and true) only when an earlier attempt was left unanswered: it may have stored
    /// the message too.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    maybe_stored_twice: bool,
}

/// A message sent, and the error of an earlier attempt that may have stored it too.
#[derive(Debug)]
struct Sent {
    result: SendResult,
    maybe_stored_before: Option<RemoteError>,
}

/// Why one message could not be sent.
#[derive(Debug, thiserror::Error)]
enum OneFailed {
    #[error("no queue: {0}")]
    Select(#[from] SelectError),
    #[error("{0}")]
    Remote(#[from] RemoteError),
    /// Failed, after an attempt whose outcome is unknown (timed out, or its connection lost):
    /// the broker may have stored the message.
    #[error("{0}")]
    Unconfirmed(RemoteError),
    #[error("{0}")]
    Invalid(rebalance_rocketmq::InvalidMessage),
}

/// Checks the arguments before anything is sent.
pub fn check(args: &SendArgs) -> Result<(), SendError> {
    if args.count > MAX_COUNT {
        return Err(SendError::Arguments(format!(
            "--count {} is above the limit of {MAX_COUNT}",
            args.count
        )));
    }
    if let Some(rate) = args.rate
        && !(MIN_RATE..=MAX_RATE).contains(&rate)
    {
        return Err(SendError::Arguments(format!(
            "--rate {rate} is not a rate between {MIN_RATE} (one message a day) and {MAX_RATE} messages per second"
        )));
    }
    if args.retries > 100 {
        return Err(SendError::Arguments(format!(
            "--retries {} is above the limit of 100",
            args.retries
        )));
    }
    Ok(())
}

/// Sends the messages, writing a line per message stored to `out` (flushed per line) and one
/// per message that failed to `err`.
pub fn run(args: &SendArgs, out: &mut impl Write, err: &mut impl Write) -> Result<(), SendError> {
    check(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(send_all(args, out, err))
}

async fn send_all(
    args: &SendArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), SendError> {
    let config = ClientConfig {
        request_timeout: args.timeout,
        connect_timeout: args.timeout,
        ..ClientConfig::default()
    };
    let name_server = args.connect.name_server(&args.namesrv, config)?;
    let producer = Producer::builder(args.group.clone())
        .name_server(Arc::new(name_server.clone()))
        .topic(args.topic.clone())
        .latency_fault_avoidance(true)
        .route_timeout(args.timeout)
        .start()
        .await?;
    // A topic that cannot be sent to fails the run at once, not each message.
    if let Err(e) = producer.register(&args.topic).await {
        producer.shutdown().await;
        return Err(SendError::Topic(e));
    }
    let sender = MessageSender::new(name_server, args.group.clone());
    let mut pace = args.rate.map(|rate| {
        let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        interval
    });
    let mut failed = 0;
    for i in 0..args.count {
        if let Some(pace) = pace.as_mut() {
            pace.tick().await;
        }
        let body = format!("{}{i}", args.body_prefix);
        let mut message = Message::new(body.clone());
        if let Some(tags) = &args.tags {
            message = message.with_tags(tags.clone());
        }
        if let Some(keys) = &args.keys {
            message = message.with_keys(numbered(keys, i));
        }
        let key = args.ordered_by.as_deref().map(|key| numbered(key, i));
        match send_one(&producer, &sender, args, &message, key.as_deref()).await {
            Ok(Sent {
                result,
                maybe_stored_before,
            }) => {
                write_sent(
                    out,
                    args.json,
                    &args.topic,
                    &result,
                    &body,
                    maybe_stored_before.is_some(),
                )?;
                if let Some(earlier) = &maybe_stored_before {
                    writeln!(
                        err,
                        "rebalance send: message {i} ({body}) sent, but an earlier attempt was left unanswered ({earlier}) and may have stored it too: it may be stored twice (id {})",
                        result.msg_id
                    )?;
                }
                if let Some(unconfirmed) = unconfirmed(result.status) {
                    writeln!(
                        err,
                        "rebalance send: message {i} ({body}) stored, but {unconfirmed}: its durability is not confirmed"
                    )?;
                }
            }
            Err(OneFailed::Unconfirmed(e)) => {
                failed += 1;
                let id = message.unique_key().unwrap_or("unknown");
                writeln!(
                    err,
                    "rebalance send: message {i} ({body}) not confirmed: {e}; a broker may have stored it all the same (id {id}): check before sending it again"
                )?;
            }
            Err(e) => {
                failed += 1;
                writeln!(err, "rebalance send: message {i} ({body}) not sent: {e}")?;
            }
        }
    }
    producer.shutdown().await;
    if failed > 0 {
        return Err(SendError::Failed {
            failed,
            count: args.count,
        });
    }
    Ok(())
}

/// What the broker could not confirm of a message it stored, if anything (every status but
/// `SendOk`; the Java producer returns them as results, not errors, and so does this one).
fn unconfirmed(status: SendStatus) -> Option<&'static str> {
    match status {
        SendStatus::SendOk => None,
        SendStatus::FlushDiskTimeout => Some("its disk flush timed out (FLUSH_DISK_TIMEOUT)"),
        SendStatus::FlushSlaveTimeout => {
            Some("its replication to the slave timed out (FLUSH_SLAVE_TIMEOUT)")
        }
        SendStatus::SlaveNotAvailable => Some("no slave is available (SLAVE_NOT_AVAILABLE)"),
    }
}

/// `template` with `{i}` replaced by `i`.
fn numbered(template: &str, i: u64) -> String {
    template.replace("{i}", &i.to_string())
}

/// Sends one message: on its key's queue when ordered (retried there), else on the queue the
/// selector picks, retried on another broker after a failure, each outcome reported to the
/// producer's fault avoidance. A refusal of the message itself is not retried (see
/// [`worth_retrying`]).
async fn send_one(
    producer: &ProducerHandle,
    sender: &MessageSender,
    args: &SendArgs,
    message: &Message,
    key: Option<&str>,
) -> Result<Sent, OneFailed> {
    // An ordered message's queue is chosen once: its retries stay on it even when the route
    // changes between the attempts (another queue would break the key's order).
    let ordered_queue = match key {
        Some(key) => Some(producer.select_by(&args.topic, &SelectByHash, key).await?),
        None => None,
    };
    let mut last_failed: Option<String> = None;
    let mut attempt = 0;
    // Whether an attempt may have stored the message (found by review: a send timed out or
    // cut off after it left was reported "not sent", and sending it again duplicated it).
    // The error of such an attempt: what a later failure to even try again reports.
    let mut maybe_stored: Option<RemoteError> = None;
    loop {
        let queue: MessageQueue = match &ordered_queue {
            Some(queue) => queue.clone(),
            None => match producer.select(&args.topic, last_failed.as_deref()).await {
                Ok(queue) => queue,
                // No queue to try again on: an earlier attempt may have stored the message all
                // the same (found by review: reported "not sent").
                Err(e) => {
                    return Err(match maybe_stored {
                        Some(earlier) => OneFailed::Unconfirmed(earlier),
                        None => e.into(),
                    });
                }
            },
        };
        let started = Instant::now();
        match sender.send(&queue, message).await {
            Ok(result) => {
                producer.report(&queue.broker_name, result.latency, true);
                // An earlier attempt left unanswered may have stored it as well (found by
                // review: reported as sent once).
                return Ok(Sent {
                    result,
                    maybe_stored_before: maybe_stored,
                });
            }
            Err(failure) => {
                let (failed, stored) = (failure.broker_failed(), failure.maybe_stored());
                // The name server failed: no broker was asked, and the time taken is the name
                // server's, which the latency table would hold against the broker (found by
                // review: a 3 s lookup avoided it for 180 s).
                let asked_broker = !matches!(
                    failure,
                    SendFailure::NotSent {
                        broker_at_fault: false,
                        ..
                    }
                );
                let e = match failure {
                    // Refused before sending: no broker is at fault, and another try fails
                    // alike.
                    SendFailure::Invalid(e) => return Err(OneFailed::Invalid(e)),
                    SendFailure::NotSent { error, .. } | SendFailure::Remote(error) => error,
                };
                // Unreachable, unanswered or refused: avoided for a failure's time (the Java
                // producer's `updateFaultItem` isolation), unless the message itself was
                // refused, or the name server failed.
                if asked_broker {
                    producer.report(&queue.broker_name, started.elapsed(), !failed);
                }
                // Only a send that left and was not refused may have been stored (found by
                // review: a refused connection was reported "not confirmed").
                if stored {
                    maybe_stored = Some(e.clone());
                }
                if attempt >= args.retries || !worth_retrying(&e) {
                    return Err(if maybe_stored.is_some() {
                        OneFailed::Unconfirmed(e)
                    } else {
                        e.into()
                    });
                }
                attempt += 1;
                last_failed = Some(queue.broker_name.to_string());
            }
        }
    }
}

/// Whether a failed send may succeed on another try: not answered, or refused with a code the
/// Java producer retries (`retryResponseCodes`: SYSTEM_ERROR 1, SERVICE_NOT_AVAILABLE 14,
/// NO_PERMISSION 16, TOPIC_NOT_EXIST 17, NO_BUYER_ID 204, NOT_IN_CURRENT_UNIT 205). Any other
/// refusal (MESSAGE_ILLEGAL 13: a body over the broker's `maxMessageSize`…) is the message's,
/// and every broker would refuse it alike.
fn worth_retrying(error: &RemoteError) -> bool {
    match error {
        RemoteError::Refused { code, .. } => matches!(code, 1 | 14 | 16 | 17 | 204 | 205),
        _ => true,
    }
}

fn write_sent(
    out: &mut impl Write,
    json: bool,
    topic: &str,
    result: &SendResult,
    body: &str,
    maybe_stored_twice: bool,
) -> io::Result<()> {
    let queue = &result.queue;
    let msg_id = &result.msg_id;
    if json {
        let line = SentLine {
            msg_id,
            topic,
            broker: &queue.broker_name,
            queue: queue.queue_id,
            offset: result.queue_offset,
            body,
            maybe_stored_twice,
        };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)?;
    } else {
        let offset = match result.queue_offset {
            Some(offset) => offset.to_string(),
            None => "unknown".to_string(),
        };
        writeln!(
            out,
            "{body}\t{topic}@{}:{} offset {offset}\t{msg_id}",
            queue.broker_name, queue.queue_id
        )?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, OnceLock};

    use clap::Parser;
    use rebalance_rocketmq::RemotingCommand;

    use super::*;
    use crate::test_server::{scripted, scripted_async};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SendArgs,
    }

    fn parse(extra: &[&str]) -> SendArgs {
        let mut argv = vec!["send", "--namesrv", "127.0.0.1:9876", "--topic", "T"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    #[test]
    fn defaults_send_one_message_as_fast_as_answered() {
        let args = parse(&[]);
        assert_eq!(args.count, 1);
        assert_eq!(args.body_prefix, "msg-");
        assert_eq!(args.rate, None);
        assert_eq!(args.retries, 2);
        assert!(check(&args).is_ok());
    }

    #[test]
    fn out_of_range_arguments_are_refused_before_anything_is_sent() {
        for extra in [
            &["--rate", "0"][..],
            &["--rate=-1"],
            &["--rate", "NaN"],
            &["--rate", "inf"],
            &["--count", "100000001"],
            &["--retries", "101"],
            // One message in 10^300 s: a pace no clock can hold (it panicked).
            &["--rate", "1e-300"],
        ] {
            let args = parse(extra);
            assert!(
                matches!(check(&args), Err(SendError::Arguments(_))),
                "{extra:?}"
            );
        }
    }

    #[test]
    fn numbers_replace_the_placeholder() {
        assert_eq!(numbered("k{i} x{i}", 7), "k7 x7");
        assert_eq!(numbered("fixed", 7), "fixed");
    }

    #[test]
    fn json_lines_have_exactly_the_contract_keys_in_order() {
        let result = SendResult {
            status: rebalance_rocketmq::SendStatus::SendOk,
            queue: MessageQueue::new("T", "broker-a", 2),
            queue_offset: Some(41),
            msg_id: "UNIQ".into(),
            offset_msg_id: Some("OFFSETID".into()),
            transaction_id: None,
            latency: Duration::from_millis(1),
        };
        let mut out = Vec::new();
        write_sent(&mut out, true, "T", &result, "msg-3", false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"msg_id\":\"UNIQ\",\"topic\":\"T\",\"broker\":\"broker-a\",\"queue\":2,\"offset\":41,\"body\":\"msg-3\"}\n"
        );
    }

    /// A producer and a sender for topic T on broker-a and broker-b, both at `broker`.
    async fn two_brokers_at(broker: &str) -> (ProducerHandle, MessageSender) {
        two_brokers_with(broker, ClientConfig::default()).await
    }

    async fn two_brokers_with(
        broker: &str,
        config: ClientConfig,
    ) -> (ProducerHandle, MessageSender) {
        brokers_at(broker, broker, config).await
    }

    /// A producer and a sender for topic T on broker-a at `a` and broker-b at `b`.
    async fn brokers_at(a: &str, b: &str, config: ClientConfig) -> (ProducerHandle, MessageSender) {
        let route = format!(
            r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{a}"}},"brokerName":"broker-a","cluster":"c"}},{{"brokerAddrs":{{"0":"{b}"}},"brokerName":"broker-b","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}},{{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
        );
        let (namesrv, _) = scripted(move |_| {
            RemotingCommand::response(0, 0, None).with_body(route.clone().into_bytes())
        })
        .await;
        let name_server = rebalance_rocketmq::NameServerClient::builder(&namesrv)
            .client_config(config)
            .build()
            .unwrap();
        let producer = Producer::builder("G")
            .name_server(Arc::new(name_server.clone()))
            .topic("T")
            .latency_fault_avoidance(true)
            .start()
            .await
            .unwrap();
        (producer, MessageSender::new(name_server, "G"))
    }

    #[tokio::test]
    async fn a_message_the_broker_refuses_as_illegal_is_not_retried_and_blames_no_broker() {
        // What a broker with a smaller `maxMessageSize` answers: MESSAGE_ILLEGAL (13). Every
        // broker would refuse the message alike; the Java producer does not retry it, and a
        // broker that answered is not avoided as if it had failed.
        let (broker, sends) = scripted(|_| {
            RemotingCommand::response(13, 0, Some("the message body size over max value".into()))
        })
        .await;
        let (producer, sender) = two_brokers_at(&broker).await;
        let args = parse(&["--retries", "2"]);
        let outcome = send_one(&producer, &sender, &args, &Message::new("x"), None).await;
        assert!(
            matches!(
                outcome,
                Err(OneFailed::Remote(RemoteError::Refused { code: 13, .. }))
            ),
            "{outcome:?}"
        );
        assert_eq!(sends.load(Ordering::SeqCst), 1, "sent once");
        assert_eq!(producer.faults().avoided(Instant::now()), []);
        producer.shutdown().await;
    }

    /// A send left unanswered may have been stored: its failure says so (found by review: it
    /// was "not sent", and sending it again duplicated it).
    #[tokio::test]
    async fn a_send_left_unanswered_fails_as_unconfirmed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let broker = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let quick = ClientConfig {
            request_timeout: Duration::from_millis(200),
            ..ClientConfig::default()
        };
        let (producer, sender) = two_brokers_with(&broker, quick).await;
        let args = parse(&["--retries", "1"]);
        let outcome = send_one(&producer, &sender, &args, &Message::new("x"), None).await;
        assert!(
            matches!(outcome, Err(OneFailed::Unconfirmed(_))),
            "{outcome:?}"
        );
        producer.shutdown().await;
    }

    /// A send left unanswered, then stored by another broker: sent, but it may be stored twice,
    /// and the output says so (found by review: printed as one clean send).
    #[tokio::test]
    async fn a_send_stored_after_an_unanswered_attempt_may_be_stored_twice() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let (answering, _) = scripted(|_| {
            RemotingCommand::response(0, 0, None)
                .with_ext("queueId", 0)
                .with_ext("queueOffset", 5)
                .with_ext("msgId", "ID")
        })
        .await;
        let quick = ClientConfig {
            request_timeout: Duration::from_millis(200),
            ..ClientConfig::default()
        };
        let (producer, sender) = brokers_at(&silent, &answering, quick).await;
        let args = parse(&["--retries", "1"]);
        let mut flagged = Vec::new();
        for _ in 0..4 {
            let sent = send_one(&producer, &sender, &args, &Message::new("x"), None)
                .await
                .unwrap();
            assert_eq!(&*sent.result.queue.broker_name, "broker-b");
            flagged.push(sent.maybe_stored_before.is_some());
        }
        // broker-a is tried once (then avoided): that send alone may be stored twice.
        assert_eq!(flagged.iter().filter(|f| **f).count(), 1, "{flagged:?}");
        let mut out = Vec::new();
        let result = send_one(&producer, &sender, &args, &Message::new("x"), None)
            .await
            .unwrap()
            .result;
        write_sent(&mut out, true, "T", &result, "x", true).unwrap();
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["maybe_stored_twice"], true);
        producer.shutdown().await;
    }

    #[tokio::test]
    async fn a_send_refused_as_retryable_goes_to_the_other_broker() {
        // SERVICE_NOT_AVAILABLE (14): the Java producer tries another broker.
        let (broker, sends) = scripted(|request| {
            if request.ext("bname") == Some("broker-a") {
                RemotingCommand::response(14, 0, Some("broker busy".into()))
            } else {
                RemotingCommand::response(0, 0, None)
                    .with_ext("queueId", 0)
                    .with_ext("queueOffset", 5)
                    .with_ext("msgId", "ID")
            }
        })
        .await;
        let (producer, sender) = two_brokers_at(&broker).await;
        let args = parse(&["--retries", "2"]);
        for _ in 0..8 {
            let result = send_one(&producer, &sender, &args, &Message::new("x"), None)
                .await
                .unwrap()
                .result;
            assert_eq!(&*result.queue.broker_name, "broker-b");
        }
        // The refusing broker is avoided after its first refusal, as the Java producer
        // isolates it (found by review: reported ok, it kept its turn in the rotation).
        assert!(sends.load(Ordering::SeqCst) <= 9, "{sends:?}");
        producer.shutdown().await;
    }

    /// A broker that answers SUCCESS stored the message, even when its answer lacks the offset
    /// and the store id (or has them as something else than numbers): a success, sent once,
    /// printed with the offset unknown, and no broker blamed (found by review: it was retried
    /// as a bad answer, storing the message again, and the broker avoided).
    #[tokio::test]
    async fn a_success_answer_without_its_fields_is_a_success_sent_once() {
        let (broker, sends) = scripted(|_| RemotingCommand::response(0, 0, None)).await;
        let (producer, sender) = two_brokers_at(&broker).await;
        let args = parse(&["--retries", "2"]);
        let message = Message::new("x");
        let result = send_one(&producer, &sender, &args, &message, None)
            .await
            .unwrap()
            .result;
        assert_eq!(sends.load(Ordering::SeqCst), 1, "sent once");
        assert_eq!(Some(result.msg_id.as_str()), message.unique_key());
        assert_eq!((result.queue_offset, &result.offset_msg_id), (None, &None));
        assert_eq!(producer.faults().avoided(Instant::now()), []);
        let mut out = Vec::new();
        write_sent(&mut out, true, "T", &result, "x", false).unwrap();
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["offset"], serde_json::Value::Null);
        assert_eq!(line["msg_id"], result.msg_id.as_str());
        let mut out = Vec::new();
        write_sent(&mut out, false, "T", &result, "x", false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(" offset unknown\t"), "{text}");
        producer.shutdown().await;
    }

    /// An ordered send refused as retryable is retried on the key's queue even when the route
    /// changed between the attempts: broker-a lost its write permission (NO_PERMISSION, 16,
    /// which is retried), and the key's hash over the new publish queues names a queue of
    /// broker-b (found by review: each attempt chose the queue again, and the retry went to
    /// another queue, out of the key's order).
    #[tokio::test]
    async fn an_ordered_send_is_retried_on_its_queue_after_a_route_change() {
        let writable = Arc::new(AtomicBool::new(true));
        let producer_slot: Arc<OnceLock<ProducerHandle>> = Arc::new(OnceLock::new());
        let sent_to = Arc::new(Mutex::new(Vec::new()));
        let broker = {
            let (writable, producer_slot, sent_to) =
                (writable.clone(), producer_slot.clone(), sent_to.clone());
            scripted_async(move |request| {
                let (writable, producer_slot, sent_to) =
                    (writable.clone(), producer_slot.clone(), sent_to.clone());
                Box::pin(async move {
                    let queue_id: i32 = request.ext("queueId").unwrap().parse().unwrap();
                    let broker = request.ext("bname").unwrap().to_string();
                    sent_to.lock().unwrap().push((broker.clone(), queue_id));
                    if broker == "broker-a" && writable.swap(false, Ordering::SeqCst) {
                        // Answered once the producer has seen broker-a read-only.
                        let producer = producer_slot.get().unwrap();
                        let seen = async {
                            while producer.publish_info("T").is_some_and(|info| {
                                info.queues().iter().any(|q| &*q.broker_name == "broker-a")
                            }) {
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        };
                        tokio::time::timeout(Duration::from_secs(5), seen)
                            .await
                            .expect("the producer sees the new route");
                        return RemotingCommand::response(
                            16,
                            0,
                            Some("no write permission".into()),
                        );
                    }
                    RemotingCommand::response(0, 0, None)
                        .with_ext("queueId", queue_id)
                        .with_ext("queueOffset", 5)
                        .with_ext("msgId", "ID")
                })
            })
            .await
        };
        let route = move |perm_a: i32| {
            format!(
                r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{broker}"}},"brokerName":"broker-a","cluster":"c"}},{{"brokerAddrs":{{"0":"{broker}"}},"brokerName":"broker-b","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":{perm_a},"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}},{{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
            )
        };
        let (namesrv, _) = {
            let writable = writable.clone();
            scripted(move |_| {
                let perm_a = if writable.load(Ordering::SeqCst) {
                    6
                } else {
                    4
                };
                RemotingCommand::response(0, 0, None).with_body(route(perm_a).into_bytes())
            })
            .await
        };
        let name_server = rebalance_rocketmq::NameServerClient::from_addresses(&namesrv).unwrap();
        let producer = Producer::builder("G")
            .name_server(Arc::new(name_server.clone()))
            .topic("T")
            .poll_interval(Duration::from_millis(20))
            .start()
            .await
            .unwrap();
        let _ = producer_slot.set(producer.clone());
        let sender = MessageSender::new(name_server, "G");
        // A key whose queue is broker-a's.
        let mut key = None;
        for candidate in (0..64).map(|i| format!("order-{i}")) {
            let queue = producer
                .select_by("T", &SelectByHash, &candidate)
                .await
                .unwrap();
            if &*queue.broker_name == "broker-a" {
                key = Some((candidate, queue));
                break;
            }
        }
        let (key, queue) = key.expect("a key of broker-a");
        let args = parse(&["--retries", "2"]);
        let result = send_one(&producer, &sender, &args, &Message::new("x"), Some(&key))
            .await
            .unwrap()
            .result;
        let at = (queue.broker_name.to_string(), queue.queue_id);
        assert_eq!(*sent_to.lock().unwrap(), [at.clone(), at], "both attempts");
        assert_eq!(result.queue, queue);
        producer.shutdown().await;
    }

    #[tokio::test]
    async fn a_message_stored_without_confirmed_durability_says_so() {
        // FLUSH_DISK_TIMEOUT (10): stored, printed as such, and its durability not confirmed
        // is said on standard error.
        let (broker, _) = scripted(|_| {
            RemotingCommand::response(10, 0, None)
                .with_ext("queueId", 1)
                .with_ext("queueOffset", 5)
                .with_ext("msgId", "ID")
        })
        .await;
        let route = format!(
            r#"{{"brokerDatas":[{{"brokerAddrs":{{"0":"{broker}"}},"brokerName":"broker-a","cluster":"c"}}],"queueDatas":[{{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}]}}"#
        );
        let (namesrv, _) = scripted(move |_| {
            RemotingCommand::response(0, 0, None).with_body(route.clone().into_bytes())
        })
        .await;
        let mut args = parse(&[]);
        args.namesrv = namesrv;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        send_all(&args, &mut out, &mut err).await.unwrap();
        let out = String::from_utf8(out).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(out.starts_with("msg-0\tT@broker-a:1 offset 5"), "{out}");
        assert!(
            err.contains("message 0 (msg-0) stored") && err.contains("disk flush"),
            "{err}"
        );
    }

    /// A name server that cannot be reached fails the run with the producer's error, not a
    /// panic, within the timeout.
    #[test]
    fn an_unreachable_name_server_is_an_error() {
        let mut args = parse(&["--timeout", "200ms"]);
        args.namesrv = "127.0.0.1:1".into();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let result = run(&args, &mut out, &mut err);
        assert!(matches!(result, Err(SendError::Topic(_))), "{result:?}");
        assert!(out.is_empty());
    }
}
