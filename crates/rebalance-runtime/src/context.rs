//! What every task of one consumer shares: its identity, configuration and collaborators.

use std::sync::Arc;

use rebalance_core::{ClientId, StrategyRef};

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
    pub(crate) intervals: Intervals,
    pub(crate) strategy: StrategyRef,
    pub(crate) name_server: Arc<dyn NameServer>,
    pub(crate) directory: Arc<dyn GroupDirectory>,
    pub(crate) offsets: Arc<dyn OffsetStore>,
    pub(crate) locker: Option<Arc<dyn QueueLocker>>,
    pub(crate) listener: Arc<dyn QueueListener>,
}

impl Context {
    /// The locker, when queues must be locked (ordered consumption in clustering mode).
    pub(crate) fn locks(&self) -> Option<&Arc<dyn QueueLocker>> {
        match (self.consume_order, self.message_model) {
            (ConsumeOrder::Orderly, MessageModel::Clustering) => self.locker.as_ref(),
            _ => None,
        }
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
