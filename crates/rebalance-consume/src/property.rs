//! Names of the message properties the consume layer reads or writes (RocketMQ's
//! `MessageConst`), so that sources and the consume layer agree on them.

/// The message's tag (one per message in RocketMQ).
pub const TAGS: &str = "TAGS";
/// The message's keys, separated by [`KEY_SEPARATOR`].
pub const KEYS: &str = "KEYS";
/// What separates keys in [`KEYS`].
pub const KEY_SEPARATOR: &str = " ";
/// The id the producer gave the message (RocketMQ's client message id); a message's id when
/// present.
pub const UNIQ_KEY: &str = "UNIQ_KEY";
/// The topic a message sent back for redelivery came from (set on messages of a retry topic).
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// The id of the message that a redelivered one is a copy of.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// How many times a message sent back as a normal message has been consumed before.
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// The number of redeliveries after which a message goes to the group's dead-letter topic.
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
/// The delay level a message is to be delivered after.
pub const DELAY_TIME_LEVEL: &str = "DELAY";
/// When the consume layer handed the message to the application (ms since the Unix epoch).
pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
/// The queue's smallest offset when the message was pulled.
pub const MIN_OFFSET: &str = "MIN_OFFSET";
/// The queue's largest offset when the message was pulled.
pub const MAX_OFFSET: &str = "MAX_OFFSET";
/// A popped message's receipt handle, which acknowledges it (RocketMQ's `POP_CK`; opaque to
/// the consume layer, see [`PopSource`](crate::PopSource)).
pub const POP_CK: &str = "POP_CK";
