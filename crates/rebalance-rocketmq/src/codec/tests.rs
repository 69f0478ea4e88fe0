use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use super::*;
use crate::command::{FLAG_ONEWAY, FLAG_RESPONSE};

fn frame(serialize_type: u8, header: &[u8], body: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_u32((4 + header.len() + body.len()) as u32);
    buf.put_u32((u32::from(serialize_type) << 24) | header.len() as u32);
    buf.put_slice(header);
    buf.put_slice(body);
    buf
}

fn encode(cmd: &RemotingCommand) -> BytesMut {
    let mut buf = BytesMut::new();
    RemotingCodec::default()
        .encode(cmd.clone(), &mut buf)
        .unwrap();
    buf
}

fn sample() -> RemotingCommand {
    RemotingCommand::request(38)
        .with_ext("consumerGroup", "G")
        .with_ext("queueId", 3)
        .with_body(Bytes::from_static(b"{\"x\":1}"))
}

#[test]
fn writes_the_layout_and_every_required_header_field() {
    let buf = encode(&RemotingCommand {
        opaque: 9,
        ..sample()
    });
    let total = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
    assert_eq!(total, buf.len() - 4);
    let word = u32::from_be_bytes(buf[4..8].try_into().unwrap());
    assert_eq!(word >> 24, 0, "JSON serialization type");
    let header_len = (word & 0xFF_FFFF) as usize;
    assert_eq!(&buf[8 + header_len..], b"{\"x\":1}");
    let header: serde_json::Value = serde_json::from_slice(&buf[8..8 + header_len]).unwrap();
    assert_eq!(header["code"], 38);
    assert_eq!(header["language"], "RUST");
    assert_eq!(header["version"], 475);
    assert_eq!(header["opaque"], 9);
    assert_eq!(header["flag"], 0);
    assert_eq!(header["remark"], serde_json::Value::Null);
    assert_eq!(header["serializeTypeCurrentRPC"], "JSON");
    // extFields values are strings, even numbers.
    assert_eq!(
        header["extFields"],
        serde_json::json!({"consumerGroup": "G", "queueId": "3"})
    );
}

#[test]
fn round_trips_and_decodes_back_to_back_frames_in_order() {
    let a = sample();
    let b = RemotingCommand::response(22, 4, Some("not found".into()));
    let mut buf = encode(&a);
    buf.extend_from_slice(&encode(&b));
    let mut codec = RemotingCodec::default();
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(a));
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(b));
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert!(buf.is_empty());
}

#[test]
fn byte_by_byte_arrival_gives_the_same_frame() {
    let cmd = sample();
    let whole = encode(&cmd);
    let mut codec = RemotingCodec::default();
    let mut buf = BytesMut::new();
    let mut got = None;
    for (i, byte) in whole.iter().enumerate() {
        buf.put_u8(*byte);
        let decoded = codec.decode(&mut buf).unwrap();
        if i + 1 < whole.len() {
            assert!(decoded.is_none(), "frame complete too early at byte {i}");
        } else {
            got = decoded;
        }
    }
    assert_eq!(got, Some(cmd));
}

#[test]
fn reads_what_servers_send_leniently() {
    // Null extFields, a numeric extFields value, extra keys, no serializeTypeCurrentRPC.
    let header = br#"{"code":0,"extFields":null,"flag":1,"language":"JAVA","opaque":5,"remark":null,"serializeTypeCurrentRPC":"JSON","version":475,"extra":[1]}"#;
    let cmd = RemotingCodec::default()
        .decode(&mut frame(0, header, b""))
        .unwrap()
        .unwrap();
    assert!(cmd.is_response());
    assert_eq!(
        (cmd.code, cmd.opaque, cmd.language.as_str()),
        (0, 5, "JAVA")
    );
    assert!(cmd.ext_fields.is_empty());

    let header =
        br#"{"code":0,"flag":1,"opaque":6,"extFields":{"offset":42,"ok":true,"s":"x","n":null}}"#;
    let cmd = RemotingCodec::default()
        .decode(&mut frame(0, header, b""))
        .unwrap()
        .unwrap();
    assert_eq!(cmd.ext("offset"), Some("42"));
    assert_eq!(cmd.ext("ok"), Some("true"));
    assert_eq!(cmd.ext("s"), Some("x"));
    assert_eq!(cmd.ext("n"), None);
}

#[test]
fn refuses_an_oversized_frame_before_buffering_it() {
    let mut codec = RemotingCodec::new(1024);
    let mut buf = BytesMut::new();
    buf.put_u32(1025);
    buf.put_u32(10);
    let err = codec.decode(&mut buf).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::FrameTooLarge {
                len: 1025,
                max: 1024
            }
        ),
        "{err}"
    );
    assert!(
        buf.capacity() < 4096,
        "no room reserved for the oversized frame"
    );
}

/// `sample()` with a body sized so that its frame's total length (after the length prefix) is
/// `total`.
fn sample_of_total(total: usize) -> RemotingCommand {
    let bare = RemotingCommand {
        body: Bytes::new(),
        ..sample()
    };
    let overhead = encode(&bare).len() - 4;
    bare.with_body(vec![b'x'; total - overhead])
}

#[test]
fn a_frame_at_the_limit_passes_both_ways_and_one_byte_more_is_refused_both_ways() {
    let mut codec = RemotingCodec::new(256);
    assert_eq!(codec.max_frame_len(), 256);
    let at_limit = sample_of_total(256);
    let mut buf = BytesMut::new();
    codec.encode(at_limit.clone(), &mut buf).unwrap();
    assert_eq!(buf.len(), 4 + 256);
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(at_limit));

    let over = sample_of_total(257);
    let err = codec.encode(over.clone(), &mut buf).unwrap_err();
    assert!(
        matches!(err, CodecError::FrameTooLarge { len: 257, max: 256 }),
        "{err}"
    );
    assert!(buf.is_empty());
    let err = codec.decode(&mut encode(&over)).unwrap_err();
    assert!(
        matches!(err, CodecError::FrameTooLarge { len: 257, max: 256 }),
        "{err}"
    );
}

#[test]
fn the_default_limit_is_the_java_servers_16_mib_prefix_included() {
    // Java: LengthFieldBasedFrameDecoder(16 MiB, 0, 4, 0, 4) refuses prefix + total > 16 MiB.
    const LIMIT: usize = 16 * 1024 * 1024 - 4;
    let mut codec = RemotingCodec::default();
    assert_eq!(codec.max_frame_len(), LIMIT);
    // A frame announcing exactly the limit is awaited; one byte more is refused at once.
    let mut buf = BytesMut::new();
    buf.put_u32(LIMIT as u32);
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    let mut buf = BytesMut::new();
    buf.put_u32(LIMIT as u32 + 1);
    let err = codec.decode(&mut buf).unwrap_err();
    assert!(
        matches!(err, CodecError::FrameTooLarge { len, max: LIMIT } if len == LIMIT + 1),
        "{err}"
    );
    // What the encoder writes is never more than a Java server takes: 16 MiB on the wire.
    let header_and_prefix = {
        let mut buf = BytesMut::new();
        codec
            .encode(RemotingCommand::request(15), &mut buf)
            .unwrap();
        buf.len()
    };
    let fits = 16 * 1024 * 1024 - header_and_prefix;
    let mut buf = BytesMut::new();
    let cmd = RemotingCommand::request(15).with_body(vec![b'x'; fits]);
    codec.encode(cmd, &mut buf).unwrap();
    assert_eq!(buf.len(), 16 * 1024 * 1024);
    let mut buf = BytesMut::new();
    let cmd = RemotingCommand::request(15).with_body(vec![b'x'; fits + 1]);
    assert!(codec.encode(cmd, &mut buf).is_err());
    assert!(buf.is_empty());
}

#[test]
fn encoding_an_oversized_command_fails_and_writes_nothing() {
    let mut codec = RemotingCodec::new(64);
    let mut buf = BytesMut::new();
    let cmd = RemotingCommand::request(15).with_body(vec![b'x'; 100]);
    let err = codec.encode(cmd, &mut buf).unwrap_err();
    assert!(
        matches!(err, CodecError::FrameTooLarge { max: 64, .. }),
        "{err}"
    );
    assert!(buf.is_empty());
}

#[test]
fn truncated_frames_are_typed_errors_at_end_of_stream() {
    let whole = encode(&sample());
    let mut codec = RemotingCodec::default();
    let mut partial = BytesMut::from(&whole[..whole.len() - 3]);
    let err = codec.decode_eof(&mut partial).unwrap_err();
    assert!(
        matches!(err, CodecError::Truncated { received, expected } if received == whole.len() - 3 && expected == whole.len()),
        "{err}"
    );
    let mut prefix_only = BytesMut::from(&whole[..2]);
    let err = codec.decode_eof(&mut prefix_only).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::Truncated {
                received: 2,
                expected: 4
            }
        ),
        "{err}"
    );
    assert_eq!(codec.decode_eof(&mut BytesMut::new()).unwrap(), None);
}

#[test]
fn non_json_headers_and_other_serialization_types_are_refused() {
    let mut codec = RemotingCodec::default();
    let err = codec.decode(&mut frame(0, b"not json", b"")).unwrap_err();
    assert!(matches!(err, CodecError::BadHeader(_)), "{err}");
    // JSON, but not a remoting header (no code).
    let err = codec.decode(&mut frame(0, b"{}", b"")).unwrap_err();
    assert!(matches!(err, CodecError::BadHeader(_)), "{err}");
    // A non-string remark.
    let err = codec
        .decode(&mut frame(0, br#"{"code":0,"remark":5}"#, b""))
        .unwrap_err();
    assert!(matches!(err, CodecError::BadHeader(_)), "{err}");
    // RocketMQ's binary header format (1) is not supported.
    let err = codec
        .decode(&mut frame(1, br#"{"code":0}"#, b""))
        .unwrap_err();
    assert!(
        matches!(err, CodecError::UnsupportedSerialization(1)),
        "{err}"
    );
}

#[test]
fn frames_in_other_serializations_are_framed_and_skipped_whole() {
    // A binary header: code 40, language, version, opaque 0x12345678 (four different bytes,
    // each read in its place), flag 2 (one-way), remark and extFields lengths (0), then a body.
    let mut binary = vec![0, 40, 0, 1, 219];
    binary.extend_from_slice(&0x1234_5678i32.to_be_bytes());
    binary.extend_from_slice(&FLAG_ONEWAY.to_be_bytes());
    binary.extend_from_slice(&[0; 8]);
    let mut buf = frame(SERIALIZE_ROCKETMQ, &binary, b"body");
    buf.extend_from_slice(&frame(SERIALIZE_ROCKETMQ, &[0, 1, 2], b"")); // too short to read
    buf.extend_from_slice(&frame(7, b"???", b"x")); // a type of unknown layout
    buf.extend_from_slice(&encode(&sample()));
    let mut codec = RemotingCodec::default();
    let routing = FrameRouting {
        code: 40,
        opaque: 0x1234_5678,
        flag: FLAG_ONEWAY,
    };
    assert!(routing.is_oneway() && !routing.is_response());
    let unsupported = |serialize_type, routing| {
        Some(Frame::Unsupported(UnsupportedFrame {
            serialize_type,
            routing,
        }))
    };
    assert_eq!(
        codec.decode_frame(&mut buf).unwrap(),
        unsupported(1, Some(routing))
    );
    assert_eq!(codec.decode_frame(&mut buf).unwrap(), unsupported(1, None));
    assert_eq!(codec.decode_frame(&mut buf).unwrap(), unsupported(7, None));
    // The JSON frame after them is intact.
    assert_eq!(
        codec.decode_frame(&mut buf).unwrap(),
        Some(Frame::Command(sample()))
    );
    assert!(buf.is_empty());
    // Through FrameDecoder, the same; a header length beyond the frame is still garbage.
    let mut decoder = FrameDecoder::new(codec);
    let mut bad = BytesMut::new();
    bad.put_u32(8);
    bad.put_u32((1 << 24) | 100);
    bad.put_u32(0);
    assert!(matches!(
        decoder.decode(&mut bad).unwrap_err(),
        CodecError::HeaderLengthOutOfRange { .. }
    ));
    // A response code is read as a signed 16-bit number.
    let mut negative = vec![0xFF, 0xFE, 0, 0, 0];
    negative.extend_from_slice(&5i32.to_be_bytes());
    negative.extend_from_slice(&FLAG_RESPONSE.to_be_bytes());
    assert_eq!(
        decoder.decode_eof(&mut frame(1, &negative, b"")).unwrap(),
        unsupported(
            1,
            Some(FrameRouting {
                code: -2,
                opaque: 5,
                flag: FLAG_RESPONSE
            })
        )
    );
}

#[test]
fn the_smallest_frame_is_a_header_length_word_and_nothing_else() {
    // Total length 4: an empty header and no body. It frames; what it holds is judged after.
    let mut buf = frame(7, b"", b"");
    buf.extend_from_slice(&frame(SERIALIZE_ROCKETMQ, b"", b""));
    buf.extend_from_slice(&frame(SERIALIZE_JSON, b"", b""));
    assert_eq!(buf.len(), 3 * 8);
    let mut codec = RemotingCodec::default();
    for serialize_type in [7, SERIALIZE_ROCKETMQ] {
        assert_eq!(
            codec.decode_frame(&mut buf).unwrap(),
            Some(Frame::Unsupported(UnsupportedFrame {
                serialize_type,
                routing: None
            }))
        );
    }
    let err = codec.decode_frame(&mut buf).unwrap_err();
    assert!(matches!(err, CodecError::BadHeader(_)), "{err}");
    assert!(buf.is_empty());
}

#[test]
fn impossible_lengths_are_refused() {
    let mut codec = RemotingCodec::default();
    let mut buf = BytesMut::new();
    buf.put_u32(3);
    buf.put_slice(b"abc");
    assert!(matches!(
        codec.decode(&mut buf).unwrap_err(),
        CodecError::FrameTooShort(3)
    ));
    let mut buf = BytesMut::new();
    buf.put_u32(8);
    buf.put_u32(100);
    buf.put_u32(0);
    assert!(matches!(
        codec.decode(&mut buf).unwrap_err(),
        CodecError::HeaderLengthOutOfRange {
            header_len: 100,
            frame_len: 4
        }
    ));
}

fn arb_command() -> impl Strategy<Value = RemotingCommand> {
    (
        any::<i32>(),
        "[A-Z_]{0,8}",
        any::<i32>(),
        any::<i32>(),
        prop_oneof![
            Just(0),
            Just(FLAG_RESPONSE),
            Just(FLAG_ONEWAY),
            any::<i32>()
        ],
        proptest::option::of(".{0,20}"),
        proptest::collection::btree_map(".{0,10}", ".{0,20}", 0..5),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(
            |(code, language, version, opaque, flag, remark, ext_fields, body)| RemotingCommand {
                code,
                language,
                version,
                opaque,
                flag,
                remark,
                ext_fields,
                body: body.into(),
            },
        )
}

/// Feeds `input` in chunks of `chunk` bytes, then signals the end of the stream, and checks that
/// the decoder never reserves memory beyond one frame.
fn drive(max: usize, input: &[u8], chunk: usize) -> Vec<Result<RemotingCommand, String>> {
    let mut codec = RemotingCodec::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let bound = 4 * (max + 8) + input.len();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(cmd)) => out.push(Ok(cmd)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
            assert!(
                buf.capacity() <= bound,
                "capacity {} > {bound}",
                buf.capacity()
            );
        }
        assert!(
            buf.capacity() <= bound,
            "capacity {} > {bound}",
            buf.capacity()
        );
    }
    match codec.decode_eof(&mut buf) {
        Ok(Some(cmd)) => out.push(Ok(cmd)),
        Ok(None) => {}
        Err(e) => out.push(Err(e.to_string())),
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_command_round_trips(cmd in arb_command()) {
        let mut buf = encode(&cmd);
        prop_assert_eq!(RemotingCodec::default().decode(&mut buf).unwrap(), Some(cmd));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn random_bytes_never_panic_nor_grow_the_buffer(
        input in proptest::collection::vec(any::<u8>(), 0..512),
        chunk in 1usize..64,
    ) {
        drive(256, &input, chunk);
    }

    #[test]
    fn random_bytes_after_a_plausible_prefix(
        len in 0u32..300,
        word in any::<u32>(),
        rest in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut input = len.to_be_bytes().to_vec();
        input.extend_from_slice(&word.to_be_bytes());
        input.extend_from_slice(&rest);
        drive(256, &input, 7);
    }

    #[test]
    fn mutated_frames_never_panic(
        cmd in arb_command(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        chunk in 1usize..32,
    ) {
        let mut bytes = encode(&cmd).to_vec();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        let results = drive(4096, &bytes, chunk);
        // At most one frame was encoded, so at most one frame (or one error) comes out.
        prop_assert!(results.len() <= 1 || results[1].is_err());
    }

    #[test]
    fn an_unmutated_frame_split_anywhere_decodes_whole(cmd in arb_command(), chunk in 1usize..32) {
        let bytes = encode(&cmd);
        let results = drive(4096, &bytes, chunk);
        prop_assert_eq!(results, vec![Ok(cmd)]);
    }
}

#[test]
fn a_header_longer_than_16_bits_keeps_its_whole_length() {
    // The header length field is 24 bits: a header of 70,000 bytes (a long extFields value)
    // must not be read as its low 16 bits.
    let cmd = RemotingCommand::request(36).with_ext("keys", "k".repeat(70_000));
    let mut buf = encode(&cmd);
    let word = u32::from_be_bytes(buf[4..8].try_into().unwrap());
    assert!(word > 0xFFFF && word >> 24 == 0, "{word:#x}");
    assert_eq!(
        RemotingCodec::default().decode(&mut buf).unwrap(),
        Some(cmd)
    );
    assert!(buf.is_empty());
}

#[test]
fn a_header_fills_the_24_bit_field_and_beyond_it_is_refused_whatever_the_frame_limit() {
    // With a frame limit above 16 MiB, the frame fits but its header length does not fit in
    // the 24-bit field: it would spill into the serialization type byte.
    let mut codec = RemotingCodec::new(64 * 1024 * 1024);
    let cmd = RemotingCommand::request(36).with_ext("keys", "k".repeat(MAX_HEADER_LEN + 1));
    let mut buf = BytesMut::new();
    let err = codec.encode(cmd, &mut buf).unwrap_err();
    assert!(matches!(err, CodecError::Encode(_)), "{err}");
    assert!(buf.is_empty());
    // A header of exactly 2^24 - 1 bytes, the field's largest value, is written and read back.
    let mut encoded = |cmd: &RemotingCommand| {
        let mut buf = BytesMut::new();
        codec.encode(cmd.clone(), &mut buf).unwrap();
        (u32::from_be_bytes(buf[4..8].try_into().unwrap()), buf)
    };
    let (short, _) = encoded(&RemotingCommand::request(36).with_ext("keys", ""));
    let fill = MAX_HEADER_LEN - short as usize;
    let cmd = RemotingCommand::request(36).with_ext("keys", "k".repeat(fill));
    let (word, mut buf) = encoded(&cmd);
    assert_eq!(
        word as usize, MAX_HEADER_LEN,
        "serialization type 0, every length bit set"
    );
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(cmd));
}

#[test]
fn another_protocols_answer_is_named_not_read_as_a_huge_frame() {
    let decode = |bytes: &[u8]| {
        let mut buf = BytesMut::from(bytes);
        RemotingCodec::default().decode(&mut buf).unwrap_err()
    };
    let http = decode(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(
        http.to_string(),
        "the server does not speak RocketMQ remoting (it answered like HTTP)"
    );
    // A TLS server answers a plain request with an alert (0x15) or a handshake (0x16), 3.x.
    for tls in [
        [0x15u8, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46],
        [0x16, 0x03, 0x01, 0x00, 0x2a, 0, 0],
    ] {
        assert_eq!(
            decode(&tls).to_string(),
            "the server does not speak RocketMQ remoting (it answered like TLS: it expects an \
             encrypted connection)"
        );
    }
    assert_eq!(
        decode(b"SSH-2.0-OpenSSH_9.6\r\n").to_string(),
        "the server does not speak RocketMQ remoting (it answered like text, starting \"SSH-\")"
    );
    // Four bytes of no known protocol over the limit stay a frame too large.
    let err = decode(&[0x7f, 0xff, 0xff, 0x00]);
    assert!(matches!(err, CodecError::FrameTooLarge { .. }), "{err}");
}

/// A limit asked beyond what a prefix can announce is the largest one; a prefix announcing a
/// huge frame reserves room for a part of it only, not the 4 GiB it claims.
#[test]
fn a_huge_limit_is_capped_and_a_huge_prefix_allocates_little() {
    let mut codec = RemotingCodec::new(usize::MAX);
    assert_eq!(codec.max_frame_len(), MAX_FRAME_LEN);
    let mut buf = BytesMut::from(&[0xFF; 4][..]);
    let err = codec.decode(&mut buf).unwrap_err();
    assert!(matches!(err, CodecError::FrameTooLarge { .. }), "{err}");
    let mut buf = BytesMut::new();
    buf.put_u32(MAX_FRAME_LEN as u32);
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert!(
        buf.capacity() <= 2 * 1024 * 1024,
        "reserved {} bytes",
        buf.capacity()
    );
}
