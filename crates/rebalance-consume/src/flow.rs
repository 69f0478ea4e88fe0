//! Flow control: when a lease's buffer holds too much to pull more, as the Java push consumer
//! decides it, and the rate-limited warning that says so.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::ConsumeOptions;
use super::process_queue::ProcessQueue;

/// How often a loop held by flow control says so, at most.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A limit a buffer is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Too many buffered messages (per queue, or its part of the topic's limit).
    Messages { buffered: usize, limit: usize },
    /// Too many buffered body bytes.
    Bytes { buffered: u64, limit: u64 },
    /// The buffered messages span too many offsets (concurrent consumption).
    Span { span: i64, limit: i64 },
    /// Messages pulled before the source moved the queue's offset still wait for a worker
    /// (concurrent consumption; the buffer no longer counts them).
    Moved { waiting: usize },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Messages { buffered, limit } => {
                write!(f, "{buffered} messages buffered, limit {limit}")
            }
            Limit::Bytes { buffered, limit } => {
                write!(f, "{buffered} bytes buffered, limit {limit}")
            }
            Limit::Span { span, limit } => {
                write!(f, "buffered messages span {span} offsets, limit {limit}")
            }
            Limit::Moved { waiting } => {
                write!(
                    f,
                    "{waiting} messages pulled before the offset moved still wait for a worker"
                )
            }
        }
    }
}

/// The limit `pq` is over, if any. `queues`: how many queues of the topic this client
/// consumes (a topic limit is split evenly over them, at least 1 each).
pub(crate) fn over_limit(
    pq: &ProcessQueue,
    options: &ConsumeOptions,
    queues: usize,
    orderly: bool,
) -> Option<Limit> {
    let queues = queues.max(1);
    let max_messages = options
        .topic_max_messages
        .map_or(options.queue_max_messages, |topic| {
            options.queue_max_messages.min((topic / queues).max(1))
        });
    let max_bytes = options
        .topic_max_bytes
        .map_or(options.queue_max_bytes, |topic| {
            options.queue_max_bytes.min((topic / queues as u64).max(1))
        });
    if pq.len() >= max_messages {
        return Some(Limit::Messages {
            buffered: pq.len(),
            limit: max_messages,
        });
    }
    if pq.bytes() >= max_bytes {
        return Some(Limit::Bytes {
            buffered: pq.bytes(),
            limit: max_bytes,
        });
    }
    if !orderly && pq.span() > options.max_span {
        return Some(Limit::Span {
            span: pq.span(),
            limit: options.max_span,
        });
    }
    None
}

/// Says at most once every 10 s that a loop waits for its buffer to drain.
#[derive(Debug, Default)]
pub(crate) struct FlowWarning {
    last: Option<Instant>,
    suppressed: u64,
}

impl FlowWarning {
    /// Records that the loop waits because of `limit`; warns when the last warning is old.
    pub(crate) fn hold(&mut self, limit: Limit, queue: &rebalance_core::MessageQueue) {
        let now = Instant::now();
        if self.last.is_some_and(|last| now < last + WARN_EVERY) {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(
            queue = ?queue,
            %limit,
            held_before = self.suppressed,
            "flow control: not pulling until the buffer drains (at most 50 ms at a time); the listener is behind"
        );
        self.last = Some(now);
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(count: i64, bytes: usize) -> ProcessQueue {
        let mut pq = ProcessQueue::new(0);
        pq.put((0..count).map(|o| (o, bytes)), count);
        pq
    }

    #[test]
    fn queue_limits() {
        let options = ConsumeOptions {
            queue_max_messages: 10,
            queue_max_bytes: 100,
            max_span: 5,
            ..ConsumeOptions::default()
        };
        assert_eq!(over_limit(&buffer(3, 1), &options, 1, false), None);
        assert_eq!(
            over_limit(&buffer(10, 1), &options, 1, false),
            Some(Limit::Messages {
                buffered: 10,
                limit: 10
            })
        );
        assert!(matches!(
            over_limit(&buffer(2, 60), &options, 1, false),
            Some(Limit::Bytes { .. })
        ));
        assert!(matches!(
            over_limit(&buffer(7, 1), &options, 1, false),
            Some(Limit::Span { span: 6, limit: 5 })
        ));
        assert_eq!(
            over_limit(&buffer(7, 1), &options, 1, true),
            None,
            "orderly has no span limit"
        );
    }

    #[test]
    fn topic_limits_are_split_over_the_queues() {
        let options = ConsumeOptions {
            topic_max_messages: Some(20),
            ..ConsumeOptions::default()
        };
        assert_eq!(over_limit(&buffer(4, 1), &options, 4, false), None);
        assert_eq!(
            over_limit(&buffer(5, 1), &options, 4, false),
            Some(Limit::Messages {
                buffered: 5,
                limit: 5
            })
        );
        assert_eq!(
            over_limit(&buffer(1, 1), &options, 100, false),
            Some(Limit::Messages {
                buffered: 1,
                limit: 1
            }),
            "at least one message per queue"
        );
    }

    proptest::proptest! {
        /// A loop that pulls only when its buffer is under every limit never holds more than
        /// one pull beyond them, whatever the consumption order.
        #[test]
        fn flow_control_bounds_the_buffer(
            steps in proptest::collection::vec((0usize..40, proptest::prelude::any::<bool>(), 0usize..8), 1..300),
            max_messages in 1usize..60,
            max_span in 1i64..100,
            orderly in proptest::prelude::any::<bool>(),
        ) {
            let options = ConsumeOptions {
                queue_max_messages: max_messages,
                queue_max_bytes: 4 * max_messages as u64,
                max_span,
                ..ConsumeOptions::default()
            };
            let batch = 32usize;
            let mut pq = ProcessQueue::new(0);
            let mut unconsumed: std::collections::BTreeSet<i64> = Default::default();
            for (pulled, consume_first, consumed) in steps {
                if over_limit(&pq, &options, 1, orderly).is_none() {
                    let first = pq.next_offset();
                    let count = pulled.min(batch) as i64;
                    pq.put((first..first + count).map(|o| (o, 3)), first + count);
                    unconsumed.extend(first..first + count);
                }
                for _ in 0..consumed {
                    let next = if consume_first || orderly { unconsumed.first() } else { unconsumed.last() };
                    let Some(&offset) = next else { break };
                    unconsumed.remove(&offset);
                    pq.ack(pq.epoch(), offset, offset, |_| false);
                }
                proptest::prop_assert!(pq.len() < max_messages + batch);
                proptest::prop_assert!(pq.bytes() < options.queue_max_bytes + 3 * batch as u64);
                if !orderly {
                    proptest::prop_assert!(pq.span() <= max_span + batch as i64);
                }
            }
        }
    }
}
