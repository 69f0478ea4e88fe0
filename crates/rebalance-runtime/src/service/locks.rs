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
    /// Between a round's steps: the lock renewal if it is due, and the brokers reported to
    /// have lost their locks, so that a long round (a hung broker's timeouts, topic after
    /// topic) neither lets every lock's trust lapse nor keeps trusting locks a restarted
    /// broker forgot until it ends (found by review). What they find lost is released once
    /// the round ends.
    pub(super) async fn lock_chores(&mut self) {
        if self
            .loss_watch
            .as_ref()
            .is_some_and(|rx| rx.has_changed().unwrap_or(false))
        {
            self.take_lock_losses().await;
        }
        if self.schedule.take_renewal(Instant::now()) {
            self.renew_locks().await;
        }
    }

    /// Acts on the locker's loss notifications not acted upon yet.
    pub(super) async fn take_lock_losses(&mut self) {
        let Some(rx) = self.loss_watch.as_mut() else {
            return;
        };
        let now = rx.borrow_and_update().clone();
        let brokers = now.since(&self.losses_seen);
        self.losses_seen = now;
        self.lock_losses(brokers).await;
    }

    pub(super) async fn renew_locks(&mut self) {
        let mut held: Vec<MessageQueue> = self
            .table
            .iter()
            .filter(|(_, pq)| pq.is_held())
            .map(|(q, _)| q.clone())
            .collect();
        held.sort();
        self.renew(held).await;
    }

    /// The locker says some brokers may have lost the locks they granted (a connection to them
    /// was lost: they may have restarted, and someone else may be granted those locks now).
    /// Every held lock at those brokers stops being trusted at once (no pull, no batch starts
    /// under it) and is asked for again at once: granted, it is trusted again from the request;
    /// refused, the queue is released; unanswered, it is asked for again every `lock_retry`
    /// and the queue is released once the lock granted before the loss is `lock_lifetime` old.
    pub(super) async fn lock_losses(&mut self, brokers: Vec<String>) {
        if brokers.is_empty() || self.ctx.locks().is_none() {
            return;
        }
        let now = Instant::now();
        let unlocked = self.final_offsets.lock_lost_at(&brokers, now);
        if !unlocked.is_empty() {
            // Retried only while this client's lock keeps everyone else off the queue, which
            // it may not any more (found by review: a retry after the next owner was granted
            // the lock at the restarted broker moved its stored offset back).
            tracing::warn!(?brokers, offsets = ?unlocked, "brokers may have lost the locks of released queues whose final offsets the store refused: not retrying them (the next owners may be further), keeping each as a floor if the queue comes back, and giving up the locks");
            self.unlock_released(unlocked.into_iter().map(|(q, _)| q).collect())
                .await;
        }
        let mut risked = Vec::new();
        let mut releasing = Vec::new();
        for (q, pq) in self.table.iter() {
            if !brokers.iter().any(|b| **b == *q.broker_name) {
                continue;
            }
            if !pq.is_held() {
                // Being released (its batch still running): the lock it is released under may
                // be the next owner's now, whose progress a final offset written later would
                // move back (found by review). Untrusted as of the release's start, its final
                // offset is not written.
                if let (Some(release), Some(until)) =
                    (self.table.release_of(q), pq.lock_valid_until())
                    && until > release.since
                {
                    pq.set_lock_valid_until(release.since);
                    releasing.push(q.clone());
                }
                continue;
            }
            let Some(until) = pq.lock_valid_until() else {
                continue;
            };
            if until > now {
                pq.set_lock_valid_until(now);
                // Trusted until now, so granted since any earlier loss: an entry left from one
                // is stale (its deadline another lease's, or an older grant's).
                self.at_risk.insert(q.clone(), (until, now));
            }
            risked.push(q.clone());
        }
        if !releasing.is_empty() {
            releasing.sort();
            tracing::warn!(?brokers, queues = ?releasing, "brokers may have lost the locks of queues being released: their final offsets will not be written (their next owners may be further)");
        }
        risked.sort();
        if risked.is_empty() {
            tracing::info!(
                ?brokers,
                "brokers may have lost their locks; none of this client's is held there"
            );
            return;
        }
        tracing::warn!(?brokers, count = risked.len(), queues = ?risked, "brokers may have lost their locks (a connection to them was lost); not trusting the locks held there until a renewal is granted, asking now");
        self.renew(risked).await;
    }

    /// Asks again for the locks still at risk (see [`lock_losses`](Self::lock_losses)) of the
    /// queues still held: one released meanwhile is not asked for (found by review: granted,
    /// nothing would unlock it, and its next owner was refused until the broker expired it).
    pub(super) async fn renew_at_risk(&mut self) {
        self.prune_at_risk();
        let at_risk: Vec<MessageQueue> = self.at_risk.keys().cloned().collect();
        if at_risk.is_empty() {
            self.settle_at_risk();
            return;
        }
        if !self.membership_trusted() {
            // Nothing is asked while the membership is not vouched for (see `renew_inner`),
            // which says so at each renewal, not at each of these retries.
            tracing::debug!(
                count = at_risk.len(),
                "membership not vouched for; not asking again for the locks at risk"
            );
            self.settle_at_risk();
            return;
        }
        tracing::info!(count = at_risk.len(), queues = ?at_risk, "asking again for the locks a broker may have lost");
        self.renew(at_risk).await;
    }

    /// Forgets the queues no longer at risk: released, or whose lock was set since its trust
    /// was cut (granted again, or a new lease); asks for the others again `lock_retry` from now.
    fn settle_at_risk(&mut self) {
        self.prune_at_risk();
        let retry =
            (!self.at_risk.is_empty()).then(|| Instant::now() + self.ctx.intervals.lock_retry);
        self.schedule.retry_at_risk(retry);
    }

    /// Keeps only the queues still at risk: held, and their lock not set since the loss (a
    /// queue released, or taken again meanwhile with a new grant, which the old deadline must
    /// not judge).
    fn prune_at_risk(&mut self) {
        let table = &self.table;
        self.at_risk.retain(|q, (_, cut)| {
            table
                .get(q)
                .is_some_and(|pq| pq.is_held() && pq.lock_valid_until() == Some(*cut))
        });
    }

    /// Renews the locks of `held` (held locked queues, sorted), releasing those lost.
    async fn renew(&mut self, held: Vec<MessageQueue>) {
        self.renew_inner(held).await;
        self.settle_at_risk();
    }

    async fn renew_inner(&mut self, held: Vec<MessageQueue>) {
        let Some(locker) = self.ctx.locks().cloned() else {
            return;
        };
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
        // A lock at risk (its broker may have lost it) is kept, unanswered, only while the lock
        // granted before the loss would have been.
        let renewal = Renewal::sort(held, &outcome, now, |q| match self.at_risk.get(q) {
            Some((until, _)) => Some(*until),
            None => self.table.get(q).and_then(|pq| pq.lock_valid_until()),
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
        if let Some(later) = self.lost_mid_round.as_mut() {
            tracing::warn!(count = lost.len(), queues = ?lost, "lost the lock of ordered queues (no longer trusted); releasing them once the round ends");
            later.extend(lost);
            return;
        }
        self.release_lost(lost).await;
    }

    /// Releases `lost`, queues whose lock was lost, and wakes a round to report them.
    pub(super) async fn release_lost(&mut self, lost: Vec<MessageQueue>) {
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
