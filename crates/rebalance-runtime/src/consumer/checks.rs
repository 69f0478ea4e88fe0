//! What [`ConsumerBuilder::start`] refuses: a configuration that cannot work.

use std::sync::Arc;

use rebalance_core::strategy::{Averagely, StrategyConfigError};
use tokio_util::sync::CancellationToken;

use super::identity::resolve_client_id;
use super::{ConsumerBuilder, ConsumerError};
use crate::allocation::{Allocation, ServerAllocation};
use crate::config::{ConsumeOrder, MessageModel};
use crate::context::{Context, Subscriptions, retry_subscription, uses_locks};
use crate::membership::Membership;
use crate::offset_store::OffsetScope;

/// A configuration that [`ConsumerBuilder::check`] found workable.
pub(super) struct Checked {
    /// What every task of the consumer shares.
    pub(super) ctx: Arc<Context>,
    /// The subscriptions the application asked for.
    pub(super) subscriptions: Subscriptions,
    /// The token whose cancellation shuts the consumer down.
    pub(super) shutdown: Option<CancellationToken>,
}

impl ConsumerBuilder {
    /// The consumer's context, or why the configuration cannot work (see
    /// [`start`](Self::start)).
    pub(super) fn check(self) -> Result<Checked, ConsumerError> {
        if self.group.is_empty() {
            return Err(ConsumerError::EmptyGroup);
        }
        // What the application asked for: the retry topic joins it later (`Context::effective`).
        if self.subscriptions.is_empty() {
            return Err(ConsumerError::NoSubscription);
        }
        // A strategy given as a value is refused as one built by name is (`strategy_named`):
        // every subscribed topic would be balanced with it, and nobody would get a queue.
        if let Some(Allocation::Strategy(strategy)) = &self.allocation
            && let Some(e) = StrategyConfigError::if_allocates_nothing(&**strategy)
        {
            return Err(ConsumerError::Strategy(e));
        }
        if let Some(Allocation::Server(server)) = &self.allocation {
            self.check_server_side(server)?;
        }
        let bound = self.directory.as_ref().and_then(|d| d.bound_client_id());
        let client_id = resolve_client_id(self.client_id, bound)?;
        self.intervals.validate()?;
        let locker = self.locker;
        if uses_locks(
            self.message_model,
            self.consume_order,
            self.exclusive_hand_off,
        ) && locker.is_none()
        {
            return Err(ConsumerError::Missing(
                if self.consume_order == ConsumeOrder::Orderly {
                    "a queue locker (orderly clustering consumption)"
                } else {
                    "a queue locker (exclusive hand-off)"
                },
            ));
        }
        let offsets = self
            .offsets
            .ok_or(ConsumerError::Missing("an offset store"))?;
        match (self.message_model, offsets.scope()) {
            (MessageModel::Broadcasting, OffsetScope::Group) => {
                return Err(ConsumerError::SharedOffsetStore);
            }
            (MessageModel::Clustering, OffsetScope::Client) => tracing::warn!(
                group = %self.group,
                "clustering with a per-client offset store: a queue's next owner will not see this client's progress"
            ),
            _ => {}
        }
        let listener = self
            .listener
            .ok_or(ConsumerError::Missing("a queue listener"))?;
        // Broadcasting: every member consumes every queue, so no queue is ever someone else's.
        let membership = match self.message_model {
            MessageModel::Clustering => Membership::new(self.intervals.member_expiry),
            MessageModel::Broadcasting => Membership::unconditional(),
        };
        let retry_topic =
            retry_subscription(&self.group, self.message_model, self.consume_retry_topic);
        let guarded_release = uses_locks(
            self.message_model,
            self.consume_order,
            self.exclusive_hand_off,
        )
        .then_some(self.intervals.force_unlock_after);
        let ctx = Arc::new(Context {
            group: self.group,
            client_id,
            message_model: self.message_model,
            consume_order: self.consume_order,
            consume_from: self.consume_from,
            exclusive_hand_off: self.exclusive_hand_off,
            added_failure: self.added_failure,
            intervals: self.intervals,
            allocation: self
                .allocation
                .unwrap_or_else(|| Allocation::Strategy(Arc::new(Averagely))),
            name_server: self
                .name_server
                .ok_or(ConsumerError::Missing("a name server"))?,
            directory: self
                .directory
                .ok_or(ConsumerError::Missing("a group directory"))?,
            offsets,
            locker,
            listener,
            retry_topic,
            activity: Arc::new(
                crate::running::ConsumerActivity::new(membership)
                    .guarding_releases(guarded_release),
            ),
            owned_gauge: Default::default(),
            take_backs: Default::default(),
        });
        Ok(Checked {
            ctx,
            subscriptions: self.subscriptions,
            shutdown: self.shutdown,
        })
    }
}

impl ConsumerBuilder {
    /// What server-side assignment refuses: consumers that rebalance on the client in RocketMQ
    /// (orderly, broadcasting), an exclusive hand-off of queues that may be shared, and a
    /// strategy the brokers cannot run.
    fn check_server_side(&self, server: &ServerAllocation) -> Result<(), ConsumerError> {
        if self.message_model == MessageModel::Broadcasting {
            return Err(ConsumerError::ServerSideRefused("broadcasting consumers"));
        }
        if self.consume_order == ConsumeOrder::Orderly {
            return Err(ConsumerError::ServerSideRefused("orderly consumers"));
        }
        if self.exclusive_hand_off && server.accepts_pop() {
            return Err(ConsumerError::ServerSideRefused(
                "an exclusive hand-off of popped queues (several members read them at once)",
            ));
        }
        let accepted = server.source().strategies();
        if !accepted.iter().any(|s| s == server.strategy()) {
            return Err(ConsumerError::ServerStrategy {
                strategy: server.strategy().to_string(),
                accepted,
            });
        }
        Ok(())
    }
}
