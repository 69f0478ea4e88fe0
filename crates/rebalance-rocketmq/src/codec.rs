//! [`RemotingCodec`]: the remoting frame as a tokio-util codec.
//!
//! ```text
//! int32 BE  total length = 4 + header length + body length (not counting itself)
//! int32 BE  (serialize type << 24) | header length         serialize type 0 = JSON
//! header    JSON, UTF-8
//! body      raw bytes
//! ```
//!
//! The decoder never buffers more than one frame of at most `max_frame_len` bytes, and every
//! malformed input becomes a [`CodecError`], never a panic.

use std::collections::{BTreeMap, HashMap};

use bytes::{Buf, BufMut, BytesMut};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder};

use crate::command::RemotingCommand;

/// The default largest frame (16 MiB, as the Java client's `frameMaxLength`).
pub const DEFAULT_MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

/// The serialization type of JSON headers.
pub const SERIALIZE_JSON: u8 = 0;

/// The largest header length the 24-bit length field can express.
const MAX_HEADER_LEN: usize = 0x00FF_FFFF;

/// Why bytes could not be turned into a frame, or a frame into bytes.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The frame's announced length is over the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The announced (or, when encoding, the needed) length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The announced length cannot even hold the header-length word.
    #[error("frame length {0} is too short to hold a header-length word")]
    FrameTooShort(usize),
    /// The header length does not fit in the frame.
    #[error("header length {header_len} does not fit in a frame of {frame_len} bytes")]
    HeaderLengthOutOfRange {
        /// The announced header length.
        header_len: usize,
        /// The bytes left in the frame after the header-length word.
        frame_len: usize,
    },
    /// A serialization type other than JSON (0).
    #[error("unsupported header serialization type {0} (only JSON, 0, is supported)")]
    UnsupportedSerialization(u8),
    /// The header is not a JSON remoting header.
    #[error("header is not a JSON remoting header: {0}")]
    BadHeader(String),
    /// The stream ended in the middle of a frame.
    #[error("stream ended in the middle of a frame ({received} of {expected} bytes)")]
    Truncated {
        /// The bytes received.
        received: usize,
        /// The bytes the frame needs (at least).
        expected: usize,
    },
    /// The header could not be serialized.
    #[error("header could not be encoded: {0}")]
    Encode(String),
    /// Reading or writing the stream failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The remoting frame codec, with a maximum frame size.
///
/// ```
/// use bytes::BytesMut;
/// use tokio_util::codec::{Decoder, Encoder};
/// use rebalance_rocketmq::{RemotingCodec, RemotingCommand};
///
/// let mut codec = RemotingCodec::default();
/// let mut buf = BytesMut::new();
/// let request = RemotingCommand::request(105).with_ext("topic", "T");
/// codec.encode(request.clone(), &mut buf).unwrap();
/// assert_eq!(codec.decode(&mut buf).unwrap(), Some(request));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RemotingCodec {
    max_frame_len: usize,
}

impl Default for RemotingCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl RemotingCodec {
    /// A codec refusing frames whose total length (after the length prefix) exceeds
    /// `max_frame_len`.
    pub fn new(max_frame_len: usize) -> Self {
        Self { max_frame_len }
    }

    /// The largest frame accepted.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }
}

/// The header as it is read: lenient about extra keys, missing optional keys and non-string
/// `extFields` values (kept as their JSON text).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeaderIn {
    code: i32,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    version: i32,
    #[serde(default)]
    opaque: i32,
    #[serde(default)]
    flag: i32,
    #[serde(default)]
    remark: Option<String>,
    #[serde(default)]
    ext_fields: Option<HashMap<String, serde_json::Value>>,
}

/// The header as it is written: every field the servers require.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeaderOut<'a> {
    code: i32,
    language: &'a str,
    version: i32,
    opaque: i32,
    flag: i32,
    remark: Option<&'a str>,
    ext_fields: &'a BTreeMap<String, String>,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type_current_rpc: &'static str,
}

fn ext_value_to_string(value: serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

/// Parses a JSON header and attaches the body.
fn parse_header(header: &[u8], body: bytes::Bytes) -> Result<RemotingCommand, CodecError> {
    let h: HeaderIn =
        serde_json::from_slice(header).map_err(|e| CodecError::BadHeader(e.to_string()))?;
    let ext_fields = h
        .ext_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| ext_value_to_string(v).map(|v| (k, v)))
        .collect();
    Ok(RemotingCommand {
        code: h.code,
        language: h.language.unwrap_or_default(),
        version: h.version,
        opaque: h.opaque,
        flag: h.flag,
        remark: h.remark,
        ext_fields,
        body,
    })
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        let Some(prefix) = src.get(..4) else {
            return Ok(None);
        };
        let total = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if total > self.max_frame_len {
            return Err(CodecError::FrameTooLarge {
                len: total,
                max: self.max_frame_len,
            });
        }
        if total < 4 {
            return Err(CodecError::FrameTooShort(total));
        }
        let needed = 4 + total;
        if src.len() < needed {
            // Bounded by the frame limit checked above.
            src.reserve(needed - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(needed);
        frame.advance(4);
        let word = frame.get_u32();
        let serialize_type = (word >> 24) as u8;
        let header_len = (word & MAX_HEADER_LEN as u32) as usize;
        if serialize_type != SERIALIZE_JSON {
            return Err(CodecError::UnsupportedSerialization(serialize_type));
        }
        if header_len > frame.len() {
            return Err(CodecError::HeaderLengthOutOfRange {
                header_len,
                frame_len: frame.len(),
            });
        }
        let header = frame.split_to(header_len);
        parse_header(&header, frame.freeze()).map(Some)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        match self.decode(buf)? {
            Some(frame) => Ok(Some(frame)),
            None if buf.is_empty() => Ok(None),
            None => {
                let expected = match buf.get(..4) {
                    Some(p) => 4 + u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize,
                    None => 4,
                };
                let received = buf.len();
                buf.clear();
                Err(CodecError::Truncated { received, expected })
            }
        }
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = CodecError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        encode_into(self.max_frame_len, &item, dst)
    }
}

/// Writes one frame; nothing is written when the command cannot be encoded.
fn encode_into(max: usize, cmd: &RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
    let header = serde_json::to_vec(&HeaderOut {
        code: cmd.code,
        language: &cmd.language,
        version: cmd.version,
        opaque: cmd.opaque,
        flag: cmd.flag,
        remark: cmd.remark.as_deref(),
        ext_fields: &cmd.ext_fields,
        serialize_type_current_rpc: "JSON",
    })
    .map_err(|e| CodecError::Encode(e.to_string()))?;
    if header.len() > MAX_HEADER_LEN {
        return Err(CodecError::Encode(format!(
            "header of {} bytes exceeds the 24-bit length field",
            header.len()
        )));
    }
    let total = 4 + header.len() + cmd.body.len();
    if total > max || u32::try_from(total).is_err() {
        return Err(CodecError::FrameTooLarge { len: total, max });
    }
    dst.reserve(4 + total);
    dst.put_u32(total as u32);
    dst.put_u32((u32::from(SERIALIZE_JSON) << 24) | header.len() as u32);
    dst.put_slice(&header);
    dst.put_slice(&cmd.body);
    Ok(())
}

#[cfg(test)]
mod tests;
