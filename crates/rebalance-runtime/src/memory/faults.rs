//! Faults injected into the in-memory cluster.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The calls a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterCall {
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
    /// `MessageSource::pull` (a delay or a lost reply applies after the pull was served,
    /// long polling included).
    Pull,
    /// `MessageSource::send_back` (a lost reply still sends the message back).
    SendBack,
    /// `MessageSource::min_offset`, `max_offset` and `offset_at`.
    QueryOffset,
    /// `AssignmentSource::query_assignment` (server-side assignment).
    QueryAssignment,
    /// `AssignmentSource::set_read_mode`.
    SetReadMode,
    /// The consume layer's `PopSource::pop` (a delay or a lost reply applies after the pop was
    /// served: a lost reply leaves its messages invisible until their invisible time passes).
    Pop,
    /// `PopSource::ack` (a lost reply still acknowledges).
    Ack,
    /// `PopSource::change_invisible_time` (a lost reply still changes it).
    ChangeInvisibleTime,
}

impl ClusterCall {
    /// The operation a denial of this call names (as the RocketMQ transport names it).
    pub(super) fn operation(self) -> &'static str {
        match self {
            Self::Route => "route lookup",
            Self::Register => "heartbeat",
            Self::Unregister => "unregister",
            Self::ConsumerIds => "consumer list",
            Self::ReadOffset => "offset read",
            Self::PersistOffset => "offset commit",
            Self::Lock => "lock",
            Self::Unlock => "unlock",
            Self::Pull => "pull",
            Self::SendBack => "send back",
            Self::QueryOffset => "offset query",
            Self::QueryAssignment => "query assignment",
            Self::SetReadMode => "set read mode",
            Self::Pop => "pop",
            Self::Ack => "ack",
            Self::ChangeInvisibleTime => "change invisible time",
        }
    }
}

/// The error of a call failed on purpose (a fault, or a lost reply).
pub(super) fn injected(operation: ClusterCall) -> crate::RemoteError {
    crate::RemoteError::Unreachable(format!("injected failure of {operation:?}"))
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// The call never reaches the cluster and fails.
    Fail,
    /// The call is served at once and its answer comes this much later.
    Delay(Duration),
    /// The call is served, but its answer is lost: the caller sees a failure.
    LoseReply,
}

/// Pending faults: per operation, the faults of the next calls, in order.
#[derive(Debug, Default)]
pub(super) struct Faults {
    next: HashMap<ClusterCall, VecDeque<Fault>>,
    garbled: HashMap<String, usize>,
}

impl Faults {
    pub(super) fn add(&mut self, operation: ClusterCall, n: usize, fault: Fault) {
        self.next
            .entry(operation)
            .or_default()
            .extend(std::iter::repeat_n(fault, n));
    }

    pub(super) fn garble(&mut self, topic: &str, n: usize) {
        *self.garbled.entry(topic.to_string()).or_default() += n;
    }

    /// The fault for the next call of `operation`, if any.
    pub(super) fn take(&mut self, operation: ClusterCall) -> Option<Fault> {
        self.next.get_mut(&operation).and_then(VecDeque::pop_front)
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
