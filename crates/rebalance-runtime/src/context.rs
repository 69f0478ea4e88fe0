//! What every task of one consumer shares: its identity, configuration and collaborators.

use std::collections::BTreeMap;
use std::sync::Arc;

use rebalance_core::ClientId;

use crate::allocation::Allocation;

use crate::config::{AddedFailurePolicy, ConsumeFrom, ConsumeOrder, Intervals, MessageModel};
use crate::directory::Registration;
use crate::subscription::{Subscription, TagExpression, retry_topic};
use crate::{GroupDirectory, NameServer, OffsetStore, QueueListener, QueueLocker};

/// Immutable after start.
pub(crate) struct Context {
    pub(crate) group: String,
    pub(crate) client_id: ClientId,
    pub(crate) message_model: MessageModel,
    pub(crate) consume_order: ConsumeOrder,
    pub(crate) consume_from: ConsumeFrom,
    pub(crate) exclusive_hand_off: bool,
    pub(crate) added_failure: AddedFailurePolicy,
    pub(crate) intervals: Intervals,
    pub(crate) allocation: Allocation,
    pub(crate) name_server: Arc<dyn NameServer>,
    pub(crate) directory: Arc<dyn GroupDirectory>,
    pub(crate) offsets: Arc<dyn OffsetStore>,
    pub(crate) locker: Option<Arc<dyn QueueLocker>>,
    pub(crate) listener: Arc<dyn QueueListener>,
    /// The group's retry topic, when this consumer subscribes to it besides the requested
    /// topics (clustering, not opted out).
    pub(crate) retry_topic: Option<String>,
    /// Shared by the leases and the service: consume figures, persist-now wake-ups, the start
    /// time.
    pub(crate) activity: Arc<crate::running::ConsumerActivity>,
    /// What this consumer counts in the queues-held gauge.
    pub(crate) owned_gauge: crate::metrics::OwnedGauge,
    /// The queues released for an offset reset and not taken back yet, as the service last
    /// set them (for [`ConsumerHandle::awaits_take_back`](crate::ConsumerHandle::awaits_take_back)).
    pub(crate) take_backs: TakeBacks,
}

/// The queues released for an offset reset that the round after their release has not taken
/// back (nor found someone else's) yet: the service's own record, copied here at each change
/// for the handles to read. Never held across an `.await`.
#[derive(Debug, Default)]
pub(crate) struct TakeBacks(
    std::sync::Mutex<std::collections::HashSet<rebalance_core::MessageQueue>>,
);

impl TakeBacks {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<rebalance_core::MessageQueue>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the queues awaiting their take-back.
    pub(crate) fn set<'a>(&self, queues: impl Iterator<Item = &'a rebalance_core::MessageQueue>) {
        let mut set = self.lock();
        set.clear();
        set.extend(queues.cloned());
    }

    /// Whether `queue` awaits its take-back.
    pub(crate) fn contains(&self, queue: &rebalance_core::MessageQueue) -> bool {
        self.lock().contains(queue)
    }
}

/// Each subscribed topic's tag expression.
pub(crate) type Subscriptions = BTreeMap<String, TagExpression>;

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

    /// What the consumer subscribes to when the application asked for `requested`: those, and
    /// the group's retry topic with `*` (unless the application subscribed to it itself).
    pub(crate) fn effective(&self, requested: &Subscriptions) -> Subscriptions {
        with_retry_topic(requested, self.retry_topic.as_deref())
    }

    /// The registration of `subscriptions` (effective ones, see [`effective`](Self::effective)).
    pub(crate) fn registration(&self, subscriptions: &Subscriptions) -> Registration {
        Registration {
            client_id: self.client_id.clone(),
            group: self.group.clone(),
            message_model: self.message_model,
            consume_order: self.consume_order,
            consume_from: self.consume_from,
            subscriptions: subscriptions
                .iter()
                .map(|(topic, expression)| Subscription::new(topic.clone(), expression.clone()))
                .collect(),
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

/// The retry topic a consumer so configured subscribes to by itself, as the Java push consumer
/// does: the group's, in clustering mode, unless opted out of. Broadcasting consumers never do
/// (each would consume every retried message of the group).
pub(crate) fn retry_subscription(
    group: &str,
    model: MessageModel,
    consume_retry_topic: bool,
) -> Option<String> {
    (consume_retry_topic && model == MessageModel::Clustering).then(|| retry_topic(group))
}

/// `requested` and `retry` with `*`; an expression the application gave the retry topic itself
/// is kept.
fn with_retry_topic(requested: &Subscriptions, retry: Option<&str>) -> Subscriptions {
    let mut subscriptions = requested.clone();
    if let Some(retry) = retry {
        subscriptions.entry(retry.to_string()).or_default();
    }
    subscriptions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clustering_consumers_subscribe_to_the_retry_topic_unless_opted_out() {
        assert_eq!(
            retry_subscription("G", MessageModel::Clustering, true).as_deref(),
            Some("%RETRY%G")
        );
        assert_eq!(
            retry_subscription("G", MessageModel::Clustering, false),
            None
        );
        assert_eq!(
            retry_subscription("G", MessageModel::Broadcasting, true),
            None
        );
        assert_eq!(
            retry_subscription("G", MessageModel::Broadcasting, false),
            None
        );
    }

    #[test]
    fn the_retry_topic_joins_the_requested_subscriptions_with_every_tag() {
        let tags = TagExpression::parse("TagA || TagB").unwrap();
        let requested = Subscriptions::from([("T".to_string(), tags.clone())]);
        assert_eq!(with_retry_topic(&requested, None), requested);
        assert_eq!(
            with_retry_topic(&requested, Some("%RETRY%G")),
            Subscriptions::from([
                ("%RETRY%G".to_string(), TagExpression::all()),
                ("T".to_string(), tags.clone()),
            ])
        );
        // Subscribed by the application itself: its expression stays.
        let own = Subscriptions::from([("%RETRY%G".to_string(), tags.clone())]);
        assert_eq!(with_retry_topic(&own, Some("%RETRY%G")), own);
    }
}
