//! [`MessageSender`]: SEND_MESSAGE (code 10) to the master of a chosen queue's broker, enough for
//! a producer that picks queues with the runtime's
//! [`Producer`](rebalance_runtime::producer::Producer) and for tests.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use rebalance_consume::property::UNIQ_KEY;
use rebalance_core::MessageQueue;
use rebalance_runtime::{RemoteError, RouteError};
use tokio::time::Instant;

use crate::broker::refused;
use crate::client::InvokeFailed;
use crate::command::{RemotingCommand, request_code, response_code};
use crate::denial::Op;
use crate::error::TransportError;
use crate::message::unique_id;
use crate::name_server::NameServerClient;

/// The topic a broker copies an auto-created topic's configuration from.
pub const DEFAULT_TOPIC: &str = "TBW102";
/// How many queues an auto-created topic gets.
pub const DEFAULT_TOPIC_QUEUE_NUMS: i32 = 4;

/// Separates a property's name from its value in the `properties` header field.
const NAME_VALUE_SEPARATOR: char = '\u{1}';
/// Ends each property in the `properties` header field.
const PROPERTY_SEPARATOR: char = '\u{2}';

/// The property that makes a broker store a message as a transaction's half message when it is
/// `true` (Java's `MessageConst.PROPERTY_TRANSACTION_PREPARED`): refused by [`Message::check`].
pub const TRANSACTION_PREPARED: &str = "TRAN_MSG";

/// The largest body a [`MessageSender`] sends by default: the broker's default
/// `maxMessageSize` (4 MiB), which the Java producer's `maxMessageSize` also checks before
/// sending.
pub const DEFAULT_MAX_BODY_SIZE: usize = 4 * 1024 * 1024;
/// The longest properties string (in bytes, encoded) a broker stores: its stored message format
/// keeps the length in 16 bits (Java's `Short.MAX_VALUE`), and the broker refuses longer ones.
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Why a message is refused before it is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// A property's name or value contains `\u{1}` or `\u{2}`, the separators of the
    /// `properties` field: the broker would read the rest as another property (a tag
    /// `a\u{2}DELAY\u{1}3` would delay the message) or truncate it.
    #[error(
        "property {name:?} has a property separator (\\u0001 or \\u0002) in its {part}, which the broker would read as the start of another property: remove it"
    )]
    Separator {
        /// The property's name (escaped when shown).
        name: String,
        /// `"name"` or `"value"`.
        part: &'static str,
    },
    /// A property's name or value is empty: a broker (and a consumer) drops such a property
    /// when it reads the message (Java's `MessageDecoder.string2messageProperties` keeps only
    /// `name\u{1}value` with both non-empty), so it would be lost without a word.
    #[error(
        "property {name:?} has an empty {part}, which a broker drops when it reads the message: give it a {part} or leave it out"
    )]
    EmptyProperty {
        /// The property's name.
        name: String,
        /// `"name"` or `"value"`.
        part: &'static str,
    },
    /// The message is marked as a transaction's half message (`TRAN_MSG` set to `true`, in any
    /// case, as Java's `Boolean.parseBoolean` reads it): a broker would store it where
    /// consumers do not see it and ask the producer group whether to commit it, which this
    /// sender does not answer, so it would be dropped later while the send returned OK. A
    /// message of a committed transaction keeps the property when it is consumed, so an
    /// application forwarding consumed messages with their properties meets it.
    #[error(
        "property {name:?} is {value:?}, which makes a broker store the message as a transaction's half message, hidden from consumers until its producer group commits it (this sender sends no transactions, so it would be dropped later): remove the property (when forwarding a consumed message, do not copy it)"
    )]
    TransactionHalfMessage {
        /// The property's name, [`TRANSACTION_PREPARED`].
        name: String,
        /// Its value.
        value: String,
    },
    /// The body is larger than the sender's limit.
    #[error(
        "the body is {len} bytes, more than the {max} bytes the broker accepts (its `maxMessageSize`; see `MessageSender::with_max_body_size`)"
    )]
    BodyTooLarge {
        /// The body's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The encoded properties are longer than a broker stores.
    #[error(
        "the properties are {len} bytes once encoded, more than the {max} a broker stores: shorten the keys, tags or property values"
    )]
    PropertiesTooLong {
        /// Their encoded length.
        len: usize,
        /// The limit, [`MAX_PROPERTIES_LEN`].
        max: usize,
    },
}

/// Why a send failed: refused before sending, never sent, or at the broker (the cases an
/// application tells apart to decide whether to try again, and whether the message may be
/// stored all the same: [`maybe_stored`](Self::maybe_stored)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The message was refused before sending: no broker saw it, and sending it again (to
    /// any broker) fails the same way.
    #[error("message not sent: {0}")]
    Invalid(#[from] InvalidMessage),
    /// The message never left: the broker's master could not be found (the name server
    /// failed, or knows no master for it) or reached (its connection refused, backing off
    /// after failed ones, TLS), or the request could not be encoded. No broker has it.
    #[error("message not sent: {error}")]
    NotSent {
        /// Why.
        error: RemoteError,
        /// Whether the broker is at fault (it could not be reached), not the name server or
        /// the message.
        broker_at_fault: bool,
    },
    /// The message was sent, and the broker refused it, did not answer, or answered what
    /// this client cannot read.
    #[error(transparent)]
    Remote(#[from] RemoteError),
}

impl SendError {
    /// Whether the send counts against its broker for latency fault avoidance
    /// (`Producer::report(broker, latency, ok = !broker_failed)`): a send left unanswered, and
    /// one the broker refused (it is busy, out of service, denies this client, does not have
    /// the topic...), as the Java producer's `updateFaultItem(.., isolation = true)` does for
    /// both; not a message refused before sending (no broker saw it), nor one a broker refused
    /// as illegal (MESSAGE_ILLEGAL, 13: too large, bad properties), which every broker would
    /// refuse alike (found by review: refusals were reported ok, so a broker refusing every
    /// send stayed in the rotation and took its share of the attempts).
    /// A send that never left counts against the broker only when the broker could not be
    /// reached: not when the name server failed (found by review: a name server's timeout
    /// isolated a healthy broker for 600 s).
    pub fn broker_failed(&self) -> bool {
        match self {
            SendError::Invalid(_) => false,
            SendError::NotSent {
                broker_at_fault, ..
            } => *broker_at_fault,
            SendError::Remote(RemoteError::Refused { code, .. }) => {
                *code != crate::command::response_code::MESSAGE_ILLEGAL
            }
            SendError::Remote(_) => true,
        }
    }

    /// Whether the broker may have stored the message all the same: the send left and was not
    /// refused (unanswered, its connection lost after it left, or answered unreadably).
    /// Sending it again may store it twice (consumers see a duplicate, never a loss).
    pub fn maybe_stored(&self) -> bool {
        match self {
            SendError::Invalid(_) | SendError::NotSent { .. } => false,
            SendError::Remote(RemoteError::Refused { .. } | RemoteError::Denied { .. }) => false,
            SendError::Remote(_) => true,
        }
    }
}

/// A message to send: a body and its properties, among which its unique key (`UNIQ_KEY`, the
/// id consumers see), stamped by [`Message::new`]: every send of one `Message` value (a retry
/// after a send left unanswered, which the broker may have stored) carries the same key, so
/// that consumers can tell a copy from another message, as with the Java producer. A message
/// built otherwise (a struct literal, `Default`) without the property gets a new key at each
/// send.
///
/// A clone keeps the key, as a Java `Message` sent twice does: a clone whose body is then
/// changed is another message under the same id, which consumers that drop duplicates by id
/// drop. Give such a message its own key with [`with_new_unique_key`](Self::with_new_unique_key)
/// (or build it with [`new`](Self::new)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// The payload.
    pub body: Bytes,
    /// Properties (`TAGS`, `KEYS`, application properties…), sent in the `properties` field.
    pub properties: BTreeMap<String, String>,
}

impl Message {
    /// A message with `body` and a new unique key (`UNIQ_KEY`, made by
    /// [`unique_id`], shaped like the Java producer's), its only property:
    /// [`with_property`](Self::with_property)`(UNIQ_KEY, ..)` replaces it.
    ///
    /// ```
    /// use rebalance_rocketmq::producer::Message;
    ///
    /// let message = Message::new("hello");
    /// assert_eq!(message.unique_key().map(str::len), Some(32));
    /// assert_ne!(message.unique_key(), Message::new("hello").unique_key());
    /// let mine = message.with_property("UNIQ_KEY", "order-42");
    /// assert_eq!(mine.unique_key(), Some("order-42"));
    /// ```
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self {
            body: body.into(),
            properties: BTreeMap::from([(UNIQ_KEY.to_string(), unique_id())]),
        }
    }

    /// The message's unique key (`UNIQ_KEY`), which consumers see as its id, if it has one.
    pub fn unique_key(&self) -> Option<&str> {
        self.properties.get(UNIQ_KEY).map(String::as_str)
    }

    /// The message with a new unique key: for a message made from another (a clone given
    /// another body), which is not a copy of it.
    ///
    /// ```
    /// use rebalance_rocketmq::producer::Message;
    ///
    /// let template = Message::new("").with_tags("A");
    /// let mut next = template.clone().with_new_unique_key();
    /// next.body = "second".into();
    /// assert_ne!(next.unique_key(), template.unique_key());
    /// ```
    pub fn with_new_unique_key(mut self) -> Self {
        self.properties.insert(UNIQ_KEY.to_string(), unique_id());
        self
    }

    /// Sets the tag consumers filter on (`TAGS`).
    pub fn with_tags(self, tags: impl Into<String>) -> Self {
        self.with_property("TAGS", tags)
    }

    /// Sets the message keys (`KEYS`, space separated), which the broker indexes.
    pub fn with_keys(self, keys: impl Into<String>) -> Self {
        self.with_property("KEYS", keys)
    }

    /// Sets a property (replacing one of the same name). Any name is accepted here;
    /// [`MessageSender::send`] refuses before sending what [`check`](Self::check) refuses: a
    /// name or value that is empty or holds a separator, and the properties that would make a
    /// broker store the message in a way this sender does not support: [`TRANSACTION_PREPARED`]
    /// (`TRAN_MSG`) set to `true`, which would make it a transaction's half message, never
    /// delivered. The other properties a broker reads are passed as they are (`DELAY`, a
    /// delivery time, `KEYS`, `TAGS`, …).
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// Checks what the broker would refuse, misread or drop: a property with an empty name or
    /// value, or a separator in either, a body over `max_body_size` bytes, properties longer than
    /// [`MAX_PROPERTIES_LEN`] once encoded, and a message marked as a transaction's half message
    /// ([`TRANSACTION_PREPARED`] `true`), which a broker would keep from consumers.
    /// [`MessageSender::send`] sends nothing that fails it.
    pub fn check(&self, max_body_size: usize) -> Result<(), InvalidMessage> {
        let has_separator = |text: &str| text.contains([NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR]);
        for (name, value) in &self.properties {
            if name == TRANSACTION_PREPARED && value.eq_ignore_ascii_case("true") {
                return Err(InvalidMessage::TransactionHalfMessage {
                    name: name.clone(),
                    value: value.clone(),
                });
            }
            for (part, text) in [("name", name), ("value", value)] {
                if text.is_empty() {
                    return Err(InvalidMessage::EmptyProperty {
                        name: name.clone(),
                        part,
                    });
                }
                if has_separator(text) {
                    return Err(InvalidMessage::Separator {
                        name: name.clone(),
                        part,
                    });
                }
            }
        }
        if self.body.len() > max_body_size {
            return Err(InvalidMessage::BodyTooLarge {
                len: self.body.len(),
                max: max_body_size,
            });
        }
        let len: usize = self
            .properties
            .iter()
            .map(|(name, value)| name.len() + value.len() + 2)
            .sum();
        if len > MAX_PROPERTIES_LEN {
            return Err(InvalidMessage::PropertiesTooLong {
                len,
                max: MAX_PROPERTIES_LEN,
            });
        }
        Ok(())
    }

    /// The properties as the `properties` header field carries them (Java's
    /// `MessageDecoder.messageProperties2String`: `name\u{1}value\u{2}` per property).
    pub fn properties_string(&self) -> String {
        let mut s = String::new();
        for (name, value) in &self.properties {
            s.push_str(name);
            s.push(NAME_VALUE_SEPARATOR);
            s.push_str(value);
            s.push(PROPERTY_SEPARATOR);
        }
        s
    }
}

/// How the broker stored a sent message (Java's `SendStatus`): every status but `SendOk` is a
/// stored message whose durability the broker could not confirm in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Stored.
    SendOk,
    /// Stored, but the disk flush timed out (code 10).
    FlushDiskTimeout,
    /// Stored, but replication to the slave timed out (code 12).
    FlushSlaveTimeout,
    /// Stored, but no slave is available (code 11).
    SlaveNotAvailable,
}

/// What the broker answered to a send that stored the message (a success: whatever its answer
/// lacks is unknown here, never an error, since sending again would store it twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// How it was stored.
    pub status: SendStatus,
    /// The queue it went to (the broker may pick another queue id when asked for `-1`; the
    /// queue asked for when the answer does not say).
    pub queue: MessageQueue,
    /// Its offset in the queue, `None` when the broker's answer does not say (or not as a
    /// number): the message is stored all the same.
    pub queue_offset: Option<i64>,
    /// The message's id: its unique key (`UNIQ_KEY`), which consumers see as its id (the Java
    /// producer's `SendResult.msgId`), the same for every send of one [`Message`].
    pub msg_id: String,
    /// The broker's message id (`msgId` in its answer: the store address of the message, what
    /// the Java client calls `offsetMsgId`), `None` when the answer does not have it.
    pub offset_msg_id: Option<String>,
    /// `transactionId`: the message's unique key as the broker read it (`UNIQ_KEY`), which
    /// this broker returns for every message.
    pub transaction_id: Option<String>,
    /// How long the request took.
    pub latency: Duration,
}

/// Builds a SEND_MESSAGE request (code 10) of `message` for `queue` with the header fields
/// this broker requires (`producerGroup`, `topic`, `defaultTopic`, `defaultTopicQueueNums`,
/// `queueId`, `sysFlag`, `bornTimestamp`, `flag`) and the optional ones a Java client sends
/// (`properties`, `reconsumeTimes`, `unitMode`, `batch`, and the broker name as `bname`).
pub fn send_message_request(
    producer_group: &str,
    queue: &MessageQueue,
    message: &Message,
    born_timestamp_ms: i64,
) -> RemotingCommand {
    RemotingCommand::request(request_code::SEND_MESSAGE)
        .with_ext("producerGroup", producer_group)
        .with_ext("topic", &queue.topic)
        .with_ext("defaultTopic", DEFAULT_TOPIC)
        .with_ext("defaultTopicQueueNums", DEFAULT_TOPIC_QUEUE_NUMS)
        .with_ext("queueId", queue.queue_id)
        .with_ext("sysFlag", 0)
        .with_ext("bornTimestamp", born_timestamp_ms)
        .with_ext("flag", 0)
        .with_ext("properties", message.properties_string())
        .with_ext("reconsumeTimes", 0)
        .with_ext("unitMode", false)
        .with_ext("batch", false)
        .with_ext("bname", &queue.broker_name)
        .with_body(message.body.clone())
}

/// Sends messages to the master of a queue's broker, found through the name server client's
/// routes (fetched on demand). Shares the name server client's connections, credentials and
/// namespace (the topic and the producer group are sent in it; queues and results carry the
/// plain names).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use rebalance_rocketmq::NameServerClient;
/// use rebalance_rocketmq::producer::{Message, MessageSender, SendError};
/// use rebalance_runtime::producer::Producer;
///
/// let name_server = NameServerClient::from_addresses("127.0.0.1:9876")?;
/// let sender = MessageSender::new(name_server.clone(), "my-producer-group");
/// let producer = Producer::builder("my-producer-group")
///     .name_server(Arc::new(name_server))
///     .latency_fault_avoidance(true)
///     .start()
///     .await?;
/// let queue = producer.select("TopicTest", None).await?;
/// let started = std::time::Instant::now();
/// match sender.send(&queue, &Message::new("hello").with_tags("greeting")).await {
///     Ok(result) => producer.report(&queue.broker_name, result.latency, true),
///     // Refused before sending, or the broker not found (the name server failed): no broker
///     // saw it, none is at fault, and the time taken is not the broker's.
///     Err(SendError::Invalid(_) | SendError::NotSent { broker_at_fault: false, .. }) => {}
///     // Unanswered, or refused by the broker (busy, out of service, ...): avoided for a
///     // failure's time, unless the message itself was refused as illegal.
///     Err(e) => producer.report(&queue.broker_name, started.elapsed(), !e.broker_failed()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MessageSender {
    name_server: NameServerClient,
    group: String,
    max_body_size: usize,
}

impl MessageSender {
    /// A sender for `producer_group`, finding brokers through `name_server`.
    pub fn new(name_server: NameServerClient, producer_group: impl Into<String>) -> Self {
        Self {
            name_server,
            group: producer_group.into(),
            max_body_size: DEFAULT_MAX_BODY_SIZE,
        }
    }

    /// Refuses bodies over `max` bytes before sending ([`DEFAULT_MAX_BODY_SIZE`] by default):
    /// set it to the brokers' `maxMessageSize` when they are configured otherwise.
    pub fn with_max_body_size(mut self, max: usize) -> Self {
        self.max_body_size = max;
        self
    }

    /// The producer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// How long a send may take before it fails (the remoting client's request timeout).
    pub fn request_timeout(&self) -> Duration {
        self.name_server.remoting().config().request_timeout
    }

    /// The master address of `queue`'s broker, fetching the topic's route when it is unknown.
    pub async fn master_addr(&self, queue: &MessageQueue) -> Result<String, RemoteError> {
        let routes = self.name_server.routes();
        if let Some(addr) = routes.master_addr(&queue.broker_name) {
            return Ok(addr);
        }
        match self.name_server.route(&queue.topic).await {
            Ok(_) => {}
            Err(RouteError::TopicNotFound(topic)) => {
                return Err(RemoteError::Refused {
                    code: response_code::TOPIC_NOT_EXIST,
                    remark: format!("topic `{topic}` not found on the name server"),
                });
            }
            Err(RouteError::NameServer(e)) => return Err(e),
        }
        routes.master_addr(&queue.broker_name).ok_or_else(|| {
            RemoteError::Unreachable(format!(
                "no master known for broker `{}`",
                queue.broker_name
            ))
        })
    }

    /// Sends `message` to `queue` and waits for the broker's answer. A message the broker would
    /// refuse or misread (see [`Message::check`]) is refused before sending
    /// ([`SendError::Invalid`]). The message is sent with its unique key
    /// ([`Message::unique_key`]; one made for this send when it has none), which the result's
    /// `msg_id` is: send the same `Message` again to retry it.
    pub async fn send(
        &self,
        queue: &MessageQueue,
        message: &Message,
    ) -> Result<SendResult, SendError> {
        let (message, msg_id) = match message.unique_key() {
            Some(key) => (Cow::Borrowed(message), key.to_string()),
            None => {
                let key = unique_id();
                tracing::debug!(topic = %queue.topic, msg_id = key, "message without a unique key; made one for this send");
                let mut stamped = message.clone();
                stamped.properties.insert(UNIQ_KEY.to_string(), key.clone());
                (Cow::Owned(stamped), key)
            }
        };
        if let Err(invalid) = message.check(self.max_body_size) {
            tracing::debug!(topic = %queue.topic, error = %invalid, "message refused before sending");
            return Err(invalid.into());
        }
        self.send_checked(queue, &message, msg_id).await
    }

    async fn send_checked(
        &self,
        queue: &MessageQueue,
        message: &Message,
        msg_id: String,
    ) -> Result<SendResult, SendError> {
        let addr = self
            .master_addr(queue)
            .await
            .map_err(|error| SendError::NotSent {
                error,
                broker_at_fault: false,
            })?;
        let ns = &self.name_server;
        let wire_queue = MessageQueue::new(
            ns.wire_name(&queue.topic).as_ref(),
            queue.broker_name.clone(),
            queue.queue_id,
        );
        let group = ns.wire_name(&self.group);
        let request = send_message_request(&group, &wire_queue, message, born_timestamp_ms());
        let op = Op::new("send", format!("topic `{}`", wire_queue.topic));
        let started = Instant::now();
        let remoting = ns.remoting();
        let response = remoting
            .invoke_telling(&addr, request, remoting.config().request_timeout)
            .await
            .map_err(
                |InvokeFailed {
                     error: e,
                     connected,
                 }| {
                    // No connection within the time (a host that drops connection attempts times
                    // out before its connect timeout: found by review) is not sent either.
                    let never_left = !connected
                        || matches!(
                            e,
                            TransportError::Connect { .. }
                                | TransportError::BackingOff { .. }
                                | TransportError::CertificateNotTrusted { .. }
                                | TransportError::Tls { .. }
                                | TransportError::Encode { .. }
                        );
                    let broker_at_fault = !matches!(e, TransportError::Encode { .. });
                    if never_left {
                        SendError::NotSent {
                            error: e.into(),
                            broker_at_fault,
                        }
                    } else {
                        // Unanswered, lost after it left, or answered unreadably: sent.
                        SendError::Remote(e.into())
                    }
                },
            )?;
        remoting.check_denied(&addr, &op, &response)?;
        let latency = started.elapsed();
        let status = match response.code {
            response_code::SUCCESS => SendStatus::SendOk,
            response_code::FLUSH_DISK_TIMEOUT => SendStatus::FlushDiskTimeout,
            response_code::FLUSH_SLAVE_TIMEOUT => SendStatus::FlushSlaveTimeout,
            response_code::SLAVE_NOT_AVAILABLE => SendStatus::SlaveNotAvailable,
            _ => {
                tracing::debug!(broker = %queue.broker_name, addr, code = response.code, remark = response.remark_or_empty(), "send refused");
                return Err(refused(&response).into());
            }
        };
        // The broker stored the message: what its answer lacks (or garbles) is unknown, never a
        // failure an application would retry, storing the message twice.
        let text = |name: &str| response.ext(name).filter(|text| !text.is_empty());
        let queue_id = text("queueId").and_then(|id| id.parse::<i32>().ok());
        let queue_offset = text("queueOffset").and_then(|offset| offset.parse::<i64>().ok());
        let offset_msg_id = text("msgId").map(str::to_string);
        let unknown: Vec<&str> = [
            ("queueId", queue_id.is_none()),
            ("queueOffset", queue_offset.is_none()),
            ("msgId", offset_msg_id.is_none()),
        ]
        .into_iter()
        .filter_map(|(name, missing)| missing.then_some(name))
        .collect();
        if !unknown.is_empty() {
            tracing::warn!(broker = %queue.broker_name, addr, msg_id, ?unknown, "the broker stored the message, but its answer lacks these fields or has them unreadable: unknown in the result");
        }
        // A message sent to a queue is stored in it (a broker chooses only for `-1`).
        let queue_id = queue_id.unwrap_or(queue.queue_id);
        Ok(SendResult {
            status,
            queue: MessageQueue::new(queue.topic.clone(), queue.broker_name.clone(), queue_id),
            queue_offset,
            msg_id,
            offset_msg_id,
            transaction_id: response.ext("transactionId").map(str::to_string),
            latency,
        })
    }
}

/// The message's birth time on the wire, in milliseconds since the Unix epoch. A timestamp the
/// broker stores with the message (as the Java client's `System.currentTimeMillis()`), not a
/// clock this crate times anything with.
fn born_timestamp_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_use_javas_separators_in_name_order() {
        let m = Message::new("x").with_tags("TagA").with_keys("k1 k2");
        let key = m.unique_key().unwrap().to_string();
        assert_eq!(
            m.properties_string(),
            format!("KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}{key}\u{2}")
        );
        assert_eq!(Message::default().properties_string(), "");
    }

    #[test]
    fn request_carries_every_field_the_broker_requires_as_strings() {
        let queue = MessageQueue::new("T", "broker-a", 3);
        let message = Message {
            body: Bytes::from_static(b"body"),
            ..Message::default()
        };
        let request = send_message_request("G", &queue, &message, 1_700_000_000_000);
        assert_eq!(request.code, 10);
        let expected = [
            ("producerGroup", "G"),
            ("topic", "T"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "3"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
            ("properties", ""),
            ("reconsumeTimes", "0"),
            ("unitMode", "false"),
            ("batch", "false"),
            ("bname", "broker-a"),
        ];
        for (name, value) in expected {
            assert_eq!(request.ext(name), Some(value), "{name}");
        }
        assert_eq!(request.ext_fields.len(), expected.len());
        assert_eq!(&request.body[..], b"body");
    }

    /// A sender whose name server cannot be reached: a message that went out would fail as
    /// unreachable, so any other error was found before sending.
    fn unreachable_sender() -> MessageSender {
        let remoting = crate::RemotingClient::new(crate::ClientConfig {
            request_timeout: Duration::from_millis(200),
            connect_timeout: Duration::from_millis(200),
            ..crate::ClientConfig::default()
        });
        MessageSender::new(NameServerClient::new(remoting, "127.0.0.1:1").unwrap(), "P")
    }

    #[tokio::test]
    async fn a_property_with_a_separator_is_refused_before_sending() {
        // A tag with \u{1}\u{2} inside would reach the broker as a second property
        // (`DELAY=3` here: the message delayed) and a truncated tag.
        let queue = MessageQueue::new("T", "broker-a", 0);
        let sender = unreachable_sender();
        let cases = [
            Message::new("x").with_tags("TagA\u{2}DELAY\u{1}3"),
            Message::new("x").with_keys("k1\u{1}k2"),
            Message::new("x").with_property("A\u{1}B", "v"),
            Message::new("x").with_property("A\u{2}B", "v"),
        ];
        for message in cases {
            let error = sender.send(&queue, &message).await.unwrap_err();
            assert!(
                matches!(&error, SendError::Invalid(InvalidMessage::Separator { .. })),
                "{error:?}"
            );
            let text = error.to_string();
            assert!(
                text.contains("separator") && !text.contains("unreachable"),
                "{message:?}: {text}"
            );
        }
    }

    /// A message marked `TRAN_MSG=true` (a consumed message of a committed transaction keeps
    /// the mark: an application forwarding it with its properties sends it) would be stored
    /// by a broker as a transaction's half message, whose outcome it asks of the producer
    /// group (nobody answers for it), then drops, while the send returned OK: refused before
    /// sending (found by review: it was sent, and silently lost).
    #[tokio::test]
    async fn a_transaction_half_message_is_refused_before_sending() {
        let queue = MessageQueue::new("T", "broker-a", 0);
        let sender = unreachable_sender();
        for value in ["true", "TRUE", "True"] {
            let message = Message::new("x")
                .with_tags("TagA")
                .with_property(TRANSACTION_PREPARED, value);
            let error = sender.send(&queue, &message).await.unwrap_err();
            assert_eq!(
                error,
                SendError::Invalid(InvalidMessage::TransactionHalfMessage {
                    name: "TRAN_MSG".into(),
                    value: value.into()
                })
            );
            let text = error.to_string();
            assert!(
                text.contains("TRAN_MSG")
                    && text.contains("remove the property")
                    && !text.contains("unreachable"),
                "{text}"
            );
        }
        // Marked not prepared, it is a plain message: a broker stores it as one.
        let plain = Message::new("x").with_property(TRANSACTION_PREPARED, "false");
        assert_eq!(plain.check(DEFAULT_MAX_BODY_SIZE), Ok(()));
        let outcome = sender.send(&queue, &plain).await;
        assert!(
            matches!(
                outcome,
                Err(SendError::NotSent {
                    error: RemoteError::Unreachable(_),
                    broker_at_fault: false
                })
            ),
            "{outcome:?}"
        );
    }

    /// A property with an empty name or value would be dropped by the broker reading the
    /// message: refused before sending, with its name, as Java's `putUserProperty` refuses it
    /// (found by review: it was sent, and lost on the way).
    #[tokio::test]
    async fn a_property_with_an_empty_name_or_value_is_refused_before_sending() {
        let queue = MessageQueue::new("T", "broker-a", 0);
        let sender = unreachable_sender();
        let cases = [
            (Message::new("x").with_tags(""), "TAGS", "value"),
            (Message::new("x").with_keys(""), "KEYS", "value"),
            (Message::new("x").with_property("", "v"), "", "name"),
            (
                Message::new("x").with_property("color", ""),
                "color",
                "value",
            ),
        ];
        for (message, name, part) in cases {
            let error = sender.send(&queue, &message).await.unwrap_err();
            assert_eq!(
                error,
                SendError::Invalid(InvalidMessage::EmptyProperty {
                    name: name.into(),
                    part
                })
            );
            let text = error.to_string();
            assert!(
                text.contains("empty") && !text.contains("unreachable"),
                "{text}"
            );
        }
        // A value of blanks is a value: the broker keeps it.
        assert_eq!(
            Message::new("x").with_property("color", " ").check(16),
            Ok(())
        );
    }

    #[tokio::test]
    async fn a_body_or_properties_over_the_brokers_limits_are_refused_before_sending() {
        let queue = MessageQueue::new("T", "broker-a", 0);
        let sender = unreachable_sender();
        // The broker's default `maxMessageSize` (4 MiB) for the body; its stored format keeps
        // the properties' length in 16 bits.
        let big_body = Message::new(vec![b'x'; 4 * 1024 * 1024 + 1]);
        let text = sender
            .send(&queue, &big_body)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("4194305") && text.contains("4194304"),
            "{text}"
        );
        let big_properties = Message::new("x").with_property("P", "v".repeat(32_768));
        let text = sender
            .send(&queue, &big_properties)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("32767") && !text.contains("unreachable"),
            "{text}"
        );
        // At the limits, the message goes out (and fails here as unreachable). Its unique key
        // counts: `UNIQ_KEY`, 32 digits and the separators.
        let at_limits = Message::new(vec![b'x'; 4 * 1024 * 1024])
            .with_property("P", "v".repeat(32_764 - (8 + 32 + 2)));
        assert_eq!(at_limits.check(DEFAULT_MAX_BODY_SIZE), Ok(()));
        let outcome = sender.send(&queue, &at_limits).await;
        assert!(
            matches!(
                outcome,
                Err(SendError::NotSent {
                    error: RemoteError::Unreachable(_),
                    broker_at_fault: false
                })
            ),
            "{outcome:?}"
        );
        // A sender configured for a broker with a smaller `maxMessageSize`.
        let small = unreachable_sender().with_max_body_size(3);
        assert_eq!(
            small.send(&queue, &Message::new("four")).await,
            Err(SendError::Invalid(InvalidMessage::BodyTooLarge {
                len: 4,
                max: 3
            }))
        );
    }

    #[test]
    fn a_sender_reports_its_group_and_its_clients_request_timeout() {
        // The request timeout is what an application charges a failed send with.
        let remoting = crate::RemotingClient::new(crate::ClientConfig {
            request_timeout: Duration::from_millis(250),
            ..crate::ClientConfig::default()
        });
        let name_server = NameServerClient::new(remoting, "127.0.0.1:9876").unwrap();
        let sender = MessageSender::new(name_server, "orders-producer");
        assert_eq!(sender.group(), "orders-producer");
        assert_eq!(sender.request_timeout(), Duration::from_millis(250));
    }
}
