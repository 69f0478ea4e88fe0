//! When this client's membership lapsed (see [`Membership`](crate::membership::Membership)):
//! what the service does once a heartbeat is accepted again, and what it does not do meanwhile.

use std::collections::BTreeMap;

use rebalance_core::MessageQueue;
use tokio::time::Instant;

use super::round::ReleaseMode;
use super::{Service, topic_report};
use crate::error::RemoteError;
use crate::lease_terms::RemovalReason;
use crate::table::Release;
use crate::wake::WakeReasons;

impl Service {
    /// Whether the membership is vouched for now: while it is not, nothing is added, no
    /// offset is written and no lock renewed (the other members may hold these queues).
    pub(super) fn membership_trusted(&self) -> bool {
        self.ctx.activity.membership.is_trusted(Instant::now())
    }

    /// What `persist_committed` answers while the membership is not vouched for: every held
    /// queue whose committed offset is not stored, refused, since nothing is written
    /// until a heartbeat is accepted again (then the queues are released without their
    /// offsets, the other members having possibly consumed further).
    pub(super) fn offsets_not_vouched_for(&self) -> Vec<(MessageQueue, RemoteError)> {
        self.table
            .iter()
            .filter(|(_, pq)| pq.is_held() && pq.unpersisted_offset().is_some())
            .map(|(queue, _)| {
                (
                    queue.clone(),
                    RemoteError::Unreachable(
                        "not written: this client's membership is not vouched for (no heartbeat accepted within member_expiry; frozen or cut off from the brokers), so another member may hold the queue now".to_string(),
                    ),
                )
            })
            .collect()
    }

    /// Whether the final offset of a queue whose release began as `release` says may be
    /// written: not while the membership is not vouched for, nor for a release begun before it
    /// was regained after a gap (its progress is from before the gap, and the queue's next
    /// owner may be further).
    pub(super) fn may_write_final(&self, release: &Release) -> bool {
        self.membership_trusted()
            && release.reason != RemovalReason::MembershipLapsed
            && self.regained_at.is_none_or(|at| release.since > at)
    }

    /// A heartbeat was accepted after the membership had lapsed (or for the first time):
    /// releases every queue held (reason `MembershipLapsed`: they were held before the gap, and
    /// the other members may have split them meanwhile), without writing their offsets, then
    /// trusts the membership again from that heartbeat and wakes a round, which takes the share
    /// again from the stored offsets.
    pub(super) async fn regain_membership(&mut self) {
        let Some(sent) = self.ctx.activity.membership.take_regained() else {
            return;
        };
        let mut by_topic: BTreeMap<String, Vec<(MessageQueue, RemovalReason)>> = BTreeMap::new();
        for (queue, pq) in self.table.iter() {
            if pq.is_held() {
                by_topic
                    .entry(queue.topic.to_string())
                    .or_default()
                    .push((queue.clone(), RemovalReason::MembershipLapsed));
            }
        }
        if by_topic.is_empty() {
            tracing::debug!("membership vouched for by a heartbeat");
        } else {
            let count: usize = by_topic.values().map(Vec::len).sum();
            tracing::warn!(
                count,
                "a heartbeat was accepted after this client's membership had lapsed (frozen, or cut off from the brokers, for longer than member_expiry): the other members may have split its queues, so it releases every queue it held, without writing their offsets, and takes its share again from the stored offsets"
            );
            let mut topics = Vec::with_capacity(by_topic.len());
            for (topic, queues) in by_topic {
                let mut report = topic_report(&topic);
                self.release(&topic, queues, ReleaseMode::Try, &mut report)
                    .await;
                topics.push(report);
            }
            self.publish_assignment(false);
            self.released_between.extend(topics);
        }
        self.regained_at = Some(Instant::now());
        self.ctx.activity.membership.restore(sent);
        self.trigger.wake(WakeReasons::MEMBERSHIP_REGAINED);
    }
}
