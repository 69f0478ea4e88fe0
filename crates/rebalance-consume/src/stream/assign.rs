//! [`Assigned`]: the allocation of a stream consumer in assign mode: the queues the application
//! named, whatever the other members; the group's retry topic shared averagely among them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rebalance_core::strategy::{AllocateError, AllocateStrategy, Averagely};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::subscription::is_retry_topic;

/// The queues named, each of the topic being allocated and present in its route; the retry
/// topic's queues are divided averagely among the members (so a message handed back is
/// redelivered to one of them, whichever queues each named).
///
/// A named queue missing from its topic's route (a queue id past the topic's queue count, a
/// broker not in the route) is taken once it appears; meanwhile it is said once, at WARN, and
/// once more at INFO when it appears: an assignment that cannot be consumed is not silent.
#[derive(Debug, Clone)]
pub(crate) struct Assigned {
    queues: Arc<[MessageQueue]>,
    /// The named queues last found missing from their topic's route.
    missing: Arc<Mutex<BTreeSet<MessageQueue>>>,
}

impl Assigned {
    pub(crate) fn new(mut queues: Vec<MessageQueue>) -> Self {
        queues.sort();
        queues.dedup();
        Self {
            queues: queues.into(),
            missing: Arc::default(),
        }
    }

    /// Compares the named queues of `topic` with its route's queues `routed`: returns the
    /// queues missing now that were not before, and those found now that were missing.
    fn note_route(
        &self,
        topic: &str,
        routed: &[MessageQueue],
    ) -> (Vec<MessageQueue>, Vec<MessageQueue>) {
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut lost, mut found) = (Vec::new(), Vec::new());
        for queue in self.queues.iter().filter(|q| &*q.topic == topic) {
            if routed.contains(queue) {
                if missing.remove(queue) {
                    found.push(queue.clone());
                }
            } else if missing.insert(queue.clone()) {
                lost.push(queue.clone());
            }
        }
        (lost, found)
    }
}

impl AllocateStrategy for Assigned {
    fn name(&self) -> &str {
        "assigned"
    }

    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        let Some(first) = mq_all.first() else {
            return Ok(Vec::new());
        };
        if is_retry_topic(&first.topic) {
            return Averagely.allocate(group, current, mq_all, cid_all);
        }
        let (lost, found) = self.note_route(&first.topic, mq_all);
        if !lost.is_empty() {
            tracing::warn!(topic = %first.topic, queues = ?lost, routed = mq_all.len(), "assigned queues are not in their topic's route: nothing is consumed from them until they appear (a queue id past the topic's queue count, or a broker not serving the topic?)");
        }
        if !found.is_empty() {
            tracing::info!(topic = %first.topic, queues = ?found, "assigned queues appeared in their topic's route: consuming them");
        }
        Ok(mq_all
            .iter()
            .filter(|q| self.queues.binary_search(q).is_ok())
            .cloned()
            .collect())
    }

    fn allocates_nothing(&self) -> Option<String> {
        self.queues
            .is_empty()
            .then(|| "no queue is assigned (give `assign` one or more)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_queues_of_the_route_and_a_share_of_the_retry_topic() {
        let named = vec![
            MessageQueue::new("T", "b", 2),
            MessageQueue::new("T", "b", 0),
            MessageQueue::new("T", "b", 9),
            MessageQueue::new("U", "b", 1),
        ];
        let strategy = Assigned::new(named);
        let members: Vec<ClientId> = ["a", "b"].into_iter().map(ClientId::from).collect();
        let t: Vec<MessageQueue> = (0..4).map(|i| MessageQueue::new("T", "b", i)).collect();
        let mine = strategy.allocate("G", &members[1], &t, &members).unwrap();
        assert_eq!(
            mine,
            vec![
                MessageQueue::new("T", "b", 0),
                MessageQueue::new("T", "b", 2)
            ],
            "named and routed, whoever the members (queue 9 is not in the route)"
        );
        let retry: Vec<MessageQueue> = (0..2)
            .map(|i| MessageQueue::new("%RETRY%G", "b", i))
            .collect();
        let a = strategy
            .allocate("G", &members[0], &retry, &members)
            .unwrap();
        let b = strategy
            .allocate("G", &members[1], &retry, &members)
            .unwrap();
        assert_eq!((a.len(), b.len()), (1, 1), "the retry topic is shared");
        assert!(
            strategy
                .allocate("G", &members[0], &[], &members)
                .unwrap()
                .is_empty()
        );
        assert!(Assigned::new(Vec::new()).allocates_nothing().is_some());
    }

    #[test]
    fn a_named_queue_missing_from_the_route_is_said_once_and_once_more_when_it_appears() {
        let q = |id| MessageQueue::new("T", "b", id);
        let strategy = Assigned::new(vec![q(0), q(9), MessageQueue::new("U", "b", 7)]);
        let route: Vec<MessageQueue> = (0..4).map(q).collect();
        assert_eq!(strategy.note_route("T", &route), (vec![q(9)], vec![]));
        assert_eq!(
            strategy.note_route("T", &route),
            (vec![], vec![]),
            "said once, not at every round"
        );
        let grown: Vec<MessageQueue> = (0..16).map(q).collect();
        assert_eq!(strategy.note_route("T", &grown), (vec![], vec![q(9)]));
        assert_eq!(strategy.note_route("T", &grown), (vec![], vec![]));
        assert_eq!(
            strategy.note_route("T", &route),
            (vec![q(9)], vec![]),
            "gone again"
        );
        // Each topic's queues are compared with that topic's route only.
        assert_eq!(
            strategy.note_route("U", &[]),
            (vec![MessageQueue::new("U", "b", 7)], vec![])
        );
        // Clones (the runtime's copy) share what was said.
        assert_eq!(strategy.clone().note_route("T", &route), (vec![], vec![]));
    }
}
