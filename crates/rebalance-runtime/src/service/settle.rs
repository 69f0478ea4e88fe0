//! How long a round waits for the group to settle after a membership change or the member's
//! start: not at all (as the Java client), a fixed window (`Intervals::membership_settle`), or a
//! window that follows the group's pace (`Intervals::adaptive_settle`).
//!
//! With the adaptive window, a member that finds itself alone in the group when it starts
//! waits only [`AdaptiveSettle::min`] (for others starting with it), not
//! [`AdaptiveSettle::max`]: nobody else holds a queue it could take too early, so the only
//! reason left to wait is a burst of members starting together, and the first of them arriving
//! within `min` makes the burst's pace known.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{AdaptiveSettle, Intervals};

/// The change of a burst from which a member already running settles: the first two (a member
/// leaving, or restarting: a leave then a join) find a stable group and run at once.
const CHURN_FROM_CHANGE: u32 = 3;

/// Changes (and the member's own start) less than [`AdaptiveSettle::max`] apart.
#[derive(Debug, Clone, Copy)]
struct Burst {
    started: Instant,
    last: Instant,
    /// Changes in the burst, its first included.
    changes: u32,
    /// The burst is the member's own start, and the directory listed nobody else then
    /// ([`Settle::alone`]): before a second change, the quiet time is `min`, not `max`.
    alone: bool,
}

/// The settle policy of one member, with what it has seen of the group. Owned by its schedule.
#[derive(Debug)]
pub(super) struct Settle {
    policy: Policy,
}

#[derive(Debug)]
enum Policy {
    /// Every round at once.
    Off,
    /// The group must have been quiet this long.
    Fixed(Duration),
    /// A quiet time that follows the pace of the changes.
    Adaptive {
        config: AdaptiveSettle,
        burst: Option<Burst>,
    },
}

impl Settle {
    pub(super) fn new(intervals: &Intervals) -> Self {
        let policy = match (intervals.membership_settle, intervals.adaptive_settle) {
            (fixed, _) if !fixed.is_zero() => Policy::Fixed(fixed),
            (_, Some(config)) => Policy::Adaptive {
                config,
                burst: None,
            },
            (_, None) => Policy::Off,
        };
        Self { policy }
    }

    /// The member starts now: how long the group must be quiet before its first round, if at
    /// all. Its start opens a burst (others may be starting with it).
    pub(super) fn start(&mut self, now: Instant) -> Option<Duration> {
        self.change(now, true)
    }

    /// Whether the start's quiet time may still be shortened by [`alone`](Self::alone): the
    /// adaptive window, and nothing seen since the start.
    pub(super) fn may_start_alone(&self) -> bool {
        matches!(&self.policy, Policy::Adaptive { burst: Some(b), .. } if b.changes == 1 && !b.alone)
    }

    /// Whether the burst under way is this member's start, alone, with nothing seen since: a
    /// round run now takes every queue on the strength of it.
    pub(super) fn alone_so_far(&self) -> bool {
        matches!(&self.policy, Policy::Adaptive { burst: Some(b), .. } if b.alone && b.changes == 1)
    }

    /// Whether a change notified `now` would belong to the burst under way (less than `max`
    /// after its last change).
    pub(super) fn continues_burst(&self, now: Instant) -> bool {
        matches!(&self.policy, Policy::Adaptive { config, burst: Some(b) } if now.saturating_duration_since(b.last) <= config.max)
    }

    /// The directory listed nobody but this member at its start (it was asked once the start
    /// was registered): how long the group must now be quiet after the start, `min` (others
    /// starting with it arrive within that time, or it is alone), or `None` when it changes
    /// nothing (not the adaptive window, or a change was seen meanwhile: its pace decides).
    pub(super) fn alone(&mut self) -> Option<Duration> {
        if !self.may_start_alone() {
            return None;
        }
        let Policy::Adaptive {
            config,
            burst: Some(burst),
        } = &mut self.policy
        else {
            return None;
        };
        burst.alone = true;
        let window = quiet_time(config, burst);
        tracing::debug!(
            ?window,
            "alone in the group at the start: the first round waits only for others starting with it"
        );
        Some(window)
    }

    /// A membership change was notified now; `starting`: the member has not run a round yet.
    /// Returns how long the group must then be quiet before the round, or `None` to run it at
    /// once.
    pub(super) fn change(&mut self, now: Instant, starting: bool) -> Option<Duration> {
        match &mut self.policy {
            Policy::Off => None,
            Policy::Fixed(window) => Some(*window),
            Policy::Adaptive { config, burst } => {
                let burst = match burst {
                    Some(b) if now.saturating_duration_since(b.last) <= config.max => {
                        b.changes = b.changes.saturating_add(1);
                        b.last = now;
                        *b
                    }
                    _ => *burst.insert(Burst {
                        started: now,
                        last: now,
                        changes: 1,
                        alone: false,
                    }),
                };
                if !starting && burst.changes < CHURN_FROM_CHANGE {
                    tracing::debug!(
                        changes = burst.changes,
                        "the group was stable: the round runs at once"
                    );
                    return None;
                }
                let window = quiet_time(config, &burst);
                tracing::debug!(
                    changes = burst.changes,
                    ?window,
                    starting,
                    "the group is changing: the round waits until it has been quiet"
                );
                Some(window)
            }
        }
    }
}

/// `gap_factor` times the burst's mean gap between changes, between `min` and `max`; before a
/// second change, when the pace is not known yet, `max`: a starting member that has seen nobody
/// else arrive waits as long as the members already running may settle, so it never takes its
/// share while they still hold it; unless it was alone in the group at its start, when nobody
/// holds anything: then `min`.
fn quiet_time(config: &AdaptiveSettle, burst: &Burst) -> Duration {
    let max = config.max.max(config.min);
    let gaps = burst.changes.saturating_sub(1);
    if gaps == 0 {
        return if burst.alone { config.min } else { max };
    }
    let mean_gap = (burst.last - burst.started) / gaps;
    mean_gap
        .saturating_mul(config.gap_factor)
        .clamp(config.min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn adaptive() -> Settle {
        Settle::new(&Intervals::default())
    }

    #[test]
    fn the_intervals_choose_the_policy() {
        let off = Intervals {
            adaptive_settle: None,
            ..Intervals::default()
        };
        assert!(matches!(Settle::new(&off).policy, Policy::Off));
        let fixed = Intervals {
            membership_settle: Duration::from_secs(1),
            ..Intervals::default()
        };
        assert!(
            matches!(Settle::new(&fixed).policy, Policy::Fixed(w) if w == Duration::from_secs(1))
        );
        assert!(matches!(adaptive().policy, Policy::Adaptive { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_waits_max_until_the_pace_is_known() {
        let d = AdaptiveSettle::default();
        let mut s = adaptive();
        assert_eq!(s.start(Instant::now()), Some(d.max));
        // Others arrive 1 ms apart: a quick pace, the quiet time drops to `min`.
        for _ in 0..10 {
            tokio::time::advance(MS).await;
            assert_eq!(s.change(Instant::now(), true), Some(d.min));
        }
        // Then 50 ms apart: the mean gap grows, and so does the quiet time, up to `max`.
        let mut last = d.min;
        for _ in 0..20 {
            tokio::time::advance(50 * MS).await;
            let w = s.change(Instant::now(), true).unwrap();
            assert!(w >= last && w <= d.max, "{w:?} after {last:?}");
            last = w;
        }
        assert!(last > d.min, "{last:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_alone_waits_min_then_follows_the_pace_of_whoever_arrives() {
        let d = AdaptiveSettle::default();
        let mut s = adaptive();
        assert_eq!(s.start(Instant::now()), Some(d.max));
        assert!(s.may_start_alone());
        assert_eq!(s.alone(), Some(d.min));
        assert!(!s.may_start_alone(), "asked once");
        assert_eq!(s.alone(), None);
        // Somebody arrives 15 ms later after all: a burst of two, 15 ms apart, 150 ms.
        tokio::time::advance(15 * MS).await;
        assert_eq!(s.change(Instant::now(), true), Some(150 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn being_alone_changes_nothing_once_the_pace_is_known_or_without_the_adaptive_window() {
        let d = AdaptiveSettle::default();
        let mut s = adaptive();
        s.start(Instant::now());
        tokio::time::advance(MS).await;
        assert_eq!(s.change(Instant::now(), true), Some(d.min));
        assert!(!s.may_start_alone());
        assert_eq!(s.alone(), None, "the pace decides");
        let now = Instant::now();
        let mut fixed = Settle {
            policy: Policy::Fixed(Duration::from_secs(1)),
        };
        fixed.start(now);
        assert!(!fixed.may_start_alone());
        assert_eq!(fixed.alone(), None);
        let mut off = Settle {
            policy: Policy::Off,
        };
        off.start(now);
        assert_eq!(off.alone(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_member_settles_only_from_the_third_change_of_a_burst() {
        let d = AdaptiveSettle::default();
        let mut s = adaptive();
        s.start(Instant::now());
        tokio::time::advance(10 * d.max).await;
        // A restart: a leave, then a join 1 s later: at once both times.
        assert_eq!(s.change(Instant::now(), false), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(s.change(Instant::now(), false), None);
        // A third change within `max`: churn, with the burst's mean gap (1 s) times 10,
        // capped at `max`.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(s.change(Instant::now(), false), Some(d.max));
        // After a quiet time longer than `max`, the group is stable again.
        tokio::time::advance(d.max + MS).await;
        assert_eq!(s.change(Instant::now(), false), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_quiet_time_is_the_mean_gap_times_the_factor() {
        let config = AdaptiveSettle {
            min: 10 * MS,
            max: Duration::from_secs(1),
            gap_factor: 4,
        };
        let mut s = Settle {
            policy: Policy::Adaptive {
                config,
                burst: None,
            },
        };
        s.change(Instant::now(), false);
        tokio::time::advance(30 * MS).await;
        s.change(Instant::now(), false);
        tokio::time::advance(50 * MS).await;
        // Gaps of 30 and 50 ms: a mean of 40 ms, times 4.
        assert_eq!(s.change(Instant::now(), false), Some(160 * MS));
    }

    #[test]
    fn fixed_and_off_ignore_the_pace() {
        let now = Instant::now();
        let mut fixed = Settle {
            policy: Policy::Fixed(Duration::from_secs(1)),
        };
        assert_eq!(fixed.start(now), Some(Duration::from_secs(1)));
        assert_eq!(fixed.change(now, false), Some(Duration::from_secs(1)));
        let mut off = Settle {
            policy: Policy::Off,
        };
        assert_eq!(off.start(now), None);
        assert_eq!(off.change(now, true), None);
    }
}
