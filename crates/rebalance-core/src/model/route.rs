//! The route of a topic, as a name server describes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::MessageQueue;
use crate::java;

/// Permission bits of a topic's queues on a broker (`PermName` in the Java client).
pub mod perm {
    /// Consumers may read.
    pub const READ: i32 = 4;
    /// Producers may write.
    pub const WRITE: i32 = 2;
    /// Inherited by auto-created topics.
    pub const INHERIT: i32 = 1;

    /// Whether `perm` lets consumers read.
    pub fn is_readable(perm: i32) -> bool {
        perm & READ == READ
    }

    /// Whether `perm` lets producers write.
    pub fn is_writeable(perm: i32) -> bool {
        perm & WRITE == WRITE
    }
}

/// The broker id of a master in [`BrokerData::broker_addrs`].
pub const MASTER_ID: i64 = 0;

/// The most read or write queues one broker may serve a topic with.
///
/// Real topics have from a handful to a few hundred queues per broker. A route announcing more
/// carries a corrupt count (the counts come from the network), and trusting it would build that
/// many queues in memory: [`TopicRoute::validate`] rejects it with
/// [`RouteDefect::TooManyQueues`], [`TopicRoute::subscribable_queues`] never builds more than
/// this many per broker, and publish queues are held to the same limit.
pub const MAX_QUEUES_PER_BROKER: i32 = 65_536;

/// The most queues consumers may subscribe to in one topic, all brokers together.
///
/// [`MAX_QUEUES_PER_BROKER`] alone does not bound a route: a name server answer of a few
/// megabytes can list thousands of brokers at that cap, billions of queues.
/// [`TopicRoute::validate`] rejects a route whose readable brokers announce more than this many
/// read queues in all ([`RouteDefect::TooManySubscribableQueues`]), and
/// [`TopicRoute::subscribable_queues`] never builds more. The same limit as the publish side's
/// [`MAX_PUBLISH_QUEUES`](crate::model::publish::MAX_PUBLISH_QUEUES).
pub const MAX_SUBSCRIBABLE_QUEUES: usize = 1 << 20;

/// How one broker (a master and its slaves, under one broker name) serves a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueData {
    /// The broker name.
    pub broker_name: String,
    /// How many queues consumers read (ids `0..read_queue_nums`).
    #[serde(default)]
    pub read_queue_nums: i32,
    /// How many queues producers write (ids `0..write_queue_nums`).
    #[serde(default)]
    pub write_queue_nums: i32,
    /// Permission bits, see [`perm`].
    #[serde(default)]
    pub perm: i32,
    /// Topic system flags (unused by allocation).
    #[serde(default)]
    pub topic_sys_flag: i32,
}

/// Where a broker name's machines are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    /// The cluster the broker belongs to.
    #[serde(default)]
    pub cluster: String,
    /// The broker name.
    pub broker_name: String,
    /// Addresses by broker id; id [`MASTER_ID`] is the master.
    #[serde(default)]
    pub broker_addrs: BTreeMap<i64, String>,
}

impl BrokerData {
    /// The master's address, if the broker has a master.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&MASTER_ID).map(String::as_str)
    }

    /// The master's address, or else the address of the lowest-numbered slave.
    pub fn any_addr(&self) -> Option<&str> {
        self.master_addr()
            .or_else(|| self.broker_addrs.values().next().map(String::as_str))
    }
}

/// A topic's route: which brokers serve it, with how many queues and which permissions.
///
/// ```
/// use rebalance_core::{TopicRoute, QueueData, BrokerData};
///
/// let route = TopicRoute {
///     queue_datas: vec![QueueData { broker_name: "broker-a".into(), read_queue_nums: 2,
///                                   write_queue_nums: 2, perm: 6, topic_sys_flag: 0 }],
///     broker_datas: vec![BrokerData { cluster: "c".into(), broker_name: "broker-a".into(),
///                                     broker_addrs: [(0, "127.0.0.1:10911".to_string())].into() }],
///     order_topic_conf: None,
/// };
/// let queues = route.subscribable_queues("T");
/// assert_eq!(queues.len(), 2);
/// assert_eq!(queues[1].queue_id, 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRoute {
    /// One entry per broker name serving the topic.
    #[serde(default)]
    pub queue_datas: Vec<QueueData>,
    /// The brokers' addresses.
    #[serde(default)]
    pub broker_datas: Vec<BrokerData>,
    /// For ordered topics: `brokerName:queueNums;brokerName:queueNums`.
    #[serde(default)]
    pub order_topic_conf: Option<String>,
}

impl TopicRoute {
    /// The queues consumers may subscribe to, as the Java client computes them: ids
    /// `0..read_queue_nums` of every readable queue data, sorted the Java way, without
    /// duplicates. No master is required (consumers may read from slaves).
    ///
    /// A count above [`MAX_QUEUES_PER_BROKER`] (a route that fails [`validate`](Self::validate))
    /// gives only that many queues, and no route gives more than [`MAX_SUBSCRIBABLE_QUEUES`] in
    /// all: memory stays bounded whatever the route says.
    pub fn subscribable_queues(&self, topic: &str) -> Vec<MessageQueue> {
        let topic: Arc<str> = topic.into();
        // The brokers in the queues' order before the cap: which queues a capped route keeps
        // must not depend on the order the name server lists its brokers in (found by review:
        // two name servers listing one route in two orders gave two lists).
        let mut readable: Vec<&QueueData> = self
            .queue_datas
            .iter()
            .filter(|q| perm::is_readable(q.perm))
            .collect();
        readable.sort_by(|a, b| java::compare_str(&a.broker_name, &b.broker_name));
        let mut queues: Vec<MessageQueue> = readable
            .into_iter()
            .flat_map(|q| {
                let broker: Arc<str> = q.broker_name.as_str().into();
                let topic = topic.clone();
                (0..q.read_queue_nums.clamp(0, MAX_QUEUES_PER_BROKER))
                    .map(move |id| MessageQueue::new(topic.clone(), broker.clone(), id))
            })
            .take(MAX_SUBSCRIBABLE_QUEUES)
            .collect();
        queues.sort();
        queues.dedup();
        queues
    }

    /// The broker data of a broker name.
    pub fn broker(&self, broker_name: &str) -> Option<&BrokerData> {
        self.broker_datas
            .iter()
            .find(|b| b.broker_name == broker_name)
    }

    /// The same route with its lists in a canonical order, so that two answers listing the same
    /// brokers in a different order compare equal.
    pub fn normalized(&self) -> TopicRoute {
        let mut route = self.clone();
        route.queue_datas.sort_by(|a, b| {
            java::compare_str(&a.broker_name, &b.broker_name).then_with(|| a.perm.cmp(&b.perm))
        });
        route.broker_datas.sort_by(|a, b| {
            java::compare_str(&a.broker_name, &b.broker_name)
                .then_with(|| a.cluster.cmp(&b.cluster))
        });
        route
    }

    /// Checks that the route makes sense: named brokers, no negative queue count, no count above
    /// [`MAX_QUEUES_PER_BROKER`], no broker listed twice, broker data for every readable broker,
    /// and no more than [`MAX_SUBSCRIBABLE_QUEUES`] read queues on the readable brokers in all. A route that fails this is garbage to be ignored (keep the last good one), not an
    /// empty topic.
    ///
    /// ```
    /// use rebalance_core::route::{MAX_QUEUES_PER_BROKER, RouteDefect};
    /// use rebalance_core::{QueueData, TopicRoute};
    ///
    /// let route = TopicRoute {
    ///     queue_datas: vec![QueueData { broker_name: "broker-a".into(), read_queue_nums: 4,
    ///                                   write_queue_nums: i32::MAX, perm: 2, topic_sys_flag: 0 }],
    ///     ..Default::default()
    /// };
    /// let defect = route.validate().unwrap_err();
    /// assert_eq!(defect, RouteDefect::TooManyQueues {
    ///     broker: "broker-a".into(), count: i32::MAX, max: MAX_QUEUES_PER_BROKER,
    /// });
    /// assert_eq!(defect.to_string(),
    ///            "broker `broker-a` announces 2147483647 queues, more than the 65536 allowed");
    /// ```
    pub fn validate(&self) -> Result<(), RouteDefect> {
        let mut seen = std::collections::HashSet::new();
        // Each count is at most MAX_QUEUES_PER_BROKER once checked, and the brokers are bounded
        // by the answer's size: a u64 cannot overflow.
        let mut subscribable: u64 = 0;
        // A set, not `self.broker()` per queue data: that scan is quadratic in the brokers.
        let described: std::collections::HashSet<&str> = self
            .broker_datas
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        for q in &self.queue_datas {
            if q.broker_name.is_empty() {
                return Err(RouteDefect::EmptyBrokerName);
            }
            if !seen.insert(q.broker_name.as_str()) {
                return Err(RouteDefect::DuplicateBroker(q.broker_name.clone()));
            }
            if q.read_queue_nums < 0 || q.write_queue_nums < 0 {
                return Err(RouteDefect::NegativeQueueCount(q.broker_name.clone()));
            }
            let count = q.read_queue_nums.max(q.write_queue_nums);
            if count > MAX_QUEUES_PER_BROKER {
                return Err(RouteDefect::TooManyQueues {
                    broker: q.broker_name.clone(),
                    count,
                    max: MAX_QUEUES_PER_BROKER,
                });
            }
            if perm::is_readable(q.perm)
                && q.read_queue_nums > 0
                && !described.contains(q.broker_name.as_str())
            {
                return Err(RouteDefect::MissingBrokerData(q.broker_name.clone()));
            }
            if perm::is_readable(q.perm) {
                subscribable += q.read_queue_nums as u64;
            }
        }
        if subscribable > MAX_SUBSCRIBABLE_QUEUES as u64 {
            return Err(RouteDefect::TooManySubscribableQueues {
                count: subscribable,
                max: MAX_SUBSCRIBABLE_QUEUES,
            });
        }
        Ok(())
    }

    /// Whether two routes describe the same thing, whatever the order of their lists.
    pub fn same_as(&self, other: &TopicRoute) -> bool {
        self.normalized() == other.normalized()
    }
}

/// Why a route cannot be trusted (see [`TopicRoute::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteDefect {
    /// A queue data has an empty broker name.
    #[error("a queue data has an empty broker name")]
    EmptyBrokerName,
    /// A broker is listed twice.
    #[error("broker `{0}` is listed twice")]
    DuplicateBroker(String),
    /// A broker has a negative queue count.
    #[error("broker `{0}` has a negative queue count")]
    NegativeQueueCount(String),
    /// A broker announces more read or write queues than [`MAX_QUEUES_PER_BROKER`].
    #[error("broker `{broker}` announces {count} queues, more than the {max} allowed")]
    TooManyQueues {
        /// The broker name.
        broker: String,
        /// The larger of its read and write queue counts.
        count: i32,
        /// The limit, [`MAX_QUEUES_PER_BROKER`].
        max: i32,
    },
    /// A readable broker has no address.
    #[error("readable broker `{0}` has no broker data")]
    MissingBrokerData(String),
    /// The readable brokers announce more than [`MAX_SUBSCRIBABLE_QUEUES`] read queues in all.
    #[error(
        "the route's readable brokers announce {count} queues in all, more than the {max} a \
         topic may have (a corrupt queue count, or a topic to split)"
    )]
    TooManySubscribableQueues {
        /// The sum of the readable brokers' read queue counts.
        count: u64,
        /// The limit, [`MAX_SUBSCRIBABLE_QUEUES`].
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subscribable queues of topic T, as `T/broker/id`.
    fn subscribable(route: &TopicRoute) -> Vec<String> {
        route
            .subscribable_queues("T")
            .iter()
            .map(|q| format!("{q:?}"))
            .collect()
    }

    fn qd(name: &str, read: i32, perm: i32) -> QueueData {
        QueueData {
            broker_name: name.into(),
            read_queue_nums: read,
            write_queue_nums: read,
            perm,
            topic_sys_flag: 0,
        }
    }

    /// A route over the cap keeps the same queues whatever order its brokers are listed in
    /// (found by review: truncated in the name server's order, then sorted, two name servers
    /// listing one route differently gave two lists, and the group split the topic two ways).
    #[test]
    fn a_capped_route_keeps_the_same_queues_in_any_broker_order() {
        let brokers: Vec<QueueData> = (0..17)
            .map(|i| qd(&format!("b{i:02}"), MAX_QUEUES_PER_BROKER, 6))
            .collect();
        let forward = TopicRoute {
            queue_datas: brokers.clone(),
            ..Default::default()
        };
        let backward = TopicRoute {
            queue_datas: brokers.into_iter().rev().collect(),
            ..Default::default()
        };
        let queues = forward.subscribable_queues("T");
        assert_eq!(queues.len(), MAX_SUBSCRIBABLE_QUEUES);
        assert_eq!(queues[0], MessageQueue::new("T", "b00", 0));
        assert!(queues == backward.subscribable_queues("T"), "the same list");
    }

    #[test]
    fn subscribable_skips_unreadable_and_sorts() {
        let route = TopicRoute {
            queue_datas: vec![
                qd("broker-2", 2, 6),
                qd("broker-10", 1, 4),
                qd("broker-w", 3, 2),
            ],
            ..Default::default()
        };
        let got = subscribable(&route);
        assert_eq!(got, ["T/broker-10/0", "T/broker-2/0", "T/broker-2/1"]);
    }

    #[test]
    fn consumers_read_the_read_queue_count_not_the_write_count() {
        // A broker being scaled down writes to 2 queues while consumers still drain 4 (and the
        // other way round while scaling up): subscribing follows readQueueNums.
        let mut draining = qd("broker-a", 4, 6);
        draining.write_queue_nums = 2;
        let mut growing = qd("broker-b", 1, 6);
        growing.write_queue_nums = 3;
        let route = TopicRoute {
            queue_datas: vec![draining, growing],
            ..Default::default()
        };
        let ids: Vec<(String, i32)> = route
            .subscribable_queues("T")
            .iter()
            .map(|q| (q.broker_name.to_string(), q.queue_id))
            .collect();
        assert_eq!(
            ids,
            [
                ("broker-a".to_string(), 0),
                ("broker-a".to_string(), 1),
                ("broker-a".to_string(), 2),
                ("broker-a".to_string(), 3),
                ("broker-b".to_string(), 0),
            ]
        );
    }

    #[test]
    fn validation_finds_garbage() {
        let bd = |name: &str| BrokerData {
            cluster: "c".into(),
            broker_name: name.into(),
            broker_addrs: [(0, "a:1".to_string())].into(),
        };
        let good = TopicRoute {
            queue_datas: vec![qd("a", 2, 6)],
            broker_datas: vec![bd("a")],
            order_topic_conf: None,
        };
        assert_eq!(good.validate(), Ok(()));
        let mut bad = good.clone();
        bad.broker_datas.clear();
        assert_eq!(
            bad.validate(),
            Err(RouteDefect::MissingBrokerData("a".into()))
        );
        let mut bad = good.clone();
        bad.queue_datas[0].read_queue_nums = -1;
        assert!(matches!(
            bad.validate(),
            Err(RouteDefect::NegativeQueueCount(_))
        ));
        let mut bad = good.clone();
        bad.queue_datas.push(qd("a", 1, 6));
        assert!(matches!(
            bad.validate(),
            Err(RouteDefect::DuplicateBroker(_))
        ));
        assert_eq!(TopicRoute::default().validate(), Ok(()));
    }

    #[test]
    fn validation_boundaries() {
        let route = |read: i32, write: i32| TopicRoute {
            queue_datas: vec![QueueData {
                write_queue_nums: write,
                ..qd("a", read, 6)
            }],
            ..Default::default()
        };
        // No queue at all is a count, not garbage; a readable broker without queues to read
        // needs no broker data.
        assert_eq!(route(0, 0).validate(), Ok(()));
        let negative = Err(RouteDefect::NegativeQueueCount("a".into()));
        assert_eq!(route(0, -1).validate(), negative);
        assert_eq!(route(-1, 0).validate(), negative);
        // One queue to read does need it.
        assert_eq!(
            route(1, 0).validate(),
            Err(RouteDefect::MissingBrokerData("a".into()))
        );
    }

    #[test]
    fn queue_counts_above_the_cap_are_garbage() {
        let bd = BrokerData {
            cluster: "c".into(),
            broker_name: "a".into(),
            broker_addrs: [(0, "a:1".to_string())].into(),
        };
        let route = |read: i32, write: i32| TopicRoute {
            queue_datas: vec![QueueData {
                write_queue_nums: write,
                ..qd("a", read, 6)
            }],
            broker_datas: vec![bd.clone()],
            order_topic_conf: None,
        };
        let cap = MAX_QUEUES_PER_BROKER;
        assert_eq!(route(cap, cap).validate(), Ok(()), "the cap itself is fine");
        let too_many = |count| {
            Err(RouteDefect::TooManyQueues {
                broker: "a".into(),
                count,
                max: cap,
            })
        };
        assert_eq!(route(cap + 1, 8).validate(), too_many(cap + 1));
        assert_eq!(route(8, cap + 1).validate(), too_many(cap + 1));
        assert_eq!(route(i32::MAX, 8).validate(), too_many(i32::MAX));
        // Unvalidated, the route still builds no more than the cap.
        assert_eq!(
            route(i32::MAX, 8).subscribable_queues("T").len(),
            cap as usize
        );
    }

    #[test]
    fn a_total_above_the_topic_limit_is_garbage() {
        // Every broker at its own cap: each passes, their sum does not.
        let brokers = MAX_SUBSCRIBABLE_QUEUES / MAX_QUEUES_PER_BROKER as usize;
        let route = |brokers: usize, perm: i32| {
            let names: Vec<String> = (0..brokers).map(|i| format!("b{i:04}")).collect();
            TopicRoute {
                queue_datas: names
                    .iter()
                    .map(|n| qd(n, MAX_QUEUES_PER_BROKER, perm))
                    .collect(),
                broker_datas: names
                    .iter()
                    .map(|n| BrokerData {
                        cluster: "c".into(),
                        broker_name: n.clone(),
                        broker_addrs: [(0, "a:1".to_string())].into(),
                    })
                    .collect(),
                order_topic_conf: None,
            }
        };
        assert_eq!(
            route(brokers, 6).validate(),
            Ok(()),
            "the limit itself is fine"
        );
        let over = route(brokers + 1, 6);
        let defect = over.validate().unwrap_err();
        assert_eq!(
            defect,
            RouteDefect::TooManySubscribableQueues {
                count: (brokers as u64 + 1) * MAX_QUEUES_PER_BROKER as u64,
                max: MAX_SUBSCRIBABLE_QUEUES,
            }
        );
        assert_eq!(
            defect.to_string(),
            "the route's readable brokers announce 1114112 queues in all, more than the 1048576 \
             a topic may have (a corrupt queue count, or a topic to split)"
        );
        // The review's case: a thousand brokers at the cap, 65.5 million queues.
        assert!(matches!(
            route(1000, 4).validate(),
            Err(RouteDefect::TooManySubscribableQueues {
                count: 65_536_000,
                ..
            })
        ));
        // Write-only brokers give no queue to subscribe to and count for nothing here.
        assert_eq!(route(brokers + 1, 2).validate(), Ok(()));
        // Unvalidated, the route still builds no more than the limit.
        assert_eq!(over.subscribable_queues("T").len(), MAX_SUBSCRIBABLE_QUEUES);
    }

    #[test]
    fn negative_counts_give_nothing() {
        let route = TopicRoute {
            queue_datas: vec![qd("b", -4, 6)],
            ..Default::default()
        };
        assert!(route.subscribable_queues("T").is_empty());
    }

    #[test]
    fn any_addr_is_the_master_or_else_the_lowest_slave() {
        let broker = |addrs: &[(i64, &str)]| BrokerData {
            cluster: "c".into(),
            broker_name: "a".into(),
            broker_addrs: addrs.iter().map(|&(id, a)| (id, a.to_string())).collect(),
        };
        let with_master = broker(&[(2, "s2:1"), (0, "m:1"), (1, "s1:1")]);
        assert_eq!(with_master.master_addr(), Some("m:1"));
        assert_eq!(with_master.any_addr(), Some("m:1"));
        let slaves_only = broker(&[(3, "s3:1"), (1, "s1:1")]);
        assert_eq!(slaves_only.master_addr(), None);
        assert_eq!(slaves_only.any_addr(), Some("s1:1"));
        assert_eq!(broker(&[]).any_addr(), None);
    }

    #[test]
    fn comparison_ignores_list_order() {
        let a = TopicRoute {
            queue_datas: vec![qd("a", 1, 6), qd("b", 2, 6)],
            ..Default::default()
        };
        let mut b = a.clone();
        b.queue_datas.reverse();
        assert!(a.same_as(&b));
        b.queue_datas[0].read_queue_nums = 3;
        assert!(!a.same_as(&b));
    }

    #[test]
    fn parses_standard_route_json() {
        let json = r#"{"orderTopicConf":null,
          "queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],
          "brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"127.0.0.1:10911"},
                          "zoneName":null,"enableActingMaster":false}],
          "filterServerTable":{},"topicQueueMappingInfo":null}"#;
        let route: TopicRoute = serde_json::from_str(json).unwrap();
        assert_eq!(
            route.broker("broker-a").and_then(BrokerData::master_addr),
            Some("127.0.0.1:10911")
        );
        assert_eq!(route.subscribable_queues("T").len(), 4);
    }

    #[test]
    fn each_perm_bit_is_tested_on_its_own() {
        // Java's PermName also has PERM_PRIORITY (8): with it, a perm above READ need not
        // carry the READ bit.
        const PRIORITY: i32 = 8;
        let cases = [
            (0, false, false),
            (perm::INHERIT, false, false),
            (perm::WRITE, false, true),
            (perm::READ, true, false),
            (perm::READ | perm::WRITE | perm::INHERIT, true, true),
            (PRIORITY, false, false),
            (PRIORITY | perm::WRITE, false, true),
            (PRIORITY | perm::READ, true, false),
        ];
        for (p, read, write) in cases {
            assert_eq!(perm::is_readable(p), read, "readable {p}");
            assert_eq!(perm::is_writeable(p), write, "writeable {p}");
        }
        let route = TopicRoute {
            queue_datas: vec![qd("prio-w", 2, PRIORITY | perm::WRITE), qd("prio-r", 1, 12)],
            ..Default::default()
        };
        let got = subscribable(&route);
        assert_eq!(got, ["T/prio-r/0"]);
    }

    #[test]
    fn a_broker_listed_twice_gives_each_queue_once() {
        // An unvalidated route listing a broker twice: the queues are a set, as in Java.
        let route = TopicRoute {
            queue_datas: vec![qd("a", 2, 6), qd("b", 1, 6), qd("a", 3, 4)],
            ..Default::default()
        };
        let got = subscribable(&route);
        assert_eq!(got, ["T/a/0", "T/a/1", "T/a/2", "T/b/0"]);
    }
}
