//! Compressed message bodies: a message whose `sysFlag` has [`COMPRESSED_FLAG`] carries its
//! body compressed with the algorithm in bits 8-10 (Java's `MessageSysFlag`): zlib (0 or 3),
//! LZ4 (1) or zstd (2).
//!
//! zlib and LZ4 are always read (pure Rust); zstd needs the crate feature `zstd`, which builds
//! the C library (without it such a body is [`DecodeError::Unsupported`]). LZ4 bodies are read
//! in both forms found in the wild: the LZ4 frame format the Java client writes, and the
//! size-prefixed block the Rust client writes.
//!
//! Every decompression stops one byte past the limit, so a small body that inflates to
//! gigabytes costs at most the limit, and its result holds exactly its length (what the
//! decoder charges to its budget); an LZ4 block's announced length is checked against the limit
//! before it is allocated, and must be the length it decompresses to.

use std::io::Read;

use super::decode::DecodeError;

/// `sysFlag` bit: the body is compressed.
pub const COMPRESSED_FLAG: i32 = 0x1;
/// Where the compression type sits in `sysFlag` (bits 8 to 10).
const COMPRESSION_TYPE_SHIFT: i32 = 8;
const COMPRESSION_TYPE_MASK: i32 = 0x7;

/// The LZ4 frame format's magic number, little-endian.
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];

/// A compression algorithm of message bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// zlib (RFC 1950), Java's `Deflater`: type 0 (legacy) or 3.
    Zlib,
    /// LZ4: type 1.
    Lz4,
    /// zstd: type 2.
    Zstd,
}

impl Compression {
    /// The algorithm a message with `sys_flag` is compressed with, `None` when its body is not
    /// compressed.
    pub fn of_sys_flag(sys_flag: i32) -> Result<Option<Self>, DecodeError> {
        if sys_flag & COMPRESSED_FLAG == 0 {
            return Ok(None);
        }
        match (sys_flag >> COMPRESSION_TYPE_SHIFT) & COMPRESSION_TYPE_MASK {
            0 | 3 => Ok(Some(Self::Zlib)),
            1 => Ok(Some(Self::Lz4)),
            2 => Ok(Some(Self::Zstd)),
            other => Err(DecodeError::Unsupported(format!(
                "compression type {other} (sysFlag {sys_flag:#x})"
            ))),
        }
    }

    /// The `sysFlag` bits of a body compressed with this algorithm.
    pub fn sys_flag(self) -> i32 {
        let kind = match self {
            Self::Zlib => 3,
            Self::Lz4 => 1,
            Self::Zstd => 2,
        };
        COMPRESSED_FLAG | (kind << COMPRESSION_TYPE_SHIFT)
    }

    /// Decompresses `data`, refusing a result longer than `max_len` bytes. The result holds no
    /// spare capacity: what it holds is its length.
    pub fn decompress(self, data: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
        let mut out = match self {
            Self::Zlib => read_capped(flate2::read::ZlibDecoder::new(data), self, max_len),
            Self::Lz4 if data.starts_with(&LZ4_FRAME_MAGIC) => {
                read_capped(lz4_flex::frame::FrameDecoder::new(data), self, max_len)
            }
            Self::Lz4 => lz4_block(data, max_len),
            Self::Zstd => zstd(data, max_len),
        }?;
        // `read_to_end` grows its buffer by doubling: up to twice the length would be kept.
        out.shrink_to_fit();
        Ok(out)
    }
}

/// Reads `reader` to its end, failing once it gives more than `max_len` bytes.
fn read_capped(
    reader: impl Read,
    kind: Compression,
    max_len: usize,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let cap = u64::try_from(max_len).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Decompress {
            kind,
            reason: e.to_string(),
        })?;
    if out.len() > max_len {
        return Err(DecodeError::BodyTooLarge { limit: max_len });
    }
    Ok(out)
}

/// An LZ4 block prefixed with its decompressed length (u32, little-endian). The length is
/// checked against `max_len` before anything is allocated (the decompressor allocates it
/// whole), and a block that does not decompress to exactly that length is refused.
fn lz4_block(data: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
    let bad = |reason: String| DecodeError::Decompress {
        kind: Compression::Lz4,
        reason,
    };
    let (size, block) = data
        .split_first_chunk::<4>()
        .ok_or_else(|| bad("shorter than its length prefix".into()))?;
    let size = usize::try_from(u32::from_le_bytes(*size)).unwrap_or(usize::MAX);
    if size > max_len {
        return Err(DecodeError::BodyTooLarge { limit: max_len });
    }
    let out = lz4_flex::block::decompress(block, size).map_err(|e| bad(e.to_string()))?;
    if out.len() != size {
        return Err(bad(format!(
            "the block decompresses to {} bytes, not the {size} its length prefix announces",
            out.len()
        )));
    }
    Ok(out)
}

/// The largest zstd window (as a power of two) a body of at most `max_len` bytes is read with:
/// the smallest that holds `max_len`, and at least 2^23 (8 MiB, what the zstd format asks every
/// decoder to support). The decoder allocates the window a frame's header asks for before any
/// output (up to 2^27 by default), so a tiny frame could otherwise make it reserve 128 MiB.
#[cfg(any(feature = "zstd", test))]
fn zstd_window_log(max_len: usize) -> u32 {
    let needed = max_len
        .max(1)
        .checked_next_power_of_two()
        .map_or(u32::MAX, usize::trailing_zeros);
    needed.clamp(23, 31)
}

#[cfg(feature = "zstd")]
fn zstd(data: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
    let bad = |e: std::io::Error| DecodeError::Decompress {
        kind: Compression::Zstd,
        reason: e.to_string(),
    };
    let mut decoder = zstd::stream::read::Decoder::new(data).map_err(bad)?;
    decoder
        .window_log_max(zstd_window_log(max_len))
        .map_err(bad)?;
    read_capped(decoder, Compression::Zstd, max_len)
}

#[cfg(not(feature = "zstd"))]
fn zstd(_data: &[u8], _max_len: usize) -> Result<Vec<u8>, DecodeError> {
    Err(DecodeError::Unsupported(
        "a zstd-compressed body: build rebalance-rocketmq with the `zstd` feature".into(),
    ))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn the_type_bits_pick_the_algorithm() {
        assert_eq!(Compression::of_sys_flag(0), Ok(None));
        assert_eq!(Compression::of_sys_flag(0x300), Ok(None), "not compressed");
        assert_eq!(Compression::of_sys_flag(1), Ok(Some(Compression::Zlib)));
        for kind in [Compression::Zlib, Compression::Lz4, Compression::Zstd] {
            assert_eq!(Compression::of_sys_flag(kind.sys_flag()), Ok(Some(kind)));
        }
        assert!(matches!(
            Compression::of_sys_flag(0x501),
            Err(DecodeError::Unsupported(_))
        ));
    }

    #[test]
    fn zlib_and_both_lz4_forms_decompress() {
        let text = b"hello hello hello hello hello".repeat(10);
        assert_eq!(
            Compression::Zlib.decompress(&zlib(&text), 1000).unwrap(),
            text
        );
        let block = lz4_flex::block::compress_prepend_size(&text);
        assert_eq!(Compression::Lz4.decompress(&block, 1000).unwrap(), text);
        let mut frame = lz4_flex::frame::FrameEncoder::new(Vec::new());
        frame.write_all(&text).unwrap();
        let frame = frame.finish().unwrap();
        assert!(frame.starts_with(&LZ4_FRAME_MAGIC));
        assert_eq!(Compression::Lz4.decompress(&frame, 1000).unwrap(), text);
    }

    /// A bomb: a few KiB that inflate to 64 MiB cost the limit, not the 64 MiB.
    #[test]
    fn a_body_inflating_past_the_limit_is_refused() {
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 100_000);
        assert_eq!(
            Compression::Zlib.decompress(&bomb, 1 << 20),
            Err(DecodeError::BodyTooLarge { limit: 1 << 20 })
        );
        // An LZ4 block claiming 4 GiB is refused before anything is allocated.
        let mut lie = u32::MAX.to_le_bytes().to_vec();
        lie.extend_from_slice(&[0x10, b'a']);
        assert_eq!(
            Compression::Lz4.decompress(&lie, 1 << 20),
            Err(DecodeError::BodyTooLarge { limit: 1 << 20 })
        );
        let text = vec![7u8; 2000];
        let block = lz4_flex::block::compress_prepend_size(&text);
        assert!(Compression::Lz4.decompress(&block, 1999).is_err());
        assert_eq!(Compression::Lz4.decompress(&block, 2000).unwrap(), text);
    }

    /// Found by review: a block announcing 16 MiB that decompressed to one byte was kept with
    /// its 16 MiB allocation and charged one byte.
    #[test]
    fn an_lz4_block_shorter_than_its_length_prefix_is_refused() {
        let mut lie = (16u32 << 20).to_le_bytes().to_vec();
        lie.extend_from_slice(&[0x10, b'a']); // one literal, the end of the block
        let err = Compression::Lz4.decompress(&lie, 16 << 20).unwrap_err();
        assert!(
            matches!(&err, DecodeError::Decompress { kind: Compression::Lz4, reason }
                if reason.contains("1 bytes, not the 16777216")),
            "{err}"
        );
        let mut honest = 1u32.to_le_bytes().to_vec();
        honest.extend_from_slice(&[0x10, b'a']);
        assert_eq!(
            Compression::Lz4.decompress(&honest, 16 << 20).unwrap(),
            b"a"
        );
    }

    /// Found by review: a zlib or LZ4-frame body was kept in the buffer `read_to_end` grew by
    /// doubling, up to twice its length, which alone was charged to the budget.
    #[test]
    fn a_decompressed_body_holds_no_spare_capacity() {
        for len in [5_000, 100_000, 1_000_001] {
            let text: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut frame = lz4_flex::frame::FrameEncoder::new(Vec::new());
            frame.write_all(&text).unwrap();
            let frame = frame.finish().unwrap();
            let block = lz4_flex::block::compress_prepend_size(&text);
            for (kind, data) in [
                (Compression::Zlib, zlib(&text)),
                (Compression::Lz4, frame),
                (Compression::Lz4, block),
            ] {
                let out = kind.decompress(&data, 2 << 20).unwrap();
                assert_eq!(out, text);
                assert_eq!(out.capacity(), out.len(), "{kind:?} of {len} bytes");
            }
        }
    }

    #[test]
    fn garbage_is_an_error() {
        for kind in [Compression::Zlib, Compression::Lz4] {
            for data in [
                &b""[..],
                b"\x01\x02\x03",
                b"\x04\x22\x4d\x18garbage",
                b"xx\x00\x00abc",
            ] {
                assert!(kind.decompress(data, 1000).is_err(), "{kind:?} {data:?}");
            }
        }
    }

    #[cfg(not(feature = "zstd"))]
    #[test]
    fn zstd_without_the_feature_says_which_feature() {
        let err = Compression::Zstd.decompress(b"x", 10).unwrap_err();
        assert!(err.to_string().contains("`zstd` feature"), "{err}");
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn zstd_decompresses_with_the_feature() {
        let text = b"zstd zstd zstd zstd".repeat(20);
        let data = zstd::encode_all(&text[..], 3).unwrap();
        assert_eq!(Compression::Zstd.decompress(&data, 1000).unwrap(), text);
        assert!(Compression::Zstd.decompress(&data, 10).is_err());
    }

    #[test]
    fn the_zstd_window_holds_the_body_limit_and_at_least_8_mib() {
        assert_eq!(zstd_window_log(0), 23);
        assert_eq!(zstd_window_log(1000), 23);
        assert_eq!(zstd_window_log(8 << 20), 23);
        assert_eq!(zstd_window_log((8 << 20) + 1), 24);
        assert_eq!(zstd_window_log(16 << 20), 24);
        assert_eq!(zstd_window_log(usize::MAX), 31);
    }

    /// A frame of a few bytes whose header asks for a 128 MiB window (the decoder's default
    /// limit) and holds nothing: refused, not decoded with the window reserved.
    #[cfg(feature = "zstd")]
    #[test]
    fn a_zstd_frame_asking_for_a_window_over_the_limit_is_refused() {
        // Magic; descriptor: no content size, not single-segment; window 2^(10 + 17);
        // one last raw block of 0 bytes.
        let frame = [0x28, 0xB5, 0x2F, 0xFD, 0x00, 17 << 3, 0x01, 0x00, 0x00];
        let err = Compression::Zstd.decompress(&frame, 16 << 20).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Decompress {
                    kind: Compression::Zstd,
                    ..
                }
            ),
            "{err:?}"
        );
        // The same frame asking for 8 MiB is an empty body.
        let small = [0x28, 0xB5, 0x2F, 0xFD, 0x00, 13 << 3, 0x01, 0x00, 0x00];
        assert_eq!(Compression::Zstd.decompress(&small, 16 << 20).unwrap(), b"");
    }
}
