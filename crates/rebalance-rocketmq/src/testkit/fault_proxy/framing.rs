//! Where the remoting frames of one direction of a connection begin and end, without buffering
//! them: what lets the proxy count requests, drop whole replies and cut a frame in its middle.
//!
//! A frame is a 4-byte big-endian length, then that many bytes (see [`crate::codec`]). The
//! cursor reads only the length prefixes; any bytes at all are accepted (a garbage length makes
//! a long frame, nothing more), so it can never fail or allocate.

/// What happens to a frame, decided when its first byte arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Fate {
    /// The frame's bytes are discarded instead of forwarded.
    pub drop: bool,
    /// The connection is reset at this point of the frame.
    pub cut: Option<CutAt>,
}

/// Where in a frame the connection is reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CutAt {
    /// Before its first byte: the peer gets nothing of it.
    Start,
    /// In its middle, after the length prefix: the peer gets a truncated frame.
    Middle,
}

/// A run of bytes of one chunk, and what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    /// Forward `chunk[range]`.
    Forward(std::ops::Range<usize>),
    /// Discard `chunk[range]`, the whole of frame or part of one (`frames` of them start in it).
    Drop {
        range: std::ops::Range<usize>,
        frames: u64,
    },
    /// Reset the connection here; the rest of the chunk is never sent.
    Cut,
}

/// The frame boundaries of one direction of a connection.
#[derive(Debug, Default)]
pub(super) struct FrameCursor {
    /// Bytes of the stream seen.
    offset: u64,
    /// Where the current frame started.
    frame_start: u64,
    /// Where the current frame ends, once its length prefix is read; `Some(offset)` at a
    /// boundary (the initial state is a boundary at 0).
    frame_end: Option<u64>,
    prefix: [u8; 4],
    prefix_len: usize,
    fate: Fate,
    /// Where the current frame is cut, once known.
    cut_at: Option<u64>,
    started: bool,
}

impl FrameCursor {
    /// Splits `chunk`, the next bytes of the stream, into pieces: `fate` is asked about each
    /// frame that starts in it; `cut_at_byte` resets the connection once the stream reaches that
    /// many bytes (if it is ahead of the cursor). After a [`Piece::Cut`] nothing more is given.
    pub(super) fn feed(
        &mut self,
        chunk: &[u8],
        cut_at_byte: Option<u64>,
        mut fate: impl FnMut() -> Fate,
    ) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut i = 0;
        loop {
            if self.cut_due(cut_at_byte) {
                pieces.push(Piece::Cut);
                return pieces;
            }
            if i == chunk.len() {
                return pieces;
            }
            let mut new_frame = false;
            if !self.started || self.frame_end == Some(self.offset) {
                self.begin_frame(fate());
                new_frame = true;
                if self.cut_due(cut_at_byte) {
                    pieces.push(Piece::Cut);
                    return pieces;
                }
            }
            let left = (chunk.len() - i) as u64;
            let mut take = match self.frame_end {
                None => (4 - self.prefix_len) as u64,
                Some(end) => end - self.offset,
            }
            .min(left);
            for limit in [self.cut_at, cut_at_byte].into_iter().flatten() {
                if limit > self.offset {
                    take = take.min(limit - self.offset);
                }
            }
            // `take` ≤ `left`, which came from a usize.
            let take_usize = usize::try_from(take).unwrap_or(chunk.len() - i);
            let range = i..i + take_usize;
            if self.frame_end.is_none() {
                for &byte in &chunk[range.clone()] {
                    self.prefix[self.prefix_len] = byte;
                    self.prefix_len += 1;
                }
                if self.prefix_len == 4 {
                    let len = u64::from(u32::from_be_bytes(self.prefix));
                    let end = self.frame_start + 4 + len;
                    self.frame_end = Some(end);
                    if self.fate.cut == Some(CutAt::Middle) {
                        self.cut_at = Some(self.frame_start + 4 + len / 2);
                    }
                }
            }
            self.offset += take;
            i += take_usize;
            push(&mut pieces, range, self.fate.drop, new_frame);
        }
    }

    fn begin_frame(&mut self, fate: Fate) {
        self.started = true;
        self.frame_start = self.offset;
        self.frame_end = None;
        self.prefix_len = 0;
        self.fate = fate;
        self.cut_at = match fate.cut {
            Some(CutAt::Start) => Some(self.offset),
            // Known once the length prefix is read.
            Some(CutAt::Middle) | None => None,
        };
    }

    fn cut_due(&self, cut_at_byte: Option<u64>) -> bool {
        self.cut_at == Some(self.offset) || cut_at_byte == Some(self.offset)
    }
}

/// Appends `range`, merged with the previous piece when it does the same.
fn push(pieces: &mut Vec<Piece>, range: std::ops::Range<usize>, drop: bool, new_frame: bool) {
    if range.is_empty() && !new_frame {
        return;
    }
    let frames = u64::from(new_frame);
    match (pieces.last_mut(), drop) {
        (Some(Piece::Forward(last)), false) if last.end == range.start => last.end = range.end,
        (
            Some(Piece::Drop {
                range: last,
                frames: n,
            }),
            true,
        ) if last.end == range.start => {
            last.end = range.end;
            *n += frames;
        }
        (_, false) => pieces.push(Piece::Forward(range)),
        (_, true) => pieces.push(Piece::Drop { range, frames }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A frame of `len` bytes after its prefix, each byte `fill`.
    fn frame(len: u32, fill: u8) -> Vec<u8> {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend(std::iter::repeat_n(fill, len as usize));
        bytes
    }

    /// Feeds `stream` in chunks of `chunk` bytes; returns the bytes forwarded, the frames
    /// dropped and whether it was cut.
    fn run(
        stream: &[u8],
        chunk: usize,
        cut_at_byte: Option<u64>,
        mut fate: impl FnMut(usize) -> Fate,
    ) -> (Vec<u8>, u64, bool) {
        let mut cursor = FrameCursor::default();
        let (mut out, mut dropped, mut frames) = (Vec::new(), 0, 0);
        for piece_of_stream in stream.chunks(chunk.max(1)) {
            let pieces = cursor.feed(piece_of_stream, cut_at_byte, || {
                frames += 1;
                fate(frames)
            });
            for piece in pieces {
                match piece {
                    Piece::Forward(r) => out.extend_from_slice(&piece_of_stream[r]),
                    Piece::Drop { frames, .. } => dropped += frames,
                    Piece::Cut => return (out, dropped, true),
                }
            }
        }
        (out, dropped, false)
    }

    #[test]
    fn drops_whole_frames_whatever_the_chunks() {
        let stream: Vec<u8> = [frame(10, 1), frame(3, 2), frame(0, 3), frame(7, 4)].concat();
        for chunk in 1..stream.len() + 1 {
            // Frames 2 and 4 dropped.
            let (out, dropped, cut) = run(&stream, chunk, None, |n| Fate {
                drop: n % 2 == 0,
                cut: None,
            });
            assert_eq!(out, [frame(10, 1), frame(0, 3)].concat(), "chunk {chunk}");
            assert_eq!((dropped, cut), (2, false), "chunk {chunk}");
        }
    }

    #[test]
    fn cuts_before_a_frame_or_in_its_middle() {
        let stream: Vec<u8> = [frame(10, 1), frame(20, 2), frame(5, 3)].concat();
        for chunk in 1..stream.len() + 1 {
            let fate = |cut| {
                move |n| Fate {
                    drop: false,
                    cut: (n == 2).then_some(cut),
                }
            };
            let (out, _, cut) = run(&stream, chunk, None, fate(CutAt::Start));
            assert_eq!((out, cut), (frame(10, 1), true), "chunk {chunk}");
            let (out, _, cut) = run(&stream, chunk, None, fate(CutAt::Middle));
            // The prefix and half of the 20 bytes.
            let mut expected = frame(10, 1);
            expected.extend_from_slice(&frame(20, 2)[..14]);
            assert_eq!((out, cut), (expected, true), "chunk {chunk}");
        }
    }

    #[test]
    fn cuts_after_a_number_of_bytes_even_at_a_chunks_end() {
        let stream: Vec<u8> = [frame(10, 1), frame(20, 2)].concat();
        for chunk in 1..stream.len() + 1 {
            let (out, _, cut) = run(&stream, chunk, Some(17), |_| Fate::default());
            assert_eq!((out.len(), cut), (17, true), "chunk {chunk}");
        }
        let (out, _, cut) = run(&stream, 7, Some(0), |_| Fate::default());
        assert_eq!((out.len(), cut), (0, true));
    }

    proptest! {
        /// Any bytes at all, in any chunks: nothing panics, and with no fate the bytes pass as
        /// they came.
        #[test]
        fn any_stream_passes_unchanged(stream in proptest::collection::vec(any::<u8>(), 0..300),
                                       chunk in 1usize..40) {
            let (out, dropped, cut) = run(&stream, chunk, None, |_| Fate::default());
            prop_assert_eq!(out, stream);
            prop_assert_eq!((dropped, cut), (0, false));
        }

        /// Cut in the middle of any frame of a well-framed stream: what passed is every frame
        /// before it and a strict prefix of it, whatever the chunks.
        #[test]
        fn a_mid_frame_cut_leaves_a_truncated_frame(lens in proptest::collection::vec(1u32..50, 1..6),
                                                   which in 0usize..6, chunk in 1usize..40) {
            let which = which % lens.len();
            let frames: Vec<Vec<u8>> = lens.iter().map(|&l| frame(l, 9)).collect();
            let stream = frames.concat();
            let (out, _, cut) = run(&stream, chunk, None, |n| Fate {
                drop: false,
                cut: (n == which + 1).then_some(CutAt::Middle),
            });
            prop_assert!(cut);
            let before: usize = frames[..which].iter().map(Vec::len).sum();
            prop_assert!(out.len() > before + 3, "the prefix of the cut frame passed");
            prop_assert!(out.len() < before + frames[which].len(), "the cut frame is truncated");
            prop_assert_eq!(&out[..], &stream[..out.len()]);
        }
    }
}
