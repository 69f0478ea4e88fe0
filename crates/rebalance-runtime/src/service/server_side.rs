//! Server-side assignment in a round
//! ([`Allocation::Server`](crate::allocation::Allocation::Server)): the brokers' answer is the
//! topic's target, as a strategy's share would be.
//!
//! The round's view is made as for a strategy (route, members, this client among them): a
//! client the directory does not list yet would be answered with nothing by the Rust broker
//! 1.0 (its answer to a client it does not know is an empty list), so the topic keeps what it
//! holds instead of asking. Then the group's read mode is set at the brokers when the
//! allocation asks for it: once per topic, and again when the route has a broker it was not
//! set at (each broker keeps its own, and one without answers PULL); then the brokers are
//! asked. Their answer is never skipped
//! as unchanged: it may change while the inputs the round sees stay (an operator's change of
//! the read mode).
//!
//! A topic answered only PULL has its POP retry topic subscribed (the messages POP left there,
//! revived or given back, are drained by pulling); one answered only POP has it no more (the
//! brokers' pops read it): `ServerSide::follow_pop_retry`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rebalance_core::MessageQueue;

use super::Service;
use super::diff::Target;
use crate::allocation::{ServerAllocation, TopicView};
use crate::assignment::Unbalanced;
use crate::assignment_source::{AssignmentRequest, ReadMode, ServerAnswer};
use crate::subscription::{is_retry_topic, pop_retry_topic};
use crate::wake::WakeReasons;

/// What the rounds remember of server-side assignment.
#[derive(Debug, Default)]
pub(super) struct ServerSide {
    /// The topics whose read mode was set at the brokers, with the brokers it was set at.
    modes_set: HashMap<String, BTreeSet<Arc<str>>>,
    /// How each queue of the last answers is read (per topic, replaced by each answer).
    modes: HashMap<String, HashMap<MessageQueue, ReadMode>>,
    /// The POP retry topic subscribed for each topic the brokers last answered only PULL.
    pop_retry: BTreeMap<String, String>,
}

impl ServerSide {
    /// How `queue` is read, as the last answer for its topic said (pulled when unknown).
    pub(super) fn mode_of(&self, queue: &MessageQueue) -> ReadMode {
        self.modes
            .get(&*queue.topic)
            .and_then(|m| m.get(queue))
            .copied()
            .unwrap_or_default()
    }

    /// Each subscribed topic's POP retry topic (see the module documentation).
    pub(super) fn pop_retry_topics(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pop_retry.iter().map(|(t, r)| (t.as_str(), r.as_str()))
    }

    /// Forgets the POP retry topics of the topics no longer subscribed (`subscribed` says).
    pub(super) fn retain_pop_retry(&mut self, subscribed: impl Fn(&str) -> bool) {
        self.pop_retry.retain(|topic, _| subscribed(topic));
    }

    /// Follows the read modes the brokers answered for `topic` (`modes`): only PULL subscribes
    /// its POP retry topic, only POP unsubscribes it, anything else changes nothing (the Java
    /// client's rule). A retry topic has none.
    fn follow_pop_retry(
        &mut self,
        group: &str,
        topic: &str,
        modes: &HashMap<MessageQueue, ReadMode>,
    ) {
        if is_retry_topic(topic) {
            return;
        }
        let pulled = modes.values().any(|m| *m == ReadMode::Pull);
        let popped = modes.values().any(|m| *m == ReadMode::Pop);
        if pulled && !popped {
            let retry = pop_retry_topic(group, topic);
            if self.pop_retry.get(topic) != Some(&retry) {
                tracing::info!(topic, retry_topic = %retry, "the brokers answer the topic only by PULL; subscribing its POP retry topic to drain what POP left there");
                self.pop_retry.insert(topic.to_string(), retry);
            }
        } else if popped
            && !pulled
            && let Some(retry) = self.pop_retry.remove(topic)
        {
            tracing::info!(topic, retry_topic = %retry, "the brokers answer the topic only by POP; unsubscribing its POP retry topic (the pops read it)");
        }
    }
}

impl Service {
    /// The target of `topic` from the brokers' answer (its view made as for a strategy).
    pub(super) async fn ask_brokers(
        &mut self,
        server: &ServerAllocation,
        topic: &str,
        view: &TopicView,
        fingerprint: u64,
    ) -> Target {
        let group = self.ctx.group.clone();
        if let Some((mode, share)) = server.read_mode() {
            let brokers: BTreeSet<Arc<str>> =
                view.queues.iter().map(|q| q.broker_name.clone()).collect();
            let set_at = self.server.modes_set.get(topic);
            let new_brokers = set_at.map_or(brokers.len(), |at| brokers.difference(at).count());
            if !is_retry_topic(topic) && (set_at.is_none() || new_brokers > 0) {
                match server
                    .source()
                    .set_read_mode(&group, topic, mode, share)
                    .await
                {
                    Ok(()) => {
                        tracing::info!(
                            topic,
                            mode = mode.as_str(),
                            share,
                            new_brokers,
                            "set the group's read mode at the brokers"
                        );
                        self.server.modes_set.insert(topic.to_string(), brokers);
                    }
                    Err(e) => {
                        tracing::warn!(topic, error = %e, "could not set the group's read mode at the brokers; trying again next round");
                        return Target::Keep(Unbalanced::AssignmentFailed(e));
                    }
                }
            }
        }
        let request = AssignmentRequest {
            group: &group,
            client_id: &self.ctx.client_id,
            topic,
            strategy: server.strategy(),
        };
        let answer = match server.source().query_assignment(&request).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(topic, error = %e, "could not ask the brokers for the assignment; keeping the current share");
                return Target::Keep(Unbalanced::AssignmentFailed(e));
            }
        };
        let assigned = match answer {
            ServerAnswer::Queues(assigned) => assigned,
            ServerAnswer::Unbalanced => {
                tracing::warn!(
                    topic,
                    "the brokers could not allocate the topic; keeping the current share"
                );
                return Target::Keep(Unbalanced::ServerUnbalanced);
            }
        };
        let popped = assigned.iter().filter(|a| a.mode == ReadMode::Pop).count();
        if popped > 0 && !server.accepts_pop() {
            tracing::error!(
                topic,
                popped,
                "the brokers assign the topic's queues by POP, which this consumer does not read; keeping the current share (configure POP on the consumer, or set the group's mode back to PULL)"
            );
            return Target::Keep(Unbalanced::PopNotAccepted);
        }
        let mut modes = HashMap::with_capacity(assigned.len());
        let mut mine = Vec::with_capacity(assigned.len());
        let mut switching = 0;
        for a in assigned {
            if *a.queue.topic != *topic {
                continue;
            }
            // A queue to pull must be one of the route's (a popped one may be `-1`, every queue
            // of its broker); the brokers' answer is outside input.
            if a.mode == ReadMode::Pull && view.queues.binary_search(&a.queue).is_err() {
                tracing::warn!(topic, queue = ?a.queue, "the brokers assigned a queue to pull that the route does not have; skipping it");
                continue;
            }
            // A queue held in the other mode is released first and taken again next round:
            // its lease would read it the wrong way.
            let held_otherwise = self
                .table
                .get(&a.queue)
                .is_some_and(|pq| pq.read_mode() != a.mode);
            if held_otherwise {
                tracing::info!(topic, queue = ?a.queue, mode = a.mode.as_str(), "the queue's read mode changed; releasing it to take it again");
                switching += 1;
            } else {
                mine.push(a.queue.clone());
            }
            modes.insert(a.queue, a.mode);
        }
        // In queue order, each once, whatever order or repetitions the answer had.
        mine.sort();
        mine.dedup();
        self.server.follow_pop_retry(&group, topic, &modes);
        self.server.modes.insert(topic.to_string(), modes);
        if switching > 0 {
            // The next round takes them back, as soon as rounds may run.
            self.trigger.wake(WakeReasons::RETRY);
        }
        Target::Share {
            all: view.queues.clone(),
            mine: Arc::from(mine),
            fingerprint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(modes: &[(i32, ReadMode)]) -> HashMap<MessageQueue, ReadMode> {
        modes
            .iter()
            .map(|(id, mode)| (MessageQueue::new("T", "b", *id), *mode))
            .collect()
    }

    fn subscribed(server: &ServerSide) -> Vec<(&str, &str)> {
        server.pop_retry_topics().collect()
    }

    /// Only PULL subscribes the POP retry topic, only POP unsubscribes it, a mixed or empty
    /// answer changes nothing, and a retry topic has none.
    #[test]
    fn the_pop_retry_topic_follows_answers_that_are_only_pull_or_only_pop() {
        let mut server = ServerSide::default();
        let (pull, pop) = (ReadMode::Pull, ReadMode::Pop);
        server.follow_pop_retry("G", "T", &answered(&[(0, pop)]));
        assert!(subscribed(&server).is_empty());
        server.follow_pop_retry("G", "T", &answered(&[(0, pull), (1, pull)]));
        assert_eq!(subscribed(&server), [("T", "%RETRY%G_T")]);
        server.follow_pop_retry("G", "T", &answered(&[(0, pull), (1, pop)]));
        server.follow_pop_retry("G", "T", &answered(&[]));
        assert_eq!(subscribed(&server), [("T", "%RETRY%G_T")]);
        server.follow_pop_retry("G", "T", &answered(&[(-1, pop)]));
        assert!(subscribed(&server).is_empty());
        server.follow_pop_retry("G", "%RETRY%G", &answered(&[(0, pull)]));
        assert!(subscribed(&server).is_empty());
    }
}
