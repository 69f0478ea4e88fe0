//! When the service does what: the rounds (balanced and unbalanced intervals, wake-ups, the
//! group settling, lock retries), lock renewal and offset persistence.

use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::settle::Settle;
use crate::config::Intervals;
use crate::wake::WakeReasons;

/// What is due next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    /// Renew the locks of held locked queues (every `lock_renew`).
    Renewal,
    /// Persist committed offsets (every `persist_offsets`).
    Persistence,
    /// Call `queues_added` again for queues of a call that failed.
    AddedRetry,
    /// Run a round.
    Round,
}

/// The service's timers and the next wake. Owned by the service task.
#[derive(Debug)]
pub(super) struct Schedule {
    intervals: Intervals,
    /// `None` when no queue is ever locked.
    renew: Option<Interval>,
    persist: Interval,
    /// When the last round started (`None` before the first).
    last_round_start: Option<Instant>,
    /// When the next round is due without a wake-up: `rebalance_wait` after a balanced round,
    /// `rebalance_min` after an unbalanced one.
    next_due: Instant,
    last_balanced: bool,
    /// When the locks a round could not get (refused or not answered) are tried again:
    /// `lock_retry` after that round.
    lock_retry_at: Option<Instant>,
    /// How long the group must be quiet before a round, after which change.
    settle: Settle,
    /// When the group will have been quiet long enough since the last membership change
    /// notified, while it settles (cleared when a round starts).
    membership_quiet_at: Option<Instant>,
    /// When the first membership change not yet acted upon was notified: settling lasts at most
    /// `rebalance_wait` from there (cleared when a round starts).
    settle_started: Option<Instant>,
}

impl Schedule {
    /// The schedule of a consumer starting now; `renewing`: whether it locks queues.
    pub(super) fn new(intervals: Intervals, renewing: bool) -> Self {
        let now = Instant::now();
        let every = |period| {
            let mut timer = tokio::time::interval_at(now + period, period);
            timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
            timer
        };
        let mut settle = Settle::new(&intervals);
        // A starting member is a membership change too: its first round waits for the
        // group to settle, like the rounds its arrival causes in the others.
        let quiet = settle.start(now);
        Self {
            intervals,
            renew: renewing.then(|| every(intervals.lock_renew)),
            persist: every(intervals.persist_offsets),
            last_round_start: None,
            next_due: now,
            last_balanced: false,
            lock_retry_at: None,
            settle,
            membership_quiet_at: quiet.map(|window| now + window),
            settle_started: quiet.map(|_| now),
        }
    }

    /// The directory said the group's membership changed: while the group settles (a fixed
    /// window, or an adaptive one that finds the group changing), the round waits until it has
    /// been quiet long enough.
    pub(super) fn membership_changed(&mut self) {
        let now = Instant::now();
        let starting = self.last_round_start.is_none();
        if let Some(window) = self.settle.change(now, starting) {
            self.membership_quiet_at = Some(now + window);
            self.settle_started.get_or_insert(now);
        }
    }

    /// When the next round may run, with `pending` wake-ups: as soon as allowed if there are
    /// any, else when the timer says; never sooner than `rebalance_min` after the previous round
    /// started, except for the retry of a refused lock, which runs `lock_retry` (500 ms) after
    /// the round that asked for it, as the Java client's `rebalanceLater(500)` does.
    ///
    /// While the group settles (a settle window applies, and only membership changes, or this
    /// member's start, are pending), nothing runs until the group has been unchanged for the
    /// window, or `rebalance_wait` after the change that began the burst: not the timers, not
    /// lock retries, which would plan from a group still changing.
    pub(super) fn next_round_at(&self, pending: WakeReasons) -> Instant {
        let intervals = &self.intervals;
        let earliest = self
            .last_round_start
            .map_or_else(Instant::now, |s| s + intervals.rebalance_min);
        let settling = WakeReasons::START | WakeReasons::MEMBERSHIP_CHANGED;
        if let (Some(quiet), Some(started)) = (self.membership_quiet_at, self.settle_started) {
            let only_changes = self.last_round_start.is_none() || settling.contains(pending);
            if !pending.is_empty() && only_changes {
                return quiet.min(started + intervals.rebalance_wait).max(earliest);
            }
        }
        let due = if pending.is_empty() {
            self.next_due
        } else {
            Instant::now()
        };
        let due = due.max(earliest);
        match self.lock_retry_at {
            Some(retry) => due.min(retry),
            None => due,
        }
    }

    /// Waits for what is due next, with `pending` wake-ups and a `queues_added` retry due at
    /// `added_retry`. Renewal, persistence and the retry come before the round: they are
    /// short, and rounds that run back to back (each longer than `rebalance_min`, with a
    /// wake-up during each) must not starve them. Cancel-safe.
    pub(super) async fn due(&mut self, pending: WakeReasons, added_retry: Option<Instant>) -> Due {
        let run_at = self.next_round_at(pending);
        let retry = async {
            match added_retry {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let renew = async {
            match &mut self.renew {
                Some(timer) => timer.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = renew => Due::Renewal,
            _ = self.persist.tick() => Due::Persistence,
            _ = retry => Due::AddedRetry,
            _ = tokio::time::sleep_until(run_at) => Due::Round,
        }
    }

    /// A round starts now, woken for `woken` (the wake-ups taken): returns why it runs, which
    /// adds the lock retry when it is due, and the timer when nothing woke it.
    pub(super) fn start_round(&mut self, woken: WakeReasons) -> WakeReasons {
        let now = Instant::now();
        let mut reasons = woken;
        if self.lock_retry_at.take().is_some_and(|at| at <= now) {
            reasons |= WakeReasons::LOCK_RETRY;
        }
        if reasons.is_empty() {
            reasons = if self.last_balanced {
                WakeReasons::INTERVAL
            } else {
                WakeReasons::RETRY
            };
        }
        self.last_round_start = Some(now);
        self.membership_quiet_at = None;
        self.settle_started = None;
        reasons
    }

    /// The round ended now: the next one is due `rebalance_wait` later if it was `balanced`,
    /// else `rebalance_min`; with `retry_locks` (some lock was refused or not answered), the
    /// locks are tried again `lock_retry` from now. A lock refused early in a long round (a
    /// broker that times out, then other topics) is retried `lock_retry` after the round, not
    /// at once: the retry would otherwise be due before the round ends, and every round would
    /// run straight after the previous one.
    pub(super) fn end_round(&mut self, balanced: bool, retry_locks: bool) {
        let now = Instant::now();
        if retry_locks {
            self.lock_retry_at = Some(now + self.intervals.lock_retry);
        }
        self.last_balanced = balanced;
        let wait = if balanced {
            self.intervals.rebalance_wait
        } else {
            self.intervals.rebalance_min
        };
        self.next_due = now + wait;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Without settling, as the Java client.
    fn intervals() -> Intervals {
        Intervals {
            membership_settle: Duration::ZERO,
            adaptive_settle: None,
            ..Intervals::default()
        }
    }

    /// Runs a round now woken for `woken`, ending it at once; returns why it ran.
    fn round(
        s: &mut Schedule,
        woken: WakeReasons,
        balanced: bool,
        retry_locks: bool,
    ) -> WakeReasons {
        let reasons = s.start_round(woken);
        s.end_round(balanced, retry_locks);
        reasons
    }

    /// Waits for the next due thing; returns it with the time it took.
    async fn next(s: &mut Schedule, pending: WakeReasons) -> (Due, Duration) {
        let start = Instant::now();
        let due = s.due(pending, None).await;
        (due, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_round_runs_at_once_without_settling() {
        let mut s = Schedule::new(intervals(), false);
        assert_eq!(
            next(&mut s, WakeReasons::START).await,
            (Due::Round, Duration::ZERO)
        );
        assert_eq!(
            round(&mut s, WakeReasons::START, true, false),
            WakeReasons::START
        );
    }

    #[tokio::test(start_paused = true)]
    async fn balanced_rounds_wait_rebalance_wait_and_unbalanced_ones_rebalance_min() {
        let i = intervals();
        let mut s = Schedule::new(i, false);
        round(&mut s, WakeReasons::START, true, false);
        // Persistence (5 s) ticks on the way to the 20 s round.
        let mut waited = Duration::ZERO;
        loop {
            let (due, took) = next(&mut s, WakeReasons::NONE).await;
            waited += took;
            if due == Due::Round {
                break;
            }
            assert_eq!(due, Due::Persistence);
        }
        assert_eq!(waited, i.rebalance_wait);
        assert_eq!(
            round(&mut s, WakeReasons::NONE, false, false),
            WakeReasons::INTERVAL
        );
        assert_eq!(
            next(&mut s, WakeReasons::NONE).await,
            (Due::Round, i.rebalance_min)
        );
        assert_eq!(
            round(&mut s, WakeReasons::NONE, true, false),
            WakeReasons::RETRY
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_runs_a_round_at_once_but_never_within_rebalance_min() {
        let i = intervals();
        let mut s = Schedule::new(i, false);
        round(&mut s, WakeReasons::START, true, false);
        tokio::time::advance(300 * MS).await;
        let (due, took) = next(&mut s, WakeReasons::MANUAL).await;
        assert_eq!((due, took), (Due::Round, i.rebalance_min - 300 * MS));
        assert_eq!(
            round(&mut s, WakeReasons::MANUAL, true, false),
            WakeReasons::MANUAL
        );
        tokio::time::advance(2 * i.rebalance_min).await;
        assert_eq!(s.next_round_at(WakeReasons::ROUTE_CHANGED), Instant::now());
        assert_eq!(
            s.next_round_at(WakeReasons::NONE),
            Instant::now() + 18 * i.rebalance_min
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_retry_runs_lock_retry_after_the_round_sooner_than_rebalance_min() {
        let i = intervals();
        assert!(i.lock_retry < i.rebalance_min);
        let mut s = Schedule::new(i, false);
        s.start_round(WakeReasons::START);
        // A long round: the retry counts from its end.
        tokio::time::advance(2 * i.rebalance_min).await;
        s.end_round(false, true);
        assert_eq!(
            next(&mut s, WakeReasons::NONE).await,
            (Due::Round, i.lock_retry)
        );
        assert_eq!(
            round(&mut s, WakeReasons::NONE, false, false),
            WakeReasons::LOCK_RETRY
        );
        // Not asked again: the next round is the ordinary retry of an unbalanced round.
        assert_eq!(
            next(&mut s, WakeReasons::NONE).await,
            (Due::Round, i.rebalance_min)
        );
        assert_eq!(
            round(&mut s, WakeReasons::NONE, true, false),
            WakeReasons::RETRY
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_settling_group_pushes_rounds_back_but_no_longer_than_rebalance_wait() {
        let settle = Duration::from_secs(3);
        let i = Intervals {
            membership_settle: settle,
            ..Intervals::default()
        };
        let mut s = Schedule::new(i, false);
        // The start settles too, whatever else asked for the round.
        assert_eq!(
            s.next_round_at(WakeReasons::MANUAL),
            Instant::now() + settle
        );
        assert_eq!(next(&mut s, WakeReasons::START).await, (Due::Round, settle));
        round(&mut s, WakeReasons::START, true, false);
        let burst = Instant::now();
        // A change every 2 s: each pushes the round back, until rebalance_wait after the first.
        let mut ran_at = None;
        for _ in 0..20 {
            s.membership_changed();
            let at = s.next_round_at(WakeReasons::MEMBERSHIP_CHANGED);
            if at <= Instant::now() + 2 * Duration::from_secs(1) {
                ran_at = Some(at);
                break;
            }
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert_eq!(ran_at, Some(burst + i.rebalance_wait));
        // Another reason runs at once (after rebalance_min) despite the settling.
        assert_eq!(
            s.next_round_at(WakeReasons::MEMBERSHIP_CHANGED | WakeReasons::MANUAL),
            Instant::now()
        );
        s.start_round(WakeReasons::MEMBERSHIP_CHANGED);
        s.end_round(true, false);
        // Settled: the next change waits `settle` from now.
        s.membership_changed();
        assert_eq!(
            s.next_round_at(WakeReasons::MEMBERSHIP_CHANGED),
            Instant::now() + settle
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewal_and_persistence_tick_at_their_periods_and_come_before_a_round() {
        let i = Intervals {
            lock_renew: Duration::from_secs(4),
            persist_offsets: Duration::from_secs(6),
            ..intervals()
        };
        let mut s = Schedule::new(i, true);
        round(&mut s, WakeReasons::START, true, false);
        let start = Instant::now();
        let mut seen = Vec::new();
        // A wake-up is pending all along: the round is due at once every time, yet the timers
        // still fire when they are due.
        while start.elapsed() <= Duration::from_secs(12) {
            let due = s.due(WakeReasons::MANUAL, None).await;
            if due == Due::Round {
                // A round that takes a whole second.
                s.start_round(WakeReasons::MANUAL);
                tokio::time::advance(Duration::from_secs(1)).await;
                s.end_round(true, false);
            } else {
                seen.push((due, start.elapsed().as_secs()));
            }
        }
        assert_eq!(
            seen,
            [
                (Due::Renewal, 4),
                (Due::Persistence, 6),
                (Due::Renewal, 8),
                (Due::Renewal, 12),
                (Due::Persistence, 12),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_added_retry_is_due_at_its_time_before_a_round() {
        let i = intervals();
        let mut s = Schedule::new(i, false);
        round(&mut s, WakeReasons::START, true, false);
        let at = Instant::now() + 3 * MS;
        let start = Instant::now();
        assert_eq!(s.due(WakeReasons::NONE, Some(at)).await, Due::AddedRetry);
        assert_eq!(start.elapsed(), 3 * MS);
        // Due at the same time as a round: the retry first.
        tokio::time::advance(i.rebalance_min).await;
        let now = Instant::now();
        assert_eq!(s.due(WakeReasons::MANUAL, Some(now)).await, Due::AddedRetry);
        assert_eq!(s.due(WakeReasons::MANUAL, None).await, Due::Round);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_renews_without_locks() {
        let mut s = Schedule::new(intervals(), false);
        round(&mut s, WakeReasons::START, true, false);
        let mut rounds = 0;
        while rounds < 3 {
            match next(&mut s, WakeReasons::NONE).await.0 {
                Due::Renewal | Due::AddedRetry => panic!("nothing to renew or retry"),
                Due::Persistence => {}
                Due::Round => {
                    round(&mut s, WakeReasons::NONE, true, false);
                    rounds += 1;
                }
            }
        }
    }
}
