//! The ProcessQueue buffer of one lease: the messages pulled and not yet consumed, by queue
//! offset, their count and size for flow control, and the commit offset they allow.
//!
//! It keeps an entry (offset, body size, whether consumed) per pulled message, in offset order;
//! the messages themselves travel to the listener. A consumed message is marked, and entries
//! are dropped from the front once consumed, so the first entry is always the smallest
//! unconsumed offset: the commit offset. Entries consumed behind an unconsumed one stay until it
//! is consumed; the span limit bounds how many that can be.

use std::collections::VecDeque;

/// One buffered message.
#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: i64,
    bytes: u32,
    done: bool,
}

/// The buffer of one lease (see the module documentation). Owned by the lease's pull loop.
#[derive(Debug)]
pub(crate) struct ProcessQueue {
    entries: VecDeque<Entry>,
    /// Unconsumed messages and their body bytes.
    live: usize,
    live_bytes: u64,
    /// The next offset to pull: the commit offset when nothing is buffered.
    next_offset: i64,
    /// Bumped by [`reset`](Self::reset): acknowledgements of earlier messages are ignored.
    epoch: u64,
}

impl ProcessQueue {
    /// An empty buffer that pulls from `next_offset`.
    pub(crate) fn new(next_offset: i64) -> Self {
        Self {
            entries: VecDeque::new(),
            live: 0,
            live_bytes: 0,
            next_offset,
            epoch: 0,
        }
    }

    /// Adds pulled messages (offset and body size, in offset order) and moves the next pull to
    /// `next_offset`. A message at or below an offset already buffered or pulled is skipped (a
    /// source that answers twice); returns how many were added.
    pub(crate) fn put(
        &mut self,
        messages: impl IntoIterator<Item = (i64, usize)>,
        next_offset: i64,
    ) -> usize {
        let mut added = 0;
        for (offset, bytes) in messages {
            let after_last = self.entries.back().is_none_or(|e| offset > e.offset);
            if offset < self.next_offset || !after_last {
                tracing::warn!(
                    offset,
                    next = self.next_offset,
                    "the source returned a message already pulled; skipped"
                );
                continue;
            }
            let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            self.entries.push_back(Entry {
                offset,
                bytes,
                done: false,
            });
            self.live += 1;
            self.live_bytes += u64::from(bytes);
            self.next_offset = offset.saturating_add(1);
            added += 1;
        }
        self.advance(next_offset);
        added
    }

    /// Moves the next pull forward to `next_offset` (a pull that found nothing new, or only
    /// messages the tag filter dropped). Never moves it back.
    pub(crate) fn advance(&mut self, next_offset: i64) {
        self.next_offset = self.next_offset.max(next_offset);
    }

    /// Marks the buffered messages from `first` to `last` (included) consumed, except those
    /// for which `keep` says true. Acknowledgements of unknown offsets (already consumed, or
    /// from before a [`reset`](Self::reset)) are ignored.
    pub(crate) fn ack(&mut self, epoch: u64, first: i64, last: i64, keep: impl Fn(i64) -> bool) {
        if epoch != self.epoch {
            return;
        }
        let start = self.entries.partition_point(|e| e.offset < first);
        for entry in self.entries.range_mut(start..) {
            if entry.offset > last {
                break;
            }
            if !entry.done && !keep(entry.offset) {
                entry.done = true;
                self.live -= 1;
                self.live_bytes -= u64::from(entry.bytes);
            }
        }
        while self.entries.front().is_some_and(|e| e.done) {
            self.entries.pop_front();
        }
    }

    /// Forgets every buffered message and continues from `next_offset` (the source moved the
    /// queue's offset); acknowledgements of earlier messages are ignored from now on.
    pub(crate) fn reset(&mut self, next_offset: i64) {
        self.entries.clear();
        self.live = 0;
        self.live_bytes = 0;
        self.next_offset = next_offset;
        self.epoch += 1;
    }

    /// The offset to commit: the smallest unconsumed one, or the next to pull when every
    /// message is consumed.
    pub(crate) fn commit_offset(&self) -> i64 {
        self.entries
            .front()
            .map_or(self.next_offset, |entry| entry.offset)
    }

    /// The next offset to pull.
    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The current epoch (see [`reset`](Self::reset)).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many messages are buffered and not consumed.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Their body bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.live_bytes
    }

    /// What the running info shows of the buffer: the unconsumed messages, their bytes, and the
    /// first and last offsets kept (0 when empty).
    pub(crate) fn buffer(&self) -> rebalance_runtime::running::QueueBuffer {
        rebalance_runtime::running::QueueBuffer {
            count: self.live as u64,
            bytes: self.live_bytes,
            min_offset: self.entries.front().map_or(0, |e| e.offset),
            max_offset: self.entries.back().map_or(0, |e| e.offset),
        }
    }

    /// The offsets between the first unconsumed message and the last buffered one.
    pub(crate) fn span(&self) -> i64 {
        match (self.entries.front(), self.entries.back()) {
            (Some(first), Some(last)) => last.offset - first.offset,
            _ => 0,
        }
    }

    /// How many entries are kept (consumed ones behind an unconsumed one included).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_commit_offset_waits_for_the_first_unconsumed_message() {
        let mut pq = ProcessQueue::new(10);
        assert_eq!(pq.commit_offset(), 10);
        assert_eq!(pq.put([(10, 5), (11, 5), (13, 7)], 14), 3);
        assert_eq!((pq.len(), pq.bytes(), pq.span()), (3, 17, 3));
        pq.ack(0, 11, 13, |_| false);
        assert_eq!(pq.commit_offset(), 10, "10 is not consumed yet");
        assert_eq!(pq.len(), 1);
        pq.ack(0, 10, 10, |_| false);
        assert_eq!(pq.commit_offset(), 14, "empty: the next offset to pull");
        assert_eq!(pq.entries(), 0);
    }

    #[test]
    fn kept_messages_hold_the_commit_offset() {
        let mut pq = ProcessQueue::new(0);
        pq.put([(0, 1), (1, 1), (2, 1)], 3);
        pq.ack(0, 0, 2, |o| o == 1);
        assert_eq!(pq.commit_offset(), 1);
        assert_eq!(pq.len(), 1);
    }

    #[test]
    fn duplicates_and_stale_acks_are_ignored() {
        let mut pq = ProcessQueue::new(0);
        pq.put([(0, 1), (1, 1)], 2);
        assert_eq!(pq.put([(1, 1), (0, 1)], 2), 0);
        assert_eq!(pq.len(), 2);
        pq.reset(50);
        pq.ack(0, 0, 1, |_| false);
        assert_eq!(pq.commit_offset(), 50);
        pq.put([(50, 1)], 51);
        pq.ack(0, 50, 50, |_| false);
        assert_eq!(pq.len(), 1, "an acknowledgement from before the reset");
        pq.ack(1, 50, 50, |_| false);
        assert_eq!(pq.commit_offset(), 51);
    }

    /// One step of a random history: a pull of `count` messages after a gap, or the
    /// acknowledgement of a random in-flight message (kept when `keep`).
    #[derive(Debug, Clone)]
    enum Step {
        Pull { gap: i64, count: usize },
        Ack { pick: usize, keep: bool },
        Empty { gap: i64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0i64..3, 0usize..6).prop_map(|(gap, count)| Step::Pull { gap, count }),
            (any::<usize>(), any::<bool>()).prop_map(|(pick, keep)| Step::Ack { pick, keep }),
            (0i64..4).prop_map(|gap| Step::Empty { gap }),
        ]
    }

    proptest! {
        /// The commit offset never passes an unconsumed message and never goes back; the
        /// counts match the unconsumed messages.
        #[test]
        fn commit_offset_is_safe_and_monotonic(steps in prop::collection::vec(step(), 1..200)) {
            let mut pq = ProcessQueue::new(0);
            let mut unconsumed = BTreeSet::new();
            let mut last_commit = pq.commit_offset();
            for step in steps {
                match step {
                    Step::Pull { gap, count } => {
                        let first = pq.next_offset() + gap;
                        let offsets: Vec<i64> = (first..first + count as i64).collect();
                        let next = first + count as i64;
                        pq.put(offsets.iter().map(|&o| (o, 3)), next);
                        unconsumed.extend(offsets);
                    }
                    Step::Ack { pick, keep } => {
                        if unconsumed.is_empty() {
                            continue;
                        }
                        let offset = *unconsumed.iter().nth(pick % unconsumed.len()).unwrap();
                        pq.ack(pq.epoch(), offset, offset, |_| keep);
                        if !keep {
                            unconsumed.remove(&offset);
                        }
                    }
                    Step::Empty { gap } => pq.advance(pq.next_offset() + gap),
                }
                let commit = pq.commit_offset();
                if let Some(&first) = unconsumed.first() {
                    prop_assert!(commit <= first, "commit {} passes unconsumed {}", commit, first);
                    prop_assert_eq!(commit, first);
                } else {
                    // Nothing left to consume: the commit is where the next pull starts.
                    prop_assert_eq!(commit, pq.next_offset());
                }
                prop_assert!(commit >= last_commit, "commit went back from {} to {}", last_commit, commit);
                last_commit = commit;
                prop_assert_eq!(pq.len(), unconsumed.len());
                prop_assert_eq!(pq.bytes(), 3 * unconsumed.len() as u64);
            }
        }
    }
}
