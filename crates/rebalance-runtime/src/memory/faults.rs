//! Faults injected into the in-memory cluster.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The calls a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `NameServer::topic_route`.
    Route,
    /// `GroupDirectory::register` (heartbeats).
    Register,
    /// `GroupDirectory::unregister`.
    Unregister,
    /// `GroupDirectory::consumer_ids`.
    ConsumerIds,
    /// `OffsetStore::read`.
    ReadOffset,
    /// `OffsetStore::persist`.
    PersistOffset,
    /// `QueueLocker::lock`.
    Lock,
    /// `QueueLocker::unlock`.
    Unlock,
}

/// Pending faults: per operation, a queue of (delay, fail) for the next calls.
#[derive(Debug, Default)]
pub(super) struct Faults {
    next: HashMap<Operation, VecDeque<(Option<Duration>, bool)>>,
    garbled: HashMap<String, usize>,
}

impl Faults {
    pub(super) fn fail(&mut self, operation: Operation, n: usize) {
        self.next
            .entry(operation)
            .or_default()
            .extend((0..n).map(|_| (None, true)));
    }

    pub(super) fn delay(&mut self, operation: Operation, n: usize, delay: Duration) {
        self.next
            .entry(operation)
            .or_default()
            .extend((0..n).map(|_| (Some(delay), false)));
    }

    pub(super) fn garble(&mut self, topic: &str, n: usize) {
        *self.garbled.entry(topic.to_string()).or_default() += n;
    }

    /// The fault for the next call of `operation`: an optional delay and whether it fails.
    pub(super) fn take(&mut self, operation: Operation) -> (Option<Duration>, bool) {
        self.next
            .get_mut(&operation)
            .and_then(VecDeque::pop_front)
            .unwrap_or((None, false))
    }

    pub(super) fn take_garbled(&mut self, topic: &str) -> bool {
        match self.garbled.get_mut(topic) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}
