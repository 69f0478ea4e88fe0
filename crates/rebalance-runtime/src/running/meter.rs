//! [`ConsumeMeter`]: per-topic pull and consume figures over the last minute and hour, what the
//! Java client's `ConsumerStatsManager` keeps for `GET_CONSUMER_RUNNING_INFO`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::ConsumeStatus;

/// One second (or one minute) of figures.
#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    /// Which second (minute) since the meter's origin this bucket holds.
    slot: u64,
    pulls: u64,
    pull_micros: u64,
    ok: u64,
    failed: u64,
    consumes: u64,
    consume_micros: u64,
}

impl Bucket {
    fn add(&mut self, other: &Bucket) {
        self.pulls += other.pulls;
        self.pull_micros += other.pull_micros;
        self.ok += other.ok;
        self.failed += other.failed;
        self.consumes += other.consumes;
        self.consume_micros += other.consume_micros;
    }
}

/// A ring of `N` buckets of `width` each: the figures of the last `N * width`.
#[derive(Debug, Clone)]
struct Ring<const N: usize> {
    buckets: [Bucket; N],
}

impl<const N: usize> Default for Ring<N> {
    fn default() -> Self {
        Self {
            buckets: [Bucket::default(); N],
        }
    }
}

impl<const N: usize> Ring<N> {
    /// The bucket of `slot`, emptied when it held an older slot.
    fn at(&mut self, slot: u64) -> &mut Bucket {
        let bucket = &mut self.buckets[(slot % N as u64) as usize];
        if bucket.slot != slot {
            *bucket = Bucket {
                slot,
                ..Bucket::default()
            };
        }
        bucket
    }

    /// The sum of the buckets of the `N` slots up to `now_slot`, the current one excluded
    /// (Java samples whole seconds and minutes).
    fn total(&self, now_slot: u64) -> Bucket {
        let mut total = Bucket::default();
        for bucket in &self.buckets {
            if bucket.slot < now_slot && bucket.slot + N as u64 >= now_slot {
                total.add(bucket);
            }
        }
        total
    }
}

/// One topic's windows: 60 seconds and 60 minutes.
#[derive(Debug, Default, Clone)]
struct TopicWindows {
    seconds: Ring<60>,
    minutes: Ring<60>,
}

/// One topic's windows, shared by the leases of its queues (each keeps the handle, so that
/// recording a batch takes no lookup by name).
#[derive(Debug, Default)]
pub(crate) struct TopicMeter {
    windows: Mutex<TopicWindows>,
}

/// The consume layer's figures of one consumer, by topic. Bounded: one fixed-size pair of
/// windows per topic recorded, and topics are only those of the consumer's queues.
#[derive(Debug)]
pub(crate) struct ConsumeMeter {
    origin: Instant,
    topics: Mutex<HashMap<String, Arc<TopicMeter>>>,
}

impl ConsumeMeter {
    pub(crate) fn new(origin: Instant) -> Self {
        Self {
            origin,
            topics: Mutex::new(HashMap::new()),
        }
    }

    fn slots(&self, now: Instant) -> (u64, u64) {
        let secs = now.saturating_duration_since(self.origin).as_secs();
        (secs, secs / 60)
    }

    /// `topic`'s windows, made on first use.
    pub(crate) fn topic(&self, topic: &str) -> Arc<TopicMeter> {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        match topics.get(topic) {
            Some(meter) => meter.clone(),
            None => topics.entry(topic.to_string()).or_default().clone(),
        }
    }

    fn record(&self, meter: &TopicMeter, now: Instant, edit: impl Fn(&mut Bucket)) {
        let (second, minute) = self.slots(now);
        let mut windows = meter.windows.lock().unwrap_or_else(PoisonError::into_inner);
        edit(windows.seconds.at(second));
        edit(windows.minutes.at(minute));
    }

    /// A pull of `topic` that took `latency`.
    #[cfg(test)]
    pub(crate) fn pulled(&self, topic: &str, latency: Duration, now: Instant) {
        self.pulled_on(&self.topic(topic), latency, now);
    }

    /// A pull of the topic of `meter` that took `latency`.
    pub(crate) fn pulled_on(&self, meter: &TopicMeter, latency: Duration, now: Instant) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.record(meter, now, |b| {
            b.pulls += 1;
            b.pull_micros = b.pull_micros.saturating_add(micros);
        });
    }

    /// A batch of `topic` consumed: `ok` messages consumed, `failed` not, in `spent`.
    #[cfg(test)]
    pub(crate) fn consumed(
        &self,
        topic: &str,
        ok: u64,
        failed: u64,
        spent: Duration,
        now: Instant,
    ) {
        self.consumed_on(&self.topic(topic), 1, ok, failed, spent, now);
    }

    /// `calls` batches of the topic of `meter` consumed: `ok` messages consumed, `failed` not,
    /// in `spent` in all.
    pub(crate) fn consumed_on(
        &self,
        meter: &TopicMeter,
        calls: u64,
        ok: u64,
        failed: u64,
        spent: Duration,
        now: Instant,
    ) {
        let micros = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
        self.record(meter, now, |b| {
            b.ok += ok;
            b.failed += failed;
            b.consumes += calls;
            b.consume_micros = b.consume_micros.saturating_add(micros);
        });
    }

    /// Whether anything was ever recorded (a consume layer runs).
    pub(crate) fn is_used(&self) -> bool {
        !self
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// `topic`'s status as of `now`: rates over the last whole minute, failures over the last
    /// hour, average latencies in milliseconds (consume latency from the hour when the minute
    /// has none, as Java does).
    pub(crate) fn status(&self, topic: &str, now: Instant) -> ConsumeStatus {
        let (second, minute) = self.slots(now);
        let Some(meter) = self
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .cloned()
        else {
            return ConsumeStatus::default();
        };
        let windows = meter.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let last_minute = windows.seconds.total(second);
        let last_hour = windows.minutes.total(minute + 1);
        let avg_ms = |micros: u64, count: u64| {
            if count == 0 {
                0.0
            } else {
                micros as f64 / count as f64 / 1000.0
            }
        };
        let consume_rt = if last_minute.consumes > 0 {
            avg_ms(last_minute.consume_micros, last_minute.consumes)
        } else {
            avg_ms(last_hour.consume_micros, last_hour.consumes)
        };
        ConsumeStatus {
            pull_rt: avg_ms(last_minute.pull_micros, last_minute.pulls),
            pull_tps: last_minute.pulls as f64 / 60.0,
            consume_rt,
            consume_ok_tps: last_minute.ok as f64 / 60.0,
            consume_failed_tps: last_minute.failed as f64 / 60.0,
            consume_failed_msgs: last_hour.failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rates_cover_the_last_minute_and_failures_the_last_hour() {
        let origin = Instant::now();
        let meter = ConsumeMeter::new(origin);
        assert!(!meter.is_used());
        for s in 0..60 {
            let at = origin + Duration::from_secs(s);
            meter.pulled("T", Duration::from_millis(10), at);
            meter.consumed("T", 2, 1, Duration::from_millis(4), at);
        }
        assert!(meter.is_used());
        let status = meter.status("T", origin + Duration::from_secs(60));
        assert_eq!(status.pull_tps, 1.0);
        assert_eq!(status.pull_rt, 10.0);
        assert_eq!(status.consume_ok_tps, 2.0);
        assert_eq!(status.consume_failed_tps, 1.0);
        assert_eq!(status.consume_rt, 4.0);
        assert_eq!(status.consume_failed_msgs, 60);
        assert_eq!(meter.status("other", origin), ConsumeStatus::default());
        // Ten minutes later the minute is quiet, the hour still counts the failures, and the
        // consume latency falls back to the hour.
        let later = meter.status("T", origin + Duration::from_secs(600));
        assert_eq!(later.pull_tps, 0.0);
        assert_eq!(later.consume_ok_tps, 0.0);
        assert_eq!(later.consume_failed_msgs, 60);
        assert_eq!(later.consume_rt, 4.0);
        // Two hours later nothing is left.
        let gone = meter.status("T", origin + Duration::from_secs(7200));
        assert_eq!(gone, ConsumeStatus::default());
    }
}
