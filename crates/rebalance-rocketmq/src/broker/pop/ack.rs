//! Acknowledging popped messages (ACK_MESSAGE 200051, BATCH_ACK_MESSAGE 200151) and changing
//! their invisible time (CHANGE_MESSAGE_INVISIBLETIME 200053), at the master of the broker
//! named in their handle.
//!
//! **Answers**: 0 → acknowledged ([`AckOutcome::Acked`]) or changed ([`ChangeOutcome::Changed`],
//! with the new handle); 208 NO_MESSAGE → the offset is outside the queue's stored range, the
//! message is gone ([`AckOutcome::NoMessage`], [`ChangeOutcome::NoMessage`]); a refusal of
//! the credentials or permissions → [`RemoteError::Denied`]; anything else (13 MESSAGE_ILLEGAL
//! for a queue the topic does not have, 17 for an unknown topic, 14, 1, ...) →
//! [`RemoteError::Refused`].
//!
//! **A 0 answer does not mean the acknowledgement matched**: the broker writes it to its revive
//! log and matches it against the pop's checkpoint later; an acknowledgement with a stale
//! handle (after a change of invisible time, or after the message came back) is silently
//! ignored, and the message comes back.

use std::collections::BTreeMap;
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use serde::Serialize;

use super::handle::{HandleFields, ReceiptHandle, RetryFlag};
use super::{PopError, invalid, millis};
use crate::broker::BrokerClient;
use crate::command::{RemotingCommand, request_code, response_code};
use crate::namespace::{self, Namespace};

/// The widest range of offsets one batch-ack entry may cover (its bit set is this many bits at
/// most): only a malformed handle is further from its checkpoint offset.
pub const MAX_BATCH_ACK_SPAN: i64 = 1 << 16;

/// An acknowledgement of one popped message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRequest {
    /// The consumer group that popped it.
    pub group: String,
    /// The topic popped (not a retry topic: the handle says where the message really is).
    pub topic: String,
    /// Its receipt handle.
    pub handle: ReceiptHandle,
}

impl AckRequest {
    /// Acknowledges the message of `handle`, popped by `group` from `topic`.
    pub fn new(group: impl Into<String>, topic: impl Into<String>, handle: ReceiptHandle) -> Self {
        Self {
            group: group.into(),
            topic: topic.into(),
            handle,
        }
    }
}

/// An acknowledgement of many popped messages, all served by one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchAckRequest {
    /// The consumer group that popped them.
    pub group: String,
    /// The topic popped.
    pub topic: String,
    /// Their receipt handles (at least one; all naming the same broker).
    pub handles: Vec<ReceiptHandle>,
}

impl BatchAckRequest {
    /// Acknowledges the messages of `handles`, popped by `group` from `topic`.
    pub fn new(
        group: impl Into<String>,
        topic: impl Into<String>,
        handles: Vec<ReceiptHandle>,
    ) -> Self {
        Self {
            group: group.into(),
            topic: topic.into(),
            handles,
        }
    }
}

/// A change of a popped message's invisible time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeInvisibleTimeRequest {
    /// The consumer group that popped it.
    pub group: String,
    /// The topic popped.
    pub topic: String,
    /// Its current receipt handle.
    pub handle: ReceiptHandle,
    /// How long from now it stays invisible.
    pub invisible_time: Duration,
}

impl ChangeInvisibleTimeRequest {
    /// Makes the message of `handle` invisible for `invisible_time` from now.
    pub fn new(
        group: impl Into<String>,
        topic: impl Into<String>,
        handle: ReceiptHandle,
        invisible_time: Duration,
    ) -> Self {
        Self {
            group: group.into(),
            topic: topic.into(),
            handle,
            invisible_time,
        }
    }
}

/// What an acknowledgement answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckOutcome {
    /// Taken (which does not prove it matched the pop: see the
    /// [module documentation](self)).
    Acked,
    /// The offset is outside the queue's stored range (208): the message is gone.
    NoMessage {
        /// The broker's explanation.
        remark: String,
    },
}

/// What a change of invisible time answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// Changed: acknowledge or change the message with this handle from now on.
    Changed(ReceiptHandle),
    /// The offset is outside the queue's stored range (208): the message is gone.
    NoMessage {
        /// The broker's explanation.
        remark: String,
    },
}

fn check_names(request: &'static str, group: &str, topic: &str) -> Result<(), PopError> {
    if group.is_empty() || topic.is_empty() {
        return Err(invalid(request, "the group or the topic is empty"));
    }
    Ok(())
}

/// The group as the broker knows it, and the real topic of `retry` (the popped topic or its
/// POP retry topic) as the broker knows it.
fn wire_names(
    namespace: Option<&Namespace>,
    group: &str,
    topic: &str,
    retry: RetryFlag,
) -> (String, String) {
    let group = namespace::wrap(namespace, group).into_owned();
    let topic = retry.real_topic(&namespace::wrap(namespace, topic), &group);
    (group, topic)
}

/// The ACK_MESSAGE request of `request` in `namespace`: the real topic, queue id and offset
/// of the handle, and the handle itself.
pub fn ack_message_request(
    request: &AckRequest,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    check_names("ACK", &request.group, &request.topic)?;
    let fields = request.handle.fields();
    let (group, topic) = wire_names(namespace, &request.group, &request.topic, fields.retry);
    Ok(RemotingCommand::request(request_code::ACK_MESSAGE)
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", fields.queue_id)
        .with_ext("offset", fields.queue_offset)
        .with_ext("extraInfo", request.handle.as_str())
        .with_ext("bname", &fields.broker_name))
}

/// The CHANGE_MESSAGE_INVISIBLETIME request of `request` in `namespace`.
pub fn change_invisible_time_request(
    request: &ChangeInvisibleTimeRequest,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    check_names("change invisible time", &request.group, &request.topic)?;
    let fields = request.handle.fields();
    let (group, topic) = wire_names(namespace, &request.group, &request.topic, fields.retry);
    Ok(
        RemotingCommand::request(request_code::CHANGE_MESSAGE_INVISIBLETIME)
            .with_ext("consumerGroup", group)
            .with_ext("topic", topic)
            .with_ext("queueId", fields.queue_id)
            .with_ext("offset", fields.queue_offset)
            .with_ext("extraInfo", request.handle.as_str())
            .with_ext("invisibleTime", millis(request.invisible_time))
            .with_ext("bname", &fields.broker_name),
    )
}

/// One entry of a BATCH_ACK_MESSAGE body (Java's `BatchAck`, short keys).
#[derive(Debug, Serialize)]
struct BatchAckEntry {
    c: String,
    t: String,
    r: &'static str,
    so: i64,
    q: i32,
    rq: i32,
    pt: i64,
    it: i64,
    /// Bit `i` (little-endian within each byte) set ⇔ offset `so + i` acknowledged; a whole
    /// number of 8-byte words, which the Rust broker reads as `u64`s.
    b: Vec<u8>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BatchAckBody<'a> {
    broker_name: &'a str,
    acks: Vec<BatchAckEntry>,
}

/// What identifies one pop among handles: retry flag, queue id, checkpoint offset, pop time.
type PopKey = (RetryFlag, i32, i64, i64);

/// The BATCH_ACK_MESSAGE request of `request` in `namespace`: one entry per pop (handles
/// grouped by retry flag, queue, checkpoint offset and pop time, as the Java client groups
/// them), each with the bit set of its offsets. Fails, sending nothing, when there is no handle,
/// when they name different brokers, or when a handle's offset is before its checkpoint offset
/// or more than [`MAX_BATCH_ACK_SPAN`] after it.
pub fn batch_ack_request(
    request: &BatchAckRequest,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    check_names("batch ACK", &request.group, &request.topic)?;
    let Some(first) = request.handles.first() else {
        return Err(invalid("batch ACK", "no receipt handle"));
    };
    let broker_name = &first.fields().broker_name;
    let mut pops: BTreeMap<PopKey, (&HandleFields, Vec<i64>)> = BTreeMap::new();
    for handle in &request.handles {
        let fields = handle.fields();
        if &fields.broker_name != broker_name {
            return Err(invalid(
                "batch ACK",
                format!(
                    "handles of brokers `{broker_name}` and `{}`: send one batch per broker",
                    fields.broker_name
                ),
            ));
        }
        let bit = fields
            .queue_offset
            .checked_sub(fields.checkpoint_offset)
            .filter(|bit| (0..MAX_BATCH_ACK_SPAN).contains(bit))
            .ok_or_else(|| {
                invalid(
                    "batch ACK",
                    format!(
                        "handle `{handle}`: offset {} is not within {MAX_BATCH_ACK_SPAN} after its checkpoint offset {}",
                        fields.queue_offset, fields.checkpoint_offset
                    ),
                )
            })?;
        let key = (
            fields.retry,
            fields.queue_id,
            fields.checkpoint_offset,
            fields.pop_time,
        );
        pops.entry(key).or_insert((fields, Vec::new())).1.push(bit);
    }
    let group = namespace::wrap(namespace, &request.group).into_owned();
    let topic = namespace::wrap(namespace, &request.topic).into_owned();
    let acks = pops
        .into_values()
        .map(|(fields, bits)| BatchAckEntry {
            c: group.clone(),
            t: topic.clone(),
            r: fields.retry.as_str(),
            so: fields.checkpoint_offset,
            q: fields.queue_id,
            rq: fields.revive_queue_id,
            pt: fields.pop_time,
            it: fields.invisible_time,
            b: bit_set(&bits),
        })
        .collect();
    let body = BatchAckBody { broker_name, acks };
    // Strings and numbers only: serializing cannot fail.
    let body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(RemotingCommand::request(request_code::BATCH_ACK_MESSAGE).with_body(body))
}

/// The bytes of a bit set with `bits` set (each under [`MAX_BATCH_ACK_SPAN`]), padded to whole
/// 8-byte words.
fn bit_set(bits: &[i64]) -> Vec<u8> {
    let highest = bits.iter().copied().max().unwrap_or(0).max(0) as usize;
    let words = highest / 64 + 1;
    let mut bytes = vec![0u8; words * 8];
    for &bit in bits {
        let bit = bit as usize;
        bytes[bit / 8] |= 1 << (bit % 8);
    }
    bytes
}

/// Reads the answer to an ACK or BATCH_ACK.
pub(crate) fn read_ack_answer(response: &RemotingCommand) -> Result<AckOutcome, RemoteError> {
    match response.code {
        response_code::SUCCESS => Ok(AckOutcome::Acked),
        response_code::NO_MESSAGE => Ok(AckOutcome::NoMessage {
            remark: response.remark_or_empty().to_string(),
        }),
        _ => Err(crate::broker::refused(response)),
    }
}

/// Reads the answer to a change of `handle`'s invisible time: a 0 answer's `popTime`,
/// `invisibleTime` and `reviveQid` make the new handle (the message's own offset as its
/// checkpoint offset, as the Java client builds it).
pub(crate) fn read_change_answer(
    response: &RemotingCommand,
    handle: &ReceiptHandle,
) -> Result<ChangeOutcome, RemoteError> {
    match response.code {
        response_code::SUCCESS => {}
        response_code::NO_MESSAGE => {
            return Ok(ChangeOutcome::NoMessage {
                remark: response.remark_or_empty().to_string(),
            });
        }
        _ => return Err(crate::broker::refused(response)),
    }
    fn field<T: std::str::FromStr>(
        response: &RemotingCommand,
        name: &str,
    ) -> Result<T, RemoteError> {
        let text = response.ext(name).ok_or_else(|| {
            RemoteError::BadResponse(format!(
                "change of invisible time answered without `{name}`"
            ))
        })?;
        text.parse().map_err(|_| {
            RemoteError::BadResponse(format!(
                "change of invisible time answered `{name}` `{}`, not a number",
                crate::error::excerpt(text)
            ))
        })
    }
    let old = handle.fields();
    let fields = HandleFields {
        checkpoint_offset: old.queue_offset,
        pop_time: field(response, "popTime")?,
        invisible_time: field(response, "invisibleTime")?,
        revive_queue_id: field(response, "reviveQid")?,
        ..old.clone()
    };
    ReceiptHandle::from_fields(fields)
        .map(ChangeOutcome::Changed)
        .map_err(|e| RemoteError::BadResponse(format!("change of invisible time: {e}")))
}

impl BrokerClient {
    /// The master address of the broker named in `handle`, found through `topic`'s route.
    async fn handle_master(
        &self,
        topic: &str,
        handle: &ReceiptHandle,
    ) -> Result<String, RemoteError> {
        let fields = handle.fields();
        let queue = MessageQueue::new(topic, fields.broker_name.as_str(), fields.queue_id);
        self.broker_addr(&queue, true).await
    }

    /// ACK_MESSAGE at the master of the handle's broker. See [`ack`](self) for the answers.
    pub async fn ack(&self, request: &AckRequest) -> Result<AckOutcome, PopError> {
        let command = ack_message_request(request, self.name_server().namespace())?;
        let addr = self.handle_master(&request.topic, &request.handle).await?;
        let op = self.group_topic_op("ack", &request.group, &request.topic);
        let response = self.call(&addr, &op, command).await?;
        let outcome = read_ack_answer(&response)?;
        tracing::trace!(broker = %addr, handle = %request.handle, ?outcome, "acknowledged");
        Ok(outcome)
    }

    /// BATCH_ACK_MESSAGE at the master of the handles' broker.
    pub async fn batch_ack(&self, request: &BatchAckRequest) -> Result<AckOutcome, PopError> {
        let command = batch_ack_request(request, self.name_server().namespace())?;
        let Some(first) = request.handles.first() else {
            return Err(invalid("batch ACK", "no receipt handle"));
        };
        let addr = self.handle_master(&request.topic, first).await?;
        let op = self.group_topic_op("batch ack", &request.group, &request.topic);
        let response = self.call(&addr, &op, command).await?;
        let outcome = read_ack_answer(&response)?;
        tracing::trace!(broker = %addr, handles = request.handles.len(), ?outcome, "acknowledged a batch");
        Ok(outcome)
    }

    /// CHANGE_MESSAGE_INVISIBLETIME at the master of the handle's broker: the message stays
    /// invisible for `invisible_time` from now; acknowledge or change it with the new handle
    /// afterwards.
    pub async fn change_invisible_time(
        &self,
        request: &ChangeInvisibleTimeRequest,
    ) -> Result<ChangeOutcome, PopError> {
        let command = change_invisible_time_request(request, self.name_server().namespace())?;
        let addr = self.handle_master(&request.topic, &request.handle).await?;
        let op = self.group_topic_op("change invisible time", &request.group, &request.topic);
        let response = self.call(&addr, &op, command).await?;
        let outcome = read_change_answer(&response, &request.handle)?;
        tracing::trace!(broker = %addr, handle = %request.handle, ?outcome, "changed the invisible time");
        Ok(outcome)
    }
}

#[cfg(test)]
#[path = "ack_tests.rs"]
mod tests;
