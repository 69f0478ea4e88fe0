//! POP_MESSAGE (200050): the request, with long polling, and its answer read into a
//! [`PopOutcome`].
//!
//! **Answers**: 0 → [`PopOutcome::Found`] (the records decoded by the bounded
//! [message decoder](crate::message), each with its [`ReceiptHandle`]); 210 POLLING_TIMEOUT
//! and 19 PULL_NOT_FOUND (old brokers) → [`PopOutcome::NoMessage`]; 209 POLLING_FULL →
//! [`PopOutcome::PollingFull`]; 215 FLOW_CONTROL → [`PopOutcome::FlowControl`]; a refusal of
//! the credentials or permissions → [`RemoteError::Denied`]; anything else (2 SYSTEM_BUSY
//! included: an overloaded broker) → [`RemoteError::Refused`] with the code and remark.
//! Only a 0 answer's header is read: the Rust broker 1.0 sends none with 209 and 210.
//!
//! **Receipt handles**: a record that carries `POP_CK` (the broker sets it on the messages it
//! copies out of a POP retry topic) keeps it; any other gets one built as the Java client
//! builds it: the checkpoint offset from `startOffsetInfo` (else the first offset of the batch
//! in that queue), the offset from `msgOffsetInfo` (else the record's own), the broker name
//! of the request. Each message is given the handle as its [`POP_CK`]
//! property and the pop time as [`FIRST_POP_TIME`] when it has none.
//!
//! **Bodies are re-filtered by tag**: the broker filters by tag hash code only, so a message
//! whose tag merely collides is returned; its handle goes to [`PopBatch::unmatched`], for the
//! caller to acknowledge (as the Java client does), never to the application.

use std::collections::HashMap;
use std::time::Duration;

use rebalance_consume::{Message, property};
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::subscription::TagExpression;

use super::handle::{HandleFields, ReceiptHandle, RetryFlag};
use super::offset_info::OffsetInfo;
use super::{FIRST_POP_TIME, POP_CK, PopError, invalid, millis};
use crate::broker::BrokerClient;
use crate::broker::pull::is_message_offset;
use crate::broker::pull::subscription_string;
use crate::broker::wire::EXPRESSION_TYPE_TAG;
use crate::command::{RemotingCommand, request_code, response_code};
use crate::message::{DecodeLimits, DecodedRecord, StoredMessage, decode_each};
use crate::namespace::{self, Namespace};

/// The most messages one POP may take (the brokers refuse more).
pub const MAX_POP_MESSAGES: u32 = 32;

/// How long popped messages stay invisible unless set otherwise (the Java push consumer's
/// `popInvisibleTime`).
pub const DEFAULT_INVISIBLE_TIME: Duration = Duration::from_secs(60);

/// How long the broker may hold a POP while there is nothing to pop, unless set otherwise (the
/// Java client's 15 s).
pub const DEFAULT_POLL_TIME: Duration = Duration::from_secs(15);

/// How much longer than its poll time the client waits for a POP's answer (the Java client's
/// 10 s).
pub const POP_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// Where a group starts popping a queue it has no offset for yet (`initMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PopInitMode {
    /// At the queue's oldest message (`0`).
    Min,
    /// At its newest message (`1`): the brokers deliver the last existing one, and a young
    /// queue whose offset 0 is still in memory from 0.
    #[default]
    Max,
}

impl PopInitMode {
    /// The value on the wire.
    pub fn as_i32(self) -> i32 {
        match self {
            PopInitMode::Min => 0,
            PopInitMode::Max => 1,
        }
    }
}

impl From<ConsumeFrom> for PopInitMode {
    /// The Java client's rule: [`ConsumeFrom::FirstOffset`] starts at the oldest message,
    /// anything else at the newest.
    fn from(from: ConsumeFrom) -> Self {
        match from {
            ConsumeFrom::FirstOffset => PopInitMode::Min,
            _ => PopInitMode::Max,
        }
    }
}

/// Which messages a POP takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PopFilter {
    /// By tag (`expType` `TAG`); the answer is re-filtered by tag here.
    Tags(TagExpression),
    /// By an SQL92 expression over the properties (`expType` `SQL92`; the broker needs
    /// `enablePropertyFilter`).
    Sql92(String),
}

impl Default for PopFilter {
    fn default() -> Self {
        PopFilter::Tags(TagExpression::all())
    }
}

/// A POP of up to [`max_messages`](Self::max_messages) messages of one queue, or of every
/// readable queue of a broker (queue id `-1`, as server-side assignment in POP mode assigns it).
///
/// ```
/// use std::time::Duration;
/// use rebalance_core::MessageQueue;
/// use rebalance_rocketmq::broker::pop::{PopRequest, pop_message_request};
///
/// let request = PopRequest::new("G", MessageQueue::new("T", "broker-a", -1))
///     .with_max_messages(16)
///     .with_invisible_time(Duration::from_secs(30))
///     .with_poll_time(Duration::from_secs(5));
/// let command = pop_message_request(&request, None).unwrap();
/// assert_eq!(command.code, 200050);
/// assert_eq!(command.ext("queueId"), Some("-1"));
/// assert_eq!(command.ext("invisibleTime"), Some("30000"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopRequest {
    /// The consumer group.
    pub group: String,
    /// The queue (its topic is the original one, never a retry topic); queue id `-1` for
    /// every readable queue of its broker.
    pub queue: MessageQueue,
    /// How many messages at most, 1 to [`MAX_POP_MESSAGES`].
    pub max_messages: u32,
    /// How long the messages stay invisible to other POPs unless acknowledged.
    pub invisible_time: Duration,
    /// How long the broker may hold the request while there is nothing to pop (zero: answer
    /// at once).
    pub poll_time: Duration,
    /// Where to start in a queue the group has no offset for.
    pub init_mode: PopInitMode,
    /// Which messages to take.
    pub filter: PopFilter,
    /// An orderly POP: the queue stays blocked for the group until the batch is acknowledged
    /// or its invisible time passes.
    pub order: bool,
    /// For an orderly POP: the id of this attempt; a retry with the same id is not blocked by
    /// its own batch.
    pub attempt_id: Option<String>,
    /// The request's `bornTime` (ms since the Unix epoch). `None` (the default) sends `0`, and
    /// the broker stamps it on arrival with its own clock. The broker answers at once with
    /// nothing when `bornTime + pollTime` passed more than 500 ms ago on its clock, so a client
    /// clock behind the broker's (the Java client sends its own) makes every POP come back
    /// empty.
    pub born_time_ms: Option<i64>,
}

impl PopRequest {
    /// A POP by `group` of `queue`: [`MAX_POP_MESSAGES`] messages, [`DEFAULT_INVISIBLE_TIME`],
    /// [`DEFAULT_POLL_TIME`], [`PopInitMode::Max`], every tag, not orderly.
    pub fn new(group: impl Into<String>, queue: MessageQueue) -> Self {
        Self {
            group: group.into(),
            queue,
            max_messages: MAX_POP_MESSAGES,
            invisible_time: DEFAULT_INVISIBLE_TIME,
            poll_time: DEFAULT_POLL_TIME,
            init_mode: PopInitMode::default(),
            filter: PopFilter::default(),
            order: false,
            attempt_id: None,
            born_time_ms: None,
        }
    }

    /// Sets how many messages at most.
    pub fn with_max_messages(mut self, max_messages: u32) -> Self {
        self.max_messages = max_messages;
        self
    }

    /// Sets the invisible time.
    pub fn with_invisible_time(mut self, invisible_time: Duration) -> Self {
        self.invisible_time = invisible_time;
        self
    }

    /// Sets the poll time.
    pub fn with_poll_time(mut self, poll_time: Duration) -> Self {
        self.poll_time = poll_time;
        self
    }

    /// Sets where a queue without offset starts.
    pub fn with_init_mode(mut self, init_mode: PopInitMode) -> Self {
        self.init_mode = init_mode;
        self
    }

    /// Sets the filter.
    pub fn with_filter(mut self, filter: PopFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Makes it an orderly POP, with `attempt_id` if given.
    pub fn orderly(mut self, attempt_id: Option<String>) -> Self {
        self.order = true;
        self.attempt_id = attempt_id;
        self
    }

    /// Sends `born_time_ms` as `bornTime` instead of letting the broker stamp it.
    pub fn with_born_time(mut self, born_time_ms: i64) -> Self {
        self.born_time_ms = Some(born_time_ms);
        self
    }

    /// What a broker would refuse or misread, checked before sending.
    fn check(&self) -> Result<(), PopError> {
        if self.group.is_empty() {
            return Err(invalid("POP", "the group is empty"));
        }
        if self.queue.topic.is_empty() || self.queue.broker_name.is_empty() {
            return Err(invalid("POP", "the queue has no topic or no broker name"));
        }
        if self.queue.broker_name.contains(char::is_whitespace) {
            return Err(invalid(
                "POP",
                format!(
                    "broker name `{}` has whitespace, which receipt handles cannot carry",
                    self.queue.broker_name
                ),
            ));
        }
        if self.queue.queue_id < -1 {
            return Err(invalid(
                "POP",
                format!(
                    "queue id {} (a queue id, or -1 for every queue)",
                    self.queue.queue_id
                ),
            ));
        }
        if !(1..=MAX_POP_MESSAGES).contains(&self.max_messages) {
            return Err(invalid(
                "POP",
                format!(
                    "max messages {} is not within 1..={MAX_POP_MESSAGES}",
                    self.max_messages
                ),
            ));
        }
        if self.invisible_time < Duration::from_millis(1) {
            return Err(invalid("POP", "the invisible time is under 1 ms"));
        }
        if let Some(born) = self.born_time_ms.filter(|b| *b < 0) {
            return Err(invalid("POP", format!("born time {born} is negative")));
        }
        if matches!(&self.filter, PopFilter::Sql92(expression) if expression.trim().is_empty()) {
            return Err(invalid("POP", "the SQL92 expression is empty"));
        }
        Ok(())
    }
}

/// The POP_MESSAGE request of `request`, with the group and topic as the broker knows them in
/// `namespace`. Fails, sending nothing, on a request a broker would refuse (an empty name, a
/// queue id under -1, a batch outside 1..=32, an invisible time under 1 ms, an empty SQL92
/// expression).
pub fn pop_message_request(
    request: &PopRequest,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    request.check()?;
    let (exp_type, exp) = match &request.filter {
        PopFilter::Tags(expression) => (EXPRESSION_TYPE_TAG, subscription_string(expression)),
        PopFilter::Sql92(expression) => ("SQL92", expression.clone()),
    };
    let mut command = RemotingCommand::request(request_code::POP_MESSAGE)
        .with_ext("consumerGroup", namespace::wrap(namespace, &request.group))
        .with_ext("topic", namespace::wrap(namespace, &request.queue.topic))
        .with_ext("queueId", request.queue.queue_id)
        .with_ext("maxMsgNums", request.max_messages)
        .with_ext("invisibleTime", millis(request.invisible_time))
        .with_ext("pollTime", millis(request.poll_time))
        .with_ext("bornTime", request.born_time_ms.unwrap_or(0))
        .with_ext("initMode", request.init_mode.as_i32())
        .with_ext("expType", exp_type)
        .with_ext("exp", exp)
        .with_ext("order", request.order)
        .with_ext("bname", &*request.queue.broker_name);
    if let Some(attempt) = &request.attempt_id {
        command = command.with_ext("attemptId", attempt);
    }
    Ok(command)
}

/// How long to wait for the answer to a POP the broker may hold for `poll_time`.
pub fn pop_timeout(poll_time: Duration, request_timeout: Duration) -> Duration {
    poll_time
        .saturating_add(POP_TIMEOUT_MARGIN)
        .max(request_timeout)
}

/// One popped message and what acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoppedMessage {
    /// The message. Its queue is the one it was read from: a queue of the POP retry topic
    /// (`%RETRY%{group}_{topic}`) for a redelivered message, shown under the popped topic
    /// ([`Message::topic`]); its [`POP_CK`] property is the handle.
    pub message: Message,
    /// Its receipt handle.
    pub handle: ReceiptHandle,
}

/// The messages of a POP that found some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopBatch {
    /// The broker's time of the pop (ms since the Unix epoch).
    pub pop_time: i64,
    /// The invisible time the broker applied.
    pub invisible_time: Duration,
    /// The revive queue of the batch's checkpoints
    /// ([`ORDERLY_REVIVE_QUEUE_ID`](super::ORDERLY_REVIVE_QUEUE_ID) when orderly).
    pub revive_queue_id: i32,
    /// About how many messages are left behind the popped ones (informational).
    pub rest: i64,
    /// The messages matching the filter, in the order returned.
    pub messages: Vec<PoppedMessage>,
    /// The handles of the messages returned that the tag expression does not match (tag hash
    /// collisions): acknowledge them, or they come back after the invisible time.
    pub unmatched: Vec<ReceiptHandle>,
    /// The messages too large to decode (a compressed body inflating past the decode limit),
    /// with empty bodies: [`BrokerClient::pop`] moves each to the group's dead letters by its
    /// commit-log offset and then lists its handle in `unmatched`, to be acknowledged; one it
    /// could not move stays here, neither delivered nor acknowledged (it comes back after the
    /// invisible time, and is tried again).
    pub oversized: Vec<PoppedMessage>,
}

/// What a POP answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopOutcome {
    /// Messages (possibly none after the tag re-filter).
    Found(PopBatch),
    /// Nothing to pop within the poll time: pop again.
    NoMessage,
    /// The broker holds too many POPs already: pop again after the error delay (the Java
    /// client waits its `pullTimeDelayMillsWhenException`), not at once.
    PollingFull,
    /// The broker asks to slow down: pop again a little later (the Java client waits 20 ms).
    FlowControl,
}

/// Reads the answer to `request` (see the [module documentation](self)).
pub(crate) fn read_pop_answer(
    response: &RemotingCommand,
    request: &PopRequest,
    limits: &DecodeLimits,
) -> Result<PopOutcome, RemoteError> {
    match response.code {
        response_code::SUCCESS => read_batch(response, request, limits).map(PopOutcome::Found),
        response_code::POLLING_TIMEOUT | response_code::PULL_NOT_FOUND => {
            if response.remark_or_empty().contains("timeout too much") {
                tracing::warn!(group = %request.group, queue = ?request.queue, remark = response.remark_or_empty(), "the broker found the POP's born time too old: is this client's clock behind the broker's?");
            }
            Ok(PopOutcome::NoMessage)
        }
        response_code::POLLING_FULL => Ok(PopOutcome::PollingFull),
        response_code::FLOW_CONTROL => Ok(PopOutcome::FlowControl),
        _ => Err(crate::broker::refused(response)),
    }
}

fn header<T: std::str::FromStr>(
    response: &RemotingCommand,
    name: &str,
) -> Result<Option<T>, RemoteError> {
    response
        .ext(name)
        .map(|text| {
            text.parse::<T>().map_err(|_| {
                RemoteError::BadResponse(format!(
                    "POP answer's `{name}` `{}` is not a number",
                    crate::error::excerpt(text)
                ))
            })
        })
        .transpose()
}

fn required<T: std::str::FromStr>(
    response: &RemotingCommand,
    name: &str,
) -> Result<T, RemoteError> {
    header(response, name)?
        .ok_or_else(|| RemoteError::BadResponse(format!("POP answer without `{name}`")))
}

fn read_batch(
    response: &RemotingCommand,
    request: &PopRequest,
    limits: &DecodeLimits,
) -> Result<PopBatch, RemoteError> {
    let where_ = || {
        format!(
            "POP of {}@{}:{}",
            request.queue.topic, request.queue.broker_name, request.queue.queue_id
        )
    };
    let pop_time: i64 = required(response, "popTime")?;
    let invisible_ms: i64 = required(response, "invisibleTime")?;
    // The handles carry it back to the brokers, which revive the messages by it.
    let invisible_time = u64::try_from(invisible_ms)
        .map(Duration::from_millis)
        .map_err(|_| {
            RemoteError::BadResponse(format!(
                "{}: invisibleTime {invisible_ms} ms is negative",
                where_()
            ))
        })?;
    let revive_queue_id: i32 = required(response, "reviveQid")?;
    let rest = header::<i64>(response, "restNum")?.unwrap_or(0);
    let info = OffsetInfo::parse(
        response.ext("startOffsetInfo"),
        response.ext("msgOffsetInfo"),
        response.ext("orderCountInfo"),
    )
    .map_err(|e| {
        // Quoted in an excerpt: an entry may be as long as the frame.
        RemoteError::BadResponse(format!("{}: {}", where_(), crate::error::excerpt(&e)))
    })?;
    let stored = decode_each(&response.body, limits)
        .map_err(|e| RemoteError::BadResponse(format!("{}: {e}", where_())))?;
    let fallback_starts = first_offsets(stored.iter().map(|r| match r {
        DecodedRecord::Message(message) => message,
        DecodedRecord::Oversized(oversized) => &oversized.header,
    }));
    let mut seen: HashMap<(RetryFlag, i32), usize> = HashMap::new();
    let mut messages = Vec::with_capacity(stored.len());
    let mut unmatched = Vec::new();
    let mut oversized = Vec::new();
    for record in stored {
        let (record, too_large) = match record {
            DecodedRecord::Message(message) => (message, false),
            DecodedRecord::Oversized(o) => {
                // Said at ERROR once dead-lettered (or not): `BrokerClient::pop`.
                tracing::debug!(queue = ?request.queue, offset = o.header.queue_offset, error = %o.error, "popped a message too large to decode");
                (o.header, true)
            }
        };
        if !is_message_offset(record.queue_offset) {
            return Err(impossible_offset(&where_(), record.queue_offset));
        }
        let handle = match record.properties.get(POP_CK) {
            Some(text) => ReceiptHandle::parse(text),
            None => {
                let retry = RetryFlag::of_topic(&record.topic);
                let key = (retry, record.queue_id);
                let index = seen.entry(key).or_default();
                let queue_offset = info
                    .messages
                    .get(&key)
                    .and_then(|offsets| offsets.get(*index))
                    .copied()
                    .unwrap_or(record.queue_offset);
                *index += 1;
                if queue_offset != record.queue_offset {
                    tracing::debug!(queue_offset, record = record.queue_offset, "msgOffsetInfo and the record disagree on an offset; using msgOffsetInfo's, as the Java client does");
                }
                ReceiptHandle::from_fields(HandleFields {
                    checkpoint_offset: info
                        .start
                        .get(&key)
                        .or_else(|| fallback_starts.get(&key))
                        .copied()
                        .unwrap_or(record.queue_offset),
                    pop_time,
                    invisible_time: invisible_ms,
                    revive_queue_id,
                    retry,
                    broker_name: request.queue.broker_name.to_string(),
                    queue_id: record.queue_id,
                    queue_offset,
                    retry_generation: None,
                })
            }
        }
        .map_err(|e| {
            RemoteError::BadResponse(format!(
                "{}: message at offset {}: {e}",
                where_(),
                record.queue_offset
            ))
        })?;
        if !is_message_offset(handle.fields().queue_offset) {
            return Err(impossible_offset(&where_(), handle.fields().queue_offset));
        }
        let tag = record.properties.get(property::TAGS).map(String::as_str);
        if matches!(&request.filter, PopFilter::Tags(expression) if !expression.matches(tag)) {
            unmatched.push(handle);
            continue;
        }
        let order_count = request
            .order
            .then(|| {
                info.order_count(
                    (handle.fields().retry, handle.fields().queue_id),
                    record.queue_offset,
                )
            })
            .flatten()
            .filter(|count| *count > 0);
        let message = popped_message(record, request, &handle, pop_time, order_count);
        if too_large {
            oversized.push(PoppedMessage { message, handle });
        } else {
            messages.push(PoppedMessage { message, handle });
        }
    }
    Ok(PopBatch {
        pop_time,
        invisible_time,
        revive_queue_id,
        rest,
        messages,
        unmatched,
        oversized,
    })
}

/// The error of a POP answer (`where_`) with a message at `offset`, which no message can be at.
fn impossible_offset(where_: &str, offset: i64) -> RemoteError {
    RemoteError::BadResponse(format!(
        "{where_}: a message at queue offset {offset}: a message's offset is at least 0 and below {}",
        i64::MAX
    ))
}

/// The first offset of each (retry flag, queue) in the batch: the checkpoint offset when the
/// broker sent no `startOffsetInfo` (the Java client's fallback).
fn first_offsets<'a>(
    records: impl Iterator<Item = &'a StoredMessage>,
) -> HashMap<(RetryFlag, i32), i64> {
    let mut out = HashMap::new();
    for record in records {
        out.entry((RetryFlag::of_topic(&record.topic), record.queue_id))
            .or_insert(record.queue_offset);
    }
    out
}

fn popped_message(
    record: StoredMessage,
    request: &PopRequest,
    handle: &ReceiptHandle,
    pop_time: i64,
    order_count: Option<i32>,
) -> Message {
    let fields = handle.fields();
    let real_topic = fields
        .retry
        .real_topic(&request.queue.topic, &request.group);
    let queue = MessageQueue::new(
        real_topic.as_str(),
        request.queue.broker_name.clone(),
        fields.queue_id,
    );
    let has_first_pop_time = record.properties.contains_key(FIRST_POP_TIME);
    let mut message = record
        .into_message(queue)
        .with_topic(&*request.queue.topic)
        .with_property(POP_CK, handle.as_str());
    if !has_first_pop_time {
        message = message.with_property(FIRST_POP_TIME, pop_time.to_string());
    }
    if let Some(count) = order_count {
        message = message.with_reconsume_times(count);
    }
    message
}

impl BrokerClient {
    /// POP_MESSAGE at the master of the queue's broker, waiting up to the poll time plus
    /// [`POP_TIMEOUT_MARGIN`]. See [`pop`](super) for what each answer means.
    ///
    /// Nothing needs to be set up first: the brokers pop a group's queues whatever its
    /// message request mode (SET_MESSAGE_REQUEST_MODE only changes what QUERY_ASSIGNMENT
    /// assigns).
    pub async fn pop(&self, request: &PopRequest) -> Result<PopOutcome, PopError> {
        let ns = self.name_server().namespace();
        let command = pop_message_request(request, ns)?;
        let addr = self.broker_addr(&request.queue, true).await?;
        let timeout = pop_timeout(request.poll_time, self.remoting().config().request_timeout);
        let op = self.group_topic_op("pop", &request.group, &request.queue.topic);
        let response = self
            .remoting()
            .call_with_timeout(&addr, &op, command, timeout)
            .await?;
        let mut outcome = read_pop_answer(&response, request, &DecodeLimits::default())?;
        if let PopOutcome::Found(batch) = &mut outcome {
            self.dead_letter_popped(request, batch).await;
        }
        let outcome = match (outcome, ns) {
            (PopOutcome::Found(batch), Some(ns)) => PopOutcome::Found(plain_names(batch, ns)),
            (outcome, _) => outcome,
        };
        match &outcome {
            PopOutcome::Found(batch) => {
                tracing::trace!(broker = %addr, queue = ?request.queue, messages = batch.messages.len(), unmatched = batch.unmatched.len(), pop_time = batch.pop_time, "popped")
            }
            other => {
                tracing::trace!(broker = %addr, queue = ?request.queue, outcome = ?other, "nothing popped")
            }
        }
        Ok(outcome)
    }
}

impl BrokerClient {
    /// Moves each of `batch`'s messages too large to decode to the group's dead letters (see
    /// [`dead_letter_stored`](Self::dead_letter_stored)) and lists its handle with the
    /// unmatched ones, to be acknowledged. One that could not be moved stays in `oversized`:
    /// not acknowledged, it comes back after the invisible time and is tried again.
    async fn dead_letter_popped(&self, request: &PopRequest, batch: &mut PopBatch) {
        for popped in std::mem::take(&mut batch.oversized) {
            let message = &popped.message;
            match self.dead_letter_stored(&request.group, message).await {
                Ok(addr) => {
                    tracing::error!(broker = %addr, queue = ?message.queue(), offset = message.queue_offset(), msg_id = message.msg_id(), group = %request.group, "a popped message too large to decode was moved to the group's dead-letter topic; acknowledging it");
                    batch.unmatched.push(popped.handle);
                }
                Err(e) => {
                    tracing::error!(queue = ?message.queue(), offset = message.queue_offset(), msg_id = message.msg_id(), error = %e, "a popped message too large to decode could not be moved to the dead-letter topic; it comes back after its invisible time");
                    batch.oversized.push(popped);
                }
            }
        }
    }
}

/// The origin topic of messages that carry one ([`RETRY_TOPIC`](property::RETRY_TOPIC))
/// without the namespace, as pulls give it.
fn plain_names(mut batch: PopBatch, ns: &Namespace) -> PopBatch {
    batch.messages = batch
        .messages
        .into_iter()
        .map(|popped| PoppedMessage {
            message: crate::broker::pull::plain_retry_topic(popped.message, ns),
            handle: popped.handle,
        })
        .collect();
    batch
}

#[cfg(test)]
#[path = "pop_message_tests.rs"]
mod tests;
