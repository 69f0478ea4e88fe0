//! What a running consumer is doing, as a transport-neutral snapshot: the answer to a broker's
//! "how are you" (RocketMQ `GET_CONSUMER_RUNNING_INFO`, which operators' tools such as
//! `mqadmin consumerStatus` and the dashboard show), built by
//! [`ConsumerHandle::running_info`](crate::ConsumerHandle::running_info).
//!
//! The rebalance fills what it knows (identity, configuration, subscriptions, held queues,
//! their committed offsets and locks). Whatever consumes the queues contributes the rest through
//! each queue's lease ([`QueueLease::record_pull`](crate::QueueLease::record_pull),
//! [`record_consumed`](crate::QueueLease::record_consumed),
//! [`set_buffer`](crate::QueueLease::set_buffer)): the push consumer does, and an application
//! with its own consumer can do the same. Figures nobody contributed are zero.

mod meter;

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use rebalance_core::{ClientId, MessageQueue};
use tokio::time::Instant;

use crate::config::{ConsumeFrom, ConsumeOrder, MessageModel};
use crate::membership::Membership;
use crate::subscription::Subscription;

pub(crate) use meter::{ConsumeMeter, TopicMeter};

/// A snapshot of a running consumer (see the [module](self) documentation).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunningInfo {
    /// The consumer group.
    pub group: String,
    /// This client's id.
    pub client_id: ClientId,
    /// When the consumer started (wall clock).
    pub started_at: SystemTime,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Concurrent or ordered.
    pub consume_order: ConsumeOrder,
    /// Where a queue without a stored offset starts.
    pub consume_from: ConsumeFrom,
    /// Whether a consume layer runs (it recorded pulls or consumption): when false, only the
    /// rebalance runs here and the buffer, pull and consume figures are zero.
    pub consuming: bool,
    /// What the consumer subscribes to, the group's retry topic included.
    pub subscriptions: Vec<Subscription>,
    /// The queues this client holds now, sorted.
    pub queues: Vec<QueueRunningInfo>,
    /// Per subscribed topic, the consume layer's rates (zero when no consume layer runs).
    pub status: BTreeMap<String, ConsumeStatus>,
    /// Free-form diagnostics of the library (each topic's last fingerprint, the last round).
    pub diagnostics: BTreeMap<String, String>,
}

impl RunningInfo {
    /// The committed offset of each held queue of `topic` (every topic when `None`): what a
    /// RocketMQ client answers to `GET_CONSUMER_STATUS_FROM_CLIENT`. Popped queues have none,
    /// and are left out (a Java client answers its offset store's table, which has none of
    /// them).
    pub fn committed_offsets(&self, topic: Option<&str>) -> Vec<(MessageQueue, i64)> {
        self.queues
            .iter()
            .filter(|q| !q.popped && topic.is_none_or(|t| &*q.queue.topic == t))
            .map(|q| (q.queue.clone(), q.commit_offset))
            .collect()
    }
}

/// One held queue in a [`RunningInfo`]: the Java client's `ProcessQueueInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueRunningInfo {
    /// The queue.
    pub queue: MessageQueue,
    /// The offset committed on its lease, or the one it started from; -1 when neither is known
    /// yet.
    pub commit_offset: i64,
    /// Messages pulled and not yet consumed, as the consumer last reported them.
    pub buffer: QueueBuffer,
    /// Whether the queue is locked at the broker (ordered consumption, exclusive hand-off) and
    /// the lock is still trusted.
    pub locked: bool,
    /// When its lock was last granted.
    pub last_lock: Option<SystemTime>,
    /// When it was last pulled.
    pub last_pull: Option<SystemTime>,
    /// When a batch of it was last consumed.
    pub last_consume: Option<SystemTime>,
    /// Whether the queue is popped (server-side assignment in POP mode): other members may
    /// read it too, `buffer` counts the messages popped and not acknowledged, and
    /// `commit_offset` is -1 (the brokers keep the progress). The Java client lists such
    /// queues apart (`mqPopTable`).
    pub popped: bool,
}

/// The messages of a queue a consumer has pulled and not yet consumed, as it reports them with
/// [`QueueLease::set_buffer`](crate::QueueLease::set_buffer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueBuffer {
    /// How many.
    pub count: u64,
    /// Their body bytes.
    pub bytes: u64,
    /// The smallest and largest queue offset among them (0 when there are none).
    pub min_offset: i64,
    /// See `min_offset`.
    pub max_offset: i64,
}

/// A topic's consume rates over the last minute (Java's `ConsumeStatus`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct ConsumeStatus {
    /// Average pull latency, ms.
    pub pull_rt: f64,
    /// Pulls per second.
    pub pull_tps: f64,
    /// Average time a batch spent in the listener, ms (over the last hour when the last minute
    /// had none).
    pub consume_rt: f64,
    /// Messages consumed per second.
    pub consume_ok_tps: f64,
    /// Messages failed per second.
    pub consume_failed_tps: f64,
    /// Messages failed in the last hour.
    pub consume_failed_msgs: u64,
}

/// What a consumer reported about one queue, kept in its lease's shared state.
#[derive(Debug, Default)]
pub(crate) struct QueueFigures {
    inner: Mutex<Figures>,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Figures {
    pub(crate) buffer: QueueBuffer,
    pub(crate) last_pull: Option<Instant>,
    pub(crate) last_consume: Option<Instant>,
}

impl QueueFigures {
    pub(crate) fn edit(&self, edit: impl FnOnce(&mut Figures)) {
        edit(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner));
    }

    pub(crate) fn get(&self) -> Figures {
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Turns the runtime's clock into wall-clock times: the consumer's start on both clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clocks {
    pub(crate) wall: SystemTime,
    pub(crate) instant: Instant,
}

impl Clocks {
    pub(crate) fn now() -> Self {
        Self {
            wall: SystemTime::now(),
            instant: Instant::now(),
        }
    }

    /// The wall-clock time of `at`.
    pub(crate) fn wall(&self, at: Instant) -> SystemTime {
        if at >= self.instant {
            self.wall + (at - self.instant)
        } else {
            self.wall
                .checked_sub(self.instant - at)
                .unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }
}

/// Milliseconds since the Unix epoch of `time` (0 before it).
pub fn epoch_millis(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What the leases of one consumer share with its service: the consume figures, the wake-up
/// for offsets to persist at once, the clocks, and until when its membership is vouched for.
#[derive(Debug)]
pub(crate) struct ConsumerActivity {
    /// Until when the group certainly still counts this client (see [`Membership`]): the
    /// heartbeat task confirms it, the service restores it after a gap, the leases read it.
    pub(crate) membership: Membership,
    pub(crate) clocks: Clocks,
    pub(crate) meter: ConsumeMeter,
    /// Notified when a lease asks for its offset to be persisted now; the service persists
    /// every lease so flagged (the permit coalesces wake-ups and none is lost).
    pub(crate) persist_wake: tokio::sync::Notify,
    /// Which consumer of the process this is: its application code runs with it in a
    /// task-local (see `app_code::as_callback_of`).
    pub(crate) serial: u64,
    /// `Some(force_unlock_after)` when the consumer locks its queues at the broker (ordered
    /// consumption, or an exclusive hand-off): a release then waits that long at most for the
    /// queue's consume guards ([`QueueLease::guarded_release`](crate::QueueLease::guarded_release)).
    pub(crate) guarded_release: Option<std::time::Duration>,
}

/// Numbers the consumers of the process.
static NEXT_CONSUMER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl ConsumerActivity {
    /// The activity of a consumer whose leases are trusted while `membership` says so.
    pub(crate) fn new(membership: Membership) -> Self {
        let clocks = Clocks::now();
        Self {
            membership,
            clocks,
            meter: ConsumeMeter::new(clocks.instant),
            persist_wake: tokio::sync::Notify::new(),
            serial: NEXT_CONSUMER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            guarded_release: None,
        }
    }

    /// The activity of a consumer whose releases wait for consume guards that long at most
    /// (see [`ConsumerActivity::guarded_release`]).
    pub(crate) fn guarding_releases(
        mut self,
        force_unlock_after: Option<std::time::Duration>,
    ) -> Self {
        self.guarded_release = force_unlock_after;
        self
    }
}

impl Default for ConsumerActivity {
    /// With a membership that is always trusted.
    fn default() -> Self {
        Self::new(Membership::unconditional())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: i32, popped: bool) -> QueueRunningInfo {
        QueueRunningInfo {
            queue: MessageQueue::new("T", "b", id),
            commit_offset: if popped { -1 } else { 7 },
            buffer: QueueBuffer::default(),
            locked: false,
            last_lock: None,
            last_pull: None,
            last_consume: None,
            popped,
        }
    }

    /// GET_CONSUMER_STATUS_FROM_CLIENT answers the held queues' committed offsets: a popped
    /// queue has none and is left out (found by review: it was answered as offset -1 on queue
    /// id -1).
    #[test]
    fn committed_offsets_leave_out_popped_queues() {
        let info = RunningInfo {
            group: "G".into(),
            client_id: ClientId::from("c@1"),
            started_at: SystemTime::UNIX_EPOCH,
            message_model: MessageModel::Clustering,
            consume_order: ConsumeOrder::Concurrent,
            consume_from: ConsumeFrom::default(),
            consuming: true,
            subscriptions: Vec::new(),
            queues: vec![queue(-1, true), queue(0, false)],
            status: BTreeMap::new(),
            diagnostics: BTreeMap::new(),
        };
        assert_eq!(
            info.committed_offsets(Some("T")),
            vec![(MessageQueue::new("T", "b", 0), 7)]
        );
    }
}
