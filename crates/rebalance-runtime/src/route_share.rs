//! [`RouteShare`]: what many consumers of one process derive from the same route, derived once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rebalance_core::{MessageQueue, TopicRoute};

use crate::routes::Known;

/// Route data shared between the consumers of one process that read routes from the same
/// source: each topic's route, its subscribable queues and its publish queues, derived once
/// and handed to every consumer that polls the same route, instead of one copy per consumer.
///
/// A [`NameServer`](crate::NameServer) offers one with
/// [`route_share`](crate::NameServer::route_share). The in-memory cluster does, so that a
/// simulation of 2,000 clients on 100,000 queues holds one queue list, not 2,000 (and the
/// rounds of its clients compare one list, not 2,000 equal ones). A real transport does not: a
/// consumer holds its own, as its process would. It keeps the last route of each topic it was
/// given (the data itself is shared with the consumers holding it).
///
/// ```
/// use rebalance_runtime::RouteShare;
/// use rebalance_runtime::memory::route_of;
///
/// let share = RouteShare::new();
/// let route = route_of(&["broker-a".to_string()], 4);
/// let a = share.queues_of("T", route.clone());
/// let b = share.queues_of("T", route);
/// assert_eq!(a.len(), 4);
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// assert!(std::sync::Arc::ptr_eq(&a, &share.queues("T").unwrap()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct RouteShare {
    topics: Arc<Mutex<HashMap<String, Known>>>,
}

impl RouteShare {
    /// An empty share.
    pub fn new() -> Self {
        Self::default()
    }

    /// What `route` gives for `topic`: the data derived from an equal route before (compared
    /// order-insensitively, as route changes are), or derived now and kept for the next
    /// consumer.
    pub(crate) fn known(&self, topic: &str, route: TopicRoute) -> Known {
        if let Some(known) = self.lock().get(topic).filter(|k| k.route.same_as(&route)) {
            return known.clone();
        }
        // Derived without the lock: another consumer may derive the same at the same time,
        // and the last one kept wins; each is correct.
        let known = Known::new(topic, route);
        self.lock().insert(topic.to_string(), known.clone());
        known
    }

    /// The subscribable queues of `topic` under `route`, sorted the Java way: the list every
    /// consumer of this share polling that route holds.
    pub fn queues_of(&self, topic: &str, route: TopicRoute) -> Arc<[MessageQueue]> {
        self.known(topic, route).queues
    }

    /// The subscribable queues of the last route of `topic` the share was given, if any.
    pub fn queues(&self, topic: &str) -> Option<Arc<[MessageQueue]>> {
        self.lock().get(topic).map(|k| k.queues.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        // Every update is a single insert: a panic elsewhere cannot leave the map half-changed.
        self.topics.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::route_of;

    #[test]
    fn an_equal_route_is_derived_once_and_a_changed_one_again() {
        let share = RouteShare::new();
        let brokers = ["a".to_string(), "b".to_string()];
        let first = share.known("T", route_of(&brokers, 4));
        // The same route listed in another order is the same route.
        let mut reordered = route_of(&brokers, 4);
        reordered.queue_datas.reverse();
        reordered.broker_datas.reverse();
        let again = share.known("T", reordered);
        assert!(Arc::ptr_eq(&first.queues, &again.queues));
        assert!(Arc::ptr_eq(&first.route, &again.route));
        // Another topic with the same route has queues of its own.
        let other = share.known("U", route_of(&brokers, 4));
        assert_eq!(&*other.queues[0].topic, "U");
        // A changed route is derived anew and replaces the old one.
        let grown = share.known("T", route_of(&brokers, 5));
        assert_eq!(grown.queues.len(), 10);
        let after = share.known("T", route_of(&brokers, 5));
        assert!(Arc::ptr_eq(&grown.queues, &after.queues));
    }
}
