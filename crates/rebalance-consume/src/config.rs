//! [`ConsumeOptions`]: how a [`PushConsumer`](super::PushConsumer) pulls, buffers and consumes,
//! with the Java push consumer's defaults.

use std::time::Duration;

use super::source::{DEFAULT_PULL_BATCH_BYTES, DEFAULT_PULL_BATCH_SIZE, DEFAULT_PULL_SUSPEND};

/// How long a pull loop waits after a failed pull or offset lookup (the Java client's
/// `pullTimeDelayMillsWhenException`).
pub const PULL_ERROR_DELAY: Duration = Duration::from_secs(3);
/// The longest a pull loop waits between attempts the source denies
/// ([`RemoteError::Denied`](rebalance_runtime::RemoteError::Denied): the credentials or permissions are
/// refused): it waits [`PULL_ERROR_DELAY`] after the first denial and twice as long after
/// each further one in a row, up to this, until a pull succeeds.
pub const MAX_DENIED_DELAY: Duration = Duration::from_secs(60);
/// How long a pull loop waits after the source asked it to slow down (Java:
/// `PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL`).
pub const THROTTLED_DELAY: Duration = Duration::from_millis(20);
/// How long a pull loop over a flow-control limit waits before it checks again (Java:
/// `PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL`); it pulls sooner when consumption brings
/// its buffer back under the limits.
pub const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// The shortest time between the starts of two pulls of a queue when the first moved nothing
/// forward (no new message and the same offset again, answered before this long): a source
/// that does not hold pulls, or a broker answering `PULL_RETRY_IMMEDIATELY` with the offset
/// asked, would otherwise be pulled again at network speed. The RocketMQ broker's short
/// polling holds a pull this long.
pub const EMPTY_PULL_SPACING: Duration = Duration::from_secs(1);
/// How long a message whose send-back failed waits before it is consumed again locally.
pub const LOCAL_RETRY_DELAY: Duration = Duration::from_secs(5);
/// A pull loop that has not pulled (nor checked its flow control) for this long is restarted
/// (Java: `PULL_MAX_IDLE_TIME`); while it waits for a pull's answer, for longer when the pull
/// may take longer (a `pull_suspend` over 101 s: the suspension, 16 s more before the pull is
/// cut short, and 3 s of margin).
pub const PULL_EXPIRY: Duration = Duration::from_secs(120);
/// The delay level of a message sent back because its consumption timed out (Java: 3, 10 s).
pub const EXPIRED_DELAY_LEVEL: i32 = 3;
/// The shortest suspension of an ordered queue.
pub const MIN_SUSPEND: Duration = Duration::from_millis(10);
/// The longest suspension of an ordered queue.
pub const MAX_SUSPEND: Duration = Duration::from_secs(30);

/// The most batches a consumer may consume at once ([`ConsumeOptions::consume_concurrency`]):
/// a concurrent consumer runs a worker each, and an ordered one's permits are a tokio
/// semaphore's (the Java client allows 1,000 threads).
pub const MAX_CONSUME_CONCURRENCY: usize = 65_536;

/// How a [`PushConsumer`](super::PushConsumer) pulls, buffers and consumes. Every field has
/// the Java push consumer's default; [`validate`](Self::validate) checks a value before use.
///
/// ```
/// use rebalance_consume::ConsumeOptions;
///
/// let mut options = ConsumeOptions::default();
/// options.consume_concurrency = 4;
/// assert_eq!(options.validate(), Ok(()));
/// options.consume_batch_size = 0;
/// assert!(options.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumeOptions {
    /// How many batches are consumed at once, over every queue (20: `consumeThreadMax`); at
    /// most [`MAX_CONSUME_CONCURRENCY`].
    pub consume_concurrency: usize,
    /// At most this many messages per listener call (1: `consumeMessageBatchMaxSize`).
    pub consume_batch_size: usize,
    /// At most this many messages per pull (32).
    pub pull_batch_size: u32,
    /// At most about this many body bytes per pull (256 KiB).
    pub pull_batch_bytes: u32,
    /// How long the source may hold a pull of a queue with no new message (15 s). A pull that
    /// has not answered 15 s after that counts as an error, pulled again after
    /// [`PULL_ERROR_DELAY`] (the Java client's 30 s RPC timeout). Not zero: an idle queue
    /// would be pulled again as soon as each pull answers; and whatever it is, an idle queue is
    /// pulled at most once per [`EMPTY_PULL_SPACING`] when the source answers sooner.
    pub pull_suspend: Duration,
    /// A queue stops pulling while it buffers this many messages (1,000:
    /// `pullThresholdForQueue`).
    pub queue_max_messages: usize,
    /// ... or this many body bytes (100 MiB: `pullThresholdSizeForQueue`).
    pub queue_max_bytes: u64,
    /// Concurrent consumption: a queue stops pulling while its buffered messages span more
    /// offsets than this (2,000: `consumeConcurrentlyMaxSpan`), so that one slow message does
    /// not hold the commit offset back behind an ever longer tail.
    pub max_span: i64,
    /// A limit of buffered messages per topic, split evenly over the topic's queues that this
    /// client holds (at least one each); `None` (default): no such limit.
    pub topic_max_messages: Option<usize>,
    /// A limit of buffered body bytes per topic, split the same way; `None` (default).
    pub topic_max_bytes: Option<u64>,
    /// After this many redeliveries a failed message goes to the group's dead-letter topic (16).
    pub max_reconsume_times: i32,
    /// Ordered consumption: how long a queue waits before retrying a batch its listener
    /// suspended, unless the listener sets its own (1 s; clamped to 10 ms – 30 s).
    pub suspend_time: Duration,
    /// Concurrent consumption: a batch still in the listener after this long is sent back for
    /// redelivery, so that it no longer holds the commit offset (15 min: `consumeTimeout`).
    pub consume_timeout: Duration,
    /// How long the hand-off of a removed queue waits for the batches of that queue in the
    /// listener; `None` (default): until they finish (the consumer's `callback_timeout` still
    /// bounds the callback that waits). Batches still in the listener then, concurrent or
    /// ordered, are not cancelled: they run on, but the final commit is made without them, so
    /// the queue's next owner consumes their messages again. Setting it therefore gives up
    /// `exclusive_hand_off`'s promise that no message is processed by two members. It also bounds,
    /// from the start of a [`PushConsumerHandle::shutdown`](super::PushConsumerHandle::shutdown),
    /// how long the shutdown waits for the workers before it abandons the batches still in the
    /// listener: one bound for the hand-offs and the workers together.
    pub await_in_flight: Option<Duration>,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        Self {
            consume_concurrency: 20,
            consume_batch_size: 1,
            pull_batch_size: DEFAULT_PULL_BATCH_SIZE,
            pull_batch_bytes: DEFAULT_PULL_BATCH_BYTES,
            pull_suspend: DEFAULT_PULL_SUSPEND,
            queue_max_messages: 1000,
            queue_max_bytes: 100 * 1024 * 1024,
            max_span: 2000,
            topic_max_messages: None,
            topic_max_bytes: None,
            max_reconsume_times: 16,
            suspend_time: Duration::from_secs(1),
            consume_timeout: Duration::from_secs(15 * 60),
            await_in_flight: None,
        }
    }
}

/// Why [`ConsumeOptions`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeOptionsError {
    /// A count or duration that must be positive is zero.
    #[error("consume option `{0}` is zero; it must be more than zero")]
    Zero(&'static str),
    /// `max_reconsume_times` is negative.
    #[error("consume option `max_reconsume_times` is {0}; it must be 0 or more")]
    NegativeReconsumeTimes(i32),
    /// A count is more than can work.
    #[error("consume option `{name}` is {value}; it must be at most {max}")]
    TooLarge {
        /// The option.
        name: &'static str,
        /// Its value.
        value: usize,
        /// The largest it may be.
        max: usize,
    },
}

impl ConsumeOptions {
    /// Checks that counts and the consume timeout are positive, and that
    /// `consume_concurrency` is at most [`MAX_CONSUME_CONCURRENCY`].
    pub fn validate(&self) -> Result<(), ConsumeOptionsError> {
        let zero = [
            ("consume_concurrency", self.consume_concurrency == 0),
            ("consume_batch_size", self.consume_batch_size == 0),
            ("pull_batch_size", self.pull_batch_size == 0),
            ("pull_batch_bytes", self.pull_batch_bytes == 0),
            ("queue_max_messages", self.queue_max_messages == 0),
            ("queue_max_bytes", self.queue_max_bytes == 0),
            ("max_span", self.max_span <= 0),
            ("topic_max_messages", self.topic_max_messages == Some(0)),
            ("topic_max_bytes", self.topic_max_bytes == Some(0)),
            ("consume_timeout", self.consume_timeout.is_zero()),
            ("pull_suspend", self.pull_suspend.is_zero()),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, bad)| *bad) {
            return Err(ConsumeOptionsError::Zero(name));
        }
        if self.max_reconsume_times < 0 {
            return Err(ConsumeOptionsError::NegativeReconsumeTimes(
                self.max_reconsume_times,
            ));
        }
        if self.consume_concurrency > MAX_CONSUME_CONCURRENCY {
            return Err(ConsumeOptionsError::TooLarge {
                name: "consume_concurrency",
                value: self.consume_concurrency,
                max: MAX_CONSUME_CONCURRENCY,
            });
        }
        Ok(())
    }

    /// The suspension of an ordered queue: the listener's choice or the default, clamped.
    pub(crate) fn suspend(&self, chosen: Option<Duration>) -> Duration {
        chosen
            .unwrap_or(self.suspend_time)
            .clamp(MIN_SUSPEND, MAX_SUSPEND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspension_is_clamped() {
        let options = ConsumeOptions::default();
        assert_eq!(options.suspend(None), Duration::from_secs(1));
        assert_eq!(options.suspend(Some(Duration::ZERO)), MIN_SUSPEND);
        assert_eq!(options.suspend(Some(Duration::from_secs(90))), MAX_SUSPEND);
    }

    #[test]
    fn zero_and_negative_values_are_refused() {
        let bad = ConsumeOptions {
            max_reconsume_times: -1,
            ..ConsumeOptions::default()
        };
        assert_eq!(
            bad.validate(),
            Err(ConsumeOptionsError::NegativeReconsumeTimes(-1))
        );
        let no_long_polling = ConsumeOptions {
            pull_suspend: Duration::ZERO,
            ..ConsumeOptions::default()
        };
        assert_eq!(
            no_long_polling.validate(),
            Err(ConsumeOptionsError::Zero("pull_suspend"))
        );
        let too_many = ConsumeOptions {
            consume_concurrency: MAX_CONSUME_CONCURRENCY + 1,
            ..ConsumeOptions::default()
        };
        assert!(matches!(
            too_many.validate(),
            Err(ConsumeOptionsError::TooLarge {
                name: "consume_concurrency",
                ..
            })
        ));
        let most = ConsumeOptions {
            consume_concurrency: MAX_CONSUME_CONCURRENCY,
            ..ConsumeOptions::default()
        };
        assert_eq!(most.validate(), Ok(()));
        let zero = ConsumeOptions {
            topic_max_bytes: Some(0),
            ..ConsumeOptions::default()
        };
        assert_eq!(
            zero.validate(),
            Err(ConsumeOptionsError::Zero("topic_max_bytes"))
        );
    }
}
