//! What every task of one consumer shares: its identity, configuration and collaborators.

use std::sync::Arc;

use rebalance_core::ClientId;

use crate::allocation::Allocation;

use crate::config::{ConsumeFrom, ConsumeOrder, Intervals, MessageModel};
use crate::directory::Registration;
use crate::{GroupDirectory, NameServer, OffsetStore, QueueListener, QueueLocker};

/// Immutable after start.
pub(crate) struct Context {
    pub(crate) group: String,
    pub(crate) client_id: ClientId,
    pub(crate) message_model: MessageModel,
    pub(crate) consume_order: ConsumeOrder,
    pub(crate) consume_from: ConsumeFrom,
    pub(crate) exclusive_hand_off: bool,
    pub(crate) intervals: Intervals,
    pub(crate) allocation: Allocation,
    pub(crate) name_server: Arc<dyn NameServer>,
    pub(crate) directory: Arc<dyn GroupDirectory>,
    pub(crate) offsets: Arc<dyn OffsetStore>,
    pub(crate) locker: Option<Arc<dyn QueueLocker>>,
    pub(crate) listener: Arc<dyn QueueListener>,
}

impl Context {
    /// Whether queues are locked at the broker: ordered consumption, or an exclusive hand-off,
    /// in clustering mode.
    pub(crate) fn uses_locks(&self) -> bool {
        uses_locks(
            self.message_model,
            self.consume_order,
            self.exclusive_hand_off,
        )
    }

    /// The locker, when queues must be locked.
    pub(crate) fn locks(&self) -> Option<&Arc<dyn QueueLocker>> {
        self.locker.as_ref().filter(|_| self.uses_locks())
    }

    pub(crate) fn registration(&self, topics: impl IntoIterator<Item = String>) -> Registration {
        Registration {
            client_id: self.client_id.clone(),
            group: self.group.clone(),
            message_model: self.message_model,
            consume_order: self.consume_order,
            consume_from: self.consume_from,
            topics: topics.into_iter().collect(),
        }
    }
}

/// Whether a consumer so configured locks queues at the broker (and so needs a locker).
pub(crate) fn uses_locks(
    model: MessageModel,
    order: ConsumeOrder,
    exclusive_hand_off: bool,
) -> bool {
    model == MessageModel::Clustering && (order == ConsumeOrder::Orderly || exclusive_hand_off)
}
