//! [`PopOptions`]: how a push consumer in POP mode is assigned its queues and pops them.

use std::time::Duration;

use super::source::MAX_POP_BATCH;

/// Which POP the consumer makes, and so how the brokers bring back a message popped and never
/// acknowledged (its consumer died, or its answer was lost).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PopMode {
    /// Orderly POP (`order=true`): the brokers give each queue to one batch at a time; the
    /// queue is blocked for other pops until the batch is acknowledged or its invisible time
    /// passes, and then popped again from its first unacknowledged message, its messages
    /// counted once more. The consumer acknowledges each queue's messages in offset order (a
    /// Rust broker 1.0 moves the group past a message left unacknowledged before an
    /// acknowledged one). Consumption within a batch is still concurrent.
    ///
    /// The default, because it is the POP that redelivers on the Rust broker 1.0, which never
    /// revives an ordinary POP's messages (see [`Ordinary`](Self::Ordinary)); it is lossless on
    /// the Java broker too. The price: a queue's next batch waits for the whole previous one,
    /// and **on the Rust broker 1.0 for the whole invisible time**, even once the batch is
    /// acknowledged (its acknowledgements do not reach the batch's record, a bug of that
    /// broker): one batch per queue per invisible time. There, give it a short
    /// [`invisible_time`](PopOptions::invisible_time) (5 s, the Java client's smallest; the
    /// consumer extends it for a batch consumed longer) and a
    /// [`poll_time`](PopOptions::poll_time) no longer (a held pop is not woken when a queue is
    /// let go, only by a new message).
    #[default]
    Orderly,
    /// The Java client's POP (`order=false`): several batches of a queue at once; a message
    /// not acknowledged within its invisible time is revived by the broker through its POP
    /// retry topic. **The Rust broker 1.0 revives nothing** (it schedules the checkpoints with
    /// an absolute time where a delay is expected, and its timer refuses them): there, a
    /// message popped and never acknowledged is lost to the group, and an invisible time
    /// cannot be extended (CHANGE_MESSAGE_INVISIBLETIME answers 1). Use it with a Java broker.
    Ordinary,
}

impl PopMode {
    /// A lower-case name for logs and output (`orderly`, `ordinary`).
    pub fn as_str(self) -> &'static str {
        match self {
            PopMode::Orderly => "orderly",
            PopMode::Ordinary => "ordinary",
        }
    }
}

/// How a push consumer in POP mode ([`PushConsumerBuilder::pop`](crate::PushConsumerBuilder::pop))
/// is assigned its queues and pops them. The defaults are the Java push consumer's, but for
/// [`mode`](Self::mode).
///
/// ```
/// use std::time::Duration;
/// use rebalance_consume::{PopMode, PopOptions};
///
/// let mut options = PopOptions::default();
/// assert_eq!(options.mode, PopMode::Orderly);
/// options.invisible_time = Duration::from_secs(30);
/// assert_eq!(options.validate(), Ok(()));
/// options.batch_size = 33;
/// assert!(options.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PopOptions {
    /// The brokers' allocation strategy (`AVG`; the brokers run `AVG` and `AVG_BY_CIRCLE`).
    pub strategy: String,
    /// Orderly (default) or ordinary POP.
    pub mode: PopMode,
    /// How many other members' shares each member also pops (RocketMQ's `popShareQueueNum`);
    /// 0 (default): every member pops every queue, one pop per broker.
    pub share: i32,
    /// At most this many messages per pop (32: `popBatchNums`; 1 to 32).
    pub batch_size: u32,
    /// How long popped messages stay invisible to other members (60 s: `popInvisibleTime`;
    /// at least 1 s). A batch still being consumed at three quarters of it has it extended;
    /// a member that dies leaves its messages invisible this long.
    pub invisible_time: Duration,
    /// How long the brokers may hold a pop when there is nothing to pop (15 s).
    pub poll_time: Duration,
    /// A queue stops popping while this many of its popped messages are not acknowledged (96:
    /// `popThresholdForQueue`).
    pub threshold_for_queue: usize,
}

impl Default for PopOptions {
    fn default() -> Self {
        Self {
            strategy: "AVG".into(),
            mode: PopMode::default(),
            share: 0,
            batch_size: MAX_POP_BATCH,
            invisible_time: Duration::from_secs(60),
            poll_time: Duration::from_secs(15),
            threshold_for_queue: 96,
        }
    }
}

/// The longest [`PopOptions::invisible_time`]: 12 hours (a member that dies leaves the messages
/// it popped invisible this long).
pub const MAX_INVISIBLE_TIME: Duration = Duration::from_secs(12 * 3600);

/// Why [`PopOptions`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PopOptionsError {
    /// The batch size is outside 1 to 32.
    #[error("pop option `batch_size` is {0}; it must be 1 to 32")]
    BatchSize(u32),
    /// The invisible time is under a second, or over [`MAX_INVISIBLE_TIME`].
    #[error(
        "pop option `invisible_time` is {0:?}; it must be at least 1 s (the consumer extends it at three quarters) and at most 12 h (a member that dies leaves its messages invisible this long; the Java client takes 5 s to 5 min)"
    )]
    InvisibleTime(Duration),
    /// The threshold is zero.
    #[error("pop option `threshold_for_queue` is zero; it must be more than zero")]
    Threshold,
    /// The share is negative.
    #[error("pop option `share` is {0}; it must be 0 or more")]
    Share(i32),
}

impl PopOptions {
    /// Sets the brokers' strategy.
    pub fn with_strategy(mut self, strategy: impl Into<String>) -> Self {
        self.strategy = strategy.into();
        self
    }

    /// Sets the mode.
    pub fn with_mode(mut self, mode: PopMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets how many other members' shares each member also pops.
    pub fn with_share(mut self, share: i32) -> Self {
        self.share = share;
        self
    }

    /// Sets the batch size.
    pub fn with_batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the invisible time.
    pub fn with_invisible_time(mut self, invisible_time: Duration) -> Self {
        self.invisible_time = invisible_time;
        self
    }

    /// Sets how long the brokers may hold a pop.
    pub fn with_poll_time(mut self, poll_time: Duration) -> Self {
        self.poll_time = poll_time;
        self
    }

    /// Sets the threshold of unacknowledged messages per queue.
    pub fn with_threshold_for_queue(mut self, threshold: usize) -> Self {
        self.threshold_for_queue = threshold;
        self
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<(), PopOptionsError> {
        if !(1..=MAX_POP_BATCH).contains(&self.batch_size) {
            return Err(PopOptionsError::BatchSize(self.batch_size));
        }
        if self.invisible_time < Duration::from_secs(1) || self.invisible_time > MAX_INVISIBLE_TIME
        {
            return Err(PopOptionsError::InvisibleTime(self.invisible_time));
        }
        if self.threshold_for_queue == 0 {
            return Err(PopOptionsError::Threshold);
        }
        if self.share < 0 {
            return Err(PopOptionsError::Share(self.share));
        }
        Ok(())
    }

    /// When a batch popped at `popped` (on tokio's clock) has its invisible time extended: at
    /// three quarters of it.
    pub(crate) fn extension_due(
        &self,
        visible_again: tokio::time::Instant,
    ) -> tokio::time::Instant {
        visible_again - self.invisible_time / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_cannot_work_are_refused() {
        let with = |f: fn(&mut PopOptions)| {
            let mut o = PopOptions::default();
            f(&mut o);
            o.validate()
        };
        let with_value = |invisible_time| {
            PopOptions::default()
                .with_invisible_time(invisible_time)
                .validate()
        };
        assert_eq!(
            with(|o| o.batch_size = 0),
            Err(PopOptionsError::BatchSize(0))
        );
        assert_eq!(with(|o| o.batch_size = 32), Ok(()));
        assert_eq!(
            with(|o| o.invisible_time = Duration::from_millis(999)),
            Err(PopOptionsError::InvisibleTime(Duration::from_millis(999)))
        );
        assert_eq!(
            with(|o| o.invisible_time = MAX_INVISIBLE_TIME),
            Ok(()),
            "12 h"
        );
        for past in [MAX_INVISIBLE_TIME + Duration::from_millis(1), Duration::MAX] {
            // `Duration::MAX` made the loop's `sent + invisible_time` overflow: a panic.
            assert_eq!(with_value(past), Err(PopOptionsError::InvisibleTime(past)));
        }
        assert_eq!(
            with(|o| o.threshold_for_queue = 0),
            Err(PopOptionsError::Threshold)
        );
        assert_eq!(with(|o| o.share = -1), Err(PopOptionsError::Share(-1)));
    }

    #[test]
    fn extension_is_due_at_three_quarters() {
        let o = PopOptions::default();
        let now = tokio::time::Instant::now();
        let visible = now + o.invisible_time;
        assert_eq!(o.extension_due(visible), now + Duration::from_secs(45));
    }
}
