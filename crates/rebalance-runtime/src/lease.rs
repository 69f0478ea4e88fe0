//! [`QueueLease`]: the per-queue seam between the runtime and whatever consumes the queue, and
//! the [`LeaseState`] it shares with the service's table; [`HeldLeases`], the held queues' lease
//! states as the service publishes them for the running info.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering, fence};
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use rebalance_core::MessageQueue;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::assignment::Assignment;
use crate::assignment_source::ReadMode;
use crate::lease_terms::StartPosition;
use crate::running::{ConsumerActivity, Figures, QueueBuffer, QueueFigures, TopicMeter};

/// State a queue's lease shares with the runtime's ProcessQueue table.
///
/// Small on purpose (one per held queue): what only some queues need (the lease's own
/// cancellation token, the consume lock, the broker lock's validity) is in [`Parts`], made the
/// first time something asks for it. A consumer that never looks at its leases' tokens and
/// locks no queue holds none of it.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Set (once) when the runtime takes the queue away.
    dropped: AtomicBool,
    /// The next offset to consume as the application reported it; -1 when it reported nothing.
    pub(crate) committed: AtomicI64,
    /// The last offset the store accepted; -1 when none. Written by the service task only.
    persisted: AtomicI64,
    /// Set by [`QueueLease::persist_now`]: the service persists the committed offset at once.
    pub(crate) persist_now: AtomicBool,
    /// Set when the store accepted a new offset: it is written once more, unchanged, at the
    /// next persistence (see [`LeaseState::set_persisted`]).
    confirm: AtomicBool,
    /// Set (once, after it) when [`Parts::lock_valid_until`] is first set: a queue that was
    /// never locked is read as such without the mutex, by every batch's trust check (a lock's
    /// validity, once recorded, is only ever moved, never removed).
    locked: AtomicBool,
    parts: OnceLock<Box<Parts>>,
    /// Shared by the consumer's leases and its service.
    pub(crate) activity: Arc<ConsumerActivity>,
    /// Pulled (the queue is this client's alone) or popped (server-side assignment in POP
    /// mode: shared, nothing committed).
    pub(crate) read_mode: ReadMode,
    /// Whether the queue was taken back after a release for an offset reset (see
    /// [`QueueLease::after_reset`]).
    pub(crate) after_reset: bool,
    /// Set while the group's directory does not list this client for the queue's topic: the
    /// other members have split the topic without it, so the queue is not consumed (no pull,
    /// no batch) while it is kept in case the absence ends soon (a registration on its way).
    unlisted: AtomicBool,
}

/// The parts of a [`LeaseState`] made on first use.
#[derive(Debug, Default)]
struct Parts {
    /// The lease's token, a child of the consumer's: made when the application (or the consume
    /// layer) first asks for it, cancelled when the queue is taken away.
    token: OnceLock<CancellationToken>,
    /// Held for reading while a batch is processed (ordered consumption, exclusive hand-off),
    /// and for writing by a release that waits for the batches to end.
    consume_lock: OnceLock<Arc<RwLock<()>>>,
    /// Ordered consumption and exclusive hand-off: until when the broker lock is trusted (its
    /// last grant plus `lock_lifetime`); `None` when the queue is not locked.
    lock_valid_until: std::sync::Mutex<Option<Instant>>,
    /// What the consumer reported about the queue, for the running info (made at its first
    /// report).
    figures: QueueFigures,
    /// The topic's figures (pulls, consumption) in the consumer's meter, looked up once.
    meter: OnceLock<Arc<TopicMeter>>,
}

impl LeaseState {
    #[cfg(test)]
    pub(crate) fn new(lock_valid_until: Option<Instant>) -> Self {
        Self::with_activity(lock_valid_until, Arc::default())
    }

    pub(crate) fn with_activity(
        lock_valid_until: Option<Instant>,
        activity: Arc<ConsumerActivity>,
    ) -> Self {
        let state = Self {
            dropped: AtomicBool::new(false),
            committed: AtomicI64::new(-1),
            persisted: AtomicI64::new(-1),
            persist_now: AtomicBool::new(false),
            confirm: AtomicBool::new(false),
            locked: AtomicBool::new(false),
            parts: OnceLock::new(),
            activity,
            read_mode: ReadMode::Pull,
            after_reset: false,
            unlisted: AtomicBool::new(false),
        };
        if let Some(until) = lock_valid_until {
            state.set_lock_valid_until(until);
        }
        state
    }

    /// The same, read by `read_mode`.
    pub(crate) fn with_read_mode(mut self, read_mode: ReadMode) -> Self {
        self.read_mode = read_mode;
        self
    }

    pub(crate) fn with_after_reset(mut self, after_reset: bool) -> Self {
        self.after_reset = after_reset;
        self
    }

    fn parts(&self) -> &Parts {
        self.parts.get_or_init(Box::default)
    }

    /// What the consumer reported about the queue (made at its first report).
    pub(crate) fn figures(&self) -> &QueueFigures {
        &self.parts().figures
    }

    /// `topic`'s figures in the consumer's meter (`topic`: this lease's queue's).
    fn topic_meter(&self, topic: &str) -> &TopicMeter {
        self.parts()
            .meter
            .get_or_init(|| self.activity.meter.topic(topic))
    }

    /// The figures reported so far (none when nothing was reported).
    pub(crate) fn reported_figures(&self) -> Figures {
        self.parts
            .get()
            .map(|p| p.figures.get())
            .unwrap_or_default()
    }

    fn locked_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.parts()
            .lock_valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease's token, made (a child of `parent`) on first use. A token made after the
    /// queue was taken away is cancelled at once.
    fn token(&self, parent: &CancellationToken) -> &CancellationToken {
        let token = self.parts().token.get_or_init(|| parent.child_token());
        // Pairs with the fence in `drop_lease`: either the service sees this token and cancels
        // it, or this sees `dropped` (store buffering, ruled out by the two SeqCst fences).
        fence(Ordering::SeqCst);
        if self.dropped.load(Ordering::SeqCst) {
            token.cancel();
        }
        token
    }

    /// The token, if it was made.
    fn made_token(&self) -> Option<&CancellationToken> {
        self.parts.get().and_then(|p| p.token.get())
    }

    /// Takes the queue away: marks it dropped and cancels its token if it was made (one made
    /// later is born cancelled).
    pub(crate) fn drop_lease(&self) {
        self.dropped.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(token) = self.made_token() {
            token.cancel();
        }
    }

    /// Whether the runtime took the queue away.
    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// The consume lock, made on first use.
    pub(crate) fn consume_lock(&self) -> &Arc<RwLock<()>> {
        self.parts().consume_lock.get_or_init(Default::default)
    }

    /// Whether nobody holds the consume lock now. A lock never made is free, and a batch
    /// that makes it after the queue was dropped finds the queue dropped (see
    /// [`QueueLease::consume_guard`]).
    pub(crate) fn consume_lock_is_free(&self) -> bool {
        fence(Ordering::SeqCst);
        self.parts
            .get()
            .and_then(|p| p.consume_lock.get())
            .is_none_or(|lock| lock.try_write().is_ok())
    }

    /// Waits until nobody holds the consume lock.
    pub(crate) async fn consume_lock_freed(&self) {
        fence(Ordering::SeqCst);
        let lock = self.parts.get().and_then(|p| p.consume_lock.get()).cloned();
        if let Some(lock) = lock {
            drop(lock.write().await);
        }
    }

    /// Until when the broker lock is trusted (`None`: the queue is not locked).
    pub(crate) fn lock_valid_until(&self) -> Option<Instant> {
        if !self.locked.load(Ordering::Acquire) {
            return None;
        }
        let parts = self.parts.get()?;
        *parts
            .lock_valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a granted lock, trusted until `until`.
    pub(crate) fn set_lock_valid_until(&self, until: Instant) {
        *self.locked_until() = Some(until);
        self.locked.store(true, Ordering::Release);
    }

    /// Whether the queue is locked and its lock is no longer trusted: it may belong to someone
    /// else by now.
    pub(crate) fn lock_expired(&self, now: Instant) -> bool {
        self.lock_valid_until().is_some_and(|until| now >= until)
    }

    /// Whether the queue may still be consumed at `now`: not taken away, this client's
    /// membership vouched for and listed by the directory, and its lock (when locked) still
    /// trusted.
    pub(crate) fn is_trusted(&self, now: Instant) -> bool {
        !self.is_dropped()
            && !self.unlisted.load(Ordering::Acquire)
            && self.activity.membership.is_trusted(now)
            && !self.lock_expired(now)
    }

    /// Marks the queue's topic as not listing this client (`true`), or listing it again.
    pub(crate) fn set_unlisted(&self, unlisted: bool) {
        self.unlisted.store(unlisted, Ordering::Release);
    }

    /// Until when the queue may be consumed without news from the runtime: the earlier of the
    /// membership's and the lock's validity; `None` when the queue is taken away, the
    /// membership is not vouched for, or the directory does not list this client.
    pub(crate) fn trusted_until(&self) -> Option<Instant> {
        if self.is_dropped() || self.unlisted.load(Ordering::Acquire) {
            return None;
        }
        let membership = self.activity.membership.trusted_until()?;
        Some(match self.lock_valid_until() {
            Some(lock) => lock.min(membership),
            None => membership,
        })
    }

    pub(crate) fn committed(&self) -> Option<i64> {
        let offset = self.committed.load(Ordering::Acquire);
        (offset >= 0).then_some(offset)
    }

    /// The last offset the store accepted.
    pub(crate) fn persisted(&self) -> Option<i64> {
        let offset = self.persisted.load(Ordering::Relaxed);
        (offset >= 0).then_some(offset)
    }

    /// Records that the store accepted `offset`. A new offset is to be written once more,
    /// unchanged, at the next persistence ([`unconfirmed`](Self::unconfirmed)): a RocketMQ
    /// broker also stores the offset a pull carries, and a pull sent before this write but
    /// handled after it would leave the broker behind, for good if nothing wrote it again (the
    /// Java client rewrites every offset at every tick).
    pub(crate) fn set_persisted(&self, offset: i64) {
        let before = self.persisted.swap(offset, Ordering::Relaxed);
        self.confirm.store(before != offset, Ordering::Relaxed);
    }

    /// Records `offset` as what the store holds, read from it (nothing to write again).
    pub(crate) fn set_read_from_store(&self, offset: i64) {
        self.persisted.store(offset, Ordering::Relaxed);
        self.confirm.store(false, Ordering::Relaxed);
    }

    /// Whether the last offset stored is to be written once more (see
    /// [`set_persisted`](Self::set_persisted)).
    pub(crate) fn unconfirmed(&self) -> bool {
        self.confirm.load(Ordering::Relaxed)
    }
}

/// The right to process one batch of a queue, from [`QueueLease::consume_guard`]: while any
/// guard of a queue is held, the runtime does not release the queue's broker lock (it waits
/// for every guard to be dropped, or `force_unlock_after`). Guards of one queue do not
/// exclude each other, so batches of a queue can run at once; a consumer that must process a
/// queue's batches one at a time (in order) takes care of that itself, as the push consumer's
/// ordered consumption does.
#[derive(Debug)]
#[must_use = "the guard protects the batch only while it is held: keep it until the batch is processed and committed"]
pub struct ConsumeGuard {
    _guard: OwnedRwLockReadGuard<()>,
}

/// A queue this client now consumes, handed to
/// [`QueueListener::queues_added`](crate::QueueListener::queues_added).
///
/// The lease is how the application and the runtime cooperate on one queue:
/// - [`cancelled`](Self::cancelled) completes when the queue is taken away: stop consuming;
/// - [`commit`](Self::commit) reports progress, which the runtime persists periodically and
///   once more when the queue is released;
/// - [`consume_guard`](Self::consume_guard) (ordered consumption) is held while a batch is
///   processed, so the runtime unlocks the queue only when no batch is in progress.
#[derive(Clone)]
#[must_use = "dropping a lease neither releases nor stops consuming its queue: give it to the task consuming the queue, which stops when `cancelled()` completes and reports progress with `commit`"]
pub struct QueueLease {
    queue: MessageQueue,
    start: StartPosition,
    /// The consumer's token (shared by every lease, so that a clone costs one reference count):
    /// the lease's own is its child, made on first use.
    parent: Arc<CancellationToken>,
    state: Arc<LeaseState>,
}

impl QueueLease {
    /// A lease of `queue`, cancelled when `state` is dropped or `parent` cancelled.
    pub(crate) fn new(
        queue: MessageQueue,
        start: StartPosition,
        parent: Arc<CancellationToken>,
        state: Arc<LeaseState>,
    ) -> Self {
        Self {
            queue,
            start,
            parent,
            state,
        }
    }

    /// The queue.
    pub fn queue(&self) -> &MessageQueue {
        &self.queue
    }

    /// Whether `other` is this very lease (a clone of it), not another lease of the same queue:
    /// a [`queues_added`](crate::QueueListener::queues_added) called again after a failure hands the
    /// same leases over, while a queue taken again after a release comes with a new lease.
    pub fn is_same_lease(&self, other: &QueueLease) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// Where to start consuming. For a [popped](ReadMode::Pop) queue, where the brokers start
    /// popping for a group that has no offset there yet: [`Earliest`](StartPosition::Earliest)
    /// or, for anything else, the end.
    pub fn start_position(&self) -> StartPosition {
        self.start
    }

    /// How the queue is read: [pulled](ReadMode::Pull) from a committed offset (every
    /// client-side allocation, and server-side assignment in PULL mode), or
    /// [popped](ReadMode::Pop) (server-side assignment in POP mode: other members may read the
    /// queue too, each message is acknowledged at the brokers, and nothing is committed here:
    /// the runtime persists no offset for the queue).
    pub fn read_mode(&self) -> ReadMode {
        self.state.read_mode
    }

    /// Whether this lease takes the queue back right after its release for an offset reset
    /// (a seek, or an operator's reset: [`RemovalReason::OffsetReset`](crate::RemovalReason)):
    /// the same member goes on with the same queue, from the reset offset, and what it kept
    /// for the queue across the release (a pause) still holds. False for a queue added any
    /// other way, including one that went to another member after its reset and came back.
    pub fn after_reset(&self) -> bool {
        self.state.after_reset
    }

    /// Cancelled when the queue is taken away (a child of the consumer's token). Made on the
    /// first call (every clone of the lease shares it), so that a consumer that never asks
    /// holds no token per queue.
    pub fn token(&self) -> &CancellationToken {
        self.state.token(&self.parent)
    }

    /// Completes when the queue is taken away.
    pub async fn cancelled(&self) {
        self.token().cancelled().await
    }

    /// Whether this client may consume the queue at `now`: it was not taken away, the group
    /// certainly still counts this client as a member (a heartbeat was accepted less than
    /// [`member_expiry`](crate::config::Intervals::member_expiry) ago, and none came after a
    /// gap: see below), and its broker lock, when the consumer locks its queues, is still
    /// trusted. Check it before each pull and before each batch: a consumer that was frozen (a
    /// GC pause, a stopped VM) or cut off from the brokers for longer than `member_expiry` may
    /// find its queues split among the other members, and must consume nothing more of them.
    ///
    /// An untrusted lease does not become trusted again: once the membership ran out, the
    /// runtime releases every queue held before it (reason
    /// [`MembershipLapsed`](crate::RemovalReason::MembershipLapsed)), without writing their
    /// offsets, as soon as a heartbeat is accepted again, and its next round takes the share
    /// again from the stored offsets, with new leases. Meanwhile, no offset of the lease is
    /// persisted. The push consumer checks it before each pull and each batch.
    ///
    /// A lease is not trusted either from a round that finds the group's directory no longer
    /// listing this client for the queue's topic (the other members have split the topic
    /// without it) until a round finds it listed again; the queue is released after
    /// [`lock_lifetime`](crate::config::Intervals::lock_lifetime) of absence (the Java client
    /// releases at once; the wait keeps a member whose registration is on its way, after a
    /// broker restart say, from handing its queues off for nothing).
    pub fn is_trusted(&self, now: Instant) -> bool {
        self.state.is_trusted(now) && !self.parent.is_cancelled()
    }

    /// Until when the queue may be consumed without news from the runtime (see
    /// [`is_trusted`](Self::is_trusted)): the earlier of the membership's validity (the last
    /// accepted heartbeat's sending plus `member_expiry`) and the broker lock's (its last grant's
    /// request plus `lock_lifetime`), both renewed as the runtime hears from the brokers.
    /// `None` when the queue was taken away, the membership is not vouched for (not
    /// confirmed yet, or lapsed), or the directory does not list this client. An instant in the
    /// past means it ran out.
    pub fn trusted_until(&self) -> Option<Instant> {
        self.state.trusted_until()
    }

    /// Whether the queue has been taken away.
    pub fn is_cancelled(&self) -> bool {
        self.state.is_dropped()
            || self.parent.is_cancelled()
            || self.state.made_token().is_some_and(|t| t.is_cancelled())
    }

    /// Reports that every message before `next_offset` is consumed. Offsets only move forward:
    /// a smaller value than one already reported is ignored. Ignored for a
    /// [popped](ReadMode::Pop) queue, whose progress the brokers keep.
    pub fn commit(&self, next_offset: i64) {
        if self.state.read_mode == ReadMode::Pop {
            return;
        }
        self.state
            .committed
            .fetch_max(next_offset, Ordering::AcqRel);
    }

    /// Reports `next_offset` as the progress even when it is smaller than one reported before:
    /// for a consumer that must move back (the source said the queue's offset moved), or that
    /// commits exactly what it processed (ordered consumption). A negative value is ignored, as
    /// is any for a [popped](ReadMode::Pop) queue.
    pub fn commit_exact(&self, next_offset: i64) {
        if next_offset >= 0 && self.state.read_mode == ReadMode::Pull {
            self.state.committed.store(next_offset, Ordering::Release);
        }
    }

    /// Reports `next_offset` exactly, as [`commit_exact`](Self::commit_exact) does, and asks
    /// the runtime to persist it now instead of at the next persistence tick (every
    /// `persist_offsets`, 5 s): for a position the source imposed (its offset moved, or it
    /// answered a reset), which a crash before the tick would otherwise lose. The runtime
    /// persists whatever is committed when it gets to it, so later commits are not held back.
    /// A negative value is ignored.
    pub fn persist_now(&self, next_offset: i64) {
        if next_offset < 0 || self.state.read_mode == ReadMode::Pop {
            return;
        }
        self.commit_exact(next_offset);
        self.state.persist_now.store(true, Ordering::Release);
        self.state.activity.persist_wake.notify_one();
    }

    /// Records a pull of this queue that took `latency`, for the consumer's
    /// [running info](crate::running): the queue's last pull time and the topic's pull rate
    /// and latency. The push consumer records its pulls; an application's own consumer may.
    pub fn record_pull(&self, latency: Duration) {
        let now = Instant::now();
        self.state.figures().edit(|f| f.last_pull = Some(now));
        let meter = self.state.topic_meter(&self.queue.topic);
        self.state.activity.meter.pulled_on(meter, latency, now);
    }

    /// Records a batch of this queue leaving the listener: `ok` messages consumed, `failed`
    /// not, after `spent` in the listener (the queue's last consume time, the topic's rates).
    pub fn record_consumed(&self, ok: u64, failed: u64, spent: Duration) {
        self.record_consumed_calls(1, ok, failed, spent);
    }

    /// Records `calls` batches of this queue leaving the listener at once (what
    /// [`record_consumed`](Self::record_consumed) records for one): `ok` messages consumed in
    /// all, `failed` not, after `spent` in the listener in all. For a consumer that collects
    /// its batches' outcomes and records them together, one clock read and one update for many
    /// batches.
    pub fn record_consumed_calls(&self, calls: u64, ok: u64, failed: u64, spent: Duration) {
        if calls == 0 {
            return;
        }
        let now = Instant::now();
        self.state.figures().edit(|f| f.last_consume = Some(now));
        let meter = self.state.topic_meter(&self.queue.topic);
        self.state
            .activity
            .meter
            .consumed_on(meter, calls, ok, failed, spent, now);
    }

    /// Reports the messages of this queue pulled and not yet consumed (the running info's
    /// cached count, size and offsets).
    pub fn set_buffer(&self, buffer: QueueBuffer) {
        self.state.figures().edit(|f| f.buffer = buffer);
    }

    /// The last offset reported with [`commit`](Self::commit). A queue this client takes back
    /// before its final offset could be stored starts with that offset here (it is progress
    /// the store does not have yet, and is persisted like a commit).
    pub fn committed(&self) -> Option<i64> {
        self.state.committed()
    }

    /// `Some(force_unlock_after)` when the runtime, releasing this queue, waits for its
    /// [consume guards](Self::consume_guard) before it unlocks the queue at the broker (the
    /// consumer locks its queues: ordered consumption, or an exclusive hand-off), for that long
    /// at most; `None` when nothing waits for them. A consumer built on the lease holds a guard
    /// around each batch when this is `Some`, so that the queue's next owner starts only after
    /// the batch is committed.
    pub fn guarded_release(&self) -> Option<Duration> {
        self.state.activity.guarded_release
    }

    /// Runs `processing`, the processing of a batch of this queue, as the consumer's
    /// application code: a [`shutdown`](crate::ConsumerHandle::shutdown) of the consumer asked
    /// for from inside it starts the shutdown and returns at once, instead of waiting for the
    /// shutdown, which waits for this batch. The push consumer runs every listener call
    /// through it; a consumer of your own should too, where a batch may stop the service.
    pub fn processing<F: std::future::Future>(
        &self,
        processing: F,
    ) -> impl std::future::Future<Output = F::Output> {
        crate::app_code::as_callback_of(self.state.activity.serial, processing)
    }

    /// Waits for the right to process one batch of this queue; `None` once the queue is taken
    /// away, while its broker lock is older than `lock_lifetime` without a renewal (it may
    /// belong to someone else by then: consumption pauses until the lock is renewed, or the
    /// queue is taken away), and while the lease is not [trusted](Self::is_trusted). Hold the guard while processing (ordered consumption, or
    /// concurrent consumption with `exclusive_hand_off`): the runtime releases the queue's broker
    /// lock only when no guard is held, or after `force_unlock_after`.
    ///
    /// The runtime renews locks every `lock_renew` and takes the queue away (reason `lost`) when
    /// the broker refuses, or when renewal has failed for `lock_lifetime`; this check covers the
    /// time until that renewal, or a renewal held up by a slow callback.
    ///
    /// A guard does not wait for another batch's guard: only for a release that is waiting
    /// for the batches to end (and then the queue is gone: `None`). Several batches of the
    /// queue may hold guards at once.
    pub async fn consume_guard(&self) -> Option<ConsumeGuard> {
        if self.state.is_dropped() {
            return None;
        }
        let guard = self.state.consume_lock().clone().read_owned().await;
        // Pairs with the fence of a release that found no consume lock made yet: either it saw
        // this lock, or this sees the queue dropped.
        fence(Ordering::SeqCst);
        let usable =
            !self.state.dropped.load(Ordering::SeqCst) && self.state.is_trusted(Instant::now());
        if !usable {
            tracing::debug!(queue = ?self.queue, "no consume guard: the queue is released, its lock expired, or this client's membership is not vouched for");
        }
        usable.then_some(ConsumeGuard { _guard: guard })
    }
}

impl fmt::Debug for QueueLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueLease")
            .field("queue", &self.queue)
            .field("start", &self.start)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// The held queues as the service last published them, for the running info: the published
/// assignment itself (shared, not copied) and each held queue's lease state in the
/// assignment's order ([`Assignment::iter`](crate::assignment::Assignment::iter)), one pointer
/// per queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeldLeases {
    pub(crate) assignment: Arc<Assignment>,
    /// Shared with the leases: their commits, the last offsets the store accepted, their
    /// figures.
    pub(crate) states: Vec<Arc<LeaseState>>,
}

impl HeldLeases {
    /// Each held queue with its lease state.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&MessageQueue, &LeaseState)> {
        self.assignment.iter().zip(self.states.iter().map(|s| &**s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(parent: &Arc<CancellationToken>) -> (QueueLease, Arc<LeaseState>) {
        let state = Arc::new(LeaseState::new(None));
        let queue = MessageQueue::new("T", "b", 0);
        let lease = QueueLease::new(queue, StartPosition::Latest, parent.clone(), state.clone());
        (lease, state)
    }

    #[test]
    fn a_lease_makes_nothing_until_asked_and_a_token_made_after_the_release_is_cancelled() {
        let parent = Arc::new(CancellationToken::new());
        let (lease, state) = lease(&parent);
        assert!(!lease.is_cancelled());
        assert!(
            state.parts.get().is_none(),
            "no token, lock or lock time yet"
        );
        state.drop_lease();
        assert!(lease.is_cancelled());
        assert!(state.parts.get().is_none());
        assert!(lease.token().is_cancelled(), "born cancelled");
    }

    #[test]
    fn a_token_made_before_the_release_is_cancelled_by_it_and_shared_by_clones() {
        let parent = Arc::new(CancellationToken::new());
        let (lease, state) = lease(&parent);
        let token = lease.clone().token().clone();
        assert!(!token.is_cancelled());
        state.drop_lease();
        assert!(token.is_cancelled());
        assert!(lease.is_cancelled());
    }

    #[test]
    fn the_consumers_token_cancels_every_lease_made_or_not() {
        let parent = Arc::new(CancellationToken::new());
        let (made, _) = lease(&parent);
        let token = made.token().clone();
        let (lazy, _) = lease(&parent);
        parent.cancel();
        assert!(token.is_cancelled() && made.is_cancelled());
        assert!(lazy.is_cancelled());
        assert!(lazy.token().is_cancelled());
    }

    #[tokio::test]
    async fn a_consume_lock_never_made_is_free_and_gives_no_guard_after_the_release() {
        let parent = Arc::new(CancellationToken::new());
        let (lease, state) = lease(&parent);
        assert!(state.consume_lock_is_free());
        let guard = lease.consume_guard().await.expect("held");
        assert!(!state.consume_lock_is_free());
        drop(guard);
        assert!(state.consume_lock_is_free());
        state.drop_lease();
        assert!(lease.consume_guard().await.is_none());
        assert_eq!(state.lock_valid_until(), None);
        let locked = LeaseState::new(Some(Instant::now()));
        assert!(locked.lock_valid_until().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_trusted_while_the_membership_and_the_lock_are_and_it_is_held() {
        use crate::membership::Membership;
        let expiry = Duration::from_secs(10);
        let activity = Arc::new(ConsumerActivity::new(Membership::new(expiry)));
        let state = Arc::new(LeaseState::with_activity(None, activity.clone()));
        let parent = Arc::new(CancellationToken::new());
        let queue = MessageQueue::new("T", "b", 0);
        let lease = QueueLease::new(queue, StartPosition::Latest, parent, state.clone());
        let t0 = Instant::now();
        assert!(!lease.is_trusted(t0), "no heartbeat accepted yet");
        assert_eq!(lease.trusted_until(), None);
        assert!(lease.consume_guard().await.is_none());
        let membership = &activity.membership;
        membership.confirmed(t0, t0);
        membership.restore(membership.take_regained().unwrap());
        assert!(lease.is_trusted(t0));
        assert_eq!(lease.trusted_until(), Some(t0 + expiry));
        assert!(lease.consume_guard().await.is_some());
        // A lock trusted for less bounds it.
        state.set_lock_valid_until(t0 + Duration::from_secs(4));
        assert_eq!(lease.trusted_until(), Some(t0 + Duration::from_secs(4)));
        assert!(!lease.is_trusted(t0 + Duration::from_secs(4)));
        state.set_lock_valid_until(t0 + Duration::from_secs(60));
        assert!(!lease.is_trusted(t0 + expiry), "the membership ran out");
        tokio::time::sleep(expiry).await;
        assert!(lease.consume_guard().await.is_none());
        state.drop_lease();
        assert_eq!(lease.trusted_until(), None);
        assert!(!lease.is_trusted(t0));
    }

    /// The token made on one thread while the queue is released on another is cancelled,
    /// whichever comes first.
    #[test]
    fn a_token_made_during_the_release_is_never_left_uncancelled() {
        for _ in 0..2_000 {
            let parent = Arc::new(CancellationToken::new());
            let (lease, state) = lease(&parent);
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let releasing = {
                let (state, barrier) = (state.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    state.drop_lease();
                })
            };
            barrier.wait();
            let token = lease.token().clone();
            releasing.join().expect("released");
            assert!(token.is_cancelled());
        }
    }
}
