//! The receipt handle of a popped message (the `POP_CK` property, the `extraInfo` of ACK_MESSAGE
//! and CHANGE_MESSAGE_INVISIBLETIME): space-separated fields, read and written here.
//!
//! | # | field | meaning |
//! |---|---|---|
//! | 0 | checkpoint offset | the first offset of the pop in that queue (the broker's checkpoint key) |
//! | 1 | pop time | the broker's time of the pop (ms) |
//! | 2 | invisible time | how long the message stays invisible after the pop time (ms) |
//! | 3 | revive queue id | the revive queue of the checkpoint; [`ORDERLY_REVIVE_QUEUE_ID`] for an orderly pop |
//! | 4 | retry flag | `0` the topic itself, `1` / `2` its POP retry topic v1 / v2 ([`RetryFlag`]) |
//! | 5 | broker name | the broker that served the pop |
//! | 6 | queue id | the queue the message was read from (a retry queue for a redelivery) |
//! | 7 | queue offset | the message's offset in that queue |
//! | 8 | retry generation | the Rust broker 1.0 only, on messages of a retry topic (optional) |
//!
//! A handle is echoed to the broker exactly as it was received ([`ReceiptHandle::as_str`]):
//! fields after the eighth are kept, and only the first nine are read.

use std::fmt;
use std::str::FromStr;

use crate::namespace::RETRY_PREFIX;

/// The revive queue id of an orderly pop's handles: no checkpoint, the queue is blocked instead.
pub const ORDERLY_REVIVE_QUEUE_ID: i32 = 999;

/// The longest handle accepted (a real one is well under 200 bytes).
pub const MAX_HANDLE_LEN: usize = 1024;

/// Which topic a popped message was read from: the topic itself or one of its POP retry topics,
/// where unacknowledged messages are copied when their invisible time passes.
///
/// ```
/// use rebalance_rocketmq::broker::pop::RetryFlag;
///
/// assert_eq!(RetryFlag::V1.real_topic("T", "G"), "%RETRY%G_T");
/// assert_eq!(RetryFlag::V2.real_topic("T", "G"), "%RETRY%G+T");
/// assert_eq!(RetryFlag::Normal.real_topic("T", "G"), "T");
/// assert_eq!(RetryFlag::of_topic("%RETRY%G_T"), RetryFlag::V1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RetryFlag {
    /// The topic itself (`0`).
    #[default]
    Normal,
    /// The POP retry topic v1, `%RETRY%{group}_{topic}` (`1`); what brokers write by default.
    V1,
    /// The POP retry topic v2, `%RETRY%{group}+{topic}` (`2`; broker option
    /// `enableRetryTopicV2`).
    V2,
}

impl RetryFlag {
    /// The flag as a handle and the info strings write it.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryFlag::Normal => "0",
            RetryFlag::V1 => "1",
            RetryFlag::V2 => "2",
        }
    }

    /// The flag written as `text`, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "0" => Some(RetryFlag::Normal),
            "1" => Some(RetryFlag::V1),
            "2" => Some(RetryFlag::V2),
            _ => None,
        }
    }

    /// The flag of a message stored in `topic` (the Java client's rule: a `%RETRY%` topic with a
    /// `+` is v2, another `%RETRY%` topic v1).
    pub fn of_topic(topic: &str) -> Self {
        match topic.strip_prefix(RETRY_PREFIX) {
            Some(rest) if rest.contains('+') => RetryFlag::V2,
            Some(_) => RetryFlag::V1,
            None => RetryFlag::Normal,
        }
    }

    /// The topic the message is really stored in, for `group` popping `topic`: what ACK_MESSAGE
    /// and CHANGE_MESSAGE_INVISIBLETIME name. Not the push consumer's retry topic
    /// `%RETRY%{group}`.
    pub fn real_topic(self, topic: &str, group: &str) -> String {
        match self {
            RetryFlag::Normal => topic.to_string(),
            RetryFlag::V1 => format!("{RETRY_PREFIX}{group}_{topic}"),
            RetryFlag::V2 => format!("{RETRY_PREFIX}{group}+{topic}"),
        }
    }
}

impl fmt::Display for RetryFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fields of a [`ReceiptHandle`] (see the [module documentation](self)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HandleFields {
    /// The first offset of the pop in the message's queue: with the pop time, the key of the
    /// broker's checkpoint. After a change of invisible time, the message's own offset.
    pub checkpoint_offset: i64,
    /// The broker's time of the pop (ms since the Unix epoch); after a change of invisible
    /// time, the time of the change.
    pub pop_time: i64,
    /// How long after `pop_time` the message becomes visible again (ms).
    pub invisible_time: i64,
    /// The revive queue of the checkpoint; [`ORDERLY_REVIVE_QUEUE_ID`] for an orderly pop.
    pub revive_queue_id: i32,
    /// Which topic the message was read from.
    pub retry: RetryFlag,
    /// The broker that served the pop: acknowledgements go to its master.
    pub broker_name: String,
    /// The queue the message was read from (of the retry topic for a redelivery).
    pub queue_id: i32,
    /// The message's offset in that queue.
    pub queue_offset: i64,
    /// The Rust broker 1.0's retry-policy generation, written on messages of a retry topic.
    pub retry_generation: Option<u64>,
}

/// Why a receipt handle could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptHandleError {
    /// Fewer than the eight fields every handle has.
    #[error("receipt handle `{handle}` has {found} fields, at least 8 expected")]
    TooFewFields {
        /// The handle.
        handle: String,
        /// How many fields it has.
        found: usize,
    },
    /// A field does not hold what it must.
    #[error("receipt handle `{handle}`: {field} `{value}` is not {expected}")]
    BadField {
        /// The handle.
        handle: String,
        /// The field's name.
        field: &'static str,
        /// Its text.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// Longer than [`MAX_HANDLE_LEN`].
    #[error("receipt handle of {len} bytes, longer than {MAX_HANDLE_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
}

/// The receipt handle of a popped message: what acknowledges it or changes its invisible time.
///
/// Parsed from the text a broker gave ([`parse`](Self::parse)), kept verbatim for the requests
/// that send it back, or made from its fields ([`from_fields`](Self::from_fields)).
///
/// ```
/// use rebalance_rocketmq::broker::pop::{ReceiptHandle, RetryFlag};
///
/// let handle = ReceiptHandle::parse("100 1700000000000 60000 2 0 broker-a 3 101").unwrap();
/// assert_eq!(handle.fields().checkpoint_offset, 100);
/// assert_eq!(handle.fields().queue_offset, 101);
/// assert_eq!(handle.fields().retry, RetryFlag::Normal);
/// assert_eq!(handle.visible_again_at(), 1_700_000_060_000);
/// assert!(!handle.is_orderly());
/// assert_eq!(handle.as_str(), "100 1700000000000 60000 2 0 broker-a 3 101");
/// assert!(ReceiptHandle::parse("100 x 60000 2 0 broker-a 3 101").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReceiptHandle {
    text: String,
    fields: HandleFields,
}

impl ReceiptHandle {
    /// Reads a handle: at least eight space-separated fields (see the
    /// [module documentation](self)); a ninth is read as the retry generation when it is a
    /// number, and any further ones are kept unread.
    pub fn parse(text: &str) -> Result<Self, ReceiptHandleError> {
        if text.len() > MAX_HANDLE_LEN {
            return Err(ReceiptHandleError::TooLong { len: text.len() });
        }
        let parts: Vec<&str> = text.split(' ').collect();
        if parts.len() < 8 {
            return Err(ReceiptHandleError::TooFewFields {
                handle: text.to_string(),
                found: parts.len(),
            });
        }
        let bad = |field: &'static str, value: &str, expected: &'static str| {
            ReceiptHandleError::BadField {
                handle: text.to_string(),
                field,
                value: value.to_string(),
                expected,
            }
        };
        let long = |i: usize, field: &'static str| {
            parts[i]
                .parse::<i64>()
                .map_err(|_| bad(field, parts[i], "a 64-bit integer"))
        };
        let int = |i: usize, field: &'static str| {
            parts[i]
                .parse::<i32>()
                .map_err(|_| bad(field, parts[i], "a 32-bit integer"))
        };
        let checkpoint_offset = long(0, "checkpoint offset")?;
        let pop_time = long(1, "pop time")?;
        let invisible_time = long(2, "invisible time")?;
        let revive_queue_id = int(3, "revive queue id")?;
        let retry =
            RetryFlag::parse(parts[4]).ok_or_else(|| bad("retry flag", parts[4], "0, 1 or 2"))?;
        let broker_name = parts[5];
        if broker_name.is_empty() {
            return Err(bad("broker name", broker_name, "a name"));
        }
        let fields = HandleFields {
            checkpoint_offset,
            pop_time,
            invisible_time,
            revive_queue_id,
            retry,
            broker_name: broker_name.to_string(),
            queue_id: int(6, "queue id")?,
            queue_offset: long(7, "queue offset")?,
            retry_generation: parts.get(8).and_then(|g| g.parse().ok()),
        };
        Ok(Self {
            text: text.to_string(),
            fields,
        })
    }

    /// A handle of `fields`, written as the brokers write it (eight fields, or nine with a
    /// retry generation). The broker name must be a non-empty name without whitespace.
    pub fn from_fields(fields: HandleFields) -> Result<Self, ReceiptHandleError> {
        if fields.broker_name.is_empty() || fields.broker_name.contains(char::is_whitespace) {
            return Err(ReceiptHandleError::BadField {
                handle: String::new(),
                field: "broker name",
                value: fields.broker_name,
                expected: "a name without spaces",
            });
        }
        let mut text = format!(
            "{} {} {} {} {} {} {} {}",
            fields.checkpoint_offset,
            fields.pop_time,
            fields.invisible_time,
            fields.revive_queue_id,
            fields.retry,
            fields.broker_name,
            fields.queue_id,
            fields.queue_offset
        );
        if let Some(generation) = fields.retry_generation {
            text.push_str(&format!(" {generation}"));
        }
        if text.len() > MAX_HANDLE_LEN {
            return Err(ReceiptHandleError::TooLong { len: text.len() });
        }
        Ok(Self { text, fields })
    }

    /// The handle as the broker wrote it (sent back unchanged).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its fields.
    pub fn fields(&self) -> &HandleFields {
        &self.fields
    }

    /// Whether it comes from an orderly pop (revive queue [`ORDERLY_REVIVE_QUEUE_ID`]).
    pub fn is_orderly(&self) -> bool {
        self.fields.revive_queue_id == ORDERLY_REVIVE_QUEUE_ID
    }

    /// When the message becomes visible again unless acknowledged (ms since the Unix epoch, on
    /// the broker's clock): pop time plus invisible time.
    pub fn visible_again_at(&self) -> i64 {
        self.fields
            .pop_time
            .saturating_add(self.fields.invisible_time)
    }
}

impl fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for ReceiptHandle {
    type Err = ReceiptHandleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn fields() -> HandleFields {
        HandleFields {
            checkpoint_offset: 100,
            pop_time: 1_700_000_000_000,
            invisible_time: 60_000,
            revive_queue_id: 2,
            retry: RetryFlag::Normal,
            broker_name: "broker-a".into(),
            queue_id: 3,
            queue_offset: 101,
            retry_generation: None,
        }
    }

    #[test]
    fn java_and_rust_broker_handles_are_read_field_by_field() {
        let java = ReceiptHandle::parse("100 1700000000000 60000 2 0 broker-a 3 101").unwrap();
        assert_eq!(java.fields(), &fields());
        let rust = ReceiptHandle::parse("5 1700000000000 60000 2 1 broker-a 0 5 0").unwrap();
        assert_eq!(
            rust.fields(),
            &HandleFields {
                checkpoint_offset: 5,
                retry: RetryFlag::V1,
                queue_id: 0,
                queue_offset: 5,
                retry_generation: Some(0),
                ..fields()
            }
        );
        assert_eq!(rust.as_str(), "5 1700000000000 60000 2 1 broker-a 0 5 0");
        let orderly = ReceiptHandle::parse("7 1 2 999 0 b 0 7").unwrap();
        assert!(orderly.is_orderly());
    }

    #[test]
    fn extra_fields_are_kept_verbatim() {
        let text = "5 1 2 3 2 broker-a 0 5 x future";
        let handle = ReceiptHandle::parse(text).unwrap();
        assert_eq!(handle.fields().retry, RetryFlag::V2);
        assert_eq!(handle.fields().retry_generation, None, "not a number");
        assert_eq!(handle.to_string(), text);
    }

    #[test]
    fn written_handles_read_back() {
        let handle = ReceiptHandle::from_fields(fields()).unwrap();
        assert_eq!(
            handle.as_str(),
            "100 1700000000000 60000 2 0 broker-a 3 101"
        );
        let with_generation = HandleFields {
            retry: RetryFlag::V1,
            retry_generation: Some(4),
            ..fields()
        };
        let handle = ReceiptHandle::from_fields(with_generation.clone()).unwrap();
        assert_eq!(
            handle.as_str(),
            "100 1700000000000 60000 2 1 broker-a 3 101 4"
        );
        assert_eq!(handle.as_str().parse::<ReceiptHandle>().unwrap(), handle);
        for name in ["", "broker a", "b\t"] {
            let bad = HandleFields {
                broker_name: name.into(),
                ..fields()
            };
            assert!(
                matches!(
                    ReceiptHandle::from_fields(bad),
                    Err(ReceiptHandleError::BadField {
                        field: "broker name",
                        ..
                    })
                ),
                "{name:?}"
            );
        }
    }

    #[test]
    fn malformed_handles_are_typed_errors() {
        let cases: &[(&str, &str)] = &[
            ("", "fields"),
            ("1 2 3 4 0 b 6", "fields"),
            ("x 2 3 4 0 b 6 7", "checkpoint offset"),
            ("1 x 3 4 0 b 6 7", "pop time"),
            ("1 2 x 4 0 b 6 7", "invisible time"),
            ("1 2 3 99999999999 0 b 6 7", "revive queue id"),
            ("1 2 3 4 3 b 6 7", "retry flag"),
            ("1 2 3 4 0  6 7", "broker name"),
            ("1 2 3 4 0 b x 7", "queue id"),
            ("1 2 3 4 0 b 6 7.5", "queue offset"),
            ("1  2 3 4 0 b 6 7", "pop time"),
        ];
        for (text, field) in cases {
            let err = ReceiptHandle::parse(text).unwrap_err();
            let matched = match &err {
                ReceiptHandleError::TooFewFields { .. } => *field == "fields",
                ReceiptHandleError::BadField { field: f, .. } => f == field,
                ReceiptHandleError::TooLong { .. } => false,
            };
            assert!(matched, "{text:?}: {err}");
        }
        let long = format!("1 2 3 4 0 b 6 7 {}", "9".repeat(MAX_HANDLE_LEN));
        assert!(matches!(
            ReceiptHandle::parse(&long),
            Err(ReceiptHandleError::TooLong { .. })
        ));
    }

    #[test]
    fn retry_flags_name_the_topics_the_brokers_use() {
        assert_eq!(RetryFlag::of_topic("T"), RetryFlag::Normal);
        assert_eq!(RetryFlag::of_topic("%RETRY%G"), RetryFlag::V1);
        assert_eq!(RetryFlag::of_topic("%RETRY%G_T"), RetryFlag::V1);
        assert_eq!(RetryFlag::of_topic("%RETRY%G+T"), RetryFlag::V2);
        assert_eq!(RetryFlag::V1.real_topic("NS%T", "NS%G"), "%RETRY%NS%G_NS%T");
        for flag in [RetryFlag::Normal, RetryFlag::V1, RetryFlag::V2] {
            assert_eq!(RetryFlag::parse(flag.as_str()), Some(flag));
        }
        assert_eq!(RetryFlag::parse("01"), None);
    }

    proptest! {
        /// Whatever the text, parsing never panics, and what parses is kept verbatim.
        #[test]
        fn parsing_never_panics(text in "[0-9a-z -]{0,80}") {
            if let Ok(handle) = ReceiptHandle::parse(&text) {
                prop_assert_eq!(handle.as_str(), text.as_str());
            }
        }

        /// Every handle written reads back to its fields.
        #[test]
        fn written_handles_round_trip(
            checkpoint_offset in any::<i64>(),
            pop_time in any::<i64>(),
            invisible_time in any::<i64>(),
            revive_queue_id in any::<i32>(),
            retry in 0u8..3,
            queue_id in any::<i32>(),
            queue_offset in any::<i64>(),
            retry_generation in proptest::option::of(any::<u64>()),
        ) {
            let fields = HandleFields {
                checkpoint_offset,
                pop_time,
                invisible_time,
                revive_queue_id,
                retry: RetryFlag::parse(&retry.to_string()).unwrap(),
                broker_name: "broker-a".into(),
                queue_id,
                queue_offset,
                retry_generation,
            };
            let handle = ReceiptHandle::from_fields(fields.clone()).unwrap();
            let read = ReceiptHandle::parse(handle.as_str()).unwrap();
            prop_assert_eq!(read.fields(), &fields);
        }
    }
}
