//! Topic routes: lenient parsing and a cache shared by the name server and broker clients.

mod lenient;

use std::collections::BTreeMap;
use std::sync::Arc;

use dashmap::DashMap;
use rebalance_core::TopicRoute;
use rebalance_core::route::MASTER_ID;

pub use lenient::{RouteParseError, parse_route, quote_integer_keys};

#[derive(Debug, Default)]
struct Tables {
    topics: DashMap<String, TopicRoute>,
    brokers: DashMap<String, BTreeMap<i64, String>>,
}

/// The last routes fetched from the name server, and the addresses of every broker seen in them
/// (broker name → broker id → address). Cheap to clone; clones share the tables.
#[derive(Debug, Clone, Default)]
pub struct RouteCache {
    tables: Arc<Tables>,
}

impl RouteCache {
    /// Records the route of `topic` and its brokers' addresses.
    pub fn update(&self, topic: &str, route: &TopicRoute) {
        for broker in &route.broker_datas {
            self.tables
                .brokers
                .insert(broker.broker_name.clone(), broker.broker_addrs.clone());
        }
        self.tables.topics.insert(topic.to_string(), route.clone());
    }

    /// Forgets the route of `topic`, which is gone (the name server client calls it when told
    /// "topic not found"). Broker addresses are kept: other topics may use the same brokers.
    /// Returns whether a route was cached.
    pub fn forget(&self, topic: &str) -> bool {
        self.tables.topics.remove(topic).is_some()
    }

    /// The last route of `topic`.
    pub fn topic(&self, topic: &str) -> Option<TopicRoute> {
        self.tables.topics.get(topic).map(|r| r.value().clone())
    }

    /// The addresses of `broker_name`, by broker id.
    pub fn broker_addrs(&self, broker_name: &str) -> Option<BTreeMap<i64, String>> {
        self.tables
            .brokers
            .get(broker_name)
            .map(|a| a.value().clone())
    }

    /// The master's address of `broker_name`.
    pub fn master_addr(&self, broker_name: &str) -> Option<String> {
        self.tables
            .brokers
            .get(broker_name)
            .and_then(|a| a.value().get(&MASTER_ID).cloned())
    }

    /// The master's address of `broker_name`, or else its lowest-numbered slave's.
    pub fn any_addr(&self, broker_name: &str) -> Option<String> {
        self.tables.brokers.get(broker_name).and_then(|a| {
            a.value()
                .get(&MASTER_ID)
                .or_else(|| a.value().values().next())
                .cloned()
        })
    }
}

#[cfg(test)]
mod tests {
    use rebalance_core::{BrokerData, QueueData};

    use super::*;

    fn route(broker: &str, addrs: &[(i64, &str)]) -> TopicRoute {
        TopicRoute {
            queue_datas: vec![QueueData {
                broker_name: broker.into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "c".into(),
                broker_name: broker.into(),
                broker_addrs: addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
            }],
            order_topic_conf: None,
        }
    }

    #[test]
    fn keeps_topics_and_broker_addresses() {
        let cache = RouteCache::default();
        let shared = cache.clone();
        cache.update("T", &route("a", &[(0, "m:1"), (1, "s:1")]));
        cache.update("U", &route("b", &[(2, "s:2"), (1, "s:1")]));
        assert_eq!(
            shared.topic("T"),
            Some(route("a", &[(0, "m:1"), (1, "s:1")]))
        );
        assert_eq!(shared.master_addr("a").as_deref(), Some("m:1"));
        assert_eq!(shared.master_addr("b"), None);
        assert_eq!(shared.any_addr("b").as_deref(), Some("s:1"));
        assert_eq!(shared.any_addr("zz"), None);
        assert!(shared.forget("T"));
        assert!(!shared.forget("T"), "already forgotten");
        assert_eq!(cache.topic("T"), None);
        assert_eq!(
            cache.master_addr("a").as_deref(),
            Some("m:1"),
            "addresses survive"
        );
        // A newer route replaces the broker's addresses (a new master).
        cache.update("T", &route("a", &[(0, "m:9")]));
        assert_eq!(
            cache.broker_addrs("a"),
            Some(BTreeMap::from([(0, "m:9".to_string())]))
        );
    }
}
