//! The stored-message record (Java's `MessageDecoder.decode`), big-endian:
//!
//! | field | size |
//! |---|---|
//! | total size (the whole record, this field included) | i32 |
//! | magic code: [`MAGIC_V1`] (1-byte topic length) or [`MAGIC_V2`] (2-byte) | i32 |
//! | body CRC, queue id, flag | 3 × i32 |
//! | queue offset, commit-log offset | 2 × i64 |
//! | sysFlag | i32 |
//! | born timestamp | i64 |
//! | born host: IPv4 + port, or IPv6 + port with sysFlag [`BORN_HOST_V6_FLAG`] | 8 or 20 |
//! | store timestamp | i64 |
//! | store host: likewise with [`STORE_HOST_V6_FLAG`] | 8 or 20 |
//! | reconsume times | i32 |
//! | prepared transaction offset | i64 |
//! | body length (i32) + body, compressed with [`COMPRESSED_FLAG`](super::compression::COMPRESSED_FLAG) | 4 + n |
//! | topic length (u8 for V1, i16 for V2) + topic | 1/2 + n |
//! | properties length (i16) + properties | 2 + n |
//!
//! A pull's body is such records back to back. A record with sysFlag [`NEED_UNWRAP_FLAG`]
//! and [`INNER_BATCH_FLAG`] carries a batch of messages in its body (Java's
//! `MessageDecoder.decodeMessages` layout), unwrapped into one message each.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use bytes::Bytes;
use rebalance_consume::{Message, property};
use rebalance_core::MessageQueue;

use super::compression::Compression;
use super::{id, properties};

/// The magic code of a record whose topic length is one byte.
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// The magic code of a record whose topic length is two bytes.
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// sysFlag: the born host is IPv6.
pub const BORN_HOST_V6_FLAG: i32 = 0x10;
/// sysFlag: the store host is IPv6.
pub const STORE_HOST_V6_FLAG: i32 = 0x20;
/// sysFlag: the body is to be unwrapped by the client.
pub const NEED_UNWRAP_FLAG: i32 = 0x40;
/// sysFlag: the body is a batch of messages.
pub const INNER_BATCH_FLAG: i32 = 0x80;

/// The smallest record: every fixed field with IPv4 hosts, empty body, topic and properties.
const MIN_RECORD_V1: usize = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2;

/// Why a pull's body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A field runs past the end of its record or of the body.
    #[error("message record at byte {at} truncated: {field} needs {needed} bytes, {left} left")]
    Truncated {
        /// Where the record starts in the body.
        at: usize,
        /// The field.
        field: &'static str,
        /// How many bytes it needs.
        needed: usize,
        /// How many are left.
        left: usize,
    },
    /// A field holds an impossible value (a negative length, a size smaller than the fixed
    /// fields).
    #[error("message record at byte {at}: {what}")]
    Malformed {
        /// Where the record starts in the body.
        at: usize,
        /// What is wrong.
        what: String,
    },
    /// The magic code is neither V1 nor V2.
    #[error("message record at byte {at}: unknown magic code {magic:#x}")]
    BadMagic {
        /// Where the record starts in the body.
        at: usize,
        /// The magic code read.
        magic: i32,
    },
    /// A compressed body could not be decompressed.
    #[error("{kind:?} body does not decompress: {reason}")]
    Decompress {
        /// The algorithm.
        kind: Compression,
        /// Why.
        reason: String,
    },
    /// A decompressed body would pass [`DecodeLimits::max_body`], or the answer's decoded
    /// messages together (bodies, topics, properties) would pass [`DecodeLimits::max_total`].
    #[error("decoded messages larger than the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The answer holds more messages, inner batches unwrapped, than
    /// [`DecodeLimits::max_messages`].
    #[error(
        "more than {limit} messages in one answer (inner batches unwrapped): the broker's answer is \
         malformed or hostile, or `DecodeLimits::max_messages` is too small for it"
    )]
    TooManyMessages {
        /// The limit.
        limit: usize,
    },
    /// A feature of the record this client does not read.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// How much memory decoding one answer (a pull's or a POP's) may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The largest decompressed body of one message (16 MiB).
    pub max_body: usize,
    /// The budget of one answer (64 MiB): its decompressed bodies, and for every decoded
    /// message [`MESSAGE_OVERHEAD`] bytes plus its topic and properties, are charged to it.
    /// Bodies that were not compressed are not: they are copies of the answer's bytes.
    pub max_total: usize,
    /// The most messages one answer may decode, inner batches unwrapped (65,536).
    ///
    /// A pull or a POP asks for a few dozen records (32 by default; the Java client's pull at
    /// most 1,024), but a record may be an inner batch of many messages (a producer's batch,
    /// within the broker's 4 MiB message size), so the bound is well above what an honest
    /// answer holds. It keeps a small hostile answer (22-byte inner records, or a compressed
    /// body of them) from making hundreds of thousands of messages; 65,536 empty messages are
    /// charged [`MESSAGE_OVERHEAD`] each, under half of the default `max_total`, so the count
    /// is reached before the budget and the error names it.
    pub max_messages: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_body: 16 << 20,
            max_total: 64 << 20,
            max_messages: 1 << 16,
        }
    }
}

/// What each decoded message is charged against [`DecodeLimits::max_total`] beside its body,
/// topic and properties: its place in the answer's list (twice its size, for the list's growth).
pub const MESSAGE_OVERHEAD: usize = 2 * std::mem::size_of::<StoredMessage>();

/// A host as a record stores it: an address and a port (an i32 on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// The address.
    pub ip: IpAddr,
    /// The port.
    pub port: i32,
}

/// One message as the broker stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// The CRC32 of the body the broker computed (not checked here, as by the Java client).
    pub body_crc: i32,
    /// The queue id.
    pub queue_id: i32,
    /// The producer's flag.
    pub flag: i32,
    /// The offset in its queue.
    pub queue_offset: i64,
    /// The offset in the broker's commit log.
    pub commit_log_offset: i64,
    /// The system flags.
    pub sys_flag: i32,
    /// When the producer made it (ms since the Unix epoch).
    pub born_timestamp: i64,
    /// The producer's address.
    pub born_host: Host,
    /// When the broker stored it (ms since the Unix epoch).
    pub store_timestamp: i64,
    /// The storing broker's address.
    pub store_host: Host,
    /// How many times it was consumed and failed before.
    pub reconsume_times: i32,
    /// The prepared transaction's offset.
    pub prepared_transaction_offset: i64,
    /// The body, decompressed.
    pub body: Bytes,
    /// The topic.
    pub topic: String,
    /// The properties.
    pub properties: HashMap<String, String>,
}

impl StoredMessage {
    /// The broker's id of the message (store host and commit-log offset).
    pub fn offset_msg_id(&self) -> String {
        id::offset_msg_id(
            self.store_host.ip,
            self.store_host.port,
            self.commit_log_offset,
        )
    }

    /// The message's id as the Java client gives it: the producer's unique id (`UNIQ_KEY`)
    /// when present, else the offset message id.
    pub fn msg_id(&self) -> String {
        match self.properties.get(property::UNIQ_KEY) {
            Some(key) => key.clone(),
            None => self.offset_msg_id(),
        }
    }

    /// The consume layer's message, pulled from `queue`.
    pub fn into_message(self, queue: impl Into<Arc<MessageQueue>>) -> Message {
        let msg_id = self.msg_id();
        Message::new(queue, self.queue_offset, self.body)
            .with_msg_id(msg_id)
            .with_commit_log_offset(self.commit_log_offset)
            .with_timestamps(self.born_timestamp, self.store_timestamp)
            .with_reconsume_times(self.reconsume_times)
            .with_properties(self.properties)
    }
}

/// Bounded big-endian reads over one record.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where the record starts in the whole body, for error messages.
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, needed: usize) -> Result<&'a [u8], DecodeError> {
        let left = self.data.len() - self.pos;
        if needed > left {
            return Err(DecodeError::Truncated {
                at: self.at,
                field,
                needed,
                left,
            });
        }
        let bytes = &self.data[self.pos..self.pos + needed];
        self.pos += needed;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// A length read from the record: negative is malformed.
    fn length(&mut self, field: &'static str, raw: i64) -> Result<usize, DecodeError> {
        usize::try_from(raw).map_err(|_| DecodeError::Malformed {
            at: self.at,
            what: format!("{field} is negative ({raw})"),
        })
    }

    fn host(&mut self, field: &'static str, v6: bool) -> Result<Host, DecodeError> {
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>(field)?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>(field)?))
        };
        Ok(Host {
            ip,
            port: self.i32(field)?,
        })
    }
}

/// Decodes a pull's body: every record, in order, inner batches unwrapped. Any malformed or
/// truncated record fails the whole body (its messages must not be skipped silently: the next
/// pull would start after them), and so does a body that passes the limits (see
/// [`decode_prefix`] for the records that fit).
pub fn decode_batch(body: &[u8], limits: &DecodeLimits) -> Result<Vec<StoredMessage>, DecodeError> {
    match decode_until_limit(body, limits)? {
        (messages, None) => Ok(messages),
        (_, Some(limit)) => Err(limit),
    }
}

/// The records of a pull's body that fit in the limits, from the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedPrefix {
    /// The messages decoded, in order, inner batches unwrapped.
    pub messages: Vec<StoredMessage>,
    /// Whether they are the whole body; `false` when decoding stopped before a record whose
    /// messages would have passed a limit (the messages from that record on were not decoded).
    pub complete: bool,
    /// The first record, when it is a single message whose compressed body inflates past
    /// the limits alone: its header, topic and properties, with an empty body (nothing else
    /// is decoded then). It can never be delivered; the pull's caller dead-letters it by its
    /// commit-log offset (the broker moves its own stored copy), so that the queue goes on.
    pub oversized: Option<Oversized>,
}

/// One record of a body as [`decode_each`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedRecord {
    /// A message decoded (an inner batch's messages one by one).
    Message(StoredMessage),
    /// A message too large to decode alone: its header.
    Oversized(Oversized),
}

/// A message too large to decode within the limits (see [`DecodedPrefix::oversized`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oversized {
    /// The message as stored, with an empty body.
    pub header: StoredMessage,
    /// The limit it passed.
    pub error: DecodeError,
}

/// Decodes a pull's body as [`decode_batch`] does, but stops before a record whose messages
/// would pass a limit ([`DecodeLimits::max_body`], the answer's remaining
/// [`DecodeLimits::max_total`] or [`DecodeLimits::max_messages`]) once at least one message is
/// decoded, instead of failing: the pull then delivers the messages before it, and the next
/// pull starts at that record (a pull of many large messages would otherwise fail at the same
/// offset forever). A first record too large alone is returned as
/// [`oversized`](DecodedPrefix::oversized) (its header only) when it is a single message, and
/// is an error when it is an inner batch; a malformed record is an error. An inner batch is
/// decoded whole or not at all.
pub fn decode_prefix(body: &[u8], limits: &DecodeLimits) -> Result<DecodedPrefix, DecodeError> {
    match decode_until_limit(body, limits) {
        Ok((messages, stopped)) => Ok(DecodedPrefix {
            messages,
            complete: stopped.is_none(),
            oversized: None,
        }),
        Err(error @ DecodeError::BodyTooLarge { .. }) => {
            // The first record passed the limits alone (any later one stops the prefix
            // instead). A single message's header is still read, its body skipped, so that the
            // caller can dead-letter it rather than fail at this offset forever; an inner
            // batch (how many queue offsets it covers is in its body) stays an error.
            let (record, _) = record_at(body, 0)?;
            Ok(DecodedPrefix {
                messages: Vec::new(),
                complete: false,
                oversized: Some(oversized(record, error)?),
            })
        }
        Err(e) => Err(e),
    }
}

/// Decodes every record of a body as [`decode_batch`] does, in order, except that a single
/// message whose compressed body alone inflates past [`DecodeLimits::max_body`] comes back as
/// its header ([`DecodedRecord::Oversized`]) instead of failing the whole body. For a POP's answer,
/// whose messages are all popped at once: none can be left for a later pop, and one that can
/// never be read must be dead-lettered, not fail the others. Anything else that passes a limit
/// (the answer's budget, an inner batch) fails the whole, as in [`decode_batch`].
pub fn decode_each(body: &[u8], limits: &DecodeLimits) -> Result<Vec<DecodedRecord>, DecodeError> {
    let mut messages = Vec::new();
    // Each header with the number of messages decoded before it.
    let mut headers: Vec<(usize, Oversized)> = Vec::new();
    let mut pos = 0;
    let mut budget = limits.max_total;
    while pos < body.len() {
        let (record, size) = record_at(body, pos)?;
        let room = budget;
        match decode_into(record, pos, limits, &mut budget, &mut messages) {
            Ok(()) => {}
            // Alone past the limit, with the whole room left: not a budget spent by others.
            Err(error @ DecodeError::BodyTooLarge { .. }) if room >= limits.max_body => {
                let header = oversized(record, error)?;
                if messages.len() + headers.len() >= limits.max_messages {
                    return Err(DecodeError::TooManyMessages {
                        limit: limits.max_messages,
                    });
                }
                budget = room;
                headers.push((messages.len(), header));
            }
            Err(e) => return Err(e),
        }
        pos += size;
    }
    let mut decoded: Vec<DecodedRecord> =
        messages.into_iter().map(DecodedRecord::Message).collect();
    // The last first, so that each index still counts messages only (headers are rare).
    for (before, header) in headers.into_iter().rev() {
        decoded.insert(before, DecodedRecord::Oversized(header));
    }
    Ok(decoded)
}

/// The header of `record`, a single message too large to decode (`error`), for the caller to
/// dead-letter it; `error` itself when the record is an inner batch (how many queue offsets it
/// covers is in the body that could not be read) or its header cannot be read.
fn oversized(record: &[u8], error: DecodeError) -> Result<Oversized, DecodeError> {
    match decode_header(record) {
        Ok(header) if header.sys_flag & INNER_BATCH_FLAG == 0 => Ok(Oversized { header, error }),
        _ => Err(error),
    }
}

/// The first record of a body as [`decode_record`] reads it, with its body skipped (neither
/// decompressed nor copied) and no budget charged.
fn decode_header(record: &[u8]) -> Result<StoredMessage, DecodeError> {
    let unlimited = DecodeLimits {
        max_body: 0,
        max_total: usize::MAX,
        max_messages: usize::MAX,
    };
    let mut budget = usize::MAX;
    decode_fields(record, 0, &unlimited, &mut budget, false)
}

/// The records of `body` up to the first that passes a limit, and that limit's error; a limit
/// passed by the first record, or any other error, fails the whole.
fn decode_until_limit(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<(Vec<StoredMessage>, Option<DecodeError>), DecodeError> {
    let mut messages = Vec::new();
    let mut pos = 0;
    let mut budget = limits.max_total;
    while pos < body.len() {
        let (record, size) = record_at(body, pos)?;
        let before = messages.len();
        match decode_into(record, pos, limits, &mut budget, &mut messages) {
            Ok(()) => {}
            Err(e @ (DecodeError::BodyTooLarge { .. } | DecodeError::TooManyMessages { .. }))
                if before > 0 =>
            {
                // None of this record's messages (an inner batch's all or none): they come
                // whole in a later pull.
                messages.truncate(before);
                return Ok((messages, Some(e)));
            }
            Err(e) => return Err(e),
        }
        pos += size;
    }
    Ok((messages, None))
}

/// Decodes the record at `pos` into `out`: its message, or an inner batch's messages (all or,
/// on an error, some of them: the caller truncates).
fn decode_into(
    record: &[u8],
    pos: usize,
    limits: &DecodeLimits,
    budget: &mut usize,
    out: &mut Vec<StoredMessage>,
) -> Result<(), DecodeError> {
    let message = decode_record(record, pos, limits, budget)?;
    if message.sys_flag & NEED_UNWRAP_FLAG != 0 && message.sys_flag & INNER_BATCH_FLAG != 0 {
        unwrap_inner_batch(message, pos, limits, budget, out)
    } else {
        push_counted(out, message, limits)
    }
}

/// Adds `message` to `out` unless that passes [`DecodeLimits::max_messages`].
fn push_counted(
    out: &mut Vec<StoredMessage>,
    message: StoredMessage,
    limits: &DecodeLimits,
) -> Result<(), DecodeError> {
    if out.len() >= limits.max_messages {
        return Err(DecodeError::TooManyMessages {
            limit: limits.max_messages,
        });
    }
    out.push(message);
    Ok(())
}

/// Takes `cost` bytes from the answer's `budget`, failing when fewer are left.
fn charge(budget: &mut usize, cost: usize, limits: &DecodeLimits) -> Result<(), DecodeError> {
    *budget = budget.checked_sub(cost).ok_or(DecodeError::BodyTooLarge {
        limit: limits.max_total,
    })?;
    Ok(())
}

/// The bytes a message with a topic of `topic_len` bytes and `properties` holds beside its
/// body: [`MESSAGE_OVERHEAD`], the topic, and the properties' table and strings.
fn held_beside_body(topic_len: usize, properties: &HashMap<String, String>) -> usize {
    let table = properties
        .capacity()
        .saturating_mul(std::mem::size_of::<(String, String)>() + 1);
    properties.iter().fold(
        MESSAGE_OVERHEAD
            .saturating_add(topic_len)
            .saturating_add(table),
        |sum, (k, v)| {
            sum.saturating_add(k.capacity())
                .saturating_add(v.capacity())
        },
    )
}

/// The record starting at `pos`, bounded by its total size.
fn record_at(body: &[u8], pos: usize) -> Result<(&[u8], usize), DecodeError> {
    let left = body.len() - pos;
    let size_bytes = body.get(pos..pos + 4).ok_or(DecodeError::Truncated {
        at: pos,
        field: "total size",
        needed: 4,
        left,
    })?;
    let raw = i32::from_be_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]);
    let size = usize::try_from(raw).unwrap_or(0);
    if size < MIN_RECORD_V1 {
        return Err(DecodeError::Malformed {
            at: pos,
            what: format!("total size {raw} is smaller than a record's fixed fields"),
        });
    }
    if size > left {
        return Err(DecodeError::Truncated {
            at: pos,
            field: "record",
            needed: size,
            left,
        });
    }
    Ok((&body[pos..pos + size], size))
}

fn decode_record(
    record: &[u8],
    at: usize,
    limits: &DecodeLimits,
    budget: &mut usize,
) -> Result<StoredMessage, DecodeError> {
    decode_fields(record, at, limits, budget, true)
}

/// A record's fields; its body decoded only `with_body` (else left empty, neither
/// decompressed nor copied, and not charged).
fn decode_fields(
    record: &[u8],
    at: usize,
    limits: &DecodeLimits,
    budget: &mut usize,
    with_body: bool,
) -> Result<StoredMessage, DecodeError> {
    let mut r = Reader {
        data: record,
        pos: 4,
        at,
    };
    let magic = r.i32("magic code")?;
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Err(DecodeError::BadMagic { at, magic });
    }
    let body_crc = r.i32("body CRC")?;
    let queue_id = r.i32("queue id")?;
    let flag = r.i32("flag")?;
    let queue_offset = r.i64("queue offset")?;
    let commit_log_offset = r.i64("commit-log offset")?;
    let sys_flag = r.i32("sysFlag")?;
    let born_timestamp = r.i64("born timestamp")?;
    let born_host = r.host("born host", sys_flag & BORN_HOST_V6_FLAG != 0)?;
    let store_timestamp = r.i64("store timestamp")?;
    let store_host = r.host("store host", sys_flag & STORE_HOST_V6_FLAG != 0)?;
    let reconsume_times = r.i32("reconsume times")?;
    let prepared_transaction_offset = r.i64("prepared transaction offset")?;
    let raw = r.i32("body length")?;
    let body_len = r.length("body length", raw.into())?;
    let stored_body = r.take("body", body_len)?;
    let body = match Compression::of_sys_flag(sys_flag)? {
        _ if !with_body => Bytes::new(),
        None => Bytes::copy_from_slice(stored_body),
        Some(kind) => {
            let max = limits.max_body.min(*budget);
            let body = kind.decompress(stored_body, max).map_err(|e| match e {
                DecodeError::BodyTooLarge { .. } if max < limits.max_body => {
                    DecodeError::BodyTooLarge {
                        limit: limits.max_total,
                    }
                }
                other => other,
            })?;
            // Its capacity is what the `Bytes` keeps (`decompress` leaves none spare).
            charge(budget, body.capacity(), limits)?;
            Bytes::from(body)
        }
    };
    let topic_len = if magic == MAGIC_V1 {
        usize::from(r.array::<1>("topic length")?[0])
    } else {
        let raw = r.i16("topic length")?;
        r.length("topic length", raw.into())?
    };
    let topic = String::from_utf8_lossy(r.take("topic", topic_len)?).into_owned();
    let raw = r.i16("properties length")?;
    let properties_len = r.length("properties length", raw.into())?;
    let properties = properties::parse(&String::from_utf8_lossy(
        r.take("properties", properties_len)?,
    ));
    charge(budget, held_beside_body(topic.len(), &properties), limits)?;
    Ok(StoredMessage {
        body_crc,
        queue_id,
        flag,
        queue_offset,
        commit_log_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        topic,
        properties,
    })
}

/// The messages of an inner batch (Java's `MessageDecoder.decodeMessage(MessageExt, List)`):
/// the outer record's body is records of `total size, magic, body CRC, flag, body length +
/// body, properties length (i16) + properties`; each becomes a message with the outer
/// record's fields, its own flag, body and properties, and the queue offset of the outer
/// record plus its index. Each is counted against [`DecodeLimits::max_messages`] and charged
/// to the answer's `budget` (its body is a slice of the outer body, already charged).
fn unwrap_inner_batch(
    outer: StoredMessage,
    at: usize,
    limits: &DecodeLimits,
    budget: &mut usize,
    out: &mut Vec<StoredMessage>,
) -> Result<(), DecodeError> {
    let mut r = Reader {
        data: &outer.body,
        pos: 0,
        at,
    };
    let mut index = 0i64;
    while r.pos < r.data.len() {
        let _total = r.i32("inner total size")?;
        let _magic = r.i32("inner magic code")?;
        let body_crc = r.i32("inner body CRC")?;
        let flag = r.i32("inner flag")?;
        let raw = r.i32("inner body length")?;
        let body_len = r.length("inner body length", raw.into())?;
        let start = r.pos;
        r.take("inner body", body_len)?;
        let body = outer.body.slice(start..r.pos);
        let raw = r.i16("inner properties length")?;
        let properties_len = r.length("inner properties length", raw.into())?;
        let properties = properties::parse(&String::from_utf8_lossy(
            r.take("inner properties", properties_len)?,
        ));
        charge(
            budget,
            held_beside_body(outer.topic.len(), &properties),
            limits,
        )?;
        // Built field by field: the outer record's properties are not the inner message's,
        // and are not copied for each.
        push_counted(
            out,
            StoredMessage {
                body_crc,
                queue_id: outer.queue_id,
                flag,
                queue_offset: outer.queue_offset.saturating_add(index),
                commit_log_offset: outer.commit_log_offset,
                sys_flag: outer.sys_flag,
                born_timestamp: outer.born_timestamp,
                born_host: outer.born_host,
                store_timestamp: outer.store_timestamp,
                store_host: outer.store_host,
                reconsume_times: outer.reconsume_times,
                prepared_transaction_offset: outer.prepared_transaction_offset,
                body,
                topic: outer.topic.clone(),
                properties,
            },
            limits,
        )?;
        index += 1;
    }
    Ok(())
}
