//! What the rounds remember of each topic, so that a steady round costs what changed rather
//! than what is held: the hash of the topic's queue list (for its fingerprint), and the inputs
//! of its last balanced round.
//!
//! A topic whose queues, members and allocation are those of its last balanced round, and
//! whose table entries have not changed since, is still balanced: the allocation would give
//! the share the table holds, and the diff would change nothing. The round skips both for it
//! ([`Target::Unchanged`](super::diff::Target::Unchanged)); everything else a round does (the
//! directory call, the locks and releases still pending, which keep a round unbalanced, the
//! absence bound) runs as before.

use std::collections::HashMap;
use std::sync::Arc;

use rebalance_core::{ClientId, MessageQueue};

use crate::allocation::Allocation;
use crate::assignment::{fingerprint_ids, fingerprint_queues};

/// Which allocation computed a share: the strategy or assignor value itself (the consumer
/// holds it for its whole life, so its address names it), by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AllocationId {
    assignor: bool,
    address: usize,
}

impl AllocationId {
    pub(super) fn of(allocation: &Allocation) -> Self {
        match allocation {
            Allocation::Strategy(s) => Self {
                assignor: false,
                address: Arc::as_ptr(s).cast::<()>() as usize,
            },
            Allocation::Assignor(a) => Self {
                assignor: true,
                address: Arc::as_ptr(a).cast::<()>() as usize,
            },
            // Never skipped (the brokers may change their answer while the inputs stay).
            Allocation::Server(s) => Self {
                assignor: false,
                address: Arc::as_ptr(s.source()).cast::<()>() as usize,
            },
        }
    }
}

/// Everything besides the queue list that a topic's share depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Inputs {
    /// The members, sorted (empty when broadcasting).
    pub(super) ids: Vec<ClientId>,
    pub(super) allocation: AllocationId,
    /// With a group assignor, every topic allocated in the same call, sorted (one topic's
    /// share depends on the others'); empty with a per-topic strategy.
    pub(super) peers: Arc<[String]>,
}

/// The inputs of a topic's last balanced round, and the table's stamp of the topic after it.
#[derive(Debug)]
struct Settled {
    inputs: Inputs,
    stamp: u64,
}

#[derive(Debug)]
struct TopicMemo {
    /// The queue list last seen.
    queues: Arc<[MessageQueue]>,
    /// [`fingerprint_queues`] of `queues`.
    queues_hash: u64,
    /// The last round's outcome, when it was balanced (from `queues`).
    settled: Option<Settled>,
    /// The inputs of the round under way, until it concludes.
    pending: Option<Inputs>,
}

/// Per topic, the rounds' memory. Owned by the service task.
#[derive(Debug, Default)]
pub(super) struct InputsMemo {
    topics: HashMap<String, TopicMemo>,
}

impl InputsMemo {
    /// Records this round's queue list of `topic` and returns the topic's fingerprint with
    /// `ids`. The list is hashed only when it differs from the last one seen (the route table
    /// hands the same list over while the route is unchanged, so that is one pointer
    /// comparison); a different list also forgets the topic's last balanced round.
    pub(super) fn observe(
        &mut self,
        topic: &str,
        queues: &Arc<[MessageQueue]>,
        ids: &[ClientId],
    ) -> u64 {
        let memo = match self.topics.get_mut(topic) {
            Some(memo) => {
                if !Arc::ptr_eq(&memo.queues, queues) {
                    if *memo.queues != **queues {
                        memo.queues_hash = fingerprint_queues(queues);
                        memo.settled = None;
                    }
                    memo.queues = queues.clone();
                }
                memo
            }
            None => self
                .topics
                .entry(topic.to_string())
                .or_insert_with(|| TopicMemo {
                    queues: queues.clone(),
                    queues_hash: fingerprint_queues(queues),
                    settled: None,
                    pending: None,
                }),
        };
        memo.pending = None;
        fingerprint_ids(memo.queues_hash, ids)
    }

    /// Whether `topic`'s last round was balanced with these inputs, from the queue list last
    /// [observed](Self::observe), and its entries have not changed since (`stamp`).
    pub(super) fn unchanged(&self, topic: &str, inputs: &Inputs, stamp: u64) -> bool {
        self.topics
            .get(topic)
            .and_then(|m| m.settled.as_ref())
            .is_some_and(|s| s.stamp == stamp && s.inputs == *inputs)
    }

    /// The members (sorted) `topic`'s last round planned with, when that round was balanced.
    pub(super) fn planned_ids(&self, topic: &str) -> Option<&[ClientId]> {
        let settled = self.topics.get(topic)?.settled.as_ref()?;
        Some(&settled.inputs.ids)
    }

    /// The round under way allocates `topic` from `inputs` (and the queue list observed).
    pub(super) fn begin(&mut self, topic: &str, inputs: Inputs) {
        if let Some(memo) = self.topics.get_mut(topic) {
            memo.pending = Some(inputs);
        }
    }

    /// The round under way decided `topic` without allocating (route unknown, directory
    /// trouble, …): its next round allocates again.
    pub(super) fn forget(&mut self, topic: &str) {
        if let Some(memo) = self.topics.get_mut(topic) {
            memo.settled = None;
            memo.pending = None;
        }
    }

    /// The round under way is done with `topic`: if it allocated and reached the share
    /// (`balanced`), its inputs and the table's `stamp` of the topic are remembered, else
    /// forgotten.
    pub(super) fn conclude(&mut self, topic: &str, balanced: bool, stamp: u64) {
        let Some(memo) = self.topics.get_mut(topic) else {
            return;
        };
        let pending = memo.pending.take();
        memo.settled = match (balanced, pending) {
            (true, Some(inputs)) => Some(Settled { inputs, stamp }),
            _ => None,
        };
    }

    /// Forgets the topics `keep` does not select (no longer subscribed).
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.topics.retain(|t, _| keep(t));
    }
}

#[cfg(test)]
mod tests;
