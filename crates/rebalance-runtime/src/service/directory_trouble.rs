//! Directory trouble: the heartbeats a round asks for, and how long a client the directory
//! does not list keeps its queues.

use std::time::Duration;

use tokio::time::Instant;

use super::Service;
use super::diff::Target;
use crate::assignment::Unbalanced;
use crate::lease_terms::RemovalReason;

/// The least time between two heartbeats the rebalance asks for because the directory
/// misbehaves (fails, lists nobody, or does not list this client). Unbalanced rounds run every
/// `rebalance_min`; a heartbeat each time would only add load to a struggling broker.
const HEARTBEAT_REQUEST_SPACING: Duration = Duration::from_secs(5);

impl Service {
    /// Asks the heartbeat task for a heartbeat now, at most once per
    /// [`HEARTBEAT_REQUEST_SPACING`]: the heartbeat timer keeps running besides.
    pub(super) fn request_heartbeat(&mut self) {
        let now = Instant::now();
        match self.last_heartbeat_request {
            Some(at) if now.duration_since(at) < HEARTBEAT_REQUEST_SPACING => {
                tracing::debug!(
                    last_request = ?now.duration_since(at),
                    "directory trouble; a heartbeat was asked for recently, not asking again yet"
                );
            }
            _ => {
                tracing::info!("directory trouble; asking for a heartbeat now");
                self.last_heartbeat_request = Some(now);
                self.outputs.heartbeat_now.notify_one();
            }
        }
    }

    /// Bounds how long this client keeps a topic's queues while the directory answers without
    /// it. The other members have split those queues among themselves already, so consuming
    /// them would consume them twice: from the first round that finds the client missing, its
    /// leases of the topic are not trusted (no pull, no batch starts); after `lock_lifetime` of absence (the heartbeats asked for
    /// meanwhile did not bring the client back) the topic's queues are released, and taken
    /// again once the directory lists the client. The clock starts at the first round that
    /// finds the client missing and stops at the first that finds it listed; rounds that learn
    /// nothing about the membership (directory failed, no route) leave it running.
    pub(super) fn limit_absence(&mut self, topic: &str, target: Target, now: Instant) -> Target {
        match &target {
            Target::Keep(Unbalanced::NotInConsumerList) => {}
            Target::Keep(_) => return target,
            _ => {
                if let Some(since) = self.missing_since.remove(topic) {
                    tracing::info!(topic, missing_for = ?now.duration_since(since), "this client is listed again; consuming the topic's queues again");
                    self.mark_unlisted(topic, false);
                }
                return target;
            }
        }
        if !self.missing_since.contains_key(topic)
            && self.table.entries_of(topic).any(|(_, pq)| pq.is_held())
        {
            tracing::warn!(
                topic,
                bound = ?self.ctx.intervals.lock_lifetime,
                "this client is not in the consumer list: not consuming the topic's queues (the other members have split the topic without it) until it is listed again; released if it is not within the bound"
            );
        }
        // Found by review: the queues were consumed until the bound, at the same time as the
        // members that had taken them.
        self.mark_unlisted(topic, true);
        let since = *self.missing_since.entry(topic.to_string()).or_insert(now);
        let missing_for = now.duration_since(since);
        let bound = self.ctx.intervals.lock_lifetime;
        if missing_for < bound {
            return target;
        }
        if self.table.entries_of(topic).any(|(_, pq)| pq.is_held()) {
            tracing::warn!(
                topic,
                ?missing_for,
                ?bound,
                "this client has been missing from the consumer list too long; releasing the topic's queues, which the other members have taken"
            );
        }
        Target::ReleaseAll {
            reason: RemovalReason::Reassigned,
            unbalanced: Some(Unbalanced::NotInConsumerList),
        }
    }

    /// Marks the leases of `topic` as not listed by the directory (not consumed), or listed.
    fn mark_unlisted(&self, topic: &str, unlisted: bool) {
        for (_, pq) in self.table.entries_of(topic) {
            pq.lease_state().set_unlisted(unlisted);
        }
    }
}
