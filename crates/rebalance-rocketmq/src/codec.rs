//! [`RemotingCodec`]: the remoting frame as a tokio-util codec.
//!
//! ```text
//! int32 BE  total length = 4 + header length + body length (not counting itself)
//! int32 BE  (serialize type << 24) | header length         serialize type 0 = JSON
//! header    JSON, UTF-8
//! body      raw bytes
//! ```
//!
//! The decoder never buffers more than one frame of at most `max_frame_len` bytes (itself at
//! most [`MAX_FRAME_LEN`]), grows its buffer with the bytes that arrive rather than with what a
//! length prefix announces, and turns every malformed input into a [`CodecError`], never a
//! panic.
//!
//! Only JSON headers are read. A well-framed frame in another serialization (RocketMQ's binary
//! one, type 1, which a server configured for it sends) is not garbage: [`FrameDecoder`] hands it
//! over as an [`UnsupportedFrame`], with the `code`, `opaque` and `flag` of a binary header, so
//! that a connection can fail the one request it answers, or skip a push, and keep going.

use std::collections::{BTreeMap, HashMap};

use bytes::{Buf, BufMut, BytesMut};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder};

use crate::command::RemotingCommand;

/// The default largest frame after the length prefix: 16 MiB minus the 4 bytes of the prefix,
/// since Java's `frameMaxLength` (16 MiB, in Netty's `LengthFieldBasedFrameDecoder`) counts
/// the prefix too. A request 1 to 4 bytes longer would be refused by a Java server, which
/// closes the connection instead of answering.
pub const DEFAULT_MAX_FRAME_LEN: usize = 16 * 1024 * 1024 - 4;

/// The largest `max_frame_len` a codec takes, whatever it is asked: what a length prefix can
/// announce, less the prefix itself (so that a frame's length never overflows).
pub const MAX_FRAME_LEN: usize = (u32::MAX - 4) as usize;

/// How far ahead of the bytes received the decoder reserves room for a frame still arriving:
/// a prefix announcing a large frame makes the buffer grow as its bytes come, not at once.
const RESERVE_AHEAD: usize = 1024 * 1024;

/// The serialization type of JSON headers.
pub const SERIALIZE_JSON: u8 = 0;

/// The serialization type of RocketMQ's binary headers (not read, see [`UnsupportedFrame`]).
pub const SERIALIZE_ROCKETMQ: u8 = 1;

/// The fixed start of a binary header: code (i16), language (u8), version (i16), opaque (i32),
/// flag (i32), all big-endian.
const BINARY_HEADER_START: usize = 13;

/// The largest header length the 24-bit length field can express.
const MAX_HEADER_LEN: usize = 0x00FF_FFFF;

/// Why bytes could not be turned into a frame, or a frame into bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The frame's announced length is over the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The announced (or, when encoding, the needed) length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The first bytes are not a frame length but the start of another protocol's answer (an
    /// HTTP status line, a TLS record, other text): the peer is not a RocketMQ server.
    #[error("the server does not speak RocketMQ remoting (it answered like {0})")]
    ForeignProtocol(String),
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
    /// `max_frame_len`, taken as at most [`MAX_FRAME_LEN`].
    pub fn new(max_frame_len: usize) -> Self {
        Self {
            max_frame_len: max_frame_len.min(MAX_FRAME_LEN),
        }
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

/// One frame off the wire, as [`FrameDecoder`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A frame with a JSON header.
    Command(RemotingCommand),
    /// A well-framed frame in a serialization this codec does not read, consumed whole.
    Unsupported(UnsupportedFrame),
}

/// What can be read of a frame whose header is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsupportedFrame {
    /// The header's serialization type (not [`SERIALIZE_JSON`]).
    pub serialize_type: u8,
    /// For a binary header ([`SERIALIZE_ROCKETMQ`]) long enough to hold them: its code, opaque
    /// and flag. `None` for other types, whose layout is unknown.
    pub routing: Option<FrameRouting>,
}

/// The fields of a header that tell what a frame is and which request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRouting {
    /// The request or response code.
    pub code: i32,
    /// The request id a response answers.
    pub opaque: i32,
    /// The flag bits ([`FLAG_RESPONSE`](crate::command::FLAG_RESPONSE),
    /// [`FLAG_ONEWAY`](crate::command::FLAG_ONEWAY)).
    pub flag: i32,
}

impl FrameRouting {
    /// Whether the frame is a response.
    pub fn is_response(&self) -> bool {
        self.flag & crate::command::FLAG_RESPONSE != 0
    }

    /// Whether the frame is a one-way request (nothing to answer).
    pub fn is_oneway(&self) -> bool {
        self.flag & crate::command::FLAG_ONEWAY != 0
    }
}

/// The code, opaque and flag at the start of a binary header, if it is long enough.
fn binary_routing(header: &[u8]) -> Option<FrameRouting> {
    let start: &[u8; BINARY_HEADER_START] = header.get(..BINARY_HEADER_START)?.try_into().ok()?;
    let int =
        |at: usize| i32::from_be_bytes([start[at], start[at + 1], start[at + 2], start[at + 3]]);
    Some(FrameRouting {
        code: i32::from(i16::from_be_bytes([start[0], start[1]])),
        opaque: int(5),
        flag: int(9),
    })
}

/// What a length prefix too large to be a frame's looks like, when it looks like the start of
/// another protocol: an HTTP status line, a TLS record (a server expecting an encrypted
/// connection answers a plain request with an alert, 0x15, or a handshake, 0x16, of version
/// 3.x), or printable text.
fn foreign_protocol(prefix: [u8; 4]) -> Option<String> {
    if prefix == *b"HTTP" {
        return Some("HTTP".into());
    }
    if matches!(prefix[0], 0x15 | 0x16) && prefix[1] == 0x03 && prefix[2] <= 0x04 {
        return Some("TLS: it expects an encrypted connection".into());
    }
    if prefix.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        let text: String = prefix.iter().map(|&b| char::from(b)).collect();
        return Some(format!("text, starting \"{}\"", text.escape_default()));
    }
    None
}

impl RemotingCodec {
    /// Decodes the next frame, JSON or not (see [`Frame`]). Errors are what cannot be framed at
    /// all; after one, the stream cannot be trusted.
    pub fn decode_frame(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        let Some(prefix) = src.get(..4) else {
            return Ok(None);
        };
        let total = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if total > self.max_frame_len {
            if let Some(like) = foreign_protocol([prefix[0], prefix[1], prefix[2], prefix[3]]) {
                return Err(CodecError::ForeignProtocol(like));
            }
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
            // Room for what is missing, up to RESERVE_AHEAD: a prefix alone does not allocate
            // its frame's length (the reader grows the buffer as the bytes come).
            src.reserve((needed - src.len()).min(RESERVE_AHEAD));
            return Ok(None);
        }
        let mut frame = src.split_to(needed);
        frame.advance(4);
        let word = frame.get_u32();
        let serialize_type = (word >> 24) as u8;
        let header_len = (word & MAX_HEADER_LEN as u32) as usize;
        if header_len > frame.len() {
            return Err(CodecError::HeaderLengthOutOfRange {
                header_len,
                frame_len: frame.len(),
            });
        }
        let header = frame.split_to(header_len);
        if serialize_type != SERIALIZE_JSON {
            let routing = (serialize_type == SERIALIZE_ROCKETMQ)
                .then(|| binary_routing(&header))
                .flatten();
            return Ok(Some(Frame::Unsupported(UnsupportedFrame {
                serialize_type,
                routing,
            })));
        }
        parse_header(&header, frame.freeze()).map(|c| Some(Frame::Command(c)))
    }

    /// [`decode_frame`](Self::decode_frame) at the end of the stream: bytes left over that do
    /// not make a frame are [`CodecError::Truncated`].
    pub fn decode_frame_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        match self.decode_frame(buf)? {
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

/// JSON commands only: a frame in another serialization is
/// [`CodecError::UnsupportedSerialization`]. Use [`FrameDecoder`] to get past such frames.
impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        json_only(self.decode_frame(src))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        json_only(self.decode_frame_eof(buf))
    }
}

fn json_only(
    frame: Result<Option<Frame>, CodecError>,
) -> Result<Option<RemotingCommand>, CodecError> {
    match frame? {
        None => Ok(None),
        Some(Frame::Command(command)) => Ok(Some(command)),
        Some(Frame::Unsupported(u)) => Err(CodecError::UnsupportedSerialization(u.serialize_type)),
    }
}

/// A decoder giving every well-framed frame as a [`Frame`], so that a frame in an unsupported
/// serialization does not end the stream.
///
/// ```
/// use bytes::{BufMut, BytesMut};
/// use tokio_util::codec::Decoder;
/// use rebalance_rocketmq::codec::{Frame, FrameDecoder, FrameRouting, SERIALIZE_ROCKETMQ};
///
/// // A binary (type 1) header: code 0, language, version, opaque 7, flag 1 (a response), then
/// // empty remark and extFields.
/// let header = [0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
/// let mut buf = BytesMut::new();
/// buf.put_u32(4 + header.len() as u32);
/// buf.put_u32(u32::from(SERIALIZE_ROCKETMQ) << 24 | header.len() as u32);
/// buf.put_slice(&header);
/// let Some(Frame::Unsupported(frame)) = FrameDecoder::default().decode(&mut buf)? else {
///     panic!("not skipped");
/// };
/// assert_eq!(frame.routing, Some(FrameRouting { code: 0, opaque: 7, flag: 1 }));
/// assert!(buf.is_empty());
/// # Ok::<(), rebalance_rocketmq::CodecError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameDecoder {
    codec: RemotingCodec,
}

impl FrameDecoder {
    /// A decoder with the frame limit of `codec`.
    pub fn new(codec: RemotingCodec) -> Self {
        Self { codec }
    }
}

impl Decoder for FrameDecoder {
    type Item = Frame;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        self.codec.decode_frame(src)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        self.codec.decode_frame_eof(buf)
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
