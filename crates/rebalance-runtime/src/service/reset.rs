//! Offsets set from outside: an operator's reset (RocketMQ `RESET_CONSUMER_CLIENT_OFFSET`),
//! and the offsets a lease asked to persist at once ([`QueueLease::persist_now`]).
//!
//! [`QueueLease::persist_now`]: crate::QueueLease::persist_now

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rebalance_core::MessageQueue;

use super::offsets::Persisting;
use super::round::ReleaseMode;
use super::{Service, topic_report};
use crate::lease_terms::RemovalReason;
use crate::table::ProcessQueue;
use crate::wake::WakeReasons;

/// How many resets may wait for the service at once (each names the queues of one topic on one
/// broker, so this is a burst of operators' resets, not a steady state).
pub(crate) const PENDING_RESETS: usize = 32;

/// An operator's reset: each queue's new next offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetReset {
    pub(crate) offsets: Vec<(MessageQueue, i64)>,
}

/// What a handle asks of the service's task besides subscriptions: an operator's reset, or the
/// held queues' committed offsets persisted now
/// ([`ConsumerHandle::persist_offsets`](crate::ConsumerHandle::persist_offsets)), answered
/// with the queues whose offset the store refused.
#[derive(Debug)]
pub(crate) enum ServiceRequest {
    Reset(OffsetReset),
    Persist(tokio::sync::oneshot::Sender<Vec<(MessageQueue, crate::RemoteError)>>),
}

impl Service {
    /// Applies a reset to the queues this client holds (the others are someone else's, or
    /// nobody's: ignored, as the Java client does). Each is released with the new offset as its
    /// final one, so its consumer stops and drops what it buffered and nothing it still
    /// commits is persisted; then a round takes it again at once, from the new offset. A queue
    /// still being released, or whose refused final offset is still retried, is not anyone
    /// else's yet: the reset becomes its final offset.
    pub(super) async fn reset_offsets(&mut self, reset: OffsetReset) {
        let mut by_topic: BTreeMap<String, Vec<(MessageQueue, RemovalReason)>> = BTreeMap::new();
        let mut ignored = 0usize;
        let mut superseded = false;
        for (queue, offset) in reset.offsets {
            // A final offset the store refused, kept without a lock for a take-back, is this
            // client's old progress: the reset replaces it (the queue resumes from the store).
            if offset >= 0
                && let Some(kept) = self.final_offsets.forget_unlocked(&queue)
            {
                tracing::info!(queue = ?queue, offset, kept, "offset reset of a released queue: dropping the final offset the store refused, kept for a take-back");
            }
            match self.table.get(&queue) {
                Some(pq) if pq.is_held() && offset >= 0 => {
                    tracing::info!(queue = ?queue, offset, "offset reset: releasing the queue to restart it from the new offset");
                    self.table.set_reset(&queue, offset);
                    self.reset_starts.insert(queue.clone(), offset);
                    by_topic
                        .entry(queue.topic.to_string())
                        .or_default()
                        .push((queue, RemovalReason::OffsetReset));
                }
                // Released for an earlier reset and not taken again yet (the round that takes
                // it back has not run): the later reset wins, as if it came once the queue was
                // back. Ignoring it would drop a reset its caller was told was made.
                entry if offset >= 0 && self.reset_starts.contains_key(&queue) => {
                    tracing::info!(queue = ?queue, offset, "offset reset of a queue released for an earlier reset: it restarts from this offset instead");
                    if entry.is_some() {
                        self.table.set_reset(&queue, offset);
                    }
                    self.reset_starts.insert(queue, offset);
                    superseded = true;
                }
                // Being released (a batch still running, or its release not finished): nobody
                // else holds it yet, so nobody else applies the reset, and the final offset
                // its release writes is the reset one (as if it came just before the release).
                Some(_) if offset >= 0 => {
                    tracing::info!(queue = ?queue, offset, "offset reset of a queue being released: its final offset is the new one");
                    self.table.set_reset(&queue, offset);
                    self.reset_starts.insert(queue, offset);
                    superseded = true;
                }
                // Released, its final offset refused and still retried under our lock: the
                // retry writes the reset offset instead.
                None if offset >= 0 && self.final_offsets.reset(&queue, offset) => {
                    tracing::info!(queue = ?queue, offset, "offset reset of a released queue whose final offset is still pending: the new offset replaces it");
                }
                _ => ignored += 1,
            }
        }
        if ignored > 0 {
            tracing::debug!(
                ignored,
                "offset reset names queues this client does not hold; ignored"
            );
        }
        self.ctx.take_backs.set(self.reset_starts.keys());
        if by_topic.is_empty() {
            if superseded {
                self.trigger.wake(WakeReasons::OFFSET_RESET);
            }
            return;
        }
        let mut topics = Vec::with_capacity(by_topic.len());
        for (topic, queues) in by_topic {
            let mut report = topic_report(&topic);
            self.release(&topic, queues, ReleaseMode::Try, &mut report)
                .await;
            topics.push(report);
        }
        let balanced = self.outputs.assignment.borrow().balanced;
        self.publish_assignment(balanced);
        self.released_between.extend(topics);
        self.trigger.wake(WakeReasons::OFFSET_RESET);
    }

    /// Persists the committed offsets of the held queues whose lease asked for it
    /// ([`QueueLease::persist_now`](crate::QueueLease::persist_now)).
    pub(super) async fn persist_requested(&mut self) {
        let asked = |pq: &ProcessQueue| pq.lease_state().persist_now.swap(false, Ordering::AcqRel);
        self.persist_committed(asked, Persisting::AtOnce).await;
    }
}
