//! [`LeaseLink`]: what the consumers of a lease's messages share with its pull loop: where to
//! report what they consumed, and whether the lease is being handed off.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rebalance_core::MessageQueue;
use tokio::sync::Notify;

use super::Message;
use super::work::Span;
use crate::commit_waits::CommitWaits;
use crate::metrics::TopicMetrics;
use rebalance_runtime::QueueLease;

/// Set in [`LeaseLink::state`] once the lease is handed off: no new batch starts.
const DROPPED: u64 = 1 << 63;

/// What a consumer of a batch reports to the lease's pull loop.
#[derive(Debug)]
pub(crate) struct Ack {
    /// The buffer's epoch the batch was taken in.
    pub(crate) epoch: u64,
    /// The batch's first and last offsets: every buffered message between them belongs to it.
    pub(crate) first: i64,
    pub(crate) last: i64,
    /// Messages of the batch that are not consumed and stay buffered: to be consumed again
    /// locally later (their send-back failed), unless the lease is handed off meanwhile.
    pub(crate) retry: Vec<Message>,
    /// How many of the report's batches left the listener: one, none for a batch sent back
    /// because it timed out while the listener still runs, several once reports of batches
    /// that follow each other joined in the inbox ([`Ack::joins`]).
    pub(crate) finished: u64,
    /// The lease's consume guard the batch ran under (when the consumer locks its queues): the
    /// pull loop commits, then drops it, so the queue is never unlocked between the two.
    pub(crate) guard: Option<rebalance_runtime::ConsumeGuard>,
    /// What the batch's listener call did, for the running info (recorded by the pull loop
    /// for all the acks it takes at once).
    pub(crate) tally: Tally,
    /// Where the batch sits in its work-queue entry ([`Span::ALONE`] when it comes from none):
    /// a report that follows the one waiting before it joins it ([`Ack::absorb`]).
    pub(crate) span: Span,
}

/// Listener calls and their outcomes, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) calls: u64,
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    pub(crate) spent: std::time::Duration,
}

impl Tally {
    /// One call: `ok` consumed, `failed` not, after `spent`.
    pub(crate) fn call(ok: usize, failed: usize, spent: std::time::Duration) -> Self {
        Self {
            calls: 1,
            ok: ok as u64,
            failed: failed as u64,
            spent,
        }
    }

    /// Adds `other`.
    pub(crate) fn add(&mut self, other: Tally) {
        self.calls += other.calls;
        self.ok += other.ok;
        self.failed += other.failed;
        self.spent += other.spent;
    }
}

impl Ack {
    /// Whether `offset` stays buffered.
    pub(crate) fn keeps(&self, offset: i64) -> bool {
        self.retry.iter().any(|m| m.queue_offset() == offset)
    }

    /// Whether the report is of batches that left the listener with every message consumed
    /// and no consume guard: the only kind that joins another.
    fn is_plain(&self) -> bool {
        self.guard.is_none() && self.retry.is_empty() && self.finished > 0
    }

    /// Whether `next` may join this report: its batch follows this one's last in their
    /// work-queue entry ([`Span::follows`]: every message of the entry between their offsets
    /// belongs to one of them), and both are plain.
    fn joins(&self, next: &Ack) -> bool {
        self.is_plain()
            && next.is_plain()
            && self.epoch == next.epoch
            && next.span.follows(&self.span)
    }

    /// Takes `next`, which [`joins`](Self::joins) it, into this report: one acknowledgement of
    /// the whole range.
    fn absorb(&mut self, next: Ack) {
        self.first = self.first.min(next.first);
        self.last = self.last.max(next.last);
        self.finished += next.finished;
        self.tally.add(next.tally);
        self.span = next.span;
    }
}

/// Shared by a lease's pull loop and the tasks consuming its messages. A new loop (a new
/// lease, or a restart) gets a new link, so an old consumer can never report into it.
#[derive(Debug)]
pub(crate) struct LeaseLink {
    /// The lease the loop consumes: its queue, and where each batch's outcome is recorded for
    /// the running info.
    lease: QueueLease,
    /// The reports waiting for the pull loop, on cache lines of their own (below).
    inbox: Inbox,
    /// [`DROPPED`] | the number of batches that started consumption.
    state: AtomicU64,
    /// Whether each batch holds the lease's consume guard (the consumer locks its queues).
    guarded: bool,
    /// The topic's metric handles, shared by its queues.
    metrics: Arc<TopicMetrics>,
}

/// Whether a batch may run, for [`LeaseLink::consume_guard`].
#[derive(Debug)]
pub(crate) enum Guard {
    /// Its queue is not locked: nothing to hold.
    Unneeded,
    /// Held: the runtime does not unlock the queue until it is dropped.
    Held(rebalance_runtime::ConsumeGuard),
    /// Refused: the queue is released, its lock is stale, or its lease is not trusted; the
    /// batch must not run now.
    Refused,
}

/// The reports of a lease's consumers waiting for its pull loop: a list, allocated only once
/// something is reported (an idle queue's holds nothing), and a wake-up. A channel would cost
/// an idle queue a block of 32 slots (about 2 KiB).
///
/// Aligned to a cache line: the workers of every runtime thread and the loop write its lock at
/// every report, and what the link holds beside it (the lease, the metric handles) each
/// worker reads at every batch; sharing a line with them made every batch's reads miss (in
/// process, on two threads, about 8 % more CPU per message).
#[derive(Debug)]
#[repr(align(64))]
struct Inbox {
    /// The reports, and how many batches reported that they left the listener (counted under
    /// the same lock as the report itself: a worker's report touches one contended cache line,
    /// not two).
    reports: Mutex<Reports>,
    /// Notified after each report into an empty inbox (a report into a non-empty one has the
    /// loop's wake-up on its way already: the loop empties the inbox whole, under the same
    /// lock); a notification with nobody waiting is kept for the next wait, so none is lost.
    ready: Notify,
    /// How many reports the loop has taken and committed ([`Reports::made`] as it was when
    /// the loop took them): a commit waits for the reports made before it
    /// ([`LeaseLink::has_applied`]).
    applied: AtomicU64,
}

/// What [`Inbox::reports`] guards.
#[derive(Debug)]
struct Reports {
    /// `None` once the loop's [`AckReceiver`] is gone: a report is dropped then, and with it
    /// the consume guard it carries.
    acks: Option<Vec<Ack>>,
    /// How many batches reported that they left the listener (for [`LeaseLink::in_flight`]).
    finished: u64,
    /// How many reports were made (and not refused).
    made: u64,
}

/// The pull loop's end of a [`LeaseLink`]: the reports, in the order they were made. Dropping
/// it closes the link (later reports are dropped).
#[derive(Debug)]
pub(crate) struct AckReceiver {
    link: Arc<LeaseLink>,
    /// Taken from the inbox and not yet received.
    taken: VecDeque<Ack>,
    /// How many reports had been made when the inbox was last taken.
    taken_upto: u64,
    /// The commits to wake when the receiver goes without a hand-off (its loop's task
    /// panicked or was aborted), so that none waits for it to its bound.
    commits: Option<Arc<CommitWaits>>,
}

impl AckReceiver {
    /// The receiver of `link`'s reports (one per link).
    pub(crate) fn new(link: &Arc<LeaseLink>) -> Self {
        Self {
            link: link.clone(),
            taken: VecDeque::new(),
            taken_upto: 0,
            commits: None,
        }
    }

    /// Wakes `commits` when the receiver is dropped (see [`Drop`]).
    pub(crate) fn waking(mut self, commits: &Arc<CommitWaits>) -> Self {
        self.commits = Some(commits.clone());
        self
    }

    /// The next report, if one was made.
    pub(crate) fn try_recv(&mut self) -> Option<Ack> {
        if self.taken.is_empty() {
            let mut reports = self
                .link
                .inbox
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(acks) = reports.acks.as_mut() {
                self.taken.extend(acks.drain(..));
            }
            self.taken_upto = reports.made;
        }
        self.taken.pop_front()
    }

    /// Says that every report received is committed (its offsets are the lease's committed
    /// offset), and wakes the `commits` waiting for them. Nothing while some taken report is
    /// not received yet. Returns whether it said so.
    pub(crate) fn applied(&self, commits: &CommitWaits) -> bool {
        if !self.taken.is_empty() {
            return false;
        }
        self.store_applied(self.taken_upto, commits);
        true
    }

    /// Says that the loop's hand-off committed all it will (after it, a report is never
    /// committed), and wakes the `commits` waiting for its reports.
    pub(crate) fn handed_off(&self, commits: &CommitWaits) {
        self.store_applied(u64::MAX, commits);
    }

    fn store_applied(&self, applied: u64, commits: &CommitWaits) {
        // SeqCst, as the waiting commits' count (see `CommitWaits`): of the two, the loop
        // sees a commit waiting or the commit sees this.
        self.link.inbox.applied.store(applied, Ordering::SeqCst);
        commits.changed();
    }

    /// [`applied`](Self::applied) after an ordered batch's outcome was committed: every
    /// settling counted on the link ([`LeaseLink::count_settled`]) is committed too, when no
    /// report waits (only one ordered batch of a queue is out at a time, and its settling was
    /// counted before the loop had its outcome).
    pub(crate) fn settled(&mut self, commits: &CommitWaits) {
        if !self.taken.is_empty() {
            return;
        }
        {
            let reports = self
                .link
                .inbox
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !reports.acks.as_ref().is_some_and(Vec::is_empty) {
                return;
            }
            self.taken_upto = reports.made;
        }
        self.applied(commits);
    }

    /// Waits for the next report. Cancel-safe: a report taken is kept for the next call.
    pub(crate) async fn recv(&mut self) -> Ack {
        loop {
            if let Some(ack) = self.try_recv() {
                return ack;
            }
            self.link.inbox.ready.notified().await;
        }
    }
}

impl Drop for AckReceiver {
    fn drop(&mut self) {
        // Its loop is gone (handed off, or its task panicked or was aborted): no batch of it
        // starts any more (a batch still queued for the workers is consumed by the queue's next
        // loop, from the committed offset, not twice).
        self.link.drop_lease();
        let left = self
            .link
            .inbox
            .reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .acks
            .take();
        drop(left);
        // The link has no receiver now: a commit waiting for it looks again and goes on.
        if let Some(commits) = &self.commits {
            commits.changed();
        }
    }
}

impl LeaseLink {
    /// A link for `lease`; its pull loop receives the reports with an [`AckReceiver`].
    pub(crate) fn new(lease: QueueLease, metrics: Arc<TopicMetrics>) -> Self {
        Self {
            lease,
            inbox: Inbox {
                reports: Mutex::new(Reports {
                    acks: Some(Vec::new()),
                    finished: 0,
                    made: 0,
                }),
                ready: Notify::new(),
                applied: AtomicU64::new(0),
            },
            state: AtomicU64::new(0),
            guarded: false,
            metrics,
        }
    }

    /// The topic's metric handles.
    pub(crate) fn metrics(&self) -> &Arc<TopicMetrics> {
        &self.metrics
    }

    /// A link for a lease no consumer manages, of `queue` (for tests).
    #[cfg(test)]
    pub(crate) fn detached(queue: MessageQueue, metrics: Arc<TopicMetrics>) -> Self {
        let (lease, _) = crate::testing::lease(&queue, rebalance_runtime::StartPosition::Offset(0));
        Self::new(lease, metrics)
    }

    /// The lease the link's loop consumes.
    pub(crate) fn lease(&self) -> &QueueLease {
        &self.lease
    }

    /// Records calls of the listener on the lease (for the running info; see
    /// [`QueueLease::record_consumed`]).
    pub(crate) fn record_consumed(&self, tally: Tally) {
        self.lease
            .record_consumed_calls(tally.calls, tally.ok, tally.failed, tally.spent);
    }

    /// Runs `processing`, a batch of the lease's messages in the listener, as the consumer's
    /// application code ([`QueueLease::processing`]): a shutdown asked for from inside it does
    /// not wait for itself.
    pub(crate) fn processing<F: std::future::Future>(
        &self,
        processing: F,
    ) -> impl std::future::Future<Output = F::Output> {
        self.lease.processing(processing)
    }

    /// The right to run one batch at `now` when the consumer does not lock its queues (no
    /// guard, and nothing to wait for): the batch runs only while the lease is trusted (this
    /// client's membership is vouched for), like a locked one (see
    /// `QueueLease::consume_guard`). `None` when the link is guarded.
    pub(crate) fn unguarded(&self, now: tokio::time::Instant) -> Option<Guard> {
        if self.guarded {
            return None;
        }
        Some(if self.lease.is_trusted(now) {
            Guard::Unneeded
        } else {
            Guard::Refused
        })
    }

    /// Makes each batch hold the lease's consume guard (the consumer locks its queues).
    pub(crate) fn guarded(mut self) -> Self {
        self.guarded = true;
        self
    }

    /// Waits for the right to run one batch, asked for at `now`: the lease's consume guard when
    /// the consumer locks its queues; refused once the lease is handed off (before or while
    /// waiting), while its lock is stale, or while the lease is not trusted (this client's
    /// membership lapsed).
    pub(crate) async fn consume_guard(&self, now: tokio::time::Instant) -> Guard {
        if let Some(unguarded) = self.unguarded(now) {
            return unguarded;
        }
        match self.lease.consume_guard().await {
            Some(guard) if !self.is_dropped() => Guard::Held(guard),
            _ => Guard::Refused,
        }
    }

    pub(crate) fn queue(&self) -> &MessageQueue {
        self.lease.queue()
    }

    /// Registers a batch starting consumption; false once the lease is handed off (the batch
    /// is then dropped unprocessed).
    pub(crate) fn begin(&self) -> bool {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                (state & DROPPED == 0).then_some(state + 1)
            })
            .is_ok()
    }

    /// Stops new batches from starting; returns how many started before.
    pub(crate) fn drop_lease(&self) -> u64 {
        self.state.fetch_or(DROPPED, Ordering::AcqRel) & !DROPPED
    }

    /// Whether the lease is handed off.
    pub(crate) fn is_dropped(&self) -> bool {
        self.state.load(Ordering::Acquire) & DROPPED != 0
    }

    /// Reports a batch to the pull loop (ignored when the loop is gone). A plain report that
    /// follows the one waiting last in the inbox joins it ([`Ack::joins`]): while the
    /// loop is busy, a pull's batches of one message reach it as one acknowledgement, not one
    /// each. The loop is woken only when the inbox was empty: otherwise a wake-up is already on
    /// its way (the one of the report that filled it, which the loop has not taken yet).
    pub(crate) fn report(&self, ack: Ack) {
        // `Err`: refused, dropped outside the lock (it may release the queue's consume guard).
        let wake = {
            let mut guard = self
                .inbox
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let reports = &mut *guard;
            reports.finished += ack.finished;
            match reports.acks.as_mut() {
                Some(acks) => {
                    reports.made += 1;
                    let wake = acks.is_empty();
                    match acks.last_mut() {
                        Some(last) if last.joins(&ack) => last.absorb(ack),
                        _ => acks.push(ack),
                    }
                    Ok(wake)
                }
                None => Err(ack),
            }
        };
        match wake {
            Ok(true) => self.inbox.ready.notify_one(),
            Ok(false) => {}
            Err(refused) => drop(refused),
        }
    }

    /// How many reports were made so far, `None` once the loop is gone (nothing it was
    /// given is committed any more).
    pub(crate) fn reports_made(&self) -> Option<u64> {
        let reports = self
            .inbox
            .reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        reports.acks.is_some().then_some(reports.made)
    }

    /// Counts an ordered batch's settling as a report (one an explicit commit waits for), made
    /// before its outcome is given to the loop.
    pub(crate) fn count_settled(&self) {
        let mut reports = self
            .inbox
            .reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if reports.acks.is_some() {
            reports.made += 1;
        }
    }

    /// Whether the loop has committed the first `made` reports.
    pub(crate) fn has_applied(&self, made: u64) -> bool {
        self.inbox.applied.load(Ordering::SeqCst) >= made
    }

    /// How many batches are in the listener (started and not finished).
    pub(crate) fn in_flight(&self) -> u64 {
        let started = self.state.load(Ordering::Acquire) & !DROPPED;
        let finished = self
            .inbox
            .reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .finished;
        started.saturating_sub(finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_metrics() -> Arc<TopicMetrics> {
        Arc::new(TopicMetrics::new("G", "T"))
    }

    fn ack(first: i64) -> Ack {
        Ack {
            epoch: 0,
            first,
            last: first,
            retry: Vec::new(),
            finished: 1,
            guard: None,
            tally: Tally::default(),
            span: Span::ALONE,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn reports_arrive_in_order_and_a_wake_up_is_never_lost() {
        let link = Arc::new(LeaseLink::detached(
            MessageQueue::new("T", "b", 0),
            test_metrics(),
        ));
        let mut acks = AckReceiver::new(&link);
        assert!(acks.try_recv().is_none());
        // Reported before anyone waits: the wake-up is kept.
        link.report(ack(1));
        link.report(ack(2));
        assert_eq!(acks.recv().await.first, 1);
        assert_eq!(acks.try_recv().map(|a| a.first), Some(2));
        let waiter = {
            let link = link.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                link.report(ack(3));
            })
        };
        assert_eq!(acks.recv().await.first, 3);
        waiter.await.unwrap();
        assert_eq!(link.in_flight(), 0);
    }

    /// A loop gone without its hand-off (its task panicked, or was aborted) closes its link:
    /// the workers start no batch still queued for it (found by review: they ran beside the
    /// queue's next loop, which pulls the same messages again, and their reports were lost).
    #[test]
    fn a_receiver_dropped_closes_its_link() {
        let link = Arc::new(LeaseLink::detached(
            MessageQueue::new("T", "b", 0),
            test_metrics(),
        ));
        let acks = AckReceiver::new(&link);
        assert!(link.begin(), "a batch starts while its loop lives");
        drop(acks);
        assert!(link.is_dropped());
        assert!(!link.begin(), "none once the loop is gone");
        assert_eq!(link.reports_made(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_that_follows_the_one_waiting_joins_it() {
        use crate::work::WorkQueue;
        let q = MessageQueue::new("T", "b", 0);
        let link = Arc::new(LeaseLink::detached(q.clone(), test_metrics()));
        let mut acks = AckReceiver::new(&link);
        let work = WorkQueue::default();
        work.push(
            link.clone(),
            0,
            (0..7).map(|o| Message::new(q.clone(), o, "x")).collect(),
        );
        let taken = || work.take(1, &mut Vec::new()).unwrap().span;
        let spans: Vec<Span> = (0..7).map(|_| taken()).collect();
        for _ in 0..7 {
            assert!(link.begin());
        }
        let of = |offset: i64| Ack {
            span: spans[offset as usize],
            ..ack(offset)
        };
        // Reported by several workers, not in order: a report joins only the one waiting last,
        // and only when it follows it.
        link.report(of(0));
        link.report(of(1));
        link.report(of(3));
        link.report(of(2));
        let first = acks.recv().await;
        assert_eq!((first.first, first.last, first.finished), (0, 1, 2));
        let second = acks.try_recv().unwrap();
        assert_eq!((second.first, second.last, second.finished), (3, 3, 1));
        let third = acks.try_recv().unwrap();
        assert_eq!((third.first, third.last), (2, 2), "2 does not follow 3");
        assert_eq!(link.in_flight(), 3, "4, 5 and 6 are still in the listener");
        // The loop took the inbox whole: 4 follows 3, but nothing waits for it to join, and
        // a loop waiting for it is woken.
        let waiter = tokio::spawn(async move {
            let ack = acks.recv().await;
            (acks, ack)
        });
        tokio::task::yield_now().await;
        link.report(of(4));
        let (mut acks, fourth) = tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("the loop is woken")
            .unwrap();
        assert_eq!((fourth.first, fourth.last, fourth.finished), (4, 4, 1));
        // Not plain (a message kept for a local retry): never joined.
        let mut failed = of(6);
        failed.retry = vec![Message::new(q.clone(), 6, "x")];
        link.report(of(5));
        link.report(failed);
        assert_eq!(acks.recv().await.last, 5);
        assert_eq!(acks.try_recv().map(|a| a.first), Some(6));
        assert_eq!(link.in_flight(), 0, "each joined batch counted as finished");
    }

    #[tokio::test]
    async fn reports_after_the_receiver_is_gone_are_dropped_with_their_guard() {
        let link = Arc::new(LeaseLink::detached(
            MessageQueue::new("T", "b", 0),
            test_metrics(),
        ));
        let (lease, state) =
            crate::testing::lease(link.queue(), rebalance_runtime::StartPosition::Offset(0));
        let acks = AckReceiver::new(&link);
        let mut kept = ack(1);
        kept.guard = lease.consume_guard().await;
        assert!(state.guard_held());
        link.report(kept);
        drop(acks);
        assert!(!state.guard_held(), "closing drops what was waiting");
        let mut late = ack(2);
        late.guard = lease.consume_guard().await;
        link.report(late);
        assert!(!state.guard_held(), "a late report is dropped at once");
    }

    #[test]
    fn no_batch_begins_after_the_drop() {
        let link = LeaseLink::detached(MessageQueue::new("T", "b", 0), test_metrics());
        assert!(link.begin());
        assert!(link.begin());
        assert_eq!(link.drop_lease(), 2);
        assert!(link.is_dropped());
        assert!(!link.begin());
        assert_eq!(link.drop_lease(), 2);
    }
}
