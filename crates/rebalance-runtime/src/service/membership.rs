//! What the service asks the directory about the group outside the rounds: whether this member
//! is alone in it when it starts (then its first round need not wait for the group to settle),
//! and, between steady rounds, whether the members are still those the last round planned with
//! (a departure the directory does not push is seen within `membership_check`, not at the next
//! round, `rebalance_wait` later).

use tokio::time::Instant;

use super::Service;
use crate::config::MessageModel;
use crate::routes::TopicState;
use crate::wake::WakeReasons;

impl Service {
    /// Whether nobody but this member is in the group, as the directory lists it for every
    /// subscribed topic whose route is known (one request per topic, once, at the start): then
    /// nobody holds a queue this member could take too early. Broadcasting members are always
    /// alone in this sense (each takes every queue). `false` when no route is known yet or the
    /// directory fails: the first round then waits as long as if others were there.
    pub(super) async fn alone_in_group(&self) -> bool {
        let ctx = &self.ctx;
        if ctx.message_model == MessageModel::Broadcasting {
            return true;
        }
        let routes = self.routes.borrow().clone();
        let mut asked = false;
        for topic in self.subscriptions.keys() {
            if !matches!(routes.topic(topic), TopicState::Known { .. }) {
                continue;
            }
            match ctx.directory.consumer_ids(&ctx.group, topic).await {
                Ok(ids) if ids.iter().all(|id| *id == ctx.client_id) => asked = true,
                Ok(ids) => {
                    tracing::debug!(
                        topic,
                        members = ids.len(),
                        "others are in the group at the start: the first round waits for them to settle"
                    );
                    return false;
                }
                Err(e) => {
                    tracing::debug!(topic, error = %e, "could not list the group at the start: the first round waits as if others were there");
                    return false;
                }
            }
        }
        asked
    }

    /// Asks the directory for the members of one subscribed topic (each topic in turn, among
    /// those whose last round was balanced) and, when they differ from the ones that round
    /// planned with, acts as on a membership notification: the group settles (a single change
    /// of a stable group runs the round at once) and a round is woken. A failure changes
    /// nothing: the rounds report directory trouble.
    pub(super) async fn check_membership(&mut self) {
        let checked: Vec<&String> = self
            .subscriptions
            .keys()
            .filter(|t| self.memo.planned_ids(t).is_some_and(|ids| !ids.is_empty()))
            .collect();
        let Some(topic) = checked.get(self.check_turn % checked.len().max(1)) else {
            return;
        };
        let topic = (*topic).clone();
        self.check_turn = self.check_turn.wrapping_add(1);
        let ctx = &self.ctx;
        let mut ids = match ctx.directory.consumer_ids(&ctx.group, &topic).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::debug!(topic, error = %e, "membership check: could not list the group's consumers; the next round will");
                return;
            }
        };
        ids.sort();
        let Some(planned) = self.memo.planned_ids(&topic) else {
            return;
        };
        if ids == planned {
            tracing::trace!(topic, members = ids.len(), "membership check: unchanged");
            return;
        }
        // Both sorted: a binary search each.
        let (gone, new) = (
            planned
                .iter()
                .filter(|id| ids.binary_search(id).is_err())
                .count(),
            ids.iter()
                .filter(|id| planned.binary_search(id).is_err())
                .count(),
        );
        tracing::info!(
            topic,
            gone,
            new,
            members = ids.len(),
            "membership check: the group's members changed since the last round"
        );
        self.schedule.membership_changed(Instant::now());
        self.trigger.wake(WakeReasons::MEMBERSHIP_CHANGED);
    }
}
