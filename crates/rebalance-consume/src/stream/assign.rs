//! [`Assigned`]: the allocation of a stream consumer in assign mode: the queues the application
//! named, whatever the other members; the group's retry topic shared averagely among them.

use std::sync::Arc;

use rebalance_core::strategy::{AllocateError, AllocateStrategy, Averagely};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::subscription::is_retry_topic;

/// The queues named, each of the topic being allocated and present in its route; the retry
/// topic's queues are divided averagely among the members (so a message handed back is
/// redelivered to one of them, whichever queues each named).
#[derive(Debug, Clone)]
pub(crate) struct Assigned {
    queues: Arc<[MessageQueue]>,
}

impl Assigned {
    pub(crate) fn new(mut queues: Vec<MessageQueue>) -> Self {
        queues.sort();
        queues.dedup();
        Self {
            queues: queues.into(),
        }
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
}
