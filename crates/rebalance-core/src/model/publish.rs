//! What a producer may send to: a topic's publish queues, computed from its route the way the
//! Java client's `topicRouteData2TopicPublishInfo` does.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::model::route::{BrokerData, MAX_QUEUES_PER_BROKER, TopicRoute, perm};
use crate::{MessageQueue, java};

/// The most publish queues a topic may have. A route asking for more is garbage (a corrupt
/// queue count), not a reason to allocate gigabytes. Each broker is also held to
/// [`MAX_QUEUES_PER_BROKER`].
pub const MAX_PUBLISH_QUEUES: usize = 1 << 20;

/// A topic's publish queues: the queues a producer may send to, grouped by broker.
///
/// - A **normal topic**: ids `0..write_queue_nums` of every writable queue data
///   (`perm & 2`) whose broker has a master (broker id 0), brokers in Java string order.
/// - An **ordered topic** (the route carries `orderTopicConf`,
///   `brokerName:queueNums;brokerName:queueNums`): the queues the configuration lists, in its
///   order, whatever the permissions (as in the Java client), so that a key keeps its queue.
///
/// Never empty: a route with nothing to send to is a [`PublishError`].
///
/// ```
/// use rebalance_core::{BrokerData, QueueData, TopicRoute};
/// use rebalance_core::model::publish::{PublishError, PublishInfo};
///
/// let broker = |name: &str, master: bool| BrokerData {
///     cluster: "c".into(),
///     broker_name: name.into(),
///     broker_addrs: if master { [(0, "10.0.0.1:10911".to_string())].into() } else { Default::default() },
/// };
/// let queues = |name: &str, n: i32, perm: i32| QueueData {
///     broker_name: name.into(), read_queue_nums: n, write_queue_nums: n, perm, topic_sys_flag: 0,
/// };
/// let mut route = TopicRoute {
///     queue_datas: vec![queues("broker-b", 2, 6), queues("broker-a", 1, 6), queues("broker-r", 4, 4)],
///     broker_datas: vec![broker("broker-a", true), broker("broker-b", true), broker("broker-r", true)],
///     order_topic_conf: None,
/// };
/// let info = PublishInfo::from_route("T", &route)?;
/// let names: Vec<String> = info.queues().iter().map(|q| format!("{q:?}")).collect();
/// assert_eq!(names, ["T/broker-a/0", "T/broker-b/0", "T/broker-b/1"]); // broker-r is read-only
///
/// route.order_topic_conf = Some("broker-b:1;broker-a:2".into());
/// let ordered = PublishInfo::from_route("T", &route)?;
/// assert!(ordered.is_ordered());
/// assert_eq!(ordered.queues()[0].queue_id, 0);
/// assert_eq!(&*ordered.queues()[2].broker_name, "broker-a");
///
/// route.order_topic_conf = Some("broker-b=1".into());
/// assert!(matches!(PublishInfo::from_route("T", &route), Err(PublishError::MalformedOrderConf { .. })));
/// # Ok::<(), PublishError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PublishInfo {
    ordered: bool,
    queues: Arc<[MessageQueue]>,
    /// Broker names in queue order, each with the range of its queues in `queues`.
    brokers: Box<[(Arc<str>, Range<usize>)]>,
    /// For every queue, the index of its broker in `brokers`.
    broker_of: Box<[u32]>,
}

impl fmt::Debug for PublishInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let brokers: Vec<String> = self
            .brokers
            .iter()
            .map(|(name, range)| format!("{name}:{}", range.len()))
            .collect();
        f.debug_struct("PublishInfo")
            .field("ordered", &self.ordered)
            .field("brokers", &brokers)
            .finish()
    }
}

/// Why a route gives a producer nothing to send to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The route's `orderTopicConf` cannot be read.
    #[error("orderTopicConf `{conf}` is malformed: {defect}")]
    MalformedOrderConf {
        /// The configuration as the route carries it.
        conf: String,
        /// What is wrong with it.
        defect: OrderConfDefect,
    },
    /// No queue data is writable with at least one write queue (or the route is empty).
    #[error("the topic has no writable queue")]
    NoWritableQueue,
    /// Writable queues exist, but none of their brokers has a master to send to.
    #[error("no writable broker has a master: {}", brokers.join(", "))]
    NoMaster {
        /// The writable brokers, without a master.
        brokers: Vec<String>,
    },
    /// A broker's write queue count (or its count in `orderTopicConf`) is above
    /// [`MAX_QUEUES_PER_BROKER`].
    #[error("broker `{broker}` announces {count} publish queues, more than the {max} allowed")]
    TooManyBrokerQueues {
        /// The broker name.
        broker: String,
        /// Its queue count.
        count: i32,
        /// The limit, [`MAX_QUEUES_PER_BROKER`].
        max: i32,
    },
    /// The route asks for more than [`MAX_PUBLISH_QUEUES`] queues.
    #[error("the route lists {count} publish queues, more than the {MAX_PUBLISH_QUEUES} allowed")]
    TooManyQueues {
        /// How many it lists.
        count: u64,
    },
}

/// What is wrong with an `orderTopicConf` entry (`brokerName:queueNums`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OrderConfDefect {
    /// An entry is not `brokerName:queueNums` (no `:`; as in Java, fields after the count are
    /// ignored).
    #[error("entry `{0}` is not brokerName:queueNums")]
    NotAPair(String),
    /// An entry has an empty broker name.
    #[error("entry `{0}` has an empty broker name")]
    EmptyBrokerName(String),
    /// An entry's queue count is not a non-negative integer.
    #[error("entry `{0}` has a queue count that is not a non-negative integer")]
    BadQueueCount(String),
    /// A broker is listed twice.
    #[error("broker `{0}` is listed twice")]
    DuplicateBroker(String),
}

impl PublishInfo {
    /// The publish queues of `topic` from its route (see the type's documentation). A route
    /// whose `orderTopicConf` is absent or empty is a normal topic.
    pub fn from_route(topic: &str, route: &TopicRoute) -> Result<Self, PublishError> {
        let topic: Arc<str> = topic.into();
        match route.order_topic_conf.as_deref() {
            Some(conf) if !conf.is_empty() => Self::ordered(topic, route, conf),
            _ => Self::normal(topic, route),
        }
    }

    fn normal(topic: Arc<str>, route: &TopicRoute) -> Result<Self, PublishError> {
        let masters: HashSet<&str> = route
            .broker_datas
            .iter()
            .filter(|b| b.master_addr().is_some())
            .map(|b| b.broker_name.as_str())
            .collect();
        let mut writable: Vec<(&str, i32)> = route
            .queue_datas
            .iter()
            .filter(|q| perm::is_writeable(q.perm) && q.write_queue_nums > 0)
            .map(|q| (q.broker_name.as_str(), q.write_queue_nums))
            .collect();
        if writable.is_empty() {
            return Err(PublishError::NoWritableQueue);
        }
        // Stable: of a broker listed twice (a garbage route), the first entry counts.
        writable.sort_by(|a, b| java::compare_str(a.0, b.0));
        writable.dedup_by(|later, first| later.0 == first.0);
        let (with_master, without): (Vec<_>, Vec<_>) = writable
            .into_iter()
            .partition(|(name, _)| masters.contains(name));
        if with_master.is_empty() {
            return Err(PublishError::NoMaster {
                brokers: without.iter().map(|(n, _)| n.to_string()).collect(),
            });
        }
        Self::build(topic, false, &with_master)
    }

    fn ordered(topic: Arc<str>, route: &TopicRoute, conf: &str) -> Result<Self, PublishError> {
        let malformed = |defect| PublishError::MalformedOrderConf {
            conf: conf.to_string(),
            defect,
        };
        let mut entries: Vec<(&str, i32)> = Vec::new();
        let mut seen = HashSet::new();
        // Java's `split(";")`: trailing empty entries are dropped, inner ones are errors.
        for entry in java::split(conf, ';') {
            // Java's `split(":")` then `item[0]`, `item[1]`: trailing empty fields dropped,
            // further fields ignored (`a:4:` and `a:4:x` are 4 queues of `a`, found by review).
            let (name, count) = match java::split(entry, ':')[..] {
                [name, count, ..] => (name, count),
                _ => return Err(malformed(OrderConfDefect::NotAPair(entry.to_string()))),
            };
            if name.is_empty() {
                return Err(malformed(OrderConfDefect::EmptyBrokerName(
                    entry.to_string(),
                )));
            }
            let count: i32 = match count.parse() {
                Ok(n) if n >= 0 => n,
                _ => {
                    return Err(malformed(OrderConfDefect::BadQueueCount(entry.to_string())));
                }
            };
            if !seen.insert(name) {
                return Err(malformed(OrderConfDefect::DuplicateBroker(
                    name.to_string(),
                )));
            }
            if count > 0 {
                entries.push((name, count));
            }
        }
        if entries.is_empty() {
            return Err(PublishError::NoWritableQueue);
        }
        let has_master = |name: &str| {
            route
                .broker(name)
                .and_then(BrokerData::master_addr)
                .is_some()
        };
        if !entries.iter().any(|(name, _)| has_master(name)) {
            return Err(PublishError::NoMaster {
                brokers: entries.iter().map(|(n, _)| n.to_string()).collect(),
            });
        }
        // Every listed queue stays, master or not, so that keys keep their queue.
        Self::build(topic, true, &entries)
    }

    fn build(
        topic: Arc<str>,
        ordered: bool,
        brokers: &[(&str, i32)],
    ) -> Result<Self, PublishError> {
        if let Some((broker, count)) = brokers.iter().find(|(_, n)| *n > MAX_QUEUES_PER_BROKER) {
            return Err(PublishError::TooManyBrokerQueues {
                broker: broker.to_string(),
                count: *count,
                max: MAX_QUEUES_PER_BROKER,
            });
        }
        let count: u64 = brokers.iter().map(|(_, n)| *n as u64).sum();
        if count > MAX_PUBLISH_QUEUES as u64 {
            return Err(PublishError::TooManyQueues { count });
        }
        let mut queues = Vec::with_capacity(count as usize);
        let mut broker_of = Vec::with_capacity(count as usize);
        let mut ranges = Vec::with_capacity(brokers.len());
        for (index, (name, n)) in brokers.iter().enumerate() {
            let name: Arc<str> = (*name).into();
            let start = queues.len();
            queues.extend((0..*n).map(|id| MessageQueue::new(topic.clone(), name.clone(), id)));
            broker_of.extend(std::iter::repeat_n(index as u32, *n as usize));
            ranges.push((name, start..queues.len()));
        }
        Ok(Self {
            ordered,
            queues: queues.into(),
            brokers: ranges.into(),
            broker_of: broker_of.into(),
        })
    }

    /// Whether the queues come from the route's `orderTopicConf`.
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }

    /// The publish queues, grouped by broker (never empty).
    pub fn queues(&self) -> &[MessageQueue] {
        &self.queues
    }

    /// The publish queues, shared.
    pub fn shared_queues(&self) -> &Arc<[MessageQueue]> {
        &self.queues
    }

    /// How many publish queues there are (at least one).
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Always false: a topic without publish queues is a [`PublishError`]. Here for clippy's
    /// `len_without_is_empty` and for callers that check anyway.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// How many brokers the queues are on.
    pub fn broker_count(&self) -> usize {
        self.brokers.len()
    }

    /// The name of broker `index` (in queue order).
    pub fn broker_name(&self, index: usize) -> Option<&str> {
        self.brokers.get(index).map(|(name, _)| &**name)
    }

    /// The broker names, in queue order.
    pub fn broker_names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.brokers.iter().map(|(name, _)| &**name)
    }

    /// The index of `broker` among [`broker_names`](Self::broker_names).
    pub fn broker_index(&self, broker: &str) -> Option<usize> {
        self.brokers.iter().position(|(name, _)| &**name == broker)
    }

    /// The index of the broker of queue `queue` (an index into [`queues`](Self::queues)).
    pub fn broker_of(&self, queue: usize) -> Option<usize> {
        self.broker_of.get(queue).map(|b| *b as usize)
    }

    /// The positions of broker `index`'s queues in [`queues`](Self::queues) (empty when there is
    /// no such broker).
    pub fn broker_range(&self, index: usize) -> Range<usize> {
        self.brokers
            .get(index)
            .map_or(0..0, |(_, range)| range.clone())
    }

    /// The queues of broker `index`.
    pub fn broker_queues(&self, index: usize) -> &[MessageQueue] {
        self.brokers
            .get(index)
            .map_or(&[], |(_, range)| &self.queues[range.clone()])
    }
}

impl TopicRoute {
    /// The queues a producer may send to (see [`PublishInfo`]).
    pub fn publish_info(&self, topic: &str) -> Result<PublishInfo, PublishError> {
        PublishInfo::from_route(topic, self)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::QueueData;

    fn qd(name: &str, write: i32, perm: i32) -> QueueData {
        QueueData {
            broker_name: name.into(),
            read_queue_nums: write,
            write_queue_nums: write,
            perm,
            topic_sys_flag: 0,
        }
    }

    fn bd(name: &str, ids: &[i64]) -> BrokerData {
        BrokerData {
            cluster: "c".into(),
            broker_name: name.into(),
            broker_addrs: ids.iter().map(|id| (*id, format!("{name}:{id}"))).collect(),
        }
    }

    fn names(info: &PublishInfo) -> Vec<String> {
        info.queues().iter().map(|q| format!("{q:?}")).collect()
    }

    #[test]
    fn normal_topic_skips_read_only_and_masterless_brokers_in_java_order() {
        let route = TopicRoute {
            queue_datas: vec![
                qd("broker-2", 2, 6),
                qd("broker-10", 1, 2),
                qd("broker-ro", 3, 4),
                qd("broker-slave", 2, 6),
                qd("broker-zero", 0, 6),
            ],
            broker_datas: vec![
                bd("broker-2", &[0, 1]),
                bd("broker-10", &[0]),
                bd("broker-ro", &[0]),
                bd("broker-slave", &[1]),
                bd("broker-zero", &[0]),
            ],
            order_topic_conf: None,
        };
        let info = route.publish_info("T").unwrap();
        assert!(!info.is_ordered());
        assert_eq!(
            names(&info),
            ["T/broker-10/0", "T/broker-2/0", "T/broker-2/1"]
        );
        assert_eq!(
            info.broker_names().collect::<Vec<_>>(),
            ["broker-10", "broker-2"]
        );
        assert_eq!(info.broker_count(), 2);
        assert_eq!(info.broker_of(2), Some(1));
        assert_eq!(info.broker_queues(1).len(), 2);
        assert_eq!(info.broker_range(1), 1..3);
        assert_eq!(info.broker_range(2), 0..0);
        assert_eq!(info.broker_index("broker-2"), Some(1));
        assert_eq!(info.broker_index("broker-slave"), None);
        assert!(info.broker_queues(7).is_empty());
        // An empty orderTopicConf is a normal topic, as in Java.
        let empty_conf = TopicRoute {
            order_topic_conf: Some(String::new()),
            ..route.clone()
        };
        assert_eq!(empty_conf.publish_info("T"), Ok(info));
    }

    #[test]
    fn brokers_are_in_java_string_order_not_byte_order() {
        // U+FF5E sorts after U+1F600 in UTF-16 (0xFF5E > 0xD83D), before it in UTF-8 bytes.
        let (fullwidth, emoji) = ("broker-\u{FF5E}", "broker-\u{1F600}");
        let route = TopicRoute {
            queue_datas: vec![qd(fullwidth, 1, 6), qd(emoji, 1, 6)],
            broker_datas: vec![bd(fullwidth, &[0]), bd(emoji, &[0])],
            order_topic_conf: None,
        };
        let info = route.publish_info("T").unwrap();
        assert_eq!(info.broker_names().collect::<Vec<_>>(), [emoji, fullwidth]);
    }

    #[test]
    fn write_queue_count_is_used_not_read_count() {
        let mut q = qd("a", 2, 6);
        q.write_queue_nums = 5;
        let route = TopicRoute {
            queue_datas: vec![q],
            broker_datas: vec![bd("a", &[0])],
            order_topic_conf: None,
        };
        assert_eq!(route.publish_info("T").unwrap().len(), 5);
    }

    #[test]
    fn nothing_to_send_to_is_a_typed_error() {
        assert_eq!(
            TopicRoute::default().publish_info("T"),
            Err(PublishError::NoWritableQueue)
        );
        let read_only = TopicRoute {
            queue_datas: vec![qd("a", 4, 4)],
            broker_datas: vec![bd("a", &[0])],
            order_topic_conf: None,
        };
        assert_eq!(
            read_only.publish_info("T"),
            Err(PublishError::NoWritableQueue)
        );
        let slaves_only = TopicRoute {
            queue_datas: vec![qd("b", 4, 6), qd("a", 4, 6)],
            broker_datas: vec![bd("a", &[1, 2])],
            order_topic_conf: None,
        };
        assert_eq!(
            slaves_only.publish_info("T"),
            Err(PublishError::NoMaster {
                brokers: vec!["a".into(), "b".into()]
            })
        );
        let err = slaves_only.publish_info("T").unwrap_err();
        assert_eq!(err.to_string(), "no writable broker has a master: a, b");
    }

    #[test]
    fn ordered_topic_lists_the_configured_queues_in_order() {
        let route = TopicRoute {
            queue_datas: vec![qd("a", 8, 6), qd("b", 8, 4)],
            broker_datas: vec![bd("a", &[0]), bd("b", &[1])],
            order_topic_conf: Some("b:2;a:1;c:0;".into()),
        };
        let info = route.publish_info("T").unwrap();
        assert!(info.is_ordered());
        // Permissions and masters do not remove listed queues: keys keep their queue.
        assert_eq!(names(&info), ["T/b/0", "T/b/1", "T/a/0"]);
        assert_eq!(
            format!("{info:?}"),
            r#"PublishInfo { ordered: true, brokers: ["b:2", "a:1"] }"#
        );
    }

    /// As Java reads an entry (`split(":")`, then the first two fields): a trailing `:` or
    /// further fields change nothing (found by review: refused, so a Rust producer could not
    /// send to an ordered topic Java producers use).
    #[test]
    fn order_conf_entries_are_read_as_java_reads_them() {
        let route = TopicRoute {
            queue_datas: vec![qd("a", 8, 6), qd("b", 8, 6)],
            broker_datas: vec![bd("a", &[0]), bd("b", &[1])],
            order_topic_conf: Some("b:2:;a:1:x".into()),
        };
        let info = route.publish_info("T").unwrap();
        assert_eq!(names(&info), ["T/b/0", "T/b/1", "T/a/0"]);
    }

    #[test]
    fn malformed_order_conf_is_a_typed_error() {
        let route = |conf: &str| TopicRoute {
            queue_datas: vec![qd("a", 8, 6)],
            broker_datas: vec![bd("a", &[0])],
            order_topic_conf: Some(conf.into()),
        };
        let defect = |conf: &str| match route(conf).publish_info("T") {
            Err(PublishError::MalformedOrderConf { defect, conf: c }) => {
                assert_eq!(c, conf);
                defect
            }
            other => panic!("{conf}: {other:?}"),
        };
        assert_eq!(defect("a"), OrderConfDefect::NotAPair("a".into()));
        assert_eq!(defect("a:"), OrderConfDefect::NotAPair("a:".into()));
        assert_eq!(defect("a:1;;b:2"), OrderConfDefect::NotAPair("".into()));
        assert_eq!(defect(":4"), OrderConfDefect::EmptyBrokerName(":4".into()));
        assert_eq!(defect("a:x"), OrderConfDefect::BadQueueCount("a:x".into()));
        assert_eq!(
            defect("a:-1"),
            OrderConfDefect::BadQueueCount("a:-1".into())
        );
        assert_eq!(
            defect("a: 1"),
            OrderConfDefect::BadQueueCount("a: 1".into())
        );
        assert_eq!(
            defect("a:1;a:2"),
            OrderConfDefect::DuplicateBroker("a".into())
        );
        assert_eq!(
            route("a:0").publish_info("T"),
            Err(PublishError::NoWritableQueue)
        );
        assert_eq!(
            route(";;").publish_info("T"),
            Err(PublishError::NoWritableQueue)
        );
        assert_eq!(
            route("z:3").publish_info("T"),
            Err(PublishError::NoMaster {
                brokers: vec!["z".into()]
            })
        );
        assert_eq!(
            route("a:1;b:2000000000").publish_info("T"),
            Err(PublishError::TooManyBrokerQueues {
                broker: "b".into(),
                count: 2_000_000_000,
                max: MAX_QUEUES_PER_BROKER,
            })
        );
    }

    #[test]
    fn corrupt_counts_do_not_allocate_the_world() {
        let route = TopicRoute {
            queue_datas: vec![qd("a", 4, 6), qd("b", i32::MAX, 6)],
            broker_datas: vec![bd("a", &[0]), bd("b", &[0])],
            order_topic_conf: None,
        };
        let err = route.publish_info("T").unwrap_err();
        assert_eq!(
            err,
            PublishError::TooManyBrokerQueues {
                broker: "b".into(),
                count: i32::MAX,
                max: MAX_QUEUES_PER_BROKER,
            }
        );
        assert_eq!(
            err.to_string(),
            "broker `b` announces 2147483647 publish queues, more than the 65536 allowed"
        );
        // At the cap each broker is fine, but enough of them still exceed the topic's limit.
        let brokers = MAX_PUBLISH_QUEUES / MAX_QUEUES_PER_BROKER as usize + 1;
        let names: Vec<String> = (0..brokers).map(|i| format!("b{i:02}")).collect();
        let route = TopicRoute {
            queue_datas: names
                .iter()
                .map(|n| qd(n, MAX_QUEUES_PER_BROKER, 6))
                .collect(),
            broker_datas: names.iter().map(|n| bd(n, &[0])).collect(),
            order_topic_conf: None,
        };
        assert_eq!(
            route.publish_info("T"),
            Err(PublishError::TooManyQueues {
                count: brokers as u64 * MAX_QUEUES_PER_BROKER as u64
            })
        );
        // One broker fewer lists exactly the topic's limit, which is allowed.
        let at_limit = TopicRoute {
            queue_datas: route.queue_datas[1..].to_vec(),
            ..route
        };
        assert_eq!(
            at_limit.publish_info("T").map(|i| i.len()),
            Ok(MAX_PUBLISH_QUEUES)
        );
        // One broker at the cap is a good topic.
        let at_cap = TopicRoute {
            queue_datas: vec![qd("a", MAX_QUEUES_PER_BROKER, 6)],
            broker_datas: vec![bd("a", &[0])],
            order_topic_conf: None,
        };
        assert_eq!(
            at_cap.publish_info("T").map(|i| i.len()),
            Ok(MAX_QUEUES_PER_BROKER as usize)
        );
    }

    /// A broker of a generated route: name, write queues, perm, has a master, has broker data.
    fn broker_strategy() -> impl Strategy<Value = (String, i32, i32, bool, bool)> {
        (
            "[a-c😀ｚ]{1,3}",
            -1..5i32,
            0..8i32,
            any::<bool>(),
            prop::bool::weighted(0.9),
        )
    }

    #[test]
    fn a_broker_listed_twice_publishes_once_with_its_first_entry() {
        // An unvalidated route listing a broker twice: the first entry counts, and the broker
        // is one broker (so a retry skips all of its queues).
        let route = TopicRoute {
            queue_datas: vec![qd("a", 2, 6), qd("b", 1, 6), qd("a", 5, 6)],
            broker_datas: vec![bd("a", &[0]), bd("b", &[0])],
            order_topic_conf: None,
        };
        let info = route.publish_info("T").unwrap();
        assert_eq!(names(&info), ["T/a/0", "T/a/1", "T/b/0"]);
        assert_eq!(info.broker_names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(info.broker_range(0), 0..2);
    }

    proptest! {
        #[test]
        fn normal_publish_info_matches_the_definition(
            brokers in prop::collection::vec(broker_strategy(), 0..8)
        ) {
            // One entry per name (a validated route), the first generated wins.
            let mut unique = BTreeMap::new();
            for b in brokers {
                unique.entry(b.0.clone()).or_insert(b);
            }
            let brokers: Vec<_> = unique.into_values().collect();
            let route = TopicRoute {
                queue_datas: brokers.iter().map(|(n, w, p, _, _)| qd(n, *w, *p)).collect(),
                broker_datas: brokers
                    .iter()
                    .filter(|b| b.4)
                    .map(|(n, _, _, master, _)| bd(n, if *master { &[0, 1] } else { &[1] }))
                    .collect(),
                order_topic_conf: None,
            };
            let eligible = |(_, w, p, master, data): &&(String, i32, i32, bool, bool)| {
                p & perm::WRITE != 0 && *w > 0 && *master && *data
            };
            let mut expected: Vec<MessageQueue> = brokers
                .iter()
                .filter(eligible)
                .flat_map(|(n, w, ..)| (0..*w).map(move |id| MessageQueue::new("T", n.as_str(), id)))
                .collect();
            expected.sort();
            match route.publish_info("T") {
                Ok(info) => {
                    prop_assert_eq!(info.queues(), &expected[..]);
                    for (i, q) in info.queues().iter().enumerate() {
                        let b = info.broker_of(i).unwrap();
                        prop_assert_eq!(info.broker_name(b), Some(&*q.broker_name));
                        prop_assert!(info.broker_queues(b).contains(q));
                    }
                }
                Err(PublishError::NoWritableQueue) => {
                    prop_assert!(brokers.iter().all(|(_, w, p, ..)| p & perm::WRITE == 0 || *w <= 0));
                }
                Err(PublishError::NoMaster { brokers: named }) => {
                    prop_assert!(expected.is_empty());
                    prop_assert!(!named.is_empty());
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }

        #[test]
        fn order_conf_round_trips(entries in prop::collection::btree_map("[a-d]{1,4}", 1..6i32, 1..5)) {
            let entries: Vec<(String, i32)> = entries.into_iter().rev().collect();
            let conf: Vec<String> = entries.iter().map(|(n, c)| format!("{n}:{c}")).collect();
            let route = TopicRoute {
                broker_datas: entries.iter().map(|(n, _)| bd(n, &[0])).collect(),
                order_topic_conf: Some(conf.join(";")),
                ..Default::default()
            };
            let info = route.publish_info("T").unwrap();
            let expected: Vec<MessageQueue> = entries
                .iter()
                .flat_map(|(n, c)| (0..*c).map(move |id| MessageQueue::new("T", n.as_str(), id)))
                .collect();
            prop_assert_eq!(info.queues(), &expected[..]);
        }

        #[test]
        fn any_order_conf_is_an_answer_not_a_panic(conf in ".{0,40}") {
            let route = TopicRoute {
                queue_datas: vec![qd("a", 2, 6)],
                broker_datas: vec![bd("a", &[0])],
                order_topic_conf: Some(conf),
            };
            if let Ok(info) = route.publish_info("T") {
                prop_assert!(!info.is_empty());
            }
        }
    }
}
