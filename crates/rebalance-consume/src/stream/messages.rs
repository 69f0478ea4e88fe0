//! [`MessageStream`]: the pulled messages of the held queues as a [`Stream`], each a
//! [`StreamMessage`] the application acknowledges.
//!
//! The pull loops put what they pull in the work queue, as for the push consumer's workers; the
//! stream takes from it as a worker would. A message yielded counts as a batch in consumption on
//! its lease's link (so a hand-off waits for it, bounded by `await_in_flight`), and its
//! acknowledgement goes back through that link to the loop, which commits the smallest offset
//! not acknowledged.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::stream::FusedStream;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::handle::StreamConsumerHandle;
use super::stale::StaleLeases;
use crate::Message;
use crate::concurrent::{restore_topics, send_back};
use crate::link::{Ack, Guard, LeaseLink, Tally};
use crate::shared::Shared;
use crate::work::{Span, WorkQueue};

/// The messages of the queues a stream consumer holds, in the order they were pulled (each
/// queue's in offset order); ends once the consumer is shut down.
///
/// Drive it with `while let Some(message) = stream.next().await` (or any
/// `futures_util::StreamExt` combinator: `for_each_concurrent` processes several at once), and
/// acknowledge each message ([`StreamMessage::ack`]) once it is processed: the queue's
/// committed offset is the smallest offset not acknowledged. A stream nobody polls stops
/// pulling once each queue's buffer is full (`queue_max_messages`, `queue_max_bytes`,
/// `max_span` of [`ConsumeOptions`](crate::ConsumeOptions)).
///
/// Dropping the stream drops its handle: with no other [`StreamConsumerHandle`] left, the
/// consumer shuts down (keep a handle and call [`shutdown`](StreamConsumerHandle::shutdown) to
/// stop it on purpose).
#[must_use = "a stream does nothing unless polled, and dropping it shuts the consumer down"]
pub struct MessageStream {
    handle: StreamConsumerHandle,
    messages: Pin<Box<dyn FusedStream<Item = StreamMessage> + Send>>,
}

impl fmt::Debug for MessageStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageStream")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl MessageStream {
    pub(super) fn new(handle: StreamConsumerHandle, work: Arc<WorkQueue>) -> Self {
        let messages = messages(
            handle.push().shared().clone(),
            work,
            handle.ended().clone(),
            handle.stale().clone(),
        );
        Self { handle, messages }
    }

    /// The consumer: seek, pause, commit, watch the queues held, shut down. Clone it to steer
    /// the consumer from another task.
    pub fn handle(&self) -> &StreamConsumerHandle {
        &self.handle
    }

    /// The next message; `None` once the consumer is shut down (and at every call after). The
    /// same as
    /// `futures_util::StreamExt::next`, without the import.
    pub async fn next(&mut self) -> Option<StreamMessage> {
        std::future::poll_fn(|cx| self.messages.as_mut().poll_next(cx)).await
    }
}

impl Stream for MessageStream {
    type Item = StreamMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamMessage>> {
        self.messages.as_mut().poll_next(cx)
    }
}

impl FusedStream for MessageStream {
    fn is_terminated(&self) -> bool {
        self.messages.is_terminated()
    }
}

/// The messages the pull loops of `shared` put in `work`, until `stop` is cancelled, except
/// those of `stale` leases.
pub(super) fn messages(
    shared: Arc<Shared>,
    work: Arc<WorkQueue>,
    stop: CancellationToken,
    stale: Arc<StaleLeases>,
) -> Pin<Box<dyn FusedStream<Item = StreamMessage> + Send>> {
    let feed = Feed {
        shared,
        work,
        stop,
        stale,
        taken: VecDeque::new(),
        scratch: Vec::new(),
    };
    // Fused: polled again after its end, it ends again (found by review: `unfold` panics
    // then, as a `select!` loop polling `next()` once more would).
    Box::pin(
        futures_util::stream::unfold(feed, |mut feed| async move {
            let message = feed.next().await?;
            Some((message, feed))
        })
        .fuse(),
    )
}

/// A message taken from the work queue, with the lease link and buffer epoch it was pulled in.
struct Taken {
    link: Arc<LeaseLink>,
    epoch: u64,
    message: Message,
}

/// What the stream takes messages from.
struct Feed {
    shared: Arc<Shared>,
    work: Arc<WorkQueue>,
    stop: CancellationToken,
    stale: Arc<StaleLeases>,
    /// Taken from the work queue and not yielded yet (part of one pull).
    taken: VecDeque<Taken>,
    scratch: Vec<Message>,
}

impl Feed {
    /// The next message to yield; `None` once the consumer stopped.
    async fn next(&mut self) -> Option<StreamMessage> {
        loop {
            if self.stop.is_cancelled() {
                return None;
            }
            while let Some(taken) = self.taken.pop_front() {
                if let Some(message) = self.offer(taken).await {
                    return Some(message);
                }
            }
            let max = self.shared.options.pull_batch_size as usize;
            let batch = self.work.next(max, &mut self.scratch, &self.stop).await?;
            restore_topics(&mut self.scratch);
            self.taken
                .extend(self.scratch.drain(..).map(|message| Taken {
                    link: batch.link.clone(),
                    epoch: batch.epoch,
                    message,
                }));
        }
    }

    /// Starts the consumption of `taken` on its link: `None` when its queue was taken away
    /// (or left behind by a seek) or its lock is stale.
    async fn offer(&self, taken: Taken) -> Option<StreamMessage> {
        let Taken {
            link,
            epoch,
            message,
        } = taken;
        if !link.begin() {
            // Not processed: it stays before the commit offset (the next owner consumes it).
            return None;
        }
        let offset = message.queue_offset();
        if self.stale.is_stale(link.lease()) {
            // Reported back, not dropped: a seek whose reset is refused marks the lease only
            // for a moment, and a message dropped then would stay in the loop's buffer, never
            // yielded again, holding the queue's commit for the rest of the lease. Reported,
            // it comes again here after the local retry delay if the lease lives on, and with
            // the lease when the seek releases it.
            tracing::debug!(queue = ?link.queue(), offset, "a seek left the lease behind; not yielded");
            Self::withhold(&link, epoch, message, None);
            return None;
        }
        let guard = match link.unguarded(Instant::now()) {
            Some(Guard::Unneeded) => None,
            Some(_) => {
                tracing::debug!(queue = ?link.queue(), offset, "the lease is not trusted; the message waits");
                Self::withhold(&link, epoch, message, None);
                return None;
            }
            None => return self.offer_guarded(link, epoch, message).await,
        };
        Some(self.yielded(link, epoch, message, guard))
    }

    /// `message` of `link`, begun and given its guard (if any), as the stream yields it.
    fn yielded(
        &self,
        link: Arc<LeaseLink>,
        epoch: u64,
        message: Message,
        guard: Option<rebalance_runtime::ConsumeGuard>,
    ) -> StreamMessage {
        StreamMessage {
            message,
            ticket: Some(Ticket {
                link,
                epoch,
                guard,
                shared: self.shared.clone(),
                since: Instant::now(),
            }),
        }
    }

    /// [`offer`](Self::offer) on a guarded link (the consumer locks its queues): the message
    /// waits for the lease's consume guard.
    async fn offer_guarded(
        &self,
        link: Arc<LeaseLink>,
        epoch: u64,
        message: Message,
    ) -> Option<StreamMessage> {
        let offset = message.queue_offset();
        // Begun: reported as not processed unless yielded, also when the stream is dropped
        // while the guard's await below yields (the hand-off would wait for it).
        let mut begun = Begun {
            link: &link,
            epoch,
            message: Some(message),
        };
        let guard = match link.consume_guard(Instant::now()).await {
            Guard::Unneeded => None,
            // The guard's await may yield (a release waiting, tokio's cooperative budget), and
            // a seek may run meanwhile: its lease left behind, the message is not yielded
            // after the seek returned. (No await follows, so none can come in between.)
            Guard::Held(guard) if self.stale.is_stale(link.lease()) => {
                tracing::debug!(queue = ?link.queue(), offset, "a seek left the lease behind while the message waited for its guard; not yielded");
                begun.withhold(Some(guard));
                return None;
            }
            Guard::Held(guard) => Some(guard),
            Guard::Refused => {
                // As a worker's batch: buffered, consumed again locally once the lock is
                // renewed, or by the next owner once handed off.
                tracing::debug!(queue = ?link.queue(), offset, "no consume guard; the message waits");
                begun.withhold(None);
                return None;
            }
        };
        let message = begun.message.take()?;
        drop(begun);
        Some(self.yielded(link, epoch, message, guard))
    }
}

/// A message begun on its link ([`LeaseLink::begin`]) and not yielded yet: withheld when dropped
/// so (the stream was dropped while it waited for its consume guard), as its hand-off waits for
/// every message begun.
struct Begun<'a> {
    link: &'a LeaseLink,
    epoch: u64,
    /// `None` once yielded or withheld.
    message: Option<Message>,
}

impl Begun<'_> {
    /// Reports the message as not yielded (see [`Feed::withhold`]).
    fn withhold(&mut self, guard: Option<rebalance_runtime::ConsumeGuard>) {
        if let Some(message) = self.message.take() {
            Feed::withhold(self.link, self.epoch, message, guard);
        }
    }
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if self.message.is_some() {
            tracing::debug!(queue = ?self.link.queue(), "the stream was dropped while a message waited for its guard; not yielded");
            self.withhold(None);
        }
    }
}

impl Feed {
    /// Reports a message begun on `link` and not yielded: not processed, so it stays below the
    /// commit offset (consumed again here, or by the queue's next owner), and `guard` is
    /// dropped once the loop took the report.
    fn withhold(
        link: &LeaseLink,
        epoch: u64,
        message: Message,
        guard: Option<rebalance_runtime::ConsumeGuard>,
    ) {
        let offset = message.queue_offset();
        link.report(Ack {
            epoch,
            first: offset,
            last: offset,
            retry: vec![message],
            finished: 1,
            guard,
            tally: Tally::default(),
            span: Span::ALONE,
        });
    }
}

/// What a yielded message owes its lease's loop: one report.
struct Ticket {
    link: Arc<LeaseLink>,
    epoch: u64,
    /// The lease's consume guard (an exclusive hand-off): the queue is not unlocked while the
    /// message is being processed.
    guard: Option<rebalance_runtime::ConsumeGuard>,
    shared: Arc<Shared>,
    since: Instant,
}

impl Ticket {
    /// Reports the message to its loop: acknowledged, or kept to be consumed again (`retry`).
    fn report(self, offset: i64, retry: Vec<Message>, ok: bool) {
        let spent = self.since.elapsed();
        let (ok, failed) = if ok { (1, 0) } else { (0, 1) };
        self.link.metrics().consumed(ok, failed, spent);
        self.link.report(Ack {
            epoch: self.epoch,
            first: offset,
            last: offset,
            retry,
            finished: 1,
            guard: self.guard,
            tally: Tally::call(ok, failed, spent),
            span: Span::ALONE,
        });
    }
}

/// A message the stream yielded: read it through `Deref` ([`Message`]'s methods), then
/// acknowledge it with [`ack`](Self::ack), or hand it back for redelivery with
/// [`nack`](Self::nack).
///
/// A message dropped without either is handed back too, without a send-back: its queue
/// consumes it again here after 5 s ([`LOCAL_RETRY_DELAY`](crate::LOCAL_RETRY_DELAY)), or, once
/// the queue is taken away, its next owner does. Until a message is acknowledged its queue's
/// committed offset stays at or before it: a message held for long holds its queue back (and,
/// past `max_span` offsets, its pulls).
///
/// A message of the group's retry topic shows the topic it came from ([`Message::topic`]); its
/// [`queue`](Message::queue) is still the retry topic's.
pub struct StreamMessage {
    message: Message,
    /// `None` once reported.
    ticket: Option<Ticket>,
}

impl fmt::Debug for StreamMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamMessage")
            .field("message", &self.message)
            .field("settled", &self.ticket.is_none())
            .finish()
    }
}

impl std::ops::Deref for StreamMessage {
    type Target = Message;

    fn deref(&self) -> &Message {
        &self.message
    }
}

impl StreamMessage {
    /// The message.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// Acknowledges the message: it is consumed, and its queue's committed offset may move
    /// past it (once every message before it is acknowledged too).
    pub fn ack(mut self) {
        if let Some(ticket) = self.ticket.take() {
            ticket.report(self.message.queue_offset(), Vec::new(), true);
        }
    }

    /// Hands the message back for redelivery, with the source's delay (RocketMQ: 10 s for a
    /// first redelivery, longer after each): it is sent back to the group's retry topic
    /// (`%RETRY%{group}`), and after `max_reconsume_times` redeliveries to its dead-letter
    /// topic (`%DLQ%{group}`), as the push consumer does with a failed message. When the
    /// send-back fails, the message is consumed again here after 5 s. A broadcasting consumer
    /// drops it (as the Java client).
    pub async fn nack(self) {
        self.nack_with_delay_level(0).await;
    }

    /// [`nack`](Self::nack) with a delay level: 0 lets the source decide, a positive level
    /// picks one of `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`, a negative
    /// one sends the message straight to the dead-letter topic.
    ///
    /// Cancel-safe: a nack dropped before it completes (a `timeout`, a `select!`) leaves the
    /// message as a message dropped unacknowledged, consumed again here after 5 s (a
    /// send-back already made by then delivers it a second time, never not at all).
    pub async fn nack_with_delay_level(mut self, delay_level: i32) {
        // The ticket stays in `self` until the send-back is done: a cancelled nack drops it
        // with the message (see `Drop`), which reports it.
        let Some(ticket) = self.ticket.as_ref() else {
            return;
        };
        let (shared, link) = (ticket.shared.clone(), ticket.link.clone());
        let offset = self.message.queue_offset();
        let message = self.message.clone();
        let retry = if shared.broadcasting {
            tracing::warn!(queue = ?link.queue(), offset, "broadcasting: a message handed back is dropped");
            Vec::new()
        } else if link.is_dropped() {
            // Handed off meanwhile: not sent back; it stays before the final commit offset,
            // and the next owner consumes it.
            vec![message]
        } else {
            send_back(&shared, &link, vec![message], delay_level).await
        };
        if let Some(ticket) = self.ticket.take() {
            ticket.report(offset, retry, false);
        }
    }
}

impl Drop for StreamMessage {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let offset = self.message.queue_offset();
            tracing::debug!(queue = ?ticket.link.queue(), offset, "a message was dropped unacknowledged; consuming it again later");
            let times = self.message.reconsume_times().saturating_add(1);
            let again = self.message.clone().with_reconsume_times(times);
            ticket.report(offset, vec![again], false);
        }
    }
}
