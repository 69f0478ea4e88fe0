//! Latency fault avoidance (the Java client's `sendLatencyFaultEnable`): a broker that answered
//! slowly, or failed, is avoided for a while.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use crate::config::MAX_INTERVAL;

/// How long a broker is avoided after a send of a given latency.
///
/// The default is the Java client's `MQFaultStrategy`: latencies of at least 50, 100, 550,
/// 1000, 2000, 3000 and 15000 ms avoid the broker for 0, 0, 30, 60, 120, 180 and 600 s; a
/// failed send counts as the largest step (600 s).
///
/// ```
/// use std::time::Duration;
/// use rebalance_runtime::producer::AvoidPolicy;
///
/// let policy = AvoidPolicy::default();
/// assert_eq!(policy.avoid_for(Duration::from_millis(120)), Duration::ZERO);
/// assert_eq!(policy.avoid_for(Duration::from_millis(550)), Duration::from_secs(30));
/// assert_eq!(policy.avoid_for(Duration::from_millis(2500)), Duration::from_secs(120));
/// assert_eq!(policy.on_failure(), Duration::from_secs(600));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvoidPolicy {
    /// `(latency at least, avoid for)`, sorted by latency.
    steps: Vec<(Duration, Duration)>,
}

impl Default for AvoidPolicy {
    fn default() -> Self {
        const MS: [u64; 7] = [50, 100, 550, 1000, 2000, 3000, 15000];
        const SECS: [u64; 7] = [0, 0, 30, 60, 120, 180, 600];
        Self::from_steps(
            MS.iter()
                .zip(SECS)
                .map(|(ms, s)| (Duration::from_millis(*ms), Duration::from_secs(s))),
        )
    }
}

impl AvoidPolicy {
    /// A policy from `(latency at least, avoid for)` steps, in any order. A latency below every
    /// step avoids nothing; a failure avoids for the step of the largest latency.
    pub fn from_steps(steps: impl IntoIterator<Item = (Duration, Duration)>) -> Self {
        let mut steps: Vec<_> = steps.into_iter().collect();
        steps.sort();
        Self { steps }
    }

    /// How long a send of `latency` makes its broker avoided.
    pub fn avoid_for(&self, latency: Duration) -> Duration {
        self.steps
            .iter()
            .rev()
            .find(|(at_least, _)| latency >= *at_least)
            .map_or(Duration::ZERO, |(_, avoid)| *avoid)
    }

    /// How long a failed send makes its broker avoided (the largest step's duration).
    pub fn on_failure(&self) -> Duration {
        self.steps
            .last()
            .map_or(Duration::ZERO, |(_, avoid)| *avoid)
    }
}

/// What the tracker remembers of a broker: its last send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultItem {
    /// The last send's latency.
    pub latency: Duration,
    /// Whether the last send failed.
    pub failed: bool,
    /// When the broker may be used again.
    pub available_at: Instant,
    /// Whether the "avoided" event was emitted and not yet its "no longer avoided" one.
    announced: bool,
}

impl FaultItem {
    /// How bad the broker is: failures are worse than any latency, then longer latencies, then
    /// a later end of avoidance.
    fn badness(&self) -> (bool, Duration, Instant) {
        (self.failed, self.latency, self.available_at)
    }
}

/// Remembers each broker's last send and tells which brokers to avoid now.
///
/// Every report replaces the broker's previous one, as in the Java client: a fast send takes a
/// broker off the avoid list at once. A broker comes off the list by itself when its time is up;
/// that event is logged at the first selection that notices it. Time is
/// [`tokio::time::Instant`], so tests run on the paused clock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use rebalance_runtime::producer::LatencyFaultTracker;
/// use tokio::time::Instant;
///
/// let faults = LatencyFaultTracker::default();
/// faults.report("broker-a", Duration::from_millis(1200), true); // avoided for 60 s
/// assert!(!faults.is_available("broker-a", Instant::now()));
/// assert!(faults.is_available("broker-b", Instant::now()));
/// tokio::time::advance(Duration::from_secs(60)).await;
/// assert!(faults.is_available("broker-a", Instant::now()));
/// # }
/// ```
pub struct LatencyFaultTracker {
    policy: AvoidPolicy,
    items: DashMap<String, FaultItem>,
    /// How many items are announced as avoided: zero lets selection skip every lookup.
    announced: AtomicUsize,
    /// What `next_sweep` counts from.
    epoch: Instant,
    /// When the next [`sweep_if_due`](Self::sweep_if_due) may run, in ms after `epoch`.
    next_sweep: AtomicU64,
}

/// How often the brokers whose avoidance is over are looked for among all those reported.
const SWEEP_EVERY_MS: u64 = 1_000;

impl Default for LatencyFaultTracker {
    fn default() -> Self {
        Self::new(AvoidPolicy::default())
    }
}

impl fmt::Debug for LatencyFaultTracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyFaultTracker")
            .field("policy", &self.policy)
            .field("brokers", &self.items.len())
            .field("avoided", &self.announced.load(Ordering::Relaxed))
            .finish()
    }
}

impl LatencyFaultTracker {
    /// A tracker with `policy`.
    pub fn new(policy: AvoidPolicy) -> Self {
        Self {
            policy,
            items: DashMap::new(),
            announced: AtomicUsize::new(0),
            epoch: Instant::now(),
            next_sweep: AtomicU64::new(0),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &AvoidPolicy {
        &self.policy
    }

    /// Records a send to `broker` that took `latency` and succeeded (`ok`) or failed.
    pub fn report(&self, broker: &str, latency: Duration, ok: bool) {
        let avoid = if ok {
            self.policy.avoid_for(latency)
        } else {
            self.policy.on_failure()
        };
        // A step longer than the clock can add (`Duration::MAX` for "for ever") would panic the
        // sender's task; a year is for ever enough.
        let avoid = avoid.min(MAX_INTERVAL);
        let now = Instant::now();
        let announce = !avoid.is_zero();
        let mut item = self
            .items
            .entry(broker.to_string())
            .or_insert_with(|| FaultItem {
                latency,
                failed: !ok,
                available_at: now,
                announced: false,
            });
        let was_announced = item.announced;
        *item = FaultItem {
            latency,
            failed: !ok,
            available_at: now + avoid,
            announced: announce,
        };
        // Counted under the entry's lock, so the count never runs behind a transition.
        match (was_announced, announce) {
            (false, true) => self.announced.fetch_add(1, Ordering::AcqRel),
            (true, false) => self.announced.fetch_sub(1, Ordering::AcqRel),
            _ => 0,
        };
        drop(item);
        let latency_ms = latency.as_millis() as u64;
        match (was_announced, announce) {
            (false, true) => {
                tracing::info!(
                    broker,
                    latency_ms,
                    ok,
                    avoid_secs = avoid.as_secs_f64(),
                    "broker put on the avoid list"
                );
            }
            (true, true) => {
                tracing::debug!(
                    broker,
                    latency_ms,
                    ok,
                    avoid_secs = avoid.as_secs_f64(),
                    "broker stays on the avoid list"
                );
            }
            (true, false) => {
                tracing::info!(
                    broker,
                    latency_ms,
                    "broker taken off the avoid list: a fast send"
                );
            }
            (false, false) => {}
        }
    }

    /// Whether some broker may be avoided now (false lets a selection skip every lookup).
    pub fn any_avoided(&self) -> bool {
        self.announced.load(Ordering::Acquire) > 0
    }

    /// Whether `broker` may be used at `now`.
    pub fn is_available(&self, broker: &str, now: Instant) -> bool {
        if !self.any_avoided() {
            return true;
        }
        let (available, expired) = match self.items.get(broker) {
            None => return true,
            Some(item) => {
                let available = now >= item.available_at;
                (available, available && item.announced)
            }
        };
        if expired {
            self.expire(broker, now);
        }
        available
    }

    /// Takes off the avoid list every broker whose time is up, at most once a second. A broker
    /// that selections look up goes off as it is looked up; one that is looked up no more (it
    /// left the route, or only topics no longer sent to have it) would otherwise stay counted
    /// for ever: every selection on the slow path, and its "taken off" event never said.
    pub(crate) fn sweep_if_due(&self, now: Instant) {
        let at = u64::try_from(now.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(u64::MAX);
        let due = self.next_sweep.load(Ordering::Relaxed);
        if at < due {
            return;
        }
        let next = at.saturating_add(SWEEP_EVERY_MS);
        let claimed =
            self.next_sweep
                .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed);
        if claimed.is_err() {
            return; // another selection is sweeping
        }
        let over: Vec<String> = self
            .items
            .iter()
            .filter(|i| i.announced && now >= i.available_at)
            .map(|i| i.key().clone())
            .collect();
        for broker in over {
            self.expire(&broker, now);
        }
    }

    /// Takes `broker` off the avoid list once its time is up (emitting the event once).
    fn expire(&self, broker: &str, now: Instant) {
        let Some(mut item) = self.items.get_mut(broker) else {
            return;
        };
        if item.announced && now >= item.available_at {
            item.announced = false;
            self.announced.fetch_sub(1, Ordering::AcqRel);
            let latency_ms = item.latency.as_millis() as u64;
            drop(item);
            tracing::info!(
                broker,
                latency_ms,
                "broker taken off the avoid list: its time is up"
            );
        }
    }

    /// The broker's last report, if any.
    pub fn item(&self, broker: &str) -> Option<FaultItem> {
        self.items.get(broker).map(|i| *i)
    }

    /// The brokers avoided at `now`, with how long each stays avoided, sorted by name.
    pub fn avoided(&self, now: Instant) -> Vec<(String, Duration)> {
        let mut list: Vec<(String, Duration)> = self
            .items
            .iter()
            .filter(|i| now < i.available_at)
            .map(|i| (i.key().clone(), i.available_at - now))
            .collect();
        list.sort();
        list
    }

    /// Of `brokers`, the least bad (see [`FaultItem`]): a broker never reported or available
    /// at `now` first, else the one whose last send was best. `None` only when `brokers` is
    /// empty. Ties go to the earliest in `brokers`.
    pub fn least_bad<'b>(
        &self,
        brokers: impl IntoIterator<Item = &'b str>,
        now: Instant,
    ) -> Option<&'b str> {
        brokers
            .into_iter()
            .map(|b| (self.rank(b, now), b))
            .min_by(|(a, _), (b, _)| a.cmp(b))
            .map(|(_, b)| b)
    }

    /// Of `brokers`, the better half (at least one), least bad first (ties in the order of
    /// `brokers`): what the Java client's `pickOneAtLeast` takes turns among when every broker
    /// is avoided, so that no single broker takes all the traffic.
    pub fn better_half<'b>(
        &self,
        brokers: impl IntoIterator<Item = &'b str>,
        now: Instant,
    ) -> Vec<&'b str> {
        let mut ranked: Vec<_> = brokers
            .into_iter()
            .map(|b| (self.rank(b, now), b))
            .collect();
        // Stable: ties keep their order.
        ranked.sort_by_key(|(rank, _)| *rank);
        ranked.truncate((ranked.len() / 2).max(1));
        ranked.into_iter().map(|(_, b)| b).collect()
    }

    /// How bad `broker` is at `now`: `None` (best) when never reported or available again.
    fn rank(&self, broker: &str, now: Instant) -> Option<(bool, Duration, Instant)> {
        match self.items.get(broker) {
            Some(item) if now < item.available_at => Some(item.badness()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn java_steps() {
        let p = AvoidPolicy::default();
        let cases = [
            (0, 0),
            (49, 0),
            (50, 0),
            (549, 0),
            (550, 30),
            (999, 30),
            (1000, 60),
            (2000, 120),
            (2999, 120),
            (3000, 180),
            (14_999, 180),
            (15_000, 600),
            (100_000, 600),
        ];
        for (latency, secs) in cases {
            assert_eq!(
                p.avoid_for(ms(latency)),
                Duration::from_secs(secs),
                "{latency} ms"
            );
        }
        assert_eq!(p.on_failure(), Duration::from_secs(600));
        let none = AvoidPolicy::from_steps([]);
        assert_eq!(none.avoid_for(ms(100_000)), Duration::ZERO);
        assert_eq!(none.on_failure(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_send_clears_and_a_failure_avoids_longest() {
        let t = LatencyFaultTracker::default();
        assert!(!t.any_avoided());
        t.report("a", ms(10), true);
        assert!(!t.any_avoided(), "a fast send avoids nothing");
        t.report("a", ms(600), true);
        assert!(t.any_avoided());
        assert!(!t.is_available("a", Instant::now()));
        assert_eq!(
            t.avoided(Instant::now()),
            [("a".to_string(), Duration::from_secs(30))]
        );
        t.report("a", ms(5), true);
        assert!(t.is_available("a", Instant::now()));
        assert!(!t.any_avoided());
        t.report("b", ms(1), false);
        let item = t.item("b").unwrap();
        assert!(item.failed);
        assert_eq!(item.available_at, Instant::now() + Duration::from_secs(600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_configured_policy_is_the_one_reported_and_applied() {
        let policy = AvoidPolicy::from_steps([(ms(10), Duration::from_secs(5))]);
        let t = LatencyFaultTracker::new(policy.clone());
        assert_eq!(t.policy(), &policy);
        assert_ne!(t.policy(), &AvoidPolicy::default());
        // 20 ms avoids for 5 s here (nothing by the default steps); a failure too.
        t.report("a", ms(20), true);
        t.report("b", ms(1), false);
        assert_eq!(
            t.avoided(Instant::now()),
            [
                ("a".to_string(), Duration::from_secs(5)),
                ("b".to_string(), Duration::from_secs(5))
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_instant_its_avoidance_ends_a_broker_ranks_as_good_as_new() {
        let t = LatencyFaultTracker::default();
        t.report("meh", ms(1000), true); // avoided for 60 s
        tokio::time::advance(Duration::from_secs(40)).await;
        t.report("fast", ms(560), true); // avoided for 30 s, until 70 s
        tokio::time::advance(Duration::from_secs(20)).await;
        let now = Instant::now();
        // At 60 s "meh" may be used again: it beats "fast", which still has 10 s to go,
        // though its last send was faster.
        assert!(t.is_available("meh", now));
        assert!(!t.is_available("fast", now));
        assert_eq!(t.least_bad(["fast", "meh"], now), Some("meh"));
        assert_eq!(t.better_half(["fast", "meh"], now), ["meh"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_avoid_step_beyond_the_clock_avoids_for_as_long_as_it_can() {
        // "Avoid for ever", as a policy may well be configured.
        let t = LatencyFaultTracker::new(AvoidPolicy::from_steps([(ms(0), Duration::MAX)]));
        t.report("slow", ms(1), true);
        t.report("failed", ms(1), false);
        let in_a_month = Instant::now() + Duration::from_secs(30 * 24 * 3600);
        assert!(!t.is_available("slow", in_a_month));
        assert!(!t.is_available("failed", in_a_month));
    }

    #[tokio::test(start_paused = true)]
    async fn the_better_half_is_at_least_one_broker_least_bad_first() {
        let t = LatencyFaultTracker::default();
        let now = Instant::now();
        t.report("fail", ms(1), false);
        t.report("slow", ms(20_000), true);
        t.report("meh", ms(700), true);
        t.report("ok", ms(600), true);
        assert_eq!(
            t.better_half(["fail", "slow", "meh", "ok"], now),
            ["ok", "meh"]
        );
        assert_eq!(t.better_half(["fail", "slow", "meh"], now), ["meh"]);
        assert_eq!(t.better_half(["fail"], now), ["fail"]);
        assert!(t.better_half([], now).is_empty());
        // Never reported counts as best; ties keep their order.
        assert_eq!(t.better_half(["fail", "x", "y", "slow"], now), ["x", "y"]);
    }

    #[tokio::test(start_paused = true)]
    async fn least_bad_prefers_available_then_no_failure_then_low_latency() {
        let t = LatencyFaultTracker::default();
        let now = Instant::now();
        t.report("fail", ms(1), false);
        t.report("slow", ms(20_000), true);
        t.report("meh", ms(700), true);
        assert_eq!(t.least_bad(["fail", "slow", "meh"], now), Some("meh"));
        assert_eq!(t.least_bad(["fail", "slow"], now), Some("slow"));
        assert_eq!(t.least_bad(["fail", "slow", "new"], now), Some("new"));
        assert_eq!(t.least_bad([], now), None);
        // Once its time is up, a broker is as good as new.
        let later = now + Duration::from_secs(30);
        assert_eq!(t.least_bad(["fail", "slow", "meh"], later), Some("meh"));
        assert_eq!(
            t.least_bad(["slow", "fail", "meh"], later + Duration::from_secs(600)),
            Some("slow")
        );
    }

    proptest! {
        #[test]
        fn the_avoid_list_expires_on_time(latency_ms in 0u64..40_000, ok: bool, probe_ms in 0u64..700_000) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async {
                let t = LatencyFaultTracker::default();
                let latency = ms(latency_ms);
                t.report("x", latency, ok);
                let avoid = if ok { t.policy().avoid_for(latency) } else { t.policy().on_failure() };
                let start = Instant::now();
                tokio::time::advance(ms(probe_ms)).await;
                let now = Instant::now();
                let available = t.is_available("x", now);
                prop_assert_eq!(available, now.duration_since(start) >= avoid);
                // Once noticed, the broker is off the list for good.
                prop_assert_eq!(t.any_avoided(), !available);
                Ok(())
            })?;
        }
    }
}
