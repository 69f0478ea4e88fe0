//! How a consumer behaves: message model, consumption order, start position, intervals.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lease_terms::StartPosition;
use crate::subscription::is_retry_topic;

/// How a group shares a topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MessageModel {
    /// The members divide the queues with the allocation strategy.
    #[default]
    Clustering,
    /// Every member consumes every queue; no locks. Each member keeps its own progress, so it
    /// needs a per-client [`OffsetStore`](crate::OffsetStore) (such as
    /// [`LocalOffsetStore`](crate::LocalOffsetStore)): the consumer refuses to start with the
    /// group's shared one ([`ConsumerError::SharedOffsetStore`](crate::ConsumerError::SharedOffsetStore)).
    Broadcasting,
}

impl MessageModel {
    /// The name RocketMQ uses on the wire (`CLUSTERING`, `BROADCASTING`).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageModel::Clustering => "CLUSTERING",
            MessageModel::Broadcasting => "BROADCASTING",
        }
    }
}

/// Whether messages of a queue are consumed in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumeOrder {
    /// Any order; no locks.
    #[default]
    Concurrent,
    /// One consumer at a time per queue, enforced by broker locks (clustering only).
    Orderly,
}

/// Where a queue without a stored offset starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumeFrom {
    /// From the end: only new messages.
    #[default]
    LastOffset,
    /// From the oldest message still stored.
    FirstOffset,
    /// From the first message stored at or after this time (milliseconds since the Unix epoch).
    Timestamp(i64),
}

impl ConsumeFrom {
    /// Where a queue of `topic` with no stored offset starts, as the Java client's
    /// `RebalancePushImpl.computePullFromWhere` decides it: a retry topic (`%RETRY%…`) starts
    /// from its oldest message under `LastOffset` (the messages sent back for another try
    /// before anyone stored an offset must not be skipped), and from its end under `Timestamp`.
    ///
    /// ```
    /// use rebalance_runtime::{config::ConsumeFrom, StartPosition};
    ///
    /// assert_eq!(ConsumeFrom::LastOffset.start_without_offset("orders"), StartPosition::Latest);
    /// assert_eq!(ConsumeFrom::LastOffset.start_without_offset("%RETRY%g"), StartPosition::Earliest);
    /// ```
    pub fn start_without_offset(self, topic: &str) -> StartPosition {
        let retry = is_retry_topic(topic);
        match self {
            ConsumeFrom::LastOffset if retry => StartPosition::Earliest,
            ConsumeFrom::LastOffset => StartPosition::Latest,
            ConsumeFrom::FirstOffset => StartPosition::Earliest,
            ConsumeFrom::Timestamp(_) if retry => StartPosition::Latest,
            ConsumeFrom::Timestamp(t) => StartPosition::Timestamp(t),
        }
    }

    /// The name RocketMQ uses on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumeFrom::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFrom::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
            ConsumeFrom::Timestamp(_) => "CONSUME_FROM_TIMESTAMP",
        }
    }
}

/// What the consumer does when [`QueueListener::queues_added`](crate::QueueListener::queues_added)
/// fails (returns an error, panics, or runs past
/// [`Intervals::callback_timeout`]): the queues are held, so nobody else consumes them, and the
/// allocation, deterministic, gives them to this client again at every round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddedFailurePolicy {
    /// Call `queues_added` again for the queues of the failed call (those still held), after
    /// 1 s, then after twice as long each time up to 60 s, until it succeeds; each failure is
    /// logged with its attempt number and reported in the next round report's
    /// `callback_errors`.
    #[default]
    RetryWithBackoff,
    /// Shut the consumer down (every queue released, reason `shutdown`, and the client
    /// unregistered) at the end of the round, so that the rest of the group takes the queues
    /// over. [`ConsumerHandle::join`](crate::ConsumerHandle::join) then returns
    /// `Ok(())`; the round report lists the failure.
    ReleaseAndShutdown,
}

/// The timers of a consumer, with the Java client's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intervals {
    /// How often routes are polled (30 s).
    pub poll_name_server: Duration,
    /// The wait after a balanced round (20 s).
    pub rebalance_wait: Duration,
    /// The wait after an unbalanced round, and the least time between two rounds (1 s).
    pub rebalance_min: Duration,
    /// How soon a queue whose lock was refused is tried again (500 ms; such a retry may run
    /// sooner than `rebalance_min` after the previous round).
    pub lock_retry: Duration,
    /// How often heartbeats are sent (30 s).
    pub heartbeat: Duration,
    /// How long the directory keeps a client it no longer hears from (120 s: a RocketMQ
    /// broker's `channelExpiredTimeout`; set it to your brokers' value). A heartbeat a broker
    /// accepted vouches for this client's membership until it was sent plus this long: past
    /// that the other members may have split its queues among themselves, so a clustering
    /// consumer's leases stop being trusted
    /// ([`QueueLease::is_trusted`](crate::QueueLease::is_trusted)): the push consumer pulls
    /// and consumes nothing more from them, and no offset of theirs is written. A heartbeat
    /// accepted after that (a frozen process that wakes, a partition that heals) releases
    /// every queue held before, and the next round takes the client's share again from the
    /// stored offsets. Must be longer than `heartbeat`.
    pub member_expiry: Duration,
    /// How often the locks of ordered queues are renewed (20 s).
    pub lock_renew: Duration,
    /// How long a lock lives without renewal (30 s): after that the client stops trusting it.
    /// At most [`BROKER_LOCK_EXPIRY`] (60 s).
    pub lock_lifetime: Duration,
    /// How often consumed offsets are persisted (5 s).
    pub persist_offsets: Duration,
    /// How long an ordered queue being released waits for its consumer to finish the current
    /// batch before it is unlocked anyway (20 s).
    pub force_unlock_after: Duration,
    /// How long the name server must keep saying a topic does not exist before its queues are
    /// released (90 s, three broker registrations), so a name server that restarts empty does
    /// not empty the assignment.
    pub topic_gone_after: Duration,
    /// How long a [`QueueListener`](crate::QueueListener) callback may take (10 s: with the
    /// defaults `lock_renew + callback_timeout = lock_lifetime`, so one slow callback cannot
    /// delay a lock renewal past the lock's lifetime; a round that meets several slow callbacks,
    /// one per topic and kind, can, and then `consume_guard` starts no batch on the stale locks
    /// until they are renewed).
    ///
    /// Rounds, lock renewal and offset persistence wait for the callbacks, so a callback that
    /// never returns would stop all of them. After this long the callback's future is dropped
    /// (cancelled at its current `.await`), an error event is logged, the round's report lists
    /// it in `callback_errors`, and the round goes on as if the callback had returned. For
    /// [`queues_removed`](crate::QueueListener::queues_removed) that means the hand-off
    /// proceeds: the last offset committed on the lease is persisted and the lock released, so
    /// the next owner may start while the application is still consuming; commit the final
    /// offset and return well within this time. A callback that blocks its thread (instead of
    /// awaiting) cannot be cut short this way.
    pub callback_timeout: Duration,
    /// How long the group's membership must stay unchanged before the round a membership
    /// change asks for runs: a fixed settle window (0: none; then
    /// [`adaptive_settle`](Self::adaptive_settle) decides, and without it every round runs at
    /// once, as in the Java client). While members come and go in a
    /// burst (a deployment, a restart of many pods), every notification pushes the round back,
    /// so each member computes one plan from the settled group instead of one per intermediate
    /// group, which moves queues back and forth. A starting member's first round waits the
    /// same way, whatever else asked for it (`rebalance_now` and subscription changes
    /// included).
    ///
    /// Meanwhile the timers and lock retries wait too, but never longer than `rebalance_wait`
    /// after the change that began the burst, so endless churn cannot stop the rounds. A round
    /// asked for another reason (`rebalance_now`, a subscription or route change, a lost lock)
    /// runs as usual. When set, it must be shorter than `rebalance_wait`
    /// ([`validate`](Self::validate)), and it replaces `adaptive_settle`.
    pub membership_settle: Duration,
    /// The settle window that adapts to the group (on by default; used when
    /// `membership_settle` is 0; `None`: every round at once, as in the Java client). A
    /// starting member's first round waits until the group has been quiet for a while: up to
    /// [`AdaptiveSettle::max`] (1 s) when it joins members already running and nobody else
    /// arrives, down to [`AdaptiveSettle::min`] (20 ms) when others arrive quickly, so that a
    /// group starting together plans once from the whole group instead of once per arrival; a
    /// member the directory lists alone in its group when it starts waits only `min` (20 ms),
    /// for others starting with it (nobody else holds a queue it could take). A member already
    /// running reacts at once to a change of a stable group (a member leaving, restarting or
    /// joining, an expiry), and settles only when changes keep coming: from the third change
    /// less than `max` after the previous one. See [`AdaptiveSettle`].
    pub adaptive_settle: Option<AdaptiveSettle>,
    /// How often a member whose last round was balanced asks the directory, between rounds,
    /// whether the group's members are still those that round planned with (1 s; `None`: only
    /// the rounds list them, as in the Java client). A check is one
    /// [`consumer_ids`](crate::GroupDirectory::consumer_ids) request for one subscribed topic
    /// (each in turn); a round runs only when the list differs, as if the directory had
    /// notified the change. It is how a member learns of a departure the directory does not
    /// push (the Rust broker 1.0 never pushes one: a member killed or partitioned away is
    /// dropped from the list when its connection closes or its registration expires, and the
    /// others would otherwise see it only at their next round, up to `rebalance_wait` later).
    /// No check runs while a round is due anyway: after an unbalanced round, while the group
    /// settles, or when the next round comes first. For very large groups, where each answer
    /// lists thousands of ids, a longer period lowers the brokers' load.
    pub membership_check: Option<Duration>,
}

/// How the adaptive settle window ([`Intervals::adaptive_settle`]) follows the group's pace.
///
/// Membership changes less than `max` apart form a *burst*; a starting member's own start opens
/// one. While a member settles, its round waits until the group has been quiet for `gap_factor`
/// times the burst's mean gap between changes, at least `min` and at most `max` (and, as with a
/// fixed window, never longer than `rebalance_wait` after the burst began). A starting member
/// that has seen no other change yet waits `max` when the directory lists other members: it
/// cannot know the pace, and a shorter wait could take its share while the members already
/// running still hold it. When the directory lists nobody else (asked once, right after the
/// start), nobody holds anything: it waits `min`, time enough for members starting with it
/// to show their pace.
///
/// So 500 members starting within half a second (a change every millisecond) all plan once,
/// `min` after the last arrival, and members joining a running group half a second apart are
/// given their shares once, `max` after the last one; a single join, leave or restart is acted
/// upon at once by the members already running, and the newcomer takes its share `max` later;
/// a member starting alone takes every queue `min` after its start.
///
/// ```
/// use std::time::Duration;
/// use rebalance_runtime::config::{AdaptiveSettle, Intervals};
///
/// let patient = Intervals {
///     adaptive_settle: Some(AdaptiveSettle { min: Duration::from_millis(100), ..AdaptiveSettle::default() }),
///     ..Intervals::default()
/// };
/// assert_eq!(patient.validate(), Ok(()));
/// let java = Intervals { adaptive_settle: None, ..Intervals::default() };
/// assert_eq!(java.validate(), Ok(()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveSettle {
    /// The shortest quiet time (20 ms): what a settling round waits after the last change
    /// when changes come quickly, and what a member alone in its group waits after its start.
    pub min: Duration,
    /// The longest quiet time (1 s), what a member starting into a running group waits when
    /// nobody else arrives, and how far apart two changes may be to belong to one burst: a
    /// change after a longer quiet time finds the group stable.
    pub max: Duration,
    /// How many mean gaps between the burst's changes the group must stay quiet (10).
    pub gap_factor: u32,
}

impl Default for AdaptiveSettle {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(20),
            max: Duration::from_secs(1),
            gap_factor: 10,
        }
    }
}

/// The longest interval [`Intervals::validate`] accepts (a year): anything longer is a mistake,
/// and durations near [`Duration::MAX`] would overflow the timers.
pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// How long a RocketMQ broker keeps a queue's lock without renewal (60 s, its
/// `rebalanceLockMaxLiveTime`): the longest [`Intervals::lock_lifetime`] a client may trust a
/// lock for.
pub const BROKER_LOCK_EXPIRY: Duration = Duration::from_secs(60);

/// Why an [`Intervals`] value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntervalsError {
    /// An interval is zero (a zero period would make its timer panic or spin).
    #[error("the interval `{0}` is zero; every interval must be longer than zero")]
    Zero(&'static str),
    /// An interval is longer than [`MAX_INTERVAL`].
    #[error("the interval `{field}` is {value:?}, longer than the maximum of {MAX_INTERVAL:?}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its value.
        value: Duration,
    },
    /// `lock_lifetime` is longer than a broker keeps a lock without renewal
    /// ([`BROKER_LOCK_EXPIRY`]).
    #[error(
        "`lock_lifetime` is {0:?}, longer than the {BROKER_LOCK_EXPIRY:?} a broker keeps a lock without renewal: this client would go on consuming an ordered queue the broker may have granted another member"
    )]
    LockOutlivesBroker(Duration),
    /// [`AdaptiveSettle::gap_factor`] is zero: every settling wait would be `min`, whatever
    /// the group's pace.
    #[error("`adaptive_settle.gap_factor` is zero; it must be at least 1 (10 by default)")]
    ZeroGapFactor,
    /// Two intervals that cannot work together, such as a `lock_renew` longer than the
    /// `lock_lifetime` it is meant to keep alive.
    #[error(
        "the interval `{field}` ({value:?}) must be {requirement} `{other}` ({other_value:?}): {why}"
    )]
    Conflict {
        /// The interval to change, most likely.
        field: &'static str,
        /// Its value.
        value: Duration,
        /// How it must compare with `other` ("shorter than", "at most").
        requirement: &'static str,
        /// The interval it conflicts with.
        other: &'static str,
        /// That interval's value.
        other_value: Duration,
        /// What would go wrong.
        why: &'static str,
    },
}

/// Checks one interval: longer than zero and at most [`MAX_INTERVAL`].
pub(crate) fn check_interval(field: &'static str, value: Duration) -> Result<(), IntervalsError> {
    if value.is_zero() {
        return Err(IntervalsError::Zero(field));
    }
    if value > MAX_INTERVAL {
        return Err(IntervalsError::TooLong { field, value });
    }
    Ok(())
}

impl Intervals {
    /// Checks that every interval is longer than zero and at most [`MAX_INTERVAL`]
    /// (`membership_settle` may be zero), and that no two of them contradict each other
    /// ([`IntervalsError::Conflict`]):
    /// - `lock_renew` shorter than `lock_lifetime`: otherwise every lock stops being trusted
    ///   before it is renewed, and ordered queues keep stopping;
    /// - `heartbeat` shorter than `member_expiry`: otherwise the leases stop being trusted
    ///   between two heartbeats;
    /// - `rebalance_min` at most `rebalance_wait`: it is the wait after an unbalanced round,
    ///   which must not be longer than the wait after a balanced one;
    /// - a nonzero `membership_settle` shorter than `rebalance_wait`, which caps every settling
    ///   wait: otherwise the group is never seen settled and every membership change waits the
    ///   whole `rebalance_wait`;
    /// - an [`AdaptiveSettle`] whose `max` is longer than zero, whose `min` is at most `max`,
    ///   and whose `gap_factor` is at least 1.
    ///
    /// [`ConsumerBuilder::start`](crate::ConsumerBuilder::start) calls it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rebalance_runtime::config::{Intervals, IntervalsError};
    ///
    /// assert_eq!(Intervals::default().validate(), Ok(()));
    /// let zero = Intervals { heartbeat: Duration::ZERO, ..Intervals::default() };
    /// assert_eq!(zero.validate(), Err(IntervalsError::Zero("heartbeat")));
    /// let stale = Intervals {
    ///     lock_renew: Duration::from_secs(60),
    ///     lock_lifetime: Duration::from_secs(1),
    ///     ..Intervals::default()
    /// };
    /// assert!(matches!(stale.validate(), Err(IntervalsError::Conflict { field: "lock_renew", .. })));
    /// // Trusted longer than the brokers keep it, a lock could be someone else's already.
    /// let outliving = Intervals { lock_lifetime: Duration::from_secs(90), ..Intervals::default() };
    /// assert!(matches!(outliving.validate(), Err(IntervalsError::LockOutlivesBroker(_))));
    /// ```
    pub fn validate(&self) -> Result<(), IntervalsError> {
        // Destructured so that a new field cannot be forgotten here.
        let Intervals {
            poll_name_server,
            rebalance_wait,
            rebalance_min,
            lock_retry,
            heartbeat,
            member_expiry,
            lock_renew,
            lock_lifetime,
            persist_offsets,
            force_unlock_after,
            topic_gone_after,
            callback_timeout,
            membership_settle,
            adaptive_settle,
            membership_check,
        } = *self;
        let fields = [
            ("poll_name_server", poll_name_server),
            ("rebalance_wait", rebalance_wait),
            ("rebalance_min", rebalance_min),
            ("lock_retry", lock_retry),
            ("heartbeat", heartbeat),
            ("member_expiry", member_expiry),
            ("lock_renew", lock_renew),
            ("lock_lifetime", lock_lifetime),
            ("persist_offsets", persist_offsets),
            ("force_unlock_after", force_unlock_after),
            ("topic_gone_after", topic_gone_after),
            ("callback_timeout", callback_timeout),
        ];
        for (field, value) in fields {
            check_interval(field, value)?;
        }
        // Zero is allowed: no settling.
        if membership_settle > MAX_INTERVAL {
            return Err(IntervalsError::TooLong {
                field: "membership_settle",
                value: membership_settle,
            });
        }
        if let Some(adaptive) = adaptive_settle {
            check_adaptive_settle(adaptive)?;
        }
        if let Some(check) = membership_check {
            check_interval("membership_check", check)?;
        }
        if lock_lifetime > BROKER_LOCK_EXPIRY {
            return Err(IntervalsError::LockOutlivesBroker(lock_lifetime));
        }
        if lock_renew >= lock_lifetime {
            return Err(IntervalsError::Conflict {
                field: "lock_renew",
                value: lock_renew,
                requirement: "shorter than",
                other: "lock_lifetime",
                other_value: lock_lifetime,
                why: "every lock would stop being trusted before it is renewed, so ordered queues would keep stopping",
            });
        }
        if heartbeat >= member_expiry {
            return Err(IntervalsError::Conflict {
                field: "heartbeat",
                value: heartbeat,
                requirement: "shorter than",
                other: "member_expiry",
                other_value: member_expiry,
                why: "the directory would drop this client between two heartbeats, and its leases would stop being trusted before each one",
            });
        }
        if rebalance_min > rebalance_wait {
            return Err(IntervalsError::Conflict {
                field: "rebalance_min",
                value: rebalance_min,
                requirement: "at most",
                other: "rebalance_wait",
                other_value: rebalance_wait,
                why: "it is the wait after an unbalanced round, which must not be longer than the wait after a balanced one",
            });
        }
        if !membership_settle.is_zero() && membership_settle >= rebalance_wait {
            return Err(IntervalsError::Conflict {
                field: "membership_settle",
                value: membership_settle,
                requirement: "shorter than",
                other: "rebalance_wait",
                other_value: rebalance_wait,
                why: "a settling wait ends after `rebalance_wait` at the latest, so the group would never be seen settled (0 turns settling off)",
            });
        }
        Ok(())
    }
}

/// Checks an [`AdaptiveSettle`]: `max` longer than zero, `min` at most `max`, `gap_factor` at
/// least 1. (A `max` longer than `rebalance_wait` is no contradiction: every settling wait ends
/// `rebalance_wait` after the burst began anyway.)
fn check_adaptive_settle(adaptive: AdaptiveSettle) -> Result<(), IntervalsError> {
    let AdaptiveSettle {
        min,
        max,
        gap_factor,
    } = adaptive;
    check_interval("adaptive_settle.max", max)?;
    if gap_factor == 0 {
        return Err(IntervalsError::ZeroGapFactor);
    }
    if min > max {
        return Err(IntervalsError::Conflict {
            field: "adaptive_settle.min",
            value: min,
            requirement: "at most",
            other: "adaptive_settle.max",
            other_value: max,
            why: "the quiet time a settling round waits lies between the two",
        });
    }
    Ok(())
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            poll_name_server: Duration::from_secs(30),
            rebalance_wait: Duration::from_secs(20),
            rebalance_min: Duration::from_secs(1),
            lock_retry: Duration::from_millis(500),
            heartbeat: Duration::from_secs(30),
            member_expiry: Duration::from_secs(120),
            lock_renew: Duration::from_secs(20),
            lock_lifetime: Duration::from_secs(30),
            persist_offsets: Duration::from_secs(5),
            force_unlock_after: Duration::from_secs(20),
            topic_gone_after: Duration::from_secs(90),
            callback_timeout: Duration::from_secs(10),
            membership_settle: Duration::ZERO,
            adaptive_settle: Some(AdaptiveSettle::default()),
            membership_check: Some(Duration::from_secs(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_without_an_offset_start_where_the_java_client_starts_them() {
        use StartPosition::*;
        let cases = [
            (ConsumeFrom::LastOffset, Latest, Earliest),
            (ConsumeFrom::FirstOffset, Earliest, Earliest),
            (ConsumeFrom::Timestamp(7), Timestamp(7), Latest),
        ];
        for (from, topic, retry) in cases {
            assert_eq!(from.start_without_offset("orders"), topic, "{from:?}");
            assert_eq!(from.start_without_offset("%RETRY%g"), retry, "{from:?}");
        }
        // Only the prefix makes a retry topic.
        assert_eq!(
            ConsumeFrom::LastOffset.start_without_offset("RETRY%g"),
            Latest
        );
    }

    /// A lock trusted longer than the brokers keep it could be another member's already
    /// (found by review: `lock_lifetime` 90 s was accepted).
    #[test]
    fn a_lock_is_trusted_at_most_as_long_as_the_brokers_keep_it() {
        let at_most = Intervals {
            lock_lifetime: BROKER_LOCK_EXPIRY,
            ..Intervals::default()
        };
        assert_eq!(at_most.validate(), Ok(()));
        let longer = Intervals {
            lock_lifetime: BROKER_LOCK_EXPIRY + Duration::from_millis(1),
            ..Intervals::default()
        };
        let err = longer.validate().unwrap_err();
        assert_eq!(
            err,
            IntervalsError::LockOutlivesBroker(BROKER_LOCK_EXPIRY + Duration::from_millis(1))
        );
        assert!(err.to_string().contains("60s"), "{err}");
    }

    #[test]
    fn membership_settle_may_be_zero_but_not_absurd() {
        let zero = Intervals {
            membership_settle: Duration::ZERO,
            ..Intervals::default()
        };
        assert_eq!(zero.validate(), Ok(()));
        let absurd = Intervals {
            membership_settle: MAX_INTERVAL + Duration::from_secs(1),
            ..Intervals::default()
        };
        assert_eq!(
            absurd.validate(),
            Err(IntervalsError::TooLong {
                field: "membership_settle",
                value: MAX_INTERVAL + Duration::from_secs(1)
            })
        );
    }

    /// `field` set to `value` and `other` to `other_value`, from the defaults.
    fn pair(field: &str, value: u64, other: &str, other_value: u64) -> Intervals {
        let mut intervals = Intervals::default();
        for (name, secs) in [(field, value), (other, other_value)] {
            let slot = match name {
                "lock_renew" => &mut intervals.lock_renew,
                "lock_lifetime" => &mut intervals.lock_lifetime,
                "rebalance_min" => &mut intervals.rebalance_min,
                "rebalance_wait" => &mut intervals.rebalance_wait,
                "membership_settle" => &mut intervals.membership_settle,
                _ => unreachable!("{name}"),
            };
            *slot = Duration::from_secs(secs);
        }
        intervals
    }

    #[test]
    fn adaptive_settle_is_on_by_default_and_checked() {
        let with = |a: AdaptiveSettle| Intervals {
            adaptive_settle: Some(a),
            ..Intervals::default()
        };
        assert_eq!(
            Intervals::default().adaptive_settle,
            Some(AdaptiveSettle::default())
        );
        let d = AdaptiveSettle::default();
        let secs = Duration::from_secs;
        assert_eq!(
            with(AdaptiveSettle { gap_factor: 0, ..d }).validate(),
            Err(IntervalsError::ZeroGapFactor)
        );
        assert_eq!(
            with(AdaptiveSettle {
                max: Duration::ZERO,
                min: Duration::ZERO,
                ..d
            })
            .validate(),
            Err(IntervalsError::Zero("adaptive_settle.max"))
        );
        let conflict = |a: AdaptiveSettle| match with(a).validate() {
            Err(IntervalsError::Conflict { field, other, .. }) => (field, other),
            other => panic!("{a:?}: {other:?}"),
        };
        assert_eq!(
            conflict(AdaptiveSettle { min: secs(3), ..d }),
            ("adaptive_settle.min", "adaptive_settle.max")
        );
        // A `max` longer than `rebalance_wait` is capped by it, not refused: the default
        // works with any `rebalance_wait`.
        assert_eq!(
            with(AdaptiveSettle { max: secs(60), ..d }).validate(),
            Ok(())
        );
        let quick = Intervals {
            rebalance_wait: Duration::from_millis(500),
            rebalance_min: Duration::from_millis(100),
            ..Intervals::default()
        };
        assert_eq!(quick.validate(), Ok(()));
        // A zero `min` is allowed: a starting member then waits only while others arrive.
        assert_eq!(
            with(AdaptiveSettle {
                min: Duration::ZERO,
                ..d
            })
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn contradictory_pairs_are_refused_naming_both_values() {
        // (field, value, other, other value, whether it works)
        let cases = [
            ("lock_renew", 60, "lock_lifetime", 1, false),
            ("lock_renew", 30, "lock_lifetime", 30, false),
            ("lock_renew", 29, "lock_lifetime", 30, true),
            ("rebalance_min", 21, "rebalance_wait", 20, false),
            ("rebalance_min", 20, "rebalance_wait", 20, true),
            ("membership_settle", 20, "rebalance_wait", 20, false),
            ("membership_settle", 19, "rebalance_wait", 20, true),
            ("membership_settle", 0, "rebalance_wait", 1, true),
        ];
        for (field, value, other, other_value, works) in cases {
            let result = pair(field, value, other, other_value).validate();
            if works {
                assert_eq!(result, Ok(()), "{field} {value}s, {other} {other_value}s");
                continue;
            }
            let error = result.expect_err(field);
            assert!(
                matches!(error, IntervalsError::Conflict { field: f, other: o, .. } if f == field && o == other),
                "{error:?}"
            );
            let message = error.to_string();
            let (a, b) = (
                format!("`{field}` ({value}s)"),
                format!("`{other}` ({other_value}s)"),
            );
            assert!(message.contains(&a) && message.contains(&b), "{message}");
        }
    }

    #[test]
    fn every_zero_field_is_named() {
        type Field = fn(&mut Intervals) -> &mut Duration;
        let cases: [(&str, Field); 11] = [
            ("poll_name_server", |i| &mut i.poll_name_server),
            ("rebalance_wait", |i| &mut i.rebalance_wait),
            ("rebalance_min", |i| &mut i.rebalance_min),
            ("lock_retry", |i| &mut i.lock_retry),
            ("heartbeat", |i| &mut i.heartbeat),
            ("lock_renew", |i| &mut i.lock_renew),
            ("lock_lifetime", |i| &mut i.lock_lifetime),
            ("persist_offsets", |i| &mut i.persist_offsets),
            ("force_unlock_after", |i| &mut i.force_unlock_after),
            ("topic_gone_after", |i| &mut i.topic_gone_after),
            ("callback_timeout", |i| &mut i.callback_timeout),
        ];
        for (name, field) in cases {
            let mut intervals = Intervals::default();
            *field(&mut intervals) = Duration::ZERO;
            assert_eq!(intervals.validate(), Err(IntervalsError::Zero(name)));
            let mut intervals = Intervals::default();
            *field(&mut intervals) = Duration::MAX;
            assert_eq!(
                intervals.validate(),
                Err(IntervalsError::TooLong {
                    field: name,
                    value: Duration::MAX
                })
            );
            let mut intervals = Intervals::default();
            *field(&mut intervals) = MAX_INTERVAL;
            // The maximum itself is a valid value (it may still conflict with another field).
            let result = intervals.validate();
            assert!(
                matches!(
                    result,
                    Ok(())
                        | Err(IntervalsError::Conflict { .. })
                        | Err(IntervalsError::LockOutlivesBroker(_))
                ),
                "{name}: the maximum itself is fine: {result:?}"
            );
        }
    }
}
