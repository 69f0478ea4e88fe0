//! Topic routes: lenient parsing and a cache shared by the name server and broker clients.

mod lenient;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use rebalance_core::TopicRoute;
use rebalance_core::route::MASTER_ID;

pub use lenient::{RouteParseError, parse_route, quote_integer_keys};

#[derive(Debug, Default)]
struct Tables {
    topics: DashMap<String, TopicRoute>,
    brokers: DashMap<String, BTreeMap<i64, String>>,
    /// Told the brokers whose master moved (see [`RouteCache::on_master_moved_while`]).
    master_moved: std::sync::RwLock<Vec<MasterMovedHook>>,
    /// Which brokers the routes name, for [`RouteCache::update`] to drop those none names any
    /// more. Taken by writers only: lookups read `brokers` alone.
    mentions: Mutex<Mentions>,
}

/// The broker names each topic's routes mention, and how many of those lists name each broker.
#[derive(Debug, Default)]
struct Mentions {
    /// Per topic (forgotten ones too), the broker names of its last route and of the route
    /// before (each list sorted, without duplicates).
    by_topic: HashMap<String, [Vec<String>; 2]>,
    /// Per broker name, how many lists of `by_topic` name it (never 0: at 0 it is removed, and
    /// its addresses with it).
    counts: HashMap<String, usize>,
}

/// A hook told the names of the brokers whose master moved.
type MasterMoved = Box<dyn Fn(&[String]) + Send + Sync>;

/// Called with the names of the brokers whose master moved, while `live` says so.
struct MasterMovedHook {
    live: Box<dyn Fn() -> bool + Send + Sync>,
    call: MasterMoved,
}

impl std::fmt::Debug for MasterMovedHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterMovedHook")
    }
}

/// The last routes fetched from the name server, and the addresses of the brokers they name
/// (broker name → broker id → address). Cheap to clone; clones share the tables.
///
/// A broker's addresses stay as long as the last route of some topic, or the route before it,
/// names the broker (a topic [`forget`](Self::forget)ten keeps its last two routes' brokers):
/// a queue of a broker that just left its topic's route can still have its offset committed
/// at the hand-off, and a name server that names new brokers in every answer does not grow
/// the table past two answers per topic.
#[derive(Debug, Clone, Default)]
pub struct RouteCache {
    tables: Arc<Tables>,
}

impl RouteCache {
    /// Records the route of `topic` and its brokers' addresses. Brokers neither this route,
    /// the one before it, nor another topic's last two routes name are dropped.
    pub fn update(&self, topic: &str, route: &TopicRoute) {
        let names: Vec<String> = route
            .broker_datas
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_string)
            .collect();
        let mut mentions = self
            .tables
            .mentions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut moved = Vec::new();
        for broker in &route.broker_datas {
            let before = self
                .tables
                .brokers
                .insert(broker.broker_name.clone(), broker.broker_addrs.clone());
            let was = before.as_ref().and_then(|addrs| addrs.get(&MASTER_ID));
            if was.is_some() && was != broker.broker_addrs.get(&MASTER_ID) {
                moved.push(broker.broker_name.clone());
            }
        }
        // The new list counts before the oldest is let go: a broker both name stays throughout.
        for name in &names {
            *mentions.counts.entry(name.clone()).or_default() += 1;
        }
        let lists = mentions.by_topic.entry(topic.to_string()).or_default();
        let last = std::mem::replace(&mut lists[0], names);
        let oldest = std::mem::replace(&mut lists[1], last);
        for name in oldest {
            let Some(count) = mentions.counts.get_mut(&name) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                mentions.counts.remove(&name);
                self.tables.brokers.remove(&name);
            }
        }
        self.tables.topics.insert(topic.to_string(), route.clone());
        drop(mentions);
        if !moved.is_empty() {
            moved.sort();
            moved.dedup();
            tracing::info!(topic, brokers = ?moved, "a broker's master moved (or is gone): the locks it granted are lost");
            for hook in self.live_master_moved_hooks().iter() {
                (hook.call)(&moved);
            }
        }
    }

    /// Calls `hook`, while `live` says so, with the names of the brokers whose master an update
    /// moved to another address or left without one (a failover, or a restart on another
    /// port): the locks the old master granted are lost to this client, which no longer
    /// talks to it, and its connection's loss would name no broker once the route moved on.
    /// The hook runs inside [`update`](Self::update) and must not block.
    pub(crate) fn on_master_moved_while(
        &self,
        live: impl Fn() -> bool + Send + Sync + 'static,
        hook: impl Fn(&[String]) + Send + Sync + 'static,
    ) {
        self.live_master_moved_hooks().push(MasterMovedHook {
            live: Box::new(live),
            call: Box::new(hook),
        });
    }

    /// Forgets the route of `topic`, which is gone (the name server client calls it when told
    /// "topic not found"). Its brokers' addresses are kept, for offsets and locks of queues still
    /// held, until the topic's next routes no longer name them. Returns whether a route was
    /// cached.
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

    /// How many master-moved hooks are live (dead ones pruned first).
    #[cfg(test)]
    pub(crate) fn master_moved_hook_count(&self) -> usize {
        self.live_master_moved_hooks().len()
    }

    /// The master-moved hooks, those no longer wanted dropped.
    fn live_master_moved_hooks(&self) -> std::sync::RwLockWriteGuard<'_, Vec<MasterMovedHook>> {
        let mut hooks = self
            .tables
            .master_moved
            .write()
            .unwrap_or_else(|e| e.into_inner());
        hooks.retain(|hook| (hook.live)());
        hooks
    }

    /// The master's address of `broker_name`.
    pub fn master_addr(&self, broker_name: &str) -> Option<String> {
        self.tables
            .brokers
            .get(broker_name)
            .and_then(|a| a.value().get(&MASTER_ID).cloned())
    }

    /// The names of the brokers whose master is at `addr` (sorted).
    pub(crate) fn masters_at(&self, addr: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .tables
            .brokers
            .iter()
            .filter(|b| b.value().get(&MASTER_ID).is_some_and(|a| a == addr))
            .map(|b| b.key().clone())
            .collect();
        names.sort();
        names
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

    /// A route naming each broker of `brokers`, with a master at `m:<name>`.
    fn naming(brokers: &[&str]) -> TopicRoute {
        let mut all = TopicRoute::default();
        for broker in brokers {
            let one = route(broker, &[(0, &format!("m:{broker}"))]);
            all.queue_datas.extend(one.queue_datas);
            all.broker_datas.extend(one.broker_datas);
        }
        all
    }

    fn known_brokers(cache: &RouteCache) -> usize {
        cache.tables.brokers.len()
    }

    #[test]
    fn a_name_server_naming_new_brokers_every_time_does_not_grow_the_table() {
        let cache = RouteCache::default();
        for i in 0..10_000 {
            let names = [format!("gen{i}-a"), format!("gen{i}-b")];
            cache.update("T", &naming(&[&names[0], &names[1]]));
            // This route's brokers and the previous one's, nothing older.
            assert!(
                known_brokers(&cache) <= 4,
                "{} after {i}",
                known_brokers(&cache)
            );
        }
        assert_eq!(known_brokers(&cache), 4);
        let mentions = cache.tables.mentions.lock().unwrap();
        assert_eq!(mentions.counts.len(), 4);
        assert_eq!(mentions.by_topic.len(), 1);
        drop(mentions);
        assert_eq!(
            cache.master_addr("gen9999-a").as_deref(),
            Some("m:gen9999-a")
        );
        assert_eq!(
            cache.master_addr("gen9998-b").as_deref(),
            Some("m:gen9998-b")
        );
        assert_eq!(cache.master_addr("gen9997-a"), None);
        assert_eq!(cache.any_addr("gen0-a"), None);
    }

    #[test]
    fn a_broker_stays_while_a_route_of_some_topic_names_it() {
        let cache = RouteCache::default();
        cache.update("T", &naming(&["a", "b"]));
        cache.update("U", &naming(&["b", "c"]));
        // T loses b: the route before still names it (a queue of b handed off now commits).
        cache.update("T", &naming(&["a"]));
        assert_eq!(cache.master_addr("b").as_deref(), Some("m:b"));
        cache.update("T", &naming(&["a"]));
        // T no longer names b at all, but U does.
        assert_eq!(cache.master_addr("b").as_deref(), Some("m:b"));
        cache.update("U", &naming(&["c"]));
        cache.update("U", &naming(&["c"]));
        assert_eq!(cache.master_addr("b"), None, "no route names b any more");
        assert_eq!(cache.master_addr("a").as_deref(), Some("m:a"));
        assert_eq!(cache.master_addr("c").as_deref(), Some("m:c"));
        // The same route polled again and again keeps its brokers, once each.
        for _ in 0..100 {
            cache.update("U", &naming(&["c", "d"]));
        }
        assert_eq!(known_brokers(&cache), 3);
        assert_eq!(cache.tables.mentions.lock().unwrap().counts["c"], 2);
        // A forgotten topic keeps its brokers until it is routed again.
        assert!(cache.forget("U"));
        assert_eq!(cache.master_addr("d").as_deref(), Some("m:d"));
        cache.update("U", &naming(&["e"]));
        cache.update("U", &naming(&["e"]));
        assert_eq!(cache.master_addr("d"), None);
        // A route listing a broker twice names it once.
        let mut twice = naming(&["f"]);
        twice.broker_datas.push(twice.broker_datas[0].clone());
        cache.update("V", &twice);
        cache.update("V", &naming(&["g"]));
        cache.update("V", &naming(&["g"]));
        assert_eq!(cache.master_addr("f"), None);
        assert!(
            !cache
                .tables
                .mentions
                .lock()
                .unwrap()
                .counts
                .contains_key("f")
        );
    }
}
