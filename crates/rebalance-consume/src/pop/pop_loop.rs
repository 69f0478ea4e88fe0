//! The POP loop of one popped lease: it pops (long polling) while the queue's unacknowledged
//! messages are under the threshold, hands each queue's messages to the workers, acknowledges
//! what they consumed (in offset order for an orderly pop), extends the invisible time of
//! batches consumed for too long, and when the lease ends, stops popping and finishes what it
//! popped.
//!
//! Acknowledgements and extensions are calls on their way beside the loop, never awaited in
//! its turn: a broker slow to answer one (up to [`CALL_TIMEOUT`]) holds up neither the pops,
//! nor the other entries' acknowledgements, nor an extension falling due meanwhile. Within one
//! entry they go one at a time (see [`Book`]).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::{Instant, sleep_until};

use super::book::{AckBatch, Book, Extension, VisibleAgain};
use super::source::NO_MESSAGE;
use super::{PopMode, PopRequest, PopResult, PopShared, PopStart};
use crate::activity::{Activity, ErrorLog};
use crate::config::{
    EMPTY_PULL_SPACING, FLOW_CONTROL_DELAY, LOCAL_RETRY_DELAY, PULL_ERROR_DELAY, THROTTLED_DELAY,
};
use crate::link::{Ack, AckReceiver, LeaseLink, Tally};
use crate::metrics::{PullOutcome, QueueGauges};
use crate::pull_loop::{UNTRUSTED_DELAY, UntrustedWait};
use crate::shared::{Mode, Shared};
use crate::{Message, PullError};
use rebalance_runtime::running::QueueBuffer;
use rebalance_runtime::{QueueLease, RemoteError};

type PopFuture = Pin<Box<dyn Future<Output = Result<PopResult, PullError>> + Send>>;

/// An acknowledgement or an extension on its way.
type Call = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// What an acknowledgement or an extension answered.
enum Answer {
    Ack(AckBatch, Result<(), RemoteError>),
    Extend {
        extension: Extension,
        /// When it was sent: the new invisible time counts from then at the soonest.
        sent: Instant,
        answer: Result<String, RemoteError>,
    },
}

/// How much longer than its poll time a pop may take before it counts as an error.
const POP_GRACE: Duration = Duration::from_secs(15);

/// How long an acknowledgement or a change of invisible time may take before it counts as
/// failed (the transport's own timeout, 3 s, comes first).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after an extension of invisible time failed on its way (no answer, or the broker
/// not reached) it is asked again, while the messages are still invisible.
const EXTENSION_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The POP loop of one lease.
pub(crate) struct PopLoop {
    shared: Arc<Shared>,
    pop: Arc<PopShared>,
    lease: QueueLease,
    link: Arc<LeaseLink>,
    acks: AckReceiver,
    activity: Arc<Activity>,
    book: Book,
    /// Messages whose send-back failed, consumed again locally when due: (when, entry, message).
    retries: VecDeque<(Instant, u64, Message)>,
    errors: ErrorLog,
    gauges: QueueGauges,
    /// The orderly attempt of the next pop: kept after a pop that failed (its answer may have
    /// been lost: the same attempt gets the same batch back), new after any answer.
    attempt: Option<String>,
    /// Whether the brokers' refusal to extend an invisible time was said.
    refusal_said: bool,
    /// Whether the loop waits because its lease is not trusted (logged once per wait).
    untrusted: UntrustedWait,
    /// How many batches reported that they left the listener.
    finished: u64,
}

/// Awaits the future in `slot`, or never when there is none.
async fn in_slot<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

impl PopLoop {
    /// A loop for `lease`, with the link its consumers report through.
    pub(crate) fn new(
        shared: Arc<Shared>,
        pop: Arc<PopShared>,
        lease: QueueLease,
        activity: Arc<Activity>,
    ) -> (Self, Arc<LeaseLink>) {
        let link = Arc::new(LeaseLink::new(
            lease.clone(),
            shared.topic_metrics(&lease.queue().topic),
        ));
        let acks = AckReceiver::new(&link).waking(&shared.commits);
        let gauges = QueueGauges::new(&shared.group, &lease.queue().topic);
        let pop_loop = Self {
            shared,
            pop,
            lease,
            link: link.clone(),
            acks,
            activity,
            book: Book::default(),
            retries: VecDeque::new(),
            errors: ErrorLog::default(),
            gauges,
            attempt: None,
            untrusted: UntrustedWait::default(),
            refusal_said: false,
            finished: 0,
        };
        (pop_loop, link)
    }

    /// Runs until the lease is cancelled, then hands the queue off (see
    /// [`begin_stop`](Self::begin_stop)) and returns. It touches its activity at every turn (a
    /// pop answers within its poll time), so the watcher of stalled loops never retires it.
    pub(crate) async fn run(&mut self) {
        self.activity.touch();
        tracing::debug!(queue = ?self.lease.queue(), mode = self.pop.options.mode.as_str(), "pop loop started");
        let mut pop: Option<PopFuture> = None;
        let mut calls: FuturesUnordered<Call> = FuturesUnordered::new();
        let mut pop_at = Instant::now();
        let mut pop_sent = pop_at;
        let mut ack_retry_at: Option<Instant> = None;
        // Once the lease ended: how many batches had started, and until when they are waited
        // for.
        let mut stop: Option<(u64, Option<Instant>)> = None;
        let mut held = false;
        loop {
            let now = Instant::now();
            if stop.is_none() && self.lease.is_cancelled() {
                stop = Some(self.begin_stop(pop.take()));
            }
            let stopping = stop.is_some();
            if !stopping && pop.is_none() && now >= pop_at && !self.lease.is_trusted(now) {
                // This client cannot be sure it is still a member (its membership lapsed): the
                // workers would refuse what a pop brings, and it would stay invisible to the
                // others meanwhile (found by review: popped all the same).
                self.activity.touch();
                self.untrusted.hold(self.lease.queue());
                pop_at = now + UNTRUSTED_DELAY;
            }
            if !stopping && pop.is_none() && now >= pop_at {
                self.activity.touch();
                self.untrusted.resume(self.lease.queue());
                let threshold = self.pop.options.threshold_for_queue;
                if self.book.len() >= threshold {
                    held = true;
                    pop_at = now + FLOW_CONTROL_DELAY;
                } else {
                    held = false;
                    pop_sent = now;
                    let room = u32::try_from(threshold - self.book.len()).unwrap_or(u32::MAX);
                    pop = Some(self.pop_now(room.min(self.pop.options.batch_size)));
                }
            }
            self.resubmit_due(now);
            if ack_retry_at.is_none_or(|at| at <= now) {
                ack_retry_at = None;
                self.send_acks(&mut calls);
            }
            let due = |visible: Instant| self.pop.options.extension_due(visible);
            if self
                .book
                .next_extension(now, due)
                .is_some_and(|at| at <= now)
            {
                self.send_extensions(now, &mut calls);
            }
            self.update_gauges();
            if let Some((started, deadline)) = stop {
                let done = self.finished >= started;
                let late = deadline.is_some_and(|d| Instant::now() >= d);
                if done || late {
                    self.hand_off(late, calls).await;
                    break;
                }
            }
            let due = |visible: Instant| self.pop.options.extension_due(visible);
            let wake_at = [
                (!stopping && pop.is_none()).then_some(pop_at),
                self.retries.front().map(|(at, _, _)| *at),
                self.book.next_extension(now, due),
                ack_retry_at,
                stop.and_then(|(_, deadline)| deadline),
            ]
            .into_iter()
            .flatten()
            .min();
            tokio::select! {
                biased;
                _ = self.lease.cancelled(), if !stopping => {}
                // Before the reports: the calls are sent only when first polled, and a busy
                // inbox, ready at every turn, would keep them from being polled at all. Their
                // answers come at the network's pace, and cannot starve the reports.
                Some(answer) = calls.next(), if !calls.is_empty() => {
                    if let Some(at) = self.on_answer(answer) {
                        ack_retry_at = Some(at);
                    }
                }
                ack = self.acks.recv() => {
                    let mut tally = Tally::default();
                    self.on_ack(ack, &mut tally);
                    while let Some(ack) = self.acks.try_recv() {
                        self.on_ack(ack, &mut tally);
                    }
                    self.link.record_consumed(tally);
                    // Nothing to commit: no explicit commit waits for a popped queue.
                    self.acks.applied(&self.shared.commits);
                }
                result = in_slot(&mut pop) => {
                    pop = None;
                    pop_at = self.on_pop(result, pop_sent);
                }
                _ = sleep_until(wake_at.unwrap_or(now)), if wake_at.is_some() => {}
            }
            // Reports and acknowledgements made room: a queue held by flow control pops again
            // at once.
            if held && self.book.len() < self.pop.options.threshold_for_queue {
                pop_at = Instant::now();
            }
        }
        self.gauges.set(0, 0, 0);
        self.lease.set_buffer(QueueBuffer::default());
        tracing::debug!(queue = ?self.lease.queue(), "pop loop ended");
    }

    /// The lease ended: no more pops (one in flight is handed back when it answers, see
    /// [`hand_back`]) and no new batch starts (the workers drop the lease's batches they take
    /// from now on). Returns how many batches had started, all of which are waited for, until
    /// the `await_in_flight` deadline if set.
    fn begin_stop(&mut self, pop: Option<PopFuture>) -> (u64, Option<Instant>) {
        if let Some(pop) = pop {
            tokio::spawn(hand_back(
                self.pop.clone(),
                self.shared.group.clone(),
                self.lease.queue().clone(),
                pop,
            ));
        }
        let started = self.link.drop_lease();
        self.shared.commits.changed();
        self.give_back_unstarted();
        // Never resubmitted now (see `resubmit_due`): left waiting, the first one's time, once
        // past, would wake the loop at once at every turn until the hand-off. Their messages
        // are handed back with the rest.
        self.retries.clear();
        tracing::debug!(queue = ?self.lease.queue(), popped = self.book.len(), started, finished = self.finished, "lease ended; waiting for the batches in the listener");
        let deadline = self
            .shared
            .options
            .await_in_flight
            // A limit too long for the clock is no limit.
            .and_then(|limit| Instant::now().checked_add(limit));
        (started, deadline)
    }

    /// The lease ended: the messages still waiting for a worker never start now, and are
    /// made visible again at once, not after the batches in the listener finish (found by
    /// review: a hung listener call kept a whole pop's messages invisible to the group, and
    /// extended, until it returned). Not for an orderly pop: its later messages given back
    /// while an earlier one is in the listener could be consumed before it.
    fn give_back_unstarted(&mut self) {
        let Mode::Concurrent { work } = &self.shared.mode else {
            return;
        };
        if self.pop.options.mode == PopMode::Orderly {
            return;
        }
        let mut handles = Vec::new();
        let now = Instant::now();
        for (epoch, messages) in work.withdraw(&self.link) {
            let mut offsets: Vec<i64> = messages.iter().map(Message::queue_offset).collect();
            offsets.sort_unstable();
            handles.extend(self.book.abandon_unstarted(epoch, &offsets, now));
        }
        if handles.is_empty() {
            return;
        }
        let (pop, group, queue) = (
            self.pop.clone(),
            self.shared.group.clone(),
            self.lease.queue().clone(),
        );
        // Tracked with the batches that outlive their hand-offs: the shutdown waits for it.
        self.shared.outliving.spawn(async move {
            let count = handles.len();
            let kept = give_back(&pop, &group, handles).await;
            if kept > 0 {
                tracing::warn!(queue = ?queue, count, kept, "lease ended; the brokers did not make some popped messages visible again that no worker had started: they come back after their invisible time, if the brokers revive them");
            } else {
                tracing::debug!(queue = ?queue, count, "lease ended: gave back the popped messages no worker had started");
            }
        });
    }

    /// The hand-off, once the batches in the listener finished (or `await_in_flight` is up,
    /// `late`): the `calls` on their way answer (each within [`CALL_TIMEOUT`]), what was
    /// consumed is acknowledged (in order; a failed acknowledgement tried once more), and
    /// everything else, never given to the listener (or still in it, when late, or whose
    /// acknowledgement failed again), is made visible again at once for the members that pop
    /// the queue now, but for the messages past their invisible time (the brokers' again:
    /// a Java broker given their dead handles would deliver them once more). A broker that
    /// cannot change an ordinary pop's invisible time (the Rust broker 1.0) keeps those
    /// invisible, and never gives them back.
    async fn hand_off(&mut self, late: bool, mut calls: FuturesUnordered<Call>) {
        self.finish_calls(&mut calls).await;
        self.send_acks(&mut calls);
        self.finish_calls(&mut calls).await;
        // Everything the acknowledgements left: never consumed, or consumed behind a message
        // that was not (an orderly pop acknowledges in order): left invisible, it would hold
        // the queue up for its next owner until its invisible time is up.
        let abandoned = self.book.abandon_all(Instant::now());
        let count = abandoned.len();
        let kept = give_back(&self.pop, &self.shared.group, abandoned).await;
        let given_back = count - kept;
        self.retries.clear();
        let queue = self.lease.queue();
        if kept > 0 {
            tracing::warn!(queue = ?queue, given_back, kept, "handed off; the brokers did not make some popped messages visible again: they come back after their invisible time, if the brokers revive them (the Rust broker 1.0 revives no ordinary POP)");
        } else if late {
            tracing::warn!(queue = ?queue, given_back, "handed off before the batches in the listener finished (await_in_flight): their messages were made visible again, and another member consumes them again");
        } else {
            tracing::debug!(queue = ?queue, given_back, "handed off");
        }
    }

    /// A pop of up to `max` messages.
    fn pop_now(&mut self, max: u32) -> PopFuture {
        let options = &self.pop.options;
        let queue = self.lease.queue();
        let mut request = PopRequest::new(
            self.shared.group.clone(),
            queue.clone(),
            self.shared.expression(&queue.topic),
        )
        .with_max_messages(max.max(1))
        .with_invisible_time(options.invisible_time)
        .with_poll_time(options.poll_time)
        .with_start(PopStart::of(self.lease.start_position()));
        if options.mode == PopMode::Orderly {
            let attempt = self
                .attempt
                .get_or_insert_with(|| self.pop.next_attempt())
                .clone();
            request = request.orderly(Some(attempt));
        }
        let source = self.pop.source.clone();
        let lease = self.lease.clone();
        let link = self.link.clone();
        Box::pin(async move {
            let started = Instant::now();
            let after = request.poll_time.saturating_add(POP_GRACE);
            let result = match tokio::time::timeout(
                after,
                rebalance_runtime::containment::caught(source.pop(&request)),
            )
            .await
            {
                Ok(Ok(result)) => result,
                Ok(Err(panic)) => {
                    tracing::error!(queue = ?request.queue, panic = %panic, "the pop source panicked; counting it as a failed pop");
                    Err(PullError::Remote(RemoteError::BadResponse(format!(
                        "the pop source panicked: {panic}"
                    ))))
                }
                Err(_) => Err(PullError::Remote(RemoteError::Timeout {
                    service: "the pop source".to_owned(),
                    after,
                })),
            };
            let took = Instant::now().saturating_duration_since(started);
            lease.record_pull(took);
            let outcome = match &result {
                Ok(PopResult::Found { .. }) => PullOutcome::Found,
                Ok(_) => PullOutcome::NoNewMessage,
                Err(PullError::Throttled(_)) => PullOutcome::Throttled,
                Err(_) => PullOutcome::Error,
            };
            link.metrics().pull(outcome, took);
            result
        })
    }

    /// Takes a pop's answer; returns when to pop next: at once after messages, no sooner than
    /// [`EMPTY_PULL_SPACING`] after an empty pop that was not held (also one "found" with
    /// nothing in it: a broker answering so every time would be popped at network speed), 20 ms
    /// after the source asked to slow down, [`PULL_ERROR_DELAY`] after a failure (a denial backs
    /// off further).
    fn on_pop(&mut self, result: Result<PopResult, PullError>, sent: Instant) -> Instant {
        let now = Instant::now();
        let queue = self.lease.queue().clone();
        match result {
            Ok(PopResult::Found { messages, filtered })
                if !messages.is_empty() || !filtered.is_empty() =>
            {
                self.errors.recovered(&self.shared.denials, &queue);
                self.attempt = None;
                // Stamped by the brokers between the sending and now (late in a long poll).
                let visible_again =
                    VisibleAgain::between(sent, now, self.pop.options.invisible_time);
                let batches = self.book.add(messages, filtered, visible_again);
                match &self.shared.mode {
                    Mode::Concurrent { work } => {
                        for (epoch, messages) in batches {
                            work.push(self.link.clone(), epoch, messages);
                        }
                    }
                    Mode::Orderly { .. } => {
                        // `start()` refuses server-side assignment to an orderly consumer.
                        tracing::error!(queue = ?queue, "popped messages reached an orderly consumer; they are left to the brokers' redelivery");
                        drop(self.book.abandon_waiting());
                    }
                }
                now
            }
            Ok(answer) => {
                self.errors.recovered(&self.shared.denials, &queue);
                self.attempt = None;
                let held = now.saturating_duration_since(sent) >= EMPTY_PULL_SPACING;
                if matches!(answer, PopResult::Found { .. }) {
                    tracing::debug!(queue = ?queue, held, "a pop found nothing in its answer; the next one is spaced as after an empty pop");
                }
                if held { now } else { sent + EMPTY_PULL_SPACING }
            }
            Err(PullError::Throttled(e)) => {
                self.errors
                    .failed(&queue, "pop throttled", &e, THROTTLED_DELAY);
                now + THROTTLED_DELAY
            }
            Err(PullError::Remote(e)) => {
                now + self
                    .errors
                    .remote(&self.shared.denials, &queue, "pop", &e, PULL_ERROR_DELAY)
            }
            Err(e) => {
                self.errors.failed(&queue, "pop", &e, PULL_ERROR_DELAY);
                now + PULL_ERROR_DELAY
            }
        }
    }

    /// Takes a batch's report: its messages are consumed (or sent back), but for those whose
    /// send-back failed, consumed again here later (handed back to the brokers if the lease
    /// ends first).
    fn on_ack(&mut self, ack: Ack, tally: &mut Tally) {
        tally.add(ack.tally);
        self.finished += ack.finished;
        self.book
            .done(ack.epoch, ack.first, ack.last, |o| ack.keeps(o));
        if ack.retry.is_empty() || self.link.is_dropped() {
            return;
        }
        let at = Instant::now() + LOCAL_RETRY_DELAY;
        self.retries
            .extend(ack.retry.into_iter().map(|m| (at, ack.epoch, m)));
    }

    /// Hands the messages whose local retry is due to the workers again, one batch each (a
    /// report then names exactly it).
    fn resubmit_due(&mut self, now: Instant) {
        if self.link.is_dropped() {
            return;
        }
        let Mode::Concurrent { work } = &self.shared.mode else {
            return;
        };
        while self.retries.front().is_some_and(|(at, _, _)| *at <= now) {
            if let Some((_, epoch, message)) = self.retries.pop_front() {
                work.push(self.link.clone(), epoch, vec![message]);
            }
        }
    }

    /// Takes the answers of every call on its way, as a hand-off does (a failed
    /// acknowledgement leaves its messages to acknowledge, at once).
    async fn finish_calls(&mut self, calls: &mut FuturesUnordered<Call>) {
        while let Some(answer) = calls.next().await {
            self.on_answer(answer);
        }
    }

    /// Sends the acknowledgements due: one call per entry, each entry's consumed messages in
    /// offset order (see [`Book::acks_due`]).
    fn send_acks(&mut self, calls: &mut FuturesUnordered<Call>) {
        let in_order = self.pop.options.mode == PopMode::Orderly;
        for batch in self.book.acks_due(in_order) {
            let source = self.pop.source.clone();
            let group = self.shared.group.clone();
            calls.push(Box::pin(async move {
                let answer = {
                    let handles: Vec<&str> = batch.handles.iter().map(String::as_str).collect();
                    contained("ack", source.ack(&group, &batch.topic, &handles)).await
                };
                Answer::Ack(batch, answer)
            }));
        }
    }

    /// Sends the extensions of invisible time due at `now`: one call per message not
    /// acknowledged yet of each entry due.
    fn send_extensions(&mut self, now: Instant, calls: &mut FuturesUnordered<Call>) {
        let invisible = self.pop.options.invisible_time;
        let due = |visible: Instant| self.pop.options.extension_due(visible);
        for extension in self.book.extensions_due(now, due) {
            let source = self.pop.source.clone();
            let group = self.shared.group.clone();
            calls.push(Box::pin(async move {
                let sent = Instant::now();
                let call = source.change_invisible_time(
                    &group,
                    &extension.topic,
                    &extension.handle,
                    invisible,
                );
                let answer = contained("change invisible time", call).await;
                Answer::Extend {
                    extension,
                    sent,
                    answer,
                }
            }));
        }
    }

    /// Takes the answer of an acknowledgement or an extension. Returns when to try a failed
    /// acknowledgement again, while it can still count (else it is given up: see
    /// `Book::ack_failed`). An entry the brokers refuse to extend is not asked again.
    fn on_answer(&mut self, answer: Answer) -> Option<Instant> {
        match answer {
            Answer::Ack(batch, Ok(())) => self.book.acked(&batch),
            // Tried again even while the lease ends (once more at the hand-off, which then
            // hands back what is still not acknowledged): given up, an orderly pop's later
            // messages would be acknowledged ahead of it. But not for ever: see
            // `Book::ack_failed`.
            Answer::Ack(batch, Err(e)) => {
                let now = Instant::now();
                let keep_trying_for =
                    (!refused_for_good(&e)).then_some(self.pop.options.invisible_time);
                let given_up = self.book.ack_failed(&batch, now, keep_trying_for);
                if given_up > 0 {
                    tracing::warn!(queue = ?self.lease.queue(), given_up, error = %e, "gave up acknowledging consumed messages (refused, past their invisible time, or failing for as long as it): the brokers may deliver them again");
                }
                if given_up < batch.offsets.len() {
                    self.errors
                        .failed(self.lease.queue(), "ack", &e, PULL_ERROR_DELAY);
                    return Some(now + PULL_ERROR_DELAY);
                }
            }
            Answer::Extend {
                extension,
                sent,
                answer: Ok(handle),
            } => {
                let invisible = self.pop.options.invisible_time;
                tracing::debug!(queue = ?self.lease.queue(), offset = extension.offset, ?invisible, "extended the invisible time of a message still being consumed");
                let visible_again = VisibleAgain::between(sent, Instant::now(), invisible);
                self.book.extended(&extension, handle, visible_again);
            }
            // Not answered, not reached, or the broker busy (SYSTEM_BUSY 2, FLOW_CONTROL 215):
            // another try while the messages are still invisible, rather than letting another
            // member have them (found by review: one busy answer ended an entry's extensions
            // for good).
            Answer::Extend {
                extension,
                answer:
                    Err(
                        e @ (RemoteError::Timeout { .. }
                        | RemoteError::Unreachable(_)
                        | RemoteError::Refused { code: 2 | 215, .. }),
                    ),
                ..
            } => {
                tracing::debug!(queue = ?self.lease.queue(), offset = extension.offset, error = %e, retry_in = ?EXTENSION_RETRY_DELAY, "extending the invisible time of a message failed on the way; trying again");
                self.book
                    .extension_failed(extension.epoch, Instant::now() + EXTENSION_RETRY_DELAY);
            }
            Answer::Extend {
                extension,
                answer: Err(e),
                ..
            } => {
                if !self.refusal_said {
                    self.refusal_said = true;
                    tracing::warn!(queue = ?self.lease.queue(), error = %e, "the brokers did not extend the invisible time of messages still being consumed: another member may get them once it passes (the Rust broker 1.0 refuses it for an ordinary POP)");
                }
                self.book.not_extendable(extension.epoch);
            }
        }
        None
    }

    /// Sets this queue's share of the buffer gauges and the running info: the messages popped
    /// and not acknowledged.
    fn update_gauges(&mut self) {
        self.gauges.set(self.book.len(), self.book.bytes(), 0);
        self.lease.set_buffer(QueueBuffer {
            count: self.book.len() as u64,
            bytes: self.book.bytes(),
            min_offset: 0,
            max_offset: 0,
        });
    }
}

/// Calls the source, contained and bounded: a panic or a call that does not answer within
/// [`CALL_TIMEOUT`] is an error.
async fn contained<T>(
    what: &'static str,
    call: impl Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    match tokio::time::timeout(CALL_TIMEOUT, rebalance_runtime::containment::caught(call)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(panic)) => Err(RemoteError::BadResponse(format!(
            "the pop source panicked in {what}: {panic}"
        ))),
        Err(_) => Err(RemoteError::Timeout {
            service: format!("the pop source ({what})"),
            after: CALL_TIMEOUT,
        }),
    }
}

/// Whether an acknowledgement's failure is the brokers' refusal of the acknowledgement itself,
/// which asking again does not change: the topic unknown (17), the queue or the handle not
/// valid (13), the offset out of the queue's range (208, its messages deleted); or an answer
/// that cannot be understood. Anything else (not reached, not answered in time, busy) is
/// tried again.
fn refused_for_good(error: &RemoteError) -> bool {
    match error {
        RemoteError::Refused { code, .. } => matches!(*code, 13 | 17 | NO_MESSAGE),
        RemoteError::BadResponse(_) => true,
        _ => false,
    }
}

/// How many changes of invisible time giving messages back has on their way at once.
const GIVE_BACK_CONCURRENCY: usize = 256;

/// Makes the messages of `handles` (topic and receipt handle) visible again at once; returns
/// how many the brokers did not take (a message its queue no longer has, refused with 208, is
/// not counted: nothing of it is left to come back). The calls go side by side (up to
/// [`GIVE_BACK_CONCURRENCY`] at once): a broker that does not answer holds a hand-off up for
/// one [`CALL_TIMEOUT`], not one per message (found by review: one after the other, a broker
/// answering late gave 40 messages back to the queue's next owner over 392 s, one every 10 s).
async fn give_back(pop: &PopShared, group: &str, handles: Vec<(Arc<str>, String)>) -> usize {
    futures_util::stream::iter(handles)
        .map(|(topic, handle)| async move {
            let call = pop
                .source
                .change_invisible_time(group, &topic, &handle, Duration::ZERO);
            match contained("change invisible time", call).await {
                Ok(_) => false,
                // Deleted from its queue: there is nothing left to give back.
                Err(RemoteError::Refused {
                    code: NO_MESSAGE, ..
                }) => false,
                Err(_) => true,
            }
        })
        .buffer_unordered(GIVE_BACK_CONCURRENCY)
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await
}

/// A pop in flight when its lease ended: what it brings is made visible again at once, for the
/// members that hold the queue now (the lease that would have consumed it is gone). A broker
/// that cannot change an ordinary pop's invisible time (the Rust broker 1.0) keeps them
/// invisible, and never gives them back.
async fn hand_back(
    pop: Arc<PopShared>,
    group: Arc<str>,
    queue: rebalance_core::MessageQueue,
    answer: PopFuture,
) {
    let Ok(PopResult::Found {
        mut messages,
        filtered,
    }) = answer.await
    else {
        return;
    };
    messages.extend(filtered);
    let handles = messages
        .iter()
        .filter_map(|m| Some((Arc::from(m.topic()), m.receipt_handle()?.to_owned())))
        .collect();
    let lost = give_back(&pop, &group, handles).await;
    if lost > 0 {
        tracing::warn!(queue = ?queue, popped = messages.len(), not_handed_back = lost, "a pop answered after its lease ended, and the brokers did not make its messages visible again: they come back after their invisible time, if the brokers revive them");
    } else {
        tracing::debug!(queue = ?queue, popped = messages.len(), "handed back what a pop brought after its lease ended");
    }
}
