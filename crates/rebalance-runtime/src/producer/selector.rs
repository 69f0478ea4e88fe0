//! Round-robin queue selection for unordered messages: skip the broker that just failed, avoid
//! slow brokers.

use std::sync::atomic::{AtomicUsize, Ordering};

use rebalance_core::{MessageQueue, PublishInfo};
use tokio::time::Instant;

use super::faults::LatencyFaultTracker;

/// How a queue was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    /// The next queue in turn (after skipping the failed or avoided brokers' queues, if any).
    InTurn,
    /// Every other broker was avoided: a queue of one of the least bad ones (the better half
    /// of them, in turn).
    LeastBad,
}

/// Round robin over a topic's publish queues with one lock-free counter.
///
/// - Every call takes the next queue in turn; over a cycle of `n` calls every queue is chosen
///   once, whatever the number of threads calling.
/// - On a retry (`last_failed` names a broker), the queues of that broker are skipped when the
///   topic has another broker that is not avoided.
/// - With a [`LatencyFaultTracker`], queues of avoided brokers are skipped too. The positions
///   skipped are consumed, so the queues still in use share the load equally (the Java client
///   scans on from one index, which doubles the load of the queue after an avoided broker).
///   When every broker (but the failed one) is avoided, the least bad half of them take turns
///   (at least the least bad one; as the Java client's `pickOneAtLeast`), each in turn among
///   its queues, so that no single broker takes all the traffic.
///
/// ```
/// use rebalance_core::{MessageQueue, TopicRoute};
/// use rebalance_runtime::memory::route_of;
/// use rebalance_runtime::producer::RoundRobin;
///
/// let route = route_of(&["broker-a".into(), "broker-b".into()], 2);
/// let info = route.publish_info("T").unwrap();
/// let rr = RoundRobin::default();
/// let picks: Vec<String> = (0..4).map(|_| format!("{:?}", rr.select(&info, None, None).0)).collect();
/// assert_eq!(picks, ["T/broker-a/0", "T/broker-a/1", "T/broker-b/0", "T/broker-b/1"]);
/// // A retry after broker-a failed goes to broker-b.
/// assert_eq!(&*rr.select(&info, Some("broker-a"), None).0.broker_name, "broker-b");
/// ```
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl RoundRobin {
    /// A counter starting at `start` (the Java client starts at a random position).
    pub fn starting_at(start: usize) -> Self {
        Self {
            next: AtomicUsize::new(start),
        }
    }

    /// The next queue of `info` for a message (see the type's documentation).
    pub fn select(
        &self,
        info: &PublishInfo,
        last_failed: Option<&str>,
        faults: Option<&LatencyFaultTracker>,
    ) -> (MessageQueue, ChosenBy) {
        let queues = info.queues();
        let n = queues.len();
        // A skipped broker only when another one exists.
        let skip = match last_failed {
            Some(broker) if info.broker_count() > 1 => info.broker_index(broker),
            _ => None,
        };
        let faults = faults.filter(|f| f.any_avoided());
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        if skip.is_none() && faults.is_none() {
            return (queues[start % n].clone(), ChosenBy::InTurn);
        }
        let now = Instant::now();
        if let Some(f) = faults {
            f.sweep_if_due(now);
        }
        let mut memo = Memo::default();
        let first = start % n;
        let mut k = 0;
        while k < n {
            let i = if first + k >= n {
                first + k - n
            } else {
                first + k
            };
            let broker = info.broker_of(i).unwrap_or(0);
            let usable = Some(broker) != skip
                && faults.is_none_or(|f| {
                    let name = info.broker_name(broker).unwrap_or_default();
                    memo.check(broker, || f.is_available(name, now))
                });
            if !usable {
                // A broker's queues are contiguous: jump past the rest of them at once.
                k += info.broker_range(broker).end.saturating_sub(i).max(1);
                continue;
            }
            if k > 0 {
                // Consume the positions skipped, so the next call goes on after this queue.
                self.next.fetch_add(k, Ordering::Relaxed);
            }
            return (queues[i].clone(), ChosenBy::InTurn);
        }
        // Only the skipped broker or avoided brokers are left. The failed broker is skipped only
        // for another one that is available: when it is the one available, it takes the message.
        if let (Some(b), Some(f)) = (skip, faults) {
            let name = info.broker_name(b).unwrap_or_default();
            let own = info.broker_queues(b);
            if !own.is_empty() && memo.check(b, || f.is_available(name, now)) {
                return (own[start % own.len()].clone(), ChosenBy::InTurn);
            }
        }
        // The least bad of the others.
        let candidates = info
            .broker_names()
            .enumerate()
            .filter(|(b, _)| Some(*b) != skip)
            .map(|(_, name)| name);
        // In turn among the better half of them (Java's `pickOneAtLeast`): the broker from the
        // counter, the queue within it from the counter's turns over that half.
        let half = faults.map_or_else(Vec::new, |f| f.better_half(candidates, now));
        let (chosen, turn) = match half.len() {
            0 => (0, start),
            h => (info.broker_index(half[start % h]).unwrap_or(0), start / h),
        };
        let own = info.broker_queues(chosen);
        let queue = match own.len() {
            0 => &queues[start % n],
            len => &own[turn % len],
        };
        tracing::debug!(
            broker = &*queue.broker_name,
            "every other broker is avoided; sending to one of the least bad"
        );
        (queue.clone(), ChosenBy::LeastBad)
    }
}

/// Remembers which brokers were found available during one selection, for the first 64
/// brokers (later ones are looked up each time).
#[derive(Default)]
struct Memo {
    known: u64,
    available: u64,
}

impl Memo {
    fn check(&mut self, broker: usize, lookup: impl FnOnce() -> bool) -> bool {
        if broker >= 64 {
            return lookup();
        }
        let bit = 1u64 << broker;
        if self.known & bit == 0 {
            self.known |= bit;
            if lookup() {
                self.available |= bit;
            }
        }
        self.available & bit != 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use proptest::prelude::*;
    use rebalance_core::TopicRoute;

    use super::*;
    use crate::memory::route_of;

    fn info(brokers: usize, queues: i32) -> PublishInfo {
        let names: Vec<String> = (0..brokers).map(|b| format!("broker-{b}")).collect();
        route_of(&names, queues).publish_info("T").unwrap()
    }

    fn counts(
        rr: &RoundRobin,
        info: &PublishInfo,
        calls: usize,
        last_failed: Option<&str>,
        faults: Option<&LatencyFaultTracker>,
    ) -> BTreeMap<MessageQueue, usize> {
        let mut counts = BTreeMap::new();
        for _ in 0..calls {
            *counts
                .entry(rr.select(info, last_failed, faults).0)
                .or_default() += 1;
        }
        counts
    }

    #[test]
    fn a_retry_skips_the_failed_broker_unless_it_is_the_only_one() {
        let two = info(2, 3);
        let rr = RoundRobin::default();
        for _ in 0..10 {
            assert_eq!(
                &*rr.select(&two, Some("broker-0"), None).0.broker_name,
                "broker-1"
            );
        }
        let one = info(1, 3);
        assert_eq!(
            &*rr.select(&one, Some("broker-0"), None).0.broker_name,
            "broker-0"
        );
        // An unknown failed broker changes nothing.
        let c = counts(&rr, &two, 6, Some("elsewhere"), None);
        assert!(c.values().all(|n| *n == 1), "{c:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn avoided_brokers_are_skipped_and_the_rest_share_equally() {
        let info = info(3, 4);
        let faults = LatencyFaultTracker::default();
        faults.report("broker-1", Duration::from_millis(2000), true);
        let rr = RoundRobin::default();
        let c = counts(&rr, &info, 8 * 10, None, Some(&faults));
        assert_eq!(c.len(), 8, "{c:?}");
        assert!(c.keys().all(|q| &*q.broker_name != "broker-1"));
        assert!(c.values().all(|n| *n == 10), "{c:?}");
        // After 120 s it is back.
        tokio::time::advance(Duration::from_secs(120)).await;
        let c = counts(&rr, &info, 12, None, Some(&faults));
        assert!(c.values().all(|n| *n == 1), "{c:?}");
        assert!(!faults.any_avoided());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_goes_back_to_the_failed_broker_when_it_is_the_one_available() {
        // broker-0 just failed this send, but its fault record says it is available (a fast
        // send of another thread since, say); broker-1 is avoided.
        let two = info(2, 3);
        let faults = LatencyFaultTracker::default();
        faults.report("broker-1", Duration::from_millis(2500), true);
        let rr = RoundRobin::default();
        let c = counts(&rr, &two, 6, Some("broker-0"), Some(&faults));
        assert_eq!(c.len(), 3, "{c:?}");
        assert!(c.keys().all(|q| &*q.broker_name == "broker-0"), "{c:?}");
        assert!(c.values().all(|n| *n == 2), "in turn: {c:?}");
        assert_eq!(
            rr.select(&two, Some("broker-0"), Some(&faults)).1,
            ChosenBy::InTurn
        );
        // Both avoided: the least bad of the others, as before.
        faults.report("broker-0", Duration::from_millis(3000), true);
        let (queue, choice) = rr.select(&two, Some("broker-0"), Some(&faults));
        assert_eq!(
            (&*queue.broker_name, choice),
            ("broker-1", ChosenBy::LeastBad)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_broker_no_route_names_any_more_comes_off_the_avoid_list_on_time() {
        let faults = LatencyFaultTracker::default();
        faults.report("broker-gone", Duration::from_millis(2000), true);
        assert!(faults.any_avoided());
        // Selections only ever look up the brokers of the routes they select over.
        let route = info(2, 2);
        let rr = RoundRobin::default();
        tokio::time::advance(Duration::from_secs(119)).await;
        rr.select(&route, None, Some(&faults));
        assert!(faults.any_avoided(), "not yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        rr.select(&route, None, Some(&faults));
        assert!(
            !faults.any_avoided(),
            "every selection would stay on the slow path: {faults:?}"
        );
        assert!(format!("{faults:?}").contains("avoided: 0"));
    }

    #[tokio::test(start_paused = true)]
    async fn all_avoided_falls_back_to_the_least_bad() {
        let info = info(3, 2);
        let faults = LatencyFaultTracker::default();
        faults.report("broker-0", Duration::from_millis(1), false);
        faults.report("broker-1", Duration::from_millis(3000), true);
        faults.report("broker-2", Duration::from_millis(16_000), true);
        let rr = RoundRobin::default();
        let (q, how) = rr.select(&info, None, Some(&faults));
        assert_eq!((&*q.broker_name, how), ("broker-1", ChosenBy::LeastBad));
        let c = counts(&rr, &info, 4, None, Some(&faults));
        assert_eq!(
            c.len(),
            2,
            "turns among the least bad broker's queues: {c:?}"
        );
        // A retry after broker-1 failed: the least bad of the others.
        let (q, _) = rr.select(&info, Some("broker-1"), Some(&faults));
        assert_eq!(&*q.broker_name, "broker-2");
    }

    #[tokio::test(start_paused = true)]
    async fn all_avoided_the_better_half_take_turns_over_all_their_queues() {
        let info = info(5, 2);
        let faults = LatencyFaultTracker::default();
        for (broker, latency) in [(0, 16_000), (1, 600), (2, 3000), (3, 1000), (4, 2000)] {
            faults.report(
                &format!("broker-{broker}"),
                Duration::from_millis(latency),
                true,
            );
        }
        let rr = RoundRobin::default();
        let c = counts(&rr, &info, 40, None, Some(&faults));
        // The two least bad of five (600 ms and 1 s), each of their queues equally.
        let expected: BTreeMap<MessageQueue, usize> = [(1, 0), (1, 1), (3, 0), (3, 1)]
            .into_iter()
            .map(|(b, q)| (MessageQueue::new("T", format!("broker-{b}"), q), 10))
            .collect();
        assert_eq!(c, expected);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_64th_broker_avoided_brokers_are_still_skipped() {
        // The per-selection memo covers the first 64 brokers; later ones are looked up.
        let info = info(70, 2);
        let faults = LatencyFaultTracker::default();
        let avoided = [
            "broker-3",
            "broker-63",
            "broker-64",
            "broker-66",
            "broker-69",
        ];
        for b in avoided {
            faults.report(b, Duration::from_secs(1), true);
        }
        // Start among the late brokers, so the scan wraps around past all of them.
        let rr = RoundRobin::starting_at(131);
        let usable = (70 - avoided.len()) * 2;
        let c = counts(&rr, &info, usable * 2, None, Some(&faults));
        assert_eq!(c.len(), usable, "{c:?}");
        assert!(c.values().all(|n| *n == 2), "{c:?}");
        for b in avoided {
            assert!(c.keys().all(|q| &*q.broker_name != b), "{b}");
        }
        // A retry after broker-65 failed skips it as well as the avoided brokers around it.
        let rr = RoundRobin::starting_at(128);
        let (q, how) = rr.select(&info, Some("broker-65"), Some(&faults));
        assert_eq!(
            (&*q.broker_name, q.queue_id, how),
            ("broker-67", 0, ChosenBy::InTurn)
        );
        // Once their time is up, every broker is back in turn.
        tokio::time::advance(Duration::from_secs(60)).await;
        let c = counts(&rr, &info, 140, None, Some(&faults));
        assert!(c.len() == 140 && c.values().all(|n| *n == 1), "{c:?}");
    }

    #[test]
    fn many_threads_share_one_cycle_exactly() {
        let info = info(4, 8);
        let rr = RoundRobin::default();
        let all: Vec<BTreeMap<MessageQueue, usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| counts(&rr, &info, 32 * 25, None, None)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut total: BTreeMap<MessageQueue, usize> = BTreeMap::new();
        for c in all {
            for (q, n) in c {
                *total.entry(q).or_default() += n;
            }
        }
        assert_eq!(total.len(), 32);
        assert!(total.values().all(|n| *n == 100), "{total:?}");
    }

    #[test]
    fn ordered_topics_go_round_robin_over_the_configured_queues() {
        let mut route: TopicRoute = route_of(&["a".into(), "b".into()], 4);
        route.order_topic_conf = Some("b:1;a:2".into());
        let info = route.publish_info("T").unwrap();
        let rr = RoundRobin::default();
        let picks: Vec<String> = (0..3)
            .map(|_| format!("{:?}", rr.select(&info, None, None).0))
            .collect();
        assert_eq!(picks, ["T/b/0", "T/a/0", "T/a/1"]);
    }

    #[test]
    fn a_retry_on_the_only_broker_goes_on_in_turn() {
        // Nothing to skip to: the retry is an ordinary turn, not a fallback.
        let one = info(1, 3);
        let rr = RoundRobin::default();
        let picks: Vec<(i32, ChosenBy)> = (0..4)
            .map(|_| {
                let (q, how) = rr.select(&one, Some("broker-0"), None);
                (q.queue_id, how)
            })
            .collect();
        assert_eq!(
            picks,
            [0, 1, 2, 0].map(|id| (id, ChosenBy::InTurn)),
            "{picks:?}"
        );
    }

    proptest! {
        #[test]
        fn round_robin_visits_every_queue_equally_over_a_cycle(
            brokers in 1usize..6,
            queues in 1i32..9,
            start in any::<usize>(),
            cycles in 1usize..4,
        ) {
            let info = info(brokers, queues);
            let rr = RoundRobin::starting_at(start);
            let c = counts(&rr, &info, info.len() * cycles, None, None);
            prop_assert_eq!(c.len(), info.len());
            prop_assert!(c.values().all(|n| *n == cycles));
        }

        #[test]
        fn with_some_brokers_avoided_the_others_share_equally(
            brokers in 2usize..6,
            queues in 1i32..6,
            avoided in prop::collection::btree_set(0usize..6, 0..5),
            cycles in 1usize..4,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let _guard = runtime.enter();
            let info = info(brokers, queues);
            let faults = LatencyFaultTracker::default();
            let avoided: Vec<usize> = avoided.into_iter().filter(|b| *b < brokers).collect();
            for b in &avoided {
                faults.report(&format!("broker-{b}"), Duration::from_secs(1), true);
            }
            let rr = RoundRobin::default();
            let usable = (brokers - avoided.len()) * queues as usize;
            if usable == 0 {
                let (_, how) = rr.select(&info, None, Some(&faults));
                prop_assert_eq!(how, ChosenBy::LeastBad);
            } else {
                let c = counts(&rr, &info, usable * cycles, None, Some(&faults));
                prop_assert_eq!(c.len(), usable);
                prop_assert!(c.values().all(|n| *n == cycles), "{:?}", c);
            }
        }
    }
}
