//! Stored messages as a broker returns them in an answer to PULL_MESSAGE: the record layout
//! ([`decode`]), compressed bodies ([`compression`]), the properties string ([`properties`])
//! and message ids ([`id`]).
//!
//! Everything here reads bytes from outside: a malformed or truncated record is a
//! [`DecodeError`], never a panic, and no length read from the bytes is allocated before it
//! is checked against the bytes left (or, for a decompressed body, against
//! [`DecodeLimits`]).

pub mod compression;
pub mod decode;
pub mod id;
pub mod properties;

#[cfg(test)]
pub(crate) mod tests;

pub use decode::{
    DecodeError, DecodeLimits, DecodedPrefix, DecodedRecord, Host, Oversized, StoredMessage,
    decode_batch, decode_each, decode_prefix,
};
pub use id::{offset_msg_id, unique_id};
