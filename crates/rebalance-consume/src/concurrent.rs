//! Concurrent consumption: the workers that take batches from the work queue, call the
//! [`ConcurrentListener`], send failed messages back and report to each lease's pull loop.

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;

use tokio_util::sync::CancellationToken;

use super::calls;
use super::config::EXPIRED_DELAY_LEVEL;
use super::link::{Ack, Guard, LeaseLink, Tally};
use super::shared::Shared;
use super::work::{Span, Taken, WorkQueue};
use super::{ConcurrentContext, ConcurrentListener, Message, SendBack, property};
use rebalance_runtime::containment::caught;
use rebalance_runtime::subscription::is_retry_topic;

/// The most messages a worker reserves room for as it starts (its buffer grows when a batch
/// is larger): a pull's default of 32 is far below.
const MAX_RESERVED_BATCH: usize = 1024;

/// One worker: consumes batches until `stop` is cancelled (finishing the batch in hand).
pub(crate) async fn run_worker(
    shared: Arc<Shared>,
    listener: Arc<dyn ConcurrentListener>,
    work: Arc<WorkQueue>,
    stop: CancellationToken,
) {
    // The worker's own child of `stop`: checked before every take, and a token's check locks
    // its node, which every worker of the consumer would otherwise lock, from every thread.
    let stop = stop.child_token();
    let size = shared.options.consume_batch_size;
    // Room for one batch, which never holds more than one pull's messages: never the batch size
    // itself, which may be far more than any pull (up to `usize::MAX`).
    let pull = usize::try_from(shared.options.pull_batch_size).unwrap_or(usize::MAX);
    let mut messages = Vec::with_capacity(size.min(pull).min(MAX_RESERVED_BATCH));
    let mut context = None;
    while let Some(taken) = work.next(size, &mut messages, &stop).await {
        consume(&shared, &*listener, &taken, &mut messages, &mut context).await;
        messages.clear();
    }
}

/// Consumes one batch of a lease (`taken`: its link, the buffer epoch it was taken in, where
/// it sits in its work-queue entry) and reports it to the lease's loop. `messages` is left
/// empty or holding what was not reported. `context`: the worker's, renewed for the batch
/// (made at its first).
pub(crate) async fn consume(
    shared: &Shared,
    listener: &dyn ConcurrentListener,
    taken: &Taken,
    messages: &mut Vec<Message>,
    context: &mut Option<ConcurrentContext>,
) {
    let (link, epoch, span) = (&*taken.link, taken.epoch, taken.span);
    let (Some(first), Some(last)) = (messages.first(), messages.last()) else {
        return;
    };
    let (first, last) = (first.queue_offset(), last.queue_offset());
    if !link.begin() {
        // Handed off before it started: dropped unprocessed (the commit offset stays before
        // it, so the next owner consumes it).
        return;
    }
    // One clock read: the trust is checked at the call's start.
    let started = tokio::time::Instant::now();
    let guard = match link.consume_guard(started).await {
        Guard::Unneeded => None,
        Guard::Held(guard) => Some(guard),
        Guard::Refused => {
            // Not processed: the batch stays buffered (before the commit offset), consumed
            // again locally when the lock is renewed, or by the next owner once handed off.
            tracing::debug!(queue = ?link.queue(), first, "no consume guard; the batch waits");
            link.report(Ack {
                epoch,
                first,
                last,
                retry: std::mem::take(messages),
                finished: 1,
                guard: None,
                tally: Tally::default(),
                span: Span::ALONE,
            });
            return;
        }
    };
    let started = if guard.is_some() {
        // The call starts after the wait for the guard.
        tokio::time::Instant::now()
    } else {
        started
    };
    restore_topics(messages);
    let context = match context {
        Some(context) => {
            context.renew(link.queue());
            context
        }
        None => context.insert(ConcurrentContext::new(link.queue().clone())),
    };
    let in_flight = shared.in_flight.enter(link.queue(), first, last, started);
    let batch = messages.len();
    // `expired`: messages of the batch already sent back because it timed out (no longer
    // buffered).
    let (consumed, expired) = {
        let call = caught(link.processing(listener.consume(messages, context)));
        let expiry = Expiry {
            shared,
            link,
            epoch,
            messages,
            first,
            last,
        };
        match expiry.run(call).await {
            Outcome::Done(Ok(result), sent_back) => {
                (context.consumed(result, messages.len()), sent_back)
            }
            Outcome::Done(Err(panic), sent_back) => {
                tracing::error!(queue = ?link.queue(), first, panic = %panic, "the listener panicked; reconsuming the batch later");
                (0, sent_back)
            }
            Outcome::Expired => {
                let took = started.elapsed();
                link.metrics().consumed(0, batch, took);
                link.report(Ack {
                    epoch,
                    first,
                    last,
                    retry: Vec::new(),
                    finished: 1,
                    guard,
                    tally: Tally::call(0, batch, took),
                    span: Span::ALONE,
                });
                return;
            }
        }
    };
    drop(in_flight);
    let failed = batch.saturating_sub(consumed);
    let took = started.elapsed();
    link.metrics().consumed(consumed, failed, took);
    let retry = if consumed == messages.len() {
        Vec::new()
    } else if shared.broadcasting {
        tracing::warn!(queue = ?link.queue(), count = messages.len() - consumed, "broadcasting: messages the listener failed are dropped");
        Vec::new()
    } else {
        // Those sent back when the batch timed out are no longer buffered: not again (Java's
        // `!processQueue.containsMessage`).
        let mut failed = messages.split_off(consumed);
        failed.retain(|m| !expired.contains(&m.queue_offset()));
        if link.is_dropped() {
            // Handed off meanwhile: not sent back; they stay before the final commit offset,
            // and the next owner consumes them.
            failed
        } else {
            send_back(shared, link, failed, context.delay_level).await
        }
    };
    link.report(Ack {
        epoch,
        first,
        last,
        retry,
        finished: 1,
        guard,
        tally: Tally::call(consumed, failed, took),
        span,
    });
}

/// Sends failed messages back; returns those whose send-back failed (consumed again locally
/// later, as in Java, with their reconsume count raised).
pub(crate) async fn send_back(
    shared: &Shared,
    link: &LeaseLink,
    failed: Vec<Message>,
    delay_level: i32,
) -> Vec<Message> {
    let mut retry = Vec::new();
    for message in failed {
        let request = SendBack::new(&shared.group, &message)
            .with_delay_level(delay_level)
            .with_max_reconsume_times(shared.options.max_reconsume_times);
        match calls::send_back(&*shared.source, request).await {
            Ok(()) => {
                tracing::debug!(queue = ?link.queue(), offset = message.queue_offset(), "sent back for redelivery")
            }
            Err(e) => {
                tracing::warn!(queue = ?link.queue(), offset = message.queue_offset(), error = %e, "send-back failed; consuming the message again here in 5 s");
                let times = message.reconsume_times().saturating_add(1);
                retry.push(message.with_reconsume_times(times));
            }
        }
    }
    retry
}

/// Shows a retry topic's messages under the topic they came from.
pub(crate) fn restore_topics(messages: &mut Vec<Message>) {
    if !messages.iter().any(|m| is_retry_topic(&m.queue().topic)) {
        return;
    }
    *messages = std::mem::take(messages)
        .into_iter()
        .map(|message| match message.property(property::RETRY_TOPIC) {
            Some(topic) if is_retry_topic(&message.queue().topic) => {
                let topic = topic.to_owned();
                message.with_topic(topic)
            }
            _ => message,
        })
        .collect();
}

/// How a listener call ended.
enum Outcome<T> {
    /// It ended, with the offsets of the messages sent back when it timed out (some send-backs
    /// failed, so the batch was not acknowledged).
    Done(T, Vec<i64>),
    /// It ran past `consume_timeout`: its messages were sent back and acknowledged.
    Expired,
}

/// Watches a listener call for `consume_timeout`.
struct Expiry<'a> {
    shared: &'a Shared,
    link: &'a LeaseLink,
    epoch: u64,
    messages: &'a [Message],
    first: i64,
    last: i64,
}

impl Expiry<'_> {
    /// Awaits `call`; past `consume_timeout`, sends the batch back (so that it no longer holds
    /// the commit offset), acknowledges it and still waits for the call to end.
    async fn run<T>(self, call: impl Future<Output = T>) -> Outcome<T> {
        tokio::pin!(call);
        // Most calls end at once: no timer for them.
        if let Poll::Ready(done) = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
            return Outcome::Done(done, Vec::new());
        }
        let timeout = self.shared.options.consume_timeout;
        tokio::select! {
            done = &mut call => return Outcome::Done(done, Vec::new()),
            _ = tokio::time::sleep(timeout) => {}
        }
        tracing::warn!(queue = ?self.link.queue(), first = self.first, ?timeout, "consumption timed out; sending the batch back");
        let mut remaining: Vec<&Message> = if self.shared.broadcasting {
            Vec::new()
        } else {
            self.messages.iter().collect()
        };
        let mut sent_back = Vec::new();
        loop {
            if self.link.is_dropped() {
                // Handed off: what is not sent back stays before the final commit offset, and
                // the next owner consumes it (found by review: sent back all the same, every
                // message was delivered twice).
                return Outcome::Done(call.await, sent_back);
            }
            let mut failed = Vec::new();
            for message in remaining {
                let request = SendBack::new(&self.shared.group, message)
                    .with_delay_level(EXPIRED_DELAY_LEVEL)
                    .with_max_reconsume_times(self.shared.options.max_reconsume_times);
                if let Err(e) = calls::send_back(&*self.shared.source, request).await {
                    tracing::warn!(queue = ?self.link.queue(), offset = message.queue_offset(), error = %e, retry_in = ?timeout, "could not send back a timed-out message; it keeps holding the commit offset until sent back");
                    failed.push(message);
                } else {
                    sent_back.push(message.queue_offset());
                }
            }
            remaining = failed;
            if remaining.is_empty() {
                self.link.report(Ack {
                    epoch: self.epoch,
                    first: self.first,
                    last: self.last,
                    retry: Vec::new(),
                    finished: 0,
                    guard: None,
                    tally: Tally::default(),
                    span: Span::ALONE,
                });
                call.await;
                return Outcome::Expired;
            }
            // Those whose send-back failed are sent back again a `consume_timeout` later (the
            // Java client's `cleanExpiredMsg` looks every 15 minutes), unless the call ends
            // first (found by review: never again, and a call that never ended held the
            // queue's commit offset, then its pulls, for good).
            tokio::select! {
                done = &mut call => return Outcome::Done(done, sent_back),
                _ = tokio::time::sleep(timeout) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use rebalance_core::MessageQueue;

    use super::*;
    use crate::link::AckReceiver;
    use crate::metrics::TopicMetrics;
    use crate::shared::Mode;
    use crate::testing::TestSource;
    use crate::{ConsumeOptions, ConsumeResult};

    /// Records the topics it sees; sleeps `delay`; fails everything when `fail`.
    #[derive(Default)]
    struct Seen {
        delay: Duration,
        fail: bool,
        topics: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl ConcurrentListener for Seen {
        async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
            tokio::time::sleep(self.delay).await;
            let mut topics = self.topics.lock().unwrap();
            topics.extend(messages.iter().map(|m| m.topic().to_owned()));
            if self.fail {
                ConsumeResult::ReconsumeLater
            } else {
                ConsumeResult::Success
            }
        }
    }

    fn shared(source: Arc<TestSource>, broadcasting: bool, options: ConsumeOptions) -> Shared {
        Shared::new(
            Arc::from("G"),
            source,
            options,
            broadcasting,
            Mode::Concurrent {
                work: Arc::new(WorkQueue::default()),
            },
            HashMap::new(),
        )
    }

    fn alone(link: &Arc<LeaseLink>) -> Taken {
        Taken {
            link: link.clone(),
            epoch: 0,
            span: Span::ALONE,
        }
    }

    fn link(queue: &MessageQueue) -> (Arc<LeaseLink>, AckReceiver) {
        let link = Arc::new(LeaseLink::detached(
            queue.clone(),
            Arc::new(TopicMetrics::new("G", &queue.topic)),
        ));
        let acks = AckReceiver::new(&link);
        (link, acks)
    }

    #[tokio::test(start_paused = true)]
    async fn retry_topic_messages_are_shown_under_their_original_topic() {
        let source = Arc::new(TestSource::default());
        let shared = shared(source, false, ConsumeOptions::default());
        let retry = MessageQueue::new("%RETRY%G", "b", 0);
        let messages = vec![
            Message::new(retry.clone(), 0, "x").with_property(property::RETRY_TOPIC, "Orders"),
            Message::new(retry.clone(), 1, "y"),
        ];
        let listener = Seen::default();
        let (link, mut acks) = link(&retry);
        consume(
            &shared,
            &listener,
            &alone(&link),
            &mut { messages },
            &mut None,
        )
        .await;
        assert_eq!(*listener.topics.lock().unwrap(), ["Orders", "%RETRY%G"]);
        let ack = acks.recv().await;
        assert_eq!(
            (ack.first, ack.last, ack.retry.len(), ack.finished),
            (0, 1, 0, 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_back_that_panics_keeps_the_message_for_a_local_retry() {
        let source = Arc::new(TestSource::default());
        source.with(|s| s.panicking_send_backs = 1);
        let shared = shared(source.clone(), false, ConsumeOptions::default());
        let q = MessageQueue::new("T", "b", 0);
        let listener = Seen {
            fail: true,
            ..Seen::default()
        };
        let (link, mut acks) = link(&q);
        let mut messages = vec![Message::new(q.clone(), 7, "x")];
        consume(&shared, &listener, &alone(&link), &mut messages, &mut None).await;
        let ack = acks.recv().await;
        let kept: Vec<(i64, i32)> = ack
            .retry
            .iter()
            .map(|m| (m.queue_offset(), m.reconsume_times()))
            .collect();
        assert_eq!(kept, vec![(7, 1)], "kept, counted once more");
        assert_eq!(ack.finished, 1);
    }

    /// Sleeps `delay` on the message at offset `slow`; consumes everything.
    struct SlowAt {
        slow: i64,
        delay: Duration,
    }

    #[async_trait]
    impl ConcurrentListener for SlowAt {
        async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
            if messages.iter().any(|m| m.queue_offset() == self.slow) {
                tokio::time::sleep(self.delay).await;
            }
            ConsumeResult::Success
        }
    }

    /// Runs one worker over `count` messages of one pull, with `listener`; returns the
    /// reports its loop receives, with when each came, until `count` batches are reported.
    async fn reports_of(listener: SlowAt, count: i64) -> Vec<(Duration, i64, i64, u64)> {
        let source = Arc::new(TestSource::default());
        let shared = Arc::new(shared(source, false, ConsumeOptions::default()));
        let q = MessageQueue::new("T", "b", 0);
        let (link, mut acks) = link(&q);
        let work = Arc::new(WorkQueue::default());
        work.push(
            link,
            0,
            (0..count)
                .map(|o| Message::new(q.clone(), o, "x"))
                .collect(),
        );
        let stop = CancellationToken::new();
        let worker = tokio::spawn(run_worker(shared, Arc::new(listener), work, stop.clone()));
        let started = tokio::time::Instant::now();
        let mut reports = Vec::new();
        let mut finished = 0;
        while finished < count as u64 {
            let ack = acks.recv().await;
            finished += ack.finished;
            reports.push((started.elapsed(), ack.first, ack.last, ack.finished));
        }
        stop.cancel();
        worker.await.unwrap();
        reports
    }

    #[tokio::test(start_paused = true)]
    async fn batches_consumed_before_the_loop_looks_are_reported_together() {
        let fast = SlowAt {
            slow: -1,
            delay: Duration::ZERO,
        };
        assert_eq!(
            reports_of(fast, 4).await,
            vec![(Duration::ZERO, 0, 3, 4)],
            "one report for the pull's four batches, consumed before the loop looked"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reports_are_made_while_the_next_call_waits() {
        let slow = SlowAt {
            slow: 2,
            delay: Duration::from_secs(10),
        };
        assert_eq!(
            reports_of(slow, 4).await,
            vec![
                (Duration::ZERO, 0, 1, 2),
                (Duration::from_secs(10), 2, 3, 2)
            ],
            "the first two are taken by the loop while the third is in the listener"
        );
    }

    /// A batch size larger than any pull's (found by review): each worker reserved room for
    /// that many messages as it started, so `usize::MAX` panicked every worker (the consumer
    /// pulled and never consumed) and a large one reserved gigabytes per worker, or aborted the
    /// process. A worker reserves room for one pull's messages at most.
    #[tokio::test(start_paused = true)]
    async fn a_batch_size_larger_than_any_pull_is_consumed() {
        let source = Arc::new(TestSource::default());
        let options = ConsumeOptions {
            consume_batch_size: usize::MAX,
            ..ConsumeOptions::default()
        };
        let shared = Arc::new(shared(source, false, options));
        let q = MessageQueue::new("T", "b", 0);
        let (link, mut acks) = link(&q);
        let work = Arc::new(WorkQueue::default());
        work.push(
            link,
            0,
            (0..4).map(|o| Message::new(q.clone(), o, "x")).collect(),
        );
        let stop = CancellationToken::new();
        let worker = tokio::spawn(run_worker(
            shared,
            Arc::new(Seen::default()),
            work,
            stop.clone(),
        ));
        let ack = tokio::time::timeout(Duration::from_secs(1), acks.recv())
            .await
            .expect("the pull's messages are consumed, as one batch");
        assert_eq!((ack.first, ack.last, ack.finished), (0, 3, 1));
        stop.cancel();
        worker.await.expect("the worker ends normally");
    }

    #[tokio::test(start_paused = true)]
    async fn broadcasting_drops_failures() {
        let source = Arc::new(TestSource::default());
        let shared = shared(source.clone(), true, ConsumeOptions::default());
        let q = MessageQueue::new("T", "b", 0);
        let listener = Seen {
            fail: true,
            ..Seen::default()
        };
        let (link, mut acks) = link(&q);
        let mut messages = vec![Message::new(q.clone(), 7, "x")];
        consume(&shared, &listener, &alone(&link), &mut messages, &mut None).await;
        let ack = acks.recv().await;
        assert!(ack.retry.is_empty(), "acknowledged, not kept");
        assert!(source.with(|s| s.sent_back.is_empty()), "not sent back");
    }

    /// A batch of one message (offset 3) whose listener call takes `delay`, with a 60 s
    /// `consume_timeout`.
    struct Stuck {
        source: Arc<TestSource>,
        shared: Shared,
        listener: Seen,
        link: Arc<LeaseLink>,
        acks: AckReceiver,
        taken: Taken,
        messages: Vec<Message>,
        context: Option<ConcurrentContext>,
    }

    fn stuck(delay: Duration) -> Stuck {
        let source = Arc::new(TestSource::default());
        let options = ConsumeOptions {
            consume_timeout: Duration::from_secs(60),
            ..ConsumeOptions::default()
        };
        let shared = shared(source.clone(), false, options);
        let q = MessageQueue::new("T", "b", 0);
        let (link, acks) = link(&q);
        let taken = alone(&link);
        Stuck {
            source,
            shared,
            listener: Seen {
                delay,
                ..Seen::default()
            },
            link,
            acks,
            taken,
            messages: vec![Message::new(q, 3, "x")],
            context: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_stuck_past_the_consume_timeout_is_sent_back_and_acknowledged() {
        let Stuck {
            source,
            shared,
            listener,
            mut acks,
            taken,
            mut messages,
            mut context,
            ..
        } = stuck(Duration::from_secs(100));
        let started = tokio::time::Instant::now();
        let consumed = consume(&shared, &listener, &taken, &mut messages, &mut context);
        tokio::pin!(consumed);
        tokio::select! {
            _ = &mut consumed => panic!("the listener is still running"),
            ack = acks.recv() => {
                assert_eq!(started.elapsed(), Duration::from_secs(60));
                assert_eq!((ack.first, ack.finished), (3, 0));
            }
        }
        let sent: Vec<(i64, i32)> = source.with(|s| {
            s.sent_back
                .iter()
                .map(|(m, l)| (m.queue_offset(), *l))
                .collect()
        });
        assert_eq!(sent, vec![(3, EXPIRED_DELAY_LEVEL)]);
        consumed.await;
        assert_eq!(started.elapsed(), Duration::from_secs(100));
        let last = acks.recv().await;
        assert_eq!(last.finished, 1);
    }

    /// A timed-out batch whose send-back failed is sent back again a `consume_timeout` later,
    /// and then acknowledged, while its call still runs (found by review: never again, and a
    /// call that never ended held the queue's commit offset for good).
    #[tokio::test(start_paused = true)]
    async fn a_timed_out_batch_whose_send_back_failed_is_sent_back_again() {
        let Stuck {
            source,
            shared,
            listener,
            mut acks,
            taken,
            mut messages,
            mut context,
            ..
        } = stuck(Duration::from_secs(1_000));
        source.with(|s| s.failing_send_backs = 1);
        let started = tokio::time::Instant::now();
        let consumed = consume(&shared, &listener, &taken, &mut messages, &mut context);
        tokio::pin!(consumed);
        tokio::select! {
            _ = &mut consumed => panic!("the listener is still running"),
            ack = acks.recv() => {
                assert_eq!(started.elapsed(), Duration::from_secs(120), "sent back at the second try");
                assert_eq!((ack.first, ack.finished), (3, 0));
            }
        }
        assert_eq!(source.with(|s| s.sent_back.len()), 1);
        consumed.await;
    }

    /// A batch that times out after its queue was handed off is not sent back: it stays before
    /// the final commit offset, and the next owner consumes it (found by review: sent back all
    /// the same, delivered twice).
    #[tokio::test(start_paused = true)]
    async fn a_batch_timing_out_after_its_hand_off_is_not_sent_back() {
        let Stuck {
            source,
            shared,
            listener,
            link,
            mut acks,
            taken,
            mut messages,
            mut context,
        } = stuck(Duration::from_secs(100));
        let consumed = consume(&shared, &listener, &taken, &mut messages, &mut context);
        tokio::pin!(consumed);
        tokio::select! {
            _ = &mut consumed => panic!("the listener is still running"),
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
        link.drop_lease();
        consumed.await;
        assert!(source.with(|s| s.sent_back.is_empty()), "not sent back");
        let ack = acks.recv().await;
        assert_eq!(ack.finished, 1);
    }
}
