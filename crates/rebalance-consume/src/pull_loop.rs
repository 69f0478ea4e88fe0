//! The pull loop of one lease: it resolves where to start, pulls (long polling), buffers, hands
//! batches to the listener, commits, and hands the queue off when the lease is cancelled.
//!
//! A loop owns its lease's [`ProcessQueue`] and a fresh [`LeaseLink`]: a batch consumed
//! elsewhere reports back through that link only, so nothing from an older loop of the same
//! queue (a lease removed and added again, a restarted loop) can reach this one.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::{Instant, Sleep, sleep_until};

use super::activity::{Activity, ErrorLog};
use super::calls;
use super::config::{
    EMPTY_PULL_SPACING, FLOW_CONTROL_DELAY, LOCAL_RETRY_DELAY, PULL_ERROR_DELAY, THROTTLED_DELAY,
};
use super::flow::{FlowWarning, Limit, over_limit};
use super::link::{Ack, AckReceiver, LeaseLink, Tally};
use super::orderly;
use super::pause::PAUSED_RECHECK;
use super::process_queue::ProcessQueue;
use super::shared::{Mode, Shared};
use super::start_positions::{self, Lookup};
use super::{Message, PullError, PullRequest, PullResult};
use crate::metrics::{PullOutcome, QueueGauges};
use rebalance_runtime::QueueLease;

type PullFuture = Pin<Box<dyn Future<Output = Result<PullResult, PullError>> + Send>>;
type OrderlyFuture = Pin<Box<dyn Future<Output = orderly::Done> + Send>>;

/// The pull loop of one lease.
pub(crate) struct PullLoop {
    shared: Arc<Shared>,
    lease: QueueLease,
    link: Arc<LeaseLink>,
    acks: AckReceiver,
    activity: Arc<Activity>,
    pq: ProcessQueue,
    /// Concurrent: batches that finished consumption (for the hand-off's wait).
    finished: u64,
    /// Concurrent: messages whose send-back failed, consumed again locally when due.
    retries: VecDeque<(Instant, Vec<Message>)>,
    /// Orderly: messages pulled and not yet consumed, in order, and when the queue may go on
    /// after a suspension.
    pending: VecDeque<Message>,
    resume_at: Instant,
    errors: ErrorLog,
    flow: FlowWarning,
    /// Whether the loop waits for its buffer to drain (flow control).
    held: bool,
    /// Concurrent: whether batches pulled before the source moved the offset may still wait
    /// for a worker (see [`moved_batches_waiting`](Self::moved_batches_waiting)).
    moved: bool,
    /// The queue's largest offset in the last pull's answer (for the lag).
    max_offset: Option<i64>,
    /// This queue's share of its topic's buffer and lag gauges.
    gauges: QueueGauges,
    /// Whether the loop waits because its lease is not trusted (logged once per wait).
    untrusted: UntrustedWait,
}

/// How long a pull (or pop) loop whose lease is not trusted waits before it looks again.
pub(crate) const UNTRUSTED_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

/// A pull loop's wait for its lease to be trusted again, logged once when it begins and once
/// when it ends.
#[derive(Default)]
pub(crate) struct UntrustedWait(bool);

impl UntrustedWait {
    pub(crate) fn hold(&mut self, queue: &rebalance_core::MessageQueue) {
        if !std::mem::replace(&mut self.0, true) {
            tracing::info!(queue = ?queue, "not pulling: this client cannot be sure it still owns the queue (its membership or lock is not vouched for, or the group's directory does not list it)");
        }
    }

    pub(crate) fn resume(&mut self, queue: &rebalance_core::MessageQueue) {
        if std::mem::replace(&mut self.0, false) {
            tracing::info!(queue = ?queue, "pulling again: the queue's lease is trusted again");
        }
    }
}

/// Awaits the future in `slot`, or never when there is none.
async fn in_slot<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

impl PullLoop {
    /// A loop for `lease`, with the link its consumers report through.
    pub(crate) fn new(
        shared: Arc<Shared>,
        lease: QueueLease,
        activity: Arc<Activity>,
    ) -> (Self, Arc<LeaseLink>) {
        let mut link = LeaseLink::new(lease.clone(), shared.topic_metrics(&lease.queue().topic));
        if lease.guarded_release().is_some() && !shared.orderly() {
            link = link.guarded();
        }
        let link = Arc::new(link);
        let acks = AckReceiver::new(&link).waking(&shared.commits);
        let gauges = QueueGauges::new(&shared.group, &lease.queue().topic);
        let pull_loop = Self {
            shared,
            lease,
            link: link.clone(),
            acks,
            activity,
            pq: ProcessQueue::new(0),
            finished: 0,
            retries: VecDeque::new(),
            pending: VecDeque::new(),
            resume_at: Instant::now(),
            errors: ErrorLog::default(),
            flow: FlowWarning::default(),
            held: false,
            moved: false,
            max_offset: None,
            gauges,
            untrusted: UntrustedWait::default(),
        };
        (pull_loop, link)
    }

    /// The loop's lease.
    pub(crate) fn lease(&self) -> &QueueLease {
        &self.lease
    }

    /// Runs until the lease is cancelled, then hands the queue off; or until the loop is asked
    /// to retire (it stopped pulling), then stops pulling, lets its batches finish (however
    /// long they take: a running listener call is never cancelled) and commits them.
    pub(crate) async fn run(&mut self) {
        self.activity.touch();
        // Boxed, as is the hand-off: their states would otherwise make every parked loop's
        // task larger for the whole life of the lease.
        let Some(start) = Box::pin(self.start_offset()).await else {
            return;
        };
        tracing::debug!(queue = ?self.lease.queue(), start, "pull loop started");
        self.pq = ProcessQueue::new(start);
        let mut pull: Option<PullFuture> = None;
        let mut pull_at = Instant::now();
        let mut pull_sent = pull_at;
        let mut consuming: Option<OrderlyFuture> = None;
        // The one timer, made when something waits on time and dropped when nothing does: a
        // queue waiting only on its long poll (an idle one) holds none.
        let mut timer: Option<Pin<Box<Sleep>>> = None;
        loop {
            self.update_gauges();
            let now = Instant::now();
            if pull.is_none() && now >= pull_at && !self.lease.is_trusted(now) {
                // This client cannot be sure it still owns the queue (its membership lapsed,
                // or its lock): no pull until the runtime knows, which releases the queue or
                // renews the lock.
                self.activity.touch();
                self.untrusted.hold(self.lease.queue());
                pull_at = now + UNTRUSTED_DELAY;
            }
            if pull.is_none() && now >= pull_at && self.shared.paused.contains(self.lease.queue()) {
                self.activity.touch();
                pull_at = now + PAUSED_RECHECK;
            } else if pull.is_none() && now >= pull_at {
                self.activity.touch();
                self.untrusted.resume(self.lease.queue());
                let queues = self.shared.queues_of(&self.lease.queue().topic);
                let limit = over_limit(
                    &self.pq,
                    &self.shared.options,
                    queues,
                    self.shared.orderly(),
                )
                .or_else(|| self.moved_batches_waiting());
                match limit {
                    Some(limit) => {
                        self.flow.hold(limit, self.lease.queue());
                        self.held = true;
                        pull_at = now + FLOW_CONTROL_DELAY;
                    }
                    None => {
                        self.held = false;
                        pull_sent = now;
                        pull = Some(self.pull());
                        self.activity.set_pulling(true);
                    }
                }
            }
            if consuming.is_none() && now >= self.resume_at {
                consuming = self.next_orderly_batch();
            }
            self.resubmit_due(now);
            self.activity.set_busy(consuming.is_some());
            // One timer for all that waits on time: the next pull, the end of an orderly
            // suspension, the next local retry.
            let wake_at = [
                pull.is_none().then_some(pull_at),
                (consuming.is_none() && !self.pending.is_empty()).then_some(self.resume_at),
                self.retries.front().map(|(at, _)| *at),
            ]
            .into_iter()
            .flatten()
            .min();
            match (wake_at, timer.as_mut()) {
                (None, _) => timer = None,
                (Some(at), Some(timer)) => {
                    if timer.deadline() != at {
                        timer.as_mut().reset(at);
                    }
                }
                (Some(at), None) => timer = Some(Box::pin(sleep_until(at))),
            }
            tokio::select! {
                biased;
                _ = self.lease.cancelled() => break,
                _ = self.activity.retired() => break,
                ack = self.acks.recv() => {
                    let mut guards = Vec::new();
                    let mut tally = Tally::default();
                    guards.extend(self.on_ack(ack, &mut tally));
                    while let Some(ack) = self.acks.try_recv() {
                        guards.extend(self.on_ack(ack, &mut tally));
                    }
                    self.link.record_consumed(tally);
                    self.commit();
                    self.acks.applied(&self.shared.commits);
                    // Only now may the runtime unlock the queue: the commit covers the batches.
                    drop(guards);
                    if self.held && self.drained() {
                        pull_at = Instant::now();
                    }
                }
                done = in_slot(&mut consuming) => {
                    consuming = None;
                    self.on_orderly_done(done);
                    self.acks.settled(&self.shared.commits);
                    if self.held && self.drained() {
                        pull_at = Instant::now();
                    }
                }
                result = in_slot(&mut pull) => {
                    pull = None;
                    self.activity.set_pulling(false);
                    pull_at = self.on_pull(result, pull_sent);
                }
                _ = in_slot(&mut timer) => {}
            }
        }
        drop(pull);
        Box::pin(self.hand_off(consuming)).await;
    }

    /// Where consumption starts: the lease's committed offset (a restarted loop, or progress
    /// the store does not have yet), its stored offset, or its start position resolved at the
    /// source and committed at once. `None` when the lease is cancelled first.
    async fn start_offset(&mut self) -> Option<i64> {
        if let Some(committed) = self.lease.committed() {
            return Some(committed);
        }
        let queue = self.lease.queue().clone();
        loop {
            self.activity.touch();
            let source = self.shared.source.clone();
            let (kind, lookup) =
                match start_positions::lookup(&*source, &queue, self.lease.start_position()) {
                    Lookup::Known(offset) => return Some(offset),
                    Lookup::Ask(kind, lookup) => (kind, lookup),
                };
            // A lookup that never answers is given up when the loop retires.
            let lookup = tokio::select! {
                biased;
                _ = self.lease.cancelled() => return None,
                _ = self.activity.retired() => return None,
                lookup = lookup => lookup,
            };
            let retry_in = match lookup {
                Ok(offset) => {
                    self.errors.recovered(&self.shared.denials, &queue);
                    let offset = offset.max(0);
                    tracing::info!(queue = ?queue, start = ?self.lease.start_position(), offset, "resolved the start position");
                    self.commit_at(offset);
                    return Some(offset);
                }
                Err(e) => {
                    self.errors
                        .remote(&self.shared.denials, &queue, kind, &e, PULL_ERROR_DELAY)
                }
            };
            tokio::select! {
                biased;
                _ = self.lease.cancelled() => return None,
                _ = self.activity.retired() => return None,
                _ = tokio::time::sleep(retry_in) => {}
            }
        }
    }

    /// Whether a loop held by flow control may pull again before its 50 ms are up: its buffer
    /// is back under every limit (and no batch pulled before an offset moved may still wait).
    fn drained(&self) -> bool {
        let queues = self.shared.queues_of(&self.lease.queue().topic);
        over_limit(
            &self.pq,
            &self.shared.options,
            queues,
            self.shared.orderly(),
        )
        .is_none()
            && !self.moved
    }

    /// Concurrent, after the source moved the queue's offset: the messages pulled before the
    /// move that still wait for a worker, as a limit while there are any. They are still
    /// consumed (nothing in hand is given up), but the buffer no longer counts them: without
    /// this, a source moving the offset again and again between answers that fill the buffer
    /// would pile a buffer's worth more into the work queue at each move, without bound.
    fn moved_batches_waiting(&mut self) -> Option<Limit> {
        if !self.moved {
            return None;
        }
        let Mode::Concurrent { work } = &self.shared.mode else {
            return None;
        };
        let waiting = work.waiting_before(&self.link, self.pq.epoch());
        self.moved = waiting > 0;
        self.moved.then_some(Limit::Moved { waiting })
    }

    /// A pull from the next offset.
    fn pull(&self) -> PullFuture {
        let options = &self.shared.options;
        let queue = self.lease.queue();
        let request = PullRequest::new(
            self.shared.group.clone(),
            queue.clone(),
            self.pq.next_offset(),
            self.shared.expression(&queue.topic),
        )
        .with_limits(options.pull_batch_size, options.pull_batch_bytes)
        .with_suspend(options.pull_suspend)
        // Only a clustering consumer's progress is the group's, which a broker stores with the
        // pull; a broadcasting consumer keeps its own (as the Java client).
        .with_commit_offset(self.lease.committed().filter(|_| !self.shared.broadcasting));
        let source = self.shared.source.clone();
        // The link's lease, not a clone of it in the pending pull: an idle queue's pull waits
        // for as long as the source holds it.
        let link = self.link.clone();
        Box::pin(async move {
            let started = Instant::now();
            let result = calls::pull(&*source, &request).await;
            let took = Instant::now().saturating_duration_since(started);
            link.lease().record_pull(took);
            let outcome = match &result {
                Ok(PullResult::Found { .. }) => PullOutcome::Found,
                Ok(PullResult::NoNewMessage { .. }) => PullOutcome::NoNewMessage,
                Ok(PullResult::OffsetMoved { .. }) => PullOutcome::OffsetMoved,
                Err(PullError::Throttled(_)) => PullOutcome::Throttled,
                Err(_) => PullOutcome::Error,
            };
            link.metrics().pull(outcome, took);
            result
        })
    }

    /// Sets this queue's share of the buffer and lag gauges.
    fn update_gauges(&mut self) {
        let lag = self
            .max_offset
            .map_or(0, |max| max.saturating_sub(self.pq.commit_offset()));
        self.gauges.set(self.pq.len(), self.pq.bytes(), lag);
    }

    /// Takes a pull's answer; returns when to pull next: at once after an answer, 20 ms after
    /// the source asked to slow down, [`PULL_ERROR_DELAY`] (3 s) after a failure. A denial
    /// ([`RemoteError::Denied`](rebalance_runtime::RemoteError::Denied): the source refuses the
    /// credentials or permissions) backs off instead: 3 s after the first, doubled after each
    /// further one in a row up to [`MAX_DENIED_DELAY`](super::MAX_DENIED_DELAY) (60 s), until
    /// a pull succeeds; it is logged at ERROR once per resource for the whole consumer (not
    /// once per queue), at debug while it lasts, and at info when the resource is served again.
    /// Other failures are logged once per kind and queue ([`ErrorLog`]).
    ///
    /// An answer that moved nothing forward (no new message, nothing pulled, the same offset
    /// again: a source that does not hold pulls, a broker answering `PULL_RETRY_IMMEDIATELY`
    /// with the offset asked) is followed by the next pull no sooner than
    /// [`EMPTY_PULL_SPACING`] after it was sent: an idle queue never re-pulls at network speed.
    fn on_pull(&mut self, result: Result<PullResult, PullError>, sent: Instant) -> Instant {
        let now = Instant::now();
        let requested = self.pq.next_offset();
        let spaced = |moved: bool| {
            if moved {
                now
            } else {
                now.max(sent + EMPTY_PULL_SPACING)
            }
        };
        let queue = self.lease.queue().clone();
        match result {
            Ok(PullResult::Found {
                mut messages,
                next_offset,
                max_offset,
                ..
            }) => {
                self.errors.recovered(&self.shared.denials, &queue);
                self.max_offset = Some(max_offset);
                let mut floor = self.pq.next_offset();
                messages.retain(|m| {
                    let fresh = m.queue_offset() >= floor;
                    if fresh {
                        floor = m.queue_offset() + 1;
                    }
                    fresh
                });
                self.pq.put(
                    messages.iter().map(|m| (m.queue_offset(), m.body().len())),
                    next_offset,
                );
                self.dispatch(messages);
                self.commit();
                spaced(self.pq.next_offset() > requested)
            }
            Ok(PullResult::NoNewMessage { next_offset }) => {
                self.errors.recovered(&self.shared.denials, &queue);
                // Nothing new: the next offset is the end of the queue.
                self.max_offset = Some(self.max_offset.map_or(next_offset, |m| m.max(next_offset)));
                self.pq.advance(next_offset);
                self.commit();
                // A pull the source held until its suspension ran out is followed at once.
                let held = now.saturating_duration_since(sent) >= EMPTY_PULL_SPACING;
                spaced(held || self.pq.next_offset() > requested)
            }
            Ok(PullResult::OffsetMoved { next_offset }) => {
                self.errors.recovered(&self.shared.denials, &queue);
                let backwards = next_offset < requested;
                // A move back (apache/rocketmq #4215: a broker that lost track of a queue
                // answers its min offset, 0) makes the queue's next owner or this client consume
                // again what was consumed; followed all the same (a move back never loses a
                // message, refusing it could), and said loudly.
                tracing::warn!(queue = ?queue, from = requested, to = next_offset, backwards, "the queue's offset moved; continuing from the new one");
                self.link.metrics().offset_moved(backwards);
                self.pq.reset(next_offset);
                self.pending.clear();
                self.retries.clear();
                // The old buffer's batches still waiting for a worker are still consumed, but
                // no longer counted: no pull until they are taken.
                self.moved = matches!(self.shared.mode, Mode::Concurrent { .. });
                // Persisted at once, not at the next tick: a crash before it would resume from
                // the old offset, which the source no longer serves (or an operator reset).
                self.lease.persist_now(next_offset.max(0));
                self.lease.set_buffer(self.pq.buffer());
                spaced(next_offset != requested)
            }
            Err(PullError::Throttled(e)) => {
                self.errors
                    .failed(&queue, "pull throttled", &e, THROTTLED_DELAY);
                now + THROTTLED_DELAY
            }
            Err(PullError::Remote(e)) => {
                now + self
                    .errors
                    .remote(&self.shared.denials, &queue, "pull", &e, PULL_ERROR_DELAY)
            }
            Err(e @ PullError::ImpossibleOffset { .. }) => {
                self.errors
                    .failed(&queue, "impossible pull answer", &e, PULL_ERROR_DELAY);
                now + PULL_ERROR_DELAY
            }
        }
    }

    /// Hands pulled messages to consumption: batches to the work queue (concurrent), or the
    /// queue's pending list (orderly).
    fn dispatch(&mut self, messages: Vec<Message>) {
        match &self.shared.mode {
            Mode::Concurrent { work } => work.push(self.link.clone(), self.pq.epoch(), messages),
            Mode::Orderly { .. } => self.pending.extend(messages),
        }
    }

    /// Concurrent: resubmits the messages whose local retry is due.
    fn resubmit_due(&mut self, now: Instant) {
        let Mode::Concurrent { work } = &self.shared.mode else {
            return;
        };
        while self.retries.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, messages)) = self.retries.pop_front() {
                work.push(self.link.clone(), self.pq.epoch(), messages);
            }
        }
    }

    /// Concurrent: takes a batch's report; returns the consume guard it ran under, to drop once
    /// the commit covers it.
    #[must_use = "drop the guard after the commit"]
    fn on_ack(
        &mut self,
        mut ack: Ack,
        tally: &mut Tally,
    ) -> Option<rebalance_runtime::ConsumeGuard> {
        let guard = ack.guard.take();
        tally.add(ack.tally);
        self.finished += ack.finished;
        self.pq
            .ack(ack.epoch, ack.first, ack.last, |o| ack.keeps(o));
        if !ack.retry.is_empty() && ack.epoch == self.pq.epoch() && !self.link.is_dropped() {
            self.retries
                .push_back((Instant::now() + LOCAL_RETRY_DELAY, ack.retry));
        }
        guard
    }

    /// Concurrent: takes a batch's report during the hand-off (begun at `since`): commits it
    /// before its guard is dropped, and says so when the runtime no longer waited for it.
    fn on_final_ack(&mut self, ack: Ack, since: Instant) {
        let mut tally = Tally::default();
        let guard = self.on_ack(ack, &mut tally);
        self.link.record_consumed(tally);
        if guard.is_none() {
            return;
        }
        self.commit();
        if let Some(bound) = self.lease.guarded_release() {
            let late = since.elapsed();
            if late >= bound {
                tracing::warn!(queue = ?self.lease.queue(), commit = self.pq.commit_offset(), ?late, force_unlock_after = ?bound, "a batch finished after force_unlock_after: the queue was already unlocked with the offset persisted before it, so this commit is lost and the next owner consumes the batch again");
            }
        }
        drop(guard);
    }

    /// Orderly: the next batch to consume, if any.
    fn next_orderly_batch(&mut self) -> Option<OrderlyFuture> {
        let Mode::Orderly { listener, permits } = &self.shared.mode else {
            return None;
        };
        if self.pending.is_empty() {
            return None;
        }
        let size = self
            .shared
            .options
            .consume_batch_size
            .min(self.pending.len());
        let batch: Vec<Message> = self.pending.drain(..size).collect();
        Some(Box::pin(orderly::consume(
            self.shared.clone(),
            listener.clone(),
            permits.clone(),
            self.link.clone(),
            self.pq.epoch(),
            batch,
        )))
    }

    /// Orderly: takes a batch's outcome, commits exactly, then releases its guard.
    fn on_orderly_done(&mut self, done: orderly::Done) {
        let orderly::Done {
            epoch,
            first,
            last,
            retry,
            suspend,
            guard,
            _permit,
        } = done;
        if epoch != self.pq.epoch() {
            return;
        }
        self.pq.ack(epoch, first, last, |o| {
            retry.iter().any(|m| m.queue_offset() == o)
        });
        if !retry.is_empty() {
            self.resume_at = Instant::now() + suspend;
            for message in retry.into_iter().rev() {
                self.pending.push_front(message);
            }
        }
        self.commit();
        drop(guard);
    }

    /// Reports the commit offset to the lease: increase-only when concurrent, exact when
    /// orderly.
    fn commit(&self) {
        self.commit_at(self.pq.commit_offset());
        self.lease.set_buffer(self.pq.buffer());
    }

    fn commit_at(&self, offset: i64) {
        start_positions::commit(&self.shared, &self.lease, offset);
    }

    /// The lease is cancelled: no new batch starts, the batches in the listener finish
    /// (bounded by `await_in_flight`), and the final commit covers exactly what they processed;
    /// buffered messages are dropped.
    ///
    /// When the consumer locks its queues, each batch holds the lease's consume guard and the
    /// runtime unlocks the queue only once the guard is free (after this loop committed the
    /// batch), or after `force_unlock_after`. A batch still running past that bound finishes
    /// and is committed here, but the runtime has already persisted the queue's offset and
    /// unlocked it: that commit is lost (logged as a warning), and the next owner consumes the
    /// batch's messages again.
    async fn hand_off(&mut self, consuming: Option<OrderlyFuture>) {
        // No longer held: its buffer and lag are not this member's any more (its next owner
        // counts them), however long the batches in the listener keep the hand-off (found by
        // review: they stayed in the gauges until the loop ended, counted twice meanwhile).
        self.gauges.set(0, 0, 0);
        let since = Instant::now();
        let retiring = !self.lease.is_cancelled();
        let started = self.link.drop_lease();
        // A commit waiting for this loop's reports waits no more: the hand-off commits them.
        self.shared.commits.changed();
        let in_flight = started - self.finished.min(started);
        let await_in_flight = self.shared.options.await_in_flight.filter(|_| !retiring);
        let mut consuming = consuming;
        let wait = async {
            if let Some(batch) = &mut consuming {
                let done = batch.await;
                consuming = None;
                self.on_orderly_done(done);
            }
            while self.finished < started {
                let ack = self.acks.recv().await;
                self.on_final_ack(ack, since);
            }
        };
        let complete = match await_in_flight {
            Some(limit) => tokio::time::timeout(limit, wait).await.is_ok(),
            None => {
                wait.await;
                true
            }
        };
        if let Some(batch) = consuming {
            // Never cancelled, as concurrent batches are not: it runs on, holding the queue's
            // guard (so the runtime unlocks the queue when it ends, or after
            // force_unlock_after), and nothing of it is committed.
            tracing::warn!(queue = ?self.lease.queue(), commit = self.pq.commit_offset(), "an ordered batch is still in the listener after await_in_flight: it runs on uncommitted, and the next owner consumes its messages again");
            let abandon = self.shared.abandon.clone();
            self.shared.outliving.spawn(async move {
                tokio::select! {
                    _ = batch => {}
                    _ = abandon.cancelled() => {}
                }
            });
        }
        while let Some(ack) = self.acks.try_recv() {
            self.on_final_ack(ack, since);
        }
        self.commit();
        // A retiring loop's lease lives on: a commit waits for this (see `CommitWaits::wait`).
        self.acks.handed_off(&self.shared.commits);
        let queue = self.lease.queue();
        if retiring {
            tracing::info!(queue = ?queue, in_flight, commit = self.pq.commit_offset(), dropped = self.pq.len(), "retired the pull loop");
        } else if complete {
            tracing::debug!(queue = ?queue, in_flight, commit = self.pq.commit_offset(), dropped = self.pq.len(), "handed off");
        } else {
            tracing::warn!(queue = ?queue, commit = self.pq.commit_offset(), "handed off before the batches in the listener finished (await_in_flight)");
        }
    }
}

#[cfg(test)]
mod tests;
