//! [`QueueLog`]: the messages of one queue of the in-memory cluster, by offset.

use std::collections::VecDeque;
use std::sync::Arc;

use rebalance_core::MessageQueue;
use rebalance_core::java::string_hash;

use tokio::sync::watch;

use crate::{Message, PullResult};
use rebalance_runtime::subscription::TagExpression;

/// At most this many messages are looked at by one pull that filters by tag (the Java broker's
/// `maxFilterMessageCount`), so that a pull of a long run of other tags stays short.
pub(super) const SCAN_LIMIT: usize = 16_000;

/// The messages of one queue: the retained ones, from `min` (the first offset not truncated)
/// to `max` (one past the last). Offsets are dense: the message at offset `o` is
/// `messages[o - min]`.
#[derive(Debug)]
pub(super) struct QueueLog {
    min: i64,
    messages: VecDeque<Message>,
    /// The queue's max offset, for pulls held until a message arrives (long polling).
    arrivals: watch::Sender<i64>,
    /// The queue, shared by its messages (made with the first).
    queue: Option<Arc<MessageQueue>>,
}

impl Default for QueueLog {
    fn default() -> Self {
        Self {
            min: 0,
            messages: VecDeque::new(),
            arrivals: watch::channel(0).0,
            queue: None,
        }
    }
}

impl QueueLog {
    /// The first offset retained.
    pub(super) fn min_offset(&self) -> i64 {
        self.min
    }

    /// One past the last offset.
    pub(super) fn max_offset(&self) -> i64 {
        self.min + self.messages.len() as i64
    }

    /// `queue`, as this log's messages share it.
    pub(super) fn shared_queue(&mut self, queue: &MessageQueue) -> Arc<MessageQueue> {
        self.queue
            .get_or_insert_with(|| Arc::new(queue.clone()))
            .clone()
    }

    /// The offset the next message gets.
    pub(super) fn next_offset(&self) -> i64 {
        self.max_offset()
    }

    /// Appends a message whose queue offset is [`next_offset`](Self::next_offset) and wakes
    /// the pulls held on this queue.
    pub(super) fn append(&mut self, message: Message) {
        debug_assert_eq!(message.queue_offset(), self.next_offset());
        self.messages.push_back(message);
        let max = self.max_offset();
        self.arrivals.send_replace(max);
    }

    /// A receiver of the max offset, to wait for a message at or after some offset.
    pub(super) fn arrivals(&self) -> watch::Receiver<i64> {
        self.arrivals.subscribe()
    }

    /// Deletes the messages below `before` (retention): pulls from those offsets are told that
    /// the offset moved. `before` past the max offset deletes every message; the max offset
    /// does not change.
    pub(super) fn truncate(&mut self, before: i64) {
        let before = before.min(self.max_offset());
        while self.min < before {
            self.messages.pop_front();
            self.min += 1;
        }
    }

    /// The retained message at `offset`, if any.
    pub(super) fn at(&self, offset: i64) -> Option<&Message> {
        let index = usize::try_from(offset.checked_sub(self.min)?).ok()?;
        self.messages.get(index)
    }

    /// The retained messages.
    pub(super) fn messages(&self) -> impl Iterator<Item = &Message> {
        self.messages.iter()
    }

    /// The offset of the first retained message stored at or after `timestamp_ms`, or the max
    /// offset when there is none (store timestamps grow with offsets).
    pub(super) fn offset_at(&self, timestamp_ms: i64) -> i64 {
        let index = self
            .messages
            .partition_point(|m| m.store_timestamp() < timestamp_ms);
        self.min + index as i64
    }

    /// Reads from `offset`: at most `max_messages` (at least one) matching `expression`, and
    /// no more body bytes than `max_bytes` unless the first one alone is larger.
    ///
    /// As a RocketMQ broker answers: an offset below the min or above the max moved (to the
    /// min, or to the max); at the max there is no new message; a scan that finds only other
    /// tags answers no new message with the offset after them. As a broker filters, by the
    /// tag's hash code ([`broker_matches`]): a tag with the same hash as a subscribed one is
    /// returned too, for the client to filter out.
    pub(super) fn read(
        &self,
        offset: i64,
        expression: &TagExpression,
        max_messages: u32,
        max_bytes: u32,
    ) -> PullResult {
        let (min, max) = (self.min_offset(), self.max_offset());
        if offset < min {
            return PullResult::OffsetMoved { next_offset: min };
        }
        if offset > max {
            return PullResult::OffsetMoved { next_offset: max };
        }
        let max_messages = max_messages.max(1) as usize;
        let max_bytes = max_bytes as usize;
        let mut messages = Vec::new();
        let mut bytes = 0usize;
        let mut next_offset = offset;
        let start = (offset - min) as usize;
        for message in self.messages.range(start..).take(SCAN_LIMIT) {
            if broker_matches(expression, message.tags()) {
                let size = message.body().len();
                if !messages.is_empty() && bytes.saturating_add(size) > max_bytes {
                    break;
                }
                bytes = bytes.saturating_add(size);
                messages.push(message.clone());
            }
            next_offset = message.queue_offset() + 1;
            if messages.len() >= max_messages {
                break;
            }
        }
        if messages.is_empty() {
            PullResult::NoNewMessage { next_offset }
        } else {
            PullResult::Found {
                messages,
                next_offset,
                min_offset: min,
                max_offset: max,
            }
        }
    }
}

/// Whether a broker's filter passes a message with tag `tag`: under `*` always, else when the
/// tag's hash code (Java's `String.hashCode`; 0 without a tag) is one of the expression's tags'
/// (the broker compares the consume queue's `tagsCode` with the subscription's `codeSet`), so
/// that a tag of the same hash passes: the client re-filters by the tag itself
/// ([`TagExpression::matches`]).
pub(super) fn broker_matches(expression: &TagExpression, tag: Option<&str>) -> bool {
    if expression.is_all() {
        return true;
    }
    let code = tag.map_or(0, string_hash);
    expression.tags().iter().any(|t| string_hash(t) == code)
}

#[cfg(test)]
mod tests {
    use rebalance_core::MessageQueue;

    use super::*;
    use crate::property;

    fn log_of(tags: &[&str], body_len: usize) -> QueueLog {
        let queue = MessageQueue::new("T", "b", 0);
        let mut log = QueueLog::default();
        for (i, tag) in tags.iter().enumerate() {
            let message = Message::new(queue.clone(), i as i64, vec![0u8; body_len])
                .with_property(property::TAGS, *tag)
                .with_timestamps(1000 + i as i64 * 10, 1000 + i as i64 * 10);
            log.append(message);
        }
        log
    }

    fn offsets(result: &PullResult) -> Vec<i64> {
        match result {
            PullResult::Found { messages, .. } => {
                messages.iter().map(|m| m.queue_offset()).collect()
            }
            _ => Vec::new(),
        }
    }

    #[test]
    fn reads_within_the_count_and_byte_limits() {
        let log = log_of(&["A"; 10], 100);
        let all = TagExpression::all();
        let result = log.read(2, &all, 3, 1 << 20);
        assert_eq!(offsets(&result), [2, 3, 4]);
        assert!(matches!(
            result,
            PullResult::Found {
                next_offset: 5,
                min_offset: 0,
                max_offset: 10,
                ..
            }
        ));
        assert_eq!(offsets(&log.read(0, &all, 32, 250)), [0, 1]);
        // One message larger than the byte limit still comes alone.
        assert_eq!(offsets(&log.read(0, &all, 32, 10)), [0]);
        assert_eq!(offsets(&log.read(0, &all, 0, 1 << 20)), [0], "at least one");
    }

    #[test]
    fn filters_by_tag_and_skips_a_run_of_other_tags() {
        let log = log_of(&["A", "B", "B", "A", "B"], 1);
        let a = TagExpression::parse("A").unwrap();
        let result = log.read(0, &a, 32, 1 << 20);
        assert_eq!(offsets(&result), [0, 3]);
        assert!(matches!(result, PullResult::Found { next_offset: 5, .. }));
        assert_eq!(
            log.read(4, &a, 32, 1 << 20),
            PullResult::NoNewMessage { next_offset: 5 }
        );
    }

    #[test]
    fn offsets_out_of_range_move_and_the_max_has_nothing_new() {
        let mut log = log_of(&["A"; 5], 1);
        let all = TagExpression::all();
        assert_eq!(
            log.read(5, &all, 32, 1024),
            PullResult::NoNewMessage { next_offset: 5 }
        );
        assert_eq!(
            log.read(9, &all, 32, 1024),
            PullResult::OffsetMoved { next_offset: 5 }
        );
        log.truncate(3);
        assert_eq!((log.min_offset(), log.max_offset()), (3, 5));
        assert_eq!(
            log.read(1, &all, 32, 1024),
            PullResult::OffsetMoved { next_offset: 3 }
        );
        assert_eq!(offsets(&log.read(3, &all, 32, 1024)), [3, 4]);
        log.truncate(100);
        assert_eq!(
            (log.min_offset(), log.max_offset()),
            (5, 5),
            "the max stays"
        );
        assert_eq!(
            log.read(4, &all, 32, 1024),
            PullResult::OffsetMoved { next_offset: 5 }
        );
    }

    #[test]
    fn offset_at_a_timestamp_is_the_first_stored_at_or_after_it() {
        let mut log = log_of(&["A"; 5], 1); // stored at 1000, 1010, … 1040
        assert_eq!(log.offset_at(0), 0);
        assert_eq!(log.offset_at(1010), 1);
        assert_eq!(log.offset_at(1011), 2);
        assert_eq!(log.offset_at(5000), 5, "none: the max");
        log.truncate(3);
        assert_eq!(log.offset_at(0), 3, "only retained messages");
    }

    proptest::proptest! {
        /// Whatever was appended and truncated, a read from any offset returns messages in
        /// offset order from that offset on, each matching, within the limits, and an answer
        /// that never skips a matching message.
        #[test]
        fn reads_are_ordered_matching_bounded_and_skip_nothing(
            tags in proptest::collection::vec(0u8..3, 0..60),
            truncate_at in 0i64..70,
            offset in -5i64..70,
            max_messages in 0u32..10,
            max_bytes in 0u32..400,
        ) {
            let names = ["A", "B", "C"];
            let queue = MessageQueue::new("T", "b", 0);
            let mut log = QueueLog::default();
            for (i, tag) in tags.iter().enumerate() {
                let body = vec![0u8; 10 * (usize::from(*tag) + 1)];
                log.append(Message::new(queue.clone(), i as i64, body).with_property(property::TAGS, names[usize::from(*tag)]));
            }
            log.truncate(truncate_at);
            let expression = TagExpression::parse("A || C").unwrap();
            let (min, max) = (log.min_offset(), log.max_offset());
            let matching = |o: i64| tags[o as usize] != 1;
            match log.read(offset, &expression, max_messages, max_bytes) {
                PullResult::OffsetMoved { next_offset } => {
                    proptest::prop_assert!(offset < min || offset > max);
                    proptest::prop_assert_eq!(next_offset, if offset < min { min } else { max });
                }
                PullResult::NoNewMessage { next_offset } => {
                    proptest::prop_assert!((min..=max).contains(&offset));
                    proptest::prop_assert!(next_offset >= offset && next_offset <= max);
                    proptest::prop_assert!((offset..next_offset).all(|o| !matching(o)));
                    proptest::prop_assert!(next_offset == max || next_offset - offset == SCAN_LIMIT as i64);
                }
                PullResult::Found { messages, next_offset, min_offset, max_offset } => {
                    proptest::prop_assert_eq!((min_offset, max_offset), (min, max));
                    proptest::prop_assert!(!messages.is_empty());
                    proptest::prop_assert!(messages.len() <= max_messages.max(1) as usize);
                    let bytes: usize = messages.iter().map(|m| m.body().len()).sum();
                    proptest::prop_assert!(messages.len() == 1 || bytes <= max_bytes as usize);
                    let offsets: Vec<i64> = messages.iter().map(Message::queue_offset).collect();
                    let expected: Vec<i64> = (offset..next_offset).filter(|o| matching(*o)).collect();
                    proptest::prop_assert_eq!(offsets, expected, "every matching message up to the next offset");
                    proptest::prop_assert!(next_offset <= max);
                }
            }
        }
    }
}
