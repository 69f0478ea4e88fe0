//! Lock renewal of held locked queues (ordered consumption, or exclusive hand-off).

use std::collections::BTreeMap;

use rebalance_core::MessageQueue;
use tokio::time::Instant;

use super::lock_book::Renewal;
use super::round::ReleaseMode;
use super::{Service, topic_report};
use crate::lease_terms::RemovalReason;
use crate::locker::LockOutcome;
use crate::wake::WakeReasons;

impl Service {
    /// Renews the locks of held locked queues; a queue whose lock is gone, or not renewed for
    /// `lock_lifetime`, is released as lost (and taken again when its lock comes back).
    pub(super) async fn renew_locks(&mut self) {
        let Some(locker) = self.ctx.locks().cloned() else {
            return;
        };
        let mut held: Vec<MessageQueue> = self
            .table
            .iter()
            .filter(|(_, pq)| pq.is_held())
            .map(|(q, _)| q.clone())
            .collect();
        held.sort();
        if held.is_empty() {
            return;
        }
        // Not vouched for: the other members may have been given these queues, and renewing
        // the locks would keep them off (the leases are not trusted anyway, and are released
        // as soon as a heartbeat is accepted).
        if !self.membership_trusted() {
            tracing::info!(
                count = held.len(),
                "this client's membership is not vouched for; not renewing its locks"
            );
            return;
        }
        let now = Instant::now();
        let lifetime = self.ctx.intervals.lock_lifetime;
        let outcome = match locker
            .lock(&self.ctx.group, &self.ctx.client_id, &held)
            .await
        {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(error = %e, "lock renewal failed at every broker");
                LockOutcome::unanswered(&held)
            }
        };
        let renewal = Renewal::sort(held, &outcome, now, |q| {
            self.table.get(q).and_then(|pq| pq.lock_valid_until())
        });
        for q in &renewal.renewed {
            if let Some(pq) = self.table.get(q) {
                pq.set_lock_valid_until(now + lifetime);
            }
        }
        // Someone else holds a refused queue's lock: stop trusting ours at once, so that no
        // batch starts and the release does not keep retrying a final offset that would land
        // over the new holder's progress.
        for q in &renewal.refused {
            if let Some(pq) = self.table.get(q) {
                pq.set_lock_valid_until(now);
            }
            crate::metrics::lock_refusals(&self.ctx.group, &q.topic, 1);
        }
        let Renewal {
            refused,
            trusted,
            expired,
            ..
        } = &renewal;
        if !refused.is_empty() {
            tracing::warn!(count = refused.len(), queues = ?refused, "the broker refused to renew the lock of ordered queues");
        }
        if !trusted.is_empty() {
            tracing::warn!(count = trusted.len(), queues = ?trusted, "no answer to the lock renewal of ordered queues; keeping them until their lock lifetime ends");
        }
        if !expired.is_empty() {
            tracing::warn!(count = expired.len(), queues = ?expired, "no answer to the lock renewal and the lock lifetime is over");
        }
        let lost = renewal.lost();
        if lost.is_empty() {
            return;
        }
        tracing::warn!(count = lost.len(), queues = ?lost, "lost the lock of ordered queues; releasing them");
        let mut by_topic: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for q in lost {
            by_topic.entry(q.topic.to_string()).or_default().push(q);
        }
        let mut topics = Vec::with_capacity(by_topic.len());
        for (topic, queues) in by_topic {
            let mut report = topic_report(&topic);
            let queues = queues
                .into_iter()
                .map(|q| (q, RemovalReason::Lost))
                .collect();
            self.release(&topic, queues, ReleaseMode::Try, &mut report)
                .await;
            topics.push(report);
        }
        self.publish_assignment(false);
        // Reported by the round this wakes (or by the shutdown, if it comes first): a report
        // of their own would be replaced on the `rounds()` watch by that round's at once.
        self.released_between.extend(topics);
        self.trigger.wake(WakeReasons::LOCK_LOST);
    }
}
