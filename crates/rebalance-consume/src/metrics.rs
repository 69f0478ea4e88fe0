//! The consume layer's metrics, through the [`metrics`] facade, under the runtime's
//! conventions (`rebalance_runtime::metrics`: a `rebalance_` prefix, `_total` on counters, base
//! units; the consumer `group` and the plain `topic` on every one; gauges go up and down by each
//! consumer's own contribution). The [`PushConsumer`](crate::PushConsumer) records them; the
//! application installs the recorder.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `rebalance_pulls_total` | counter | group, topic, result | pulls (push consumer): `found`, `no_new_message`, `offset_moved`, `throttled`, `error` |
//! | `rebalance_pull_duration_seconds` | histogram | group, topic | how long each pull took (long polling included) |
//! | `rebalance_messages_consumed_total` | counter | group, topic | messages the listener consumed successfully |
//! | `rebalance_messages_failed_total` | counter | group, topic | messages the listener failed (or that its batch's panic or timeout failed) |
//! | `rebalance_messages_sent_back_total` | counter | group, topic | failed messages sent back to the broker for redelivery |
//! | `rebalance_consume_duration_seconds` | histogram | group, topic | how long each listener call took |
//! | `rebalance_buffered_messages` | gauge | group, topic | messages pulled and not consumed yet |
//! | `rebalance_buffered_bytes` | gauge | group, topic | their body bytes |
//! | `rebalance_lag_messages` | gauge | group, topic | messages not consumed yet in the queues held: per queue, its largest offset (from the last pull's answer) minus its commit offset |
//! | `rebalance_offsets_moved_back_total` | counter | group, topic | pulls whose answer moved a queue's offset back (`OFFSET_MOVED` below the offset pulled): what was consumed since is consumed again |
//!
//! The topic of a message redelivered through the retry topic is the retry topic
//! (`%RETRY%{group}`), where it was pulled from.
//!
//! [`describe`] gives an exporter each metric's help text and unit; call it once after
//! installing the recorder (with the runtime's `rebalance_runtime::metrics::describe`).

use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram, Label, Unit, counter, gauge, histogram};
use ::metrics::{describe_counter, describe_gauge, describe_histogram};

/// Pulls (`group`, `topic`, `result`).
pub const PULLS: &str = "rebalance_pulls_total";
/// How long each pull took, in seconds (`group`, `topic`).
pub const PULL_DURATION: &str = "rebalance_pull_duration_seconds";
/// Messages consumed successfully (`group`, `topic`).
pub const MESSAGES_CONSUMED: &str = "rebalance_messages_consumed_total";
/// Messages the listener failed (`group`, `topic`).
pub const MESSAGES_FAILED: &str = "rebalance_messages_failed_total";
/// Failed messages sent back for redelivery (`group`, `topic`).
pub const MESSAGES_SENT_BACK: &str = "rebalance_messages_sent_back_total";
/// How long each listener call took, in seconds (`group`, `topic`).
pub const CONSUME_DURATION: &str = "rebalance_consume_duration_seconds";
/// Messages pulled and not consumed yet (`group`, `topic`).
pub const BUFFERED_MESSAGES: &str = "rebalance_buffered_messages";
/// Body bytes of the messages pulled and not consumed yet (`group`, `topic`).
pub const BUFFERED_BYTES: &str = "rebalance_buffered_bytes";
/// Messages not consumed yet in the queues held (`group`, `topic`).
pub const LAG: &str = "rebalance_lag_messages";
/// Pulls whose answer moved the queue's offset back (`OFFSET_MOVED` to an offset below the one
/// pulled): what was consumed since is consumed again (apache/rocketmq #4215). Labels: `group`,
/// `topic`.
pub const OFFSETS_MOVED_BACK: &str = "rebalance_offsets_moved_back_total";

/// Describes every metric of the consume layer to the installed recorder (help text and unit).
pub fn describe() {
    describe_counter!(PULLS, Unit::Count, "Pulls, by result");
    describe_histogram!(PULL_DURATION, Unit::Seconds, "Pull duration");
    describe_counter!(MESSAGES_CONSUMED, Unit::Count, "Messages consumed");
    describe_counter!(MESSAGES_FAILED, Unit::Count, "Messages the listener failed");
    describe_counter!(MESSAGES_SENT_BACK, Unit::Count, "Messages sent back");
    describe_histogram!(CONSUME_DURATION, Unit::Seconds, "Listener call duration");
    describe_gauge!(BUFFERED_MESSAGES, Unit::Count, "Messages buffered");
    describe_gauge!(BUFFERED_BYTES, Unit::Bytes, "Message bytes buffered");
    describe_gauge!(LAG, Unit::Count, "Messages not consumed yet");
    describe_counter!(
        OFFSETS_MOVED_BACK,
        Unit::Count,
        "Pulls that moved a queue's offset back (consumed again)"
    );
}

fn labels(group: &str, topic: &str) -> Vec<Label> {
    vec![
        Label::new("group", group.to_owned()),
        Label::new("topic", topic.to_owned()),
    ]
}

fn labels_with(group: &str, topic: &str, key: &'static str, value: String) -> Vec<Label> {
    let mut labels = labels(group, topic);
    labels.push(Label::new(key, value));
    labels
}

/// Counts `count` messages of `topic` sent back.
pub(crate) fn sent_back(group: &str, topic: &str, count: usize) {
    if count > 0 {
        counter!(MESSAGES_SENT_BACK, labels(group, topic)).increment(count as u64);
    }
}

/// The handles of a topic's per-message metrics, registered once per topic and shared by its
/// pull loops and consumers: recording through them costs no label allocation (building the
/// key, two label strings, at every call, per message with the default batches of one, was
/// half the consume layer's time in its benchmark).
#[derive(Debug)]
pub(crate) struct TopicMetrics {
    pulls_found: Counter,
    pulls_no_new_message: Counter,
    pulls_offset_moved: Counter,
    pulls_throttled: Counter,
    pulls_error: Counter,
    pull_duration: Histogram,
    consumed: Counter,
    failed: Counter,
    consume_duration: Histogram,
    offsets_moved_back: Counter,
}

impl TopicMetrics {
    /// The handles of `topic`'s metrics in `group`, from the recorder installed now.
    pub(crate) fn new(group: &str, topic: &str) -> Self {
        let pulls = |result: &str| {
            counter!(
                PULLS,
                labels_with(group, topic, "result", result.to_owned())
            )
        };
        Self {
            pulls_found: pulls("found"),
            pulls_no_new_message: pulls("no_new_message"),
            pulls_offset_moved: pulls("offset_moved"),
            pulls_throttled: pulls("throttled"),
            pulls_error: pulls("error"),
            pull_duration: histogram!(PULL_DURATION, labels(group, topic)),
            consumed: counter!(MESSAGES_CONSUMED, labels(group, topic)),
            failed: counter!(MESSAGES_FAILED, labels(group, topic)),
            consume_duration: histogram!(CONSUME_DURATION, labels(group, topic)),
            offsets_moved_back: counter!(OFFSETS_MOVED_BACK, labels(group, topic)),
        }
    }

    /// Records a pull that ended with `result` after `took`.
    pub(crate) fn pull(&self, result: PullOutcome, took: Duration) {
        match result {
            PullOutcome::Found => &self.pulls_found,
            PullOutcome::NoNewMessage => &self.pulls_no_new_message,
            PullOutcome::OffsetMoved => &self.pulls_offset_moved,
            PullOutcome::Throttled => &self.pulls_throttled,
            PullOutcome::Error => &self.pulls_error,
        }
        .increment(1);
        self.pull_duration.record(took);
    }

    /// Records a pull whose answer moved the queue's offset, `backwards` or not.
    pub(crate) fn offset_moved(&self, backwards: bool) {
        if backwards {
            self.offsets_moved_back.increment(1);
        }
    }

    /// Records a listener call that took `took`, consumed `consumed` messages and failed
    /// `failed`.
    pub(crate) fn consumed(&self, consumed: usize, failed: usize, took: Duration) {
        self.consume_duration.record(took);
        if consumed > 0 {
            self.consumed.increment(consumed as u64);
        }
        if failed > 0 {
            self.failed.increment(failed as u64);
        }
    }
}

/// How a pull ended, the `result` label of [`PULLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PullOutcome {
    Found,
    NoNewMessage,
    OffsetMoved,
    Throttled,
    Error,
}

/// One queue's share of its topic's gauges (buffered messages and bytes, lag): what it added
/// is replaced at each [`set`](Self::set) and taken back when dropped, so the gauges always
/// hold the sum over the queues consumed now.
pub(crate) struct QueueGauges {
    messages: Gauge,
    bytes: Gauge,
    lag: Gauge,
    /// What this queue added to each: messages, bytes, lag.
    added: (f64, f64, f64),
}

impl QueueGauges {
    /// The share of a queue of `topic`, zero to begin with.
    pub(crate) fn new(group: &str, topic: &str) -> Self {
        Self {
            messages: gauge!(BUFFERED_MESSAGES, labels(group, topic)),
            bytes: gauge!(BUFFERED_BYTES, labels(group, topic)),
            lag: gauge!(LAG, labels(group, topic)),
            added: (0.0, 0.0, 0.0),
        }
    }

    /// Sets this queue's share: `messages` buffered, of `bytes`, and `lag` messages behind.
    pub(crate) fn set(&mut self, messages: usize, bytes: u64, lag: i64) {
        let now = (messages as f64, bytes as f64, lag.max(0) as f64);
        let (m, b, l) = self.added;
        if now.0 != m {
            self.messages.increment(now.0 - m);
        }
        if now.1 != b {
            self.bytes.increment(now.1 - b);
        }
        if now.2 != l {
            self.lag.increment(now.2 - l);
        }
        self.added = now;
    }
}

impl Drop for QueueGauges {
    fn drop(&mut self) {
        self.set(0, 0, 0);
    }
}
