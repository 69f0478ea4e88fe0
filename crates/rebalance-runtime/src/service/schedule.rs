//! When the service does what: the rounds (balanced and unbalanced intervals, wake-ups, the
//! group settling, lock retries), the membership checks between steady rounds, lock renewal
//! and offset persistence.
//!
//! A [`Schedule`] is a value: it never reads the clock and owns no timer. Given `now`, it says
//! what is due ([`Schedule::take_due`]) or when something next will be
//! ([`Schedule::next_at`]); [`Service::run`](super::Service::run) sleeps until then.

use std::time::Duration;

use tokio::time::Instant;

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
    /// Ask the directory whether the members are still those of the last round (every
    /// `membership_check` after a balanced round, while no round is due sooner).
    MembershipCheck,
    /// Ask again for the locks at risk (their broker may have lost them, and the last request
    /// went unanswered): `lock_retry` after it.
    AtRisk,
}

/// How late a tick may be taken and still count as on time: tokio's `Interval` tolerance,
/// which the periodic work kept when it ran on tokio intervals.
const LATE_TICK: Duration = Duration::from_millis(5);

/// A periodic deadline: every `period`, the first one `period` after the start. A tick taken
/// late (the service was busy) moves the next one to `period` after it was taken, so that late
/// ticks never come in a burst (tokio's `MissedTickBehavior::Delay`).
#[derive(Debug, Clone, Copy)]
struct Ticks {
    next: Instant,
    period: Duration,
}

impl Ticks {
    fn starting(start: Instant, period: Duration) -> Self {
        Self {
            next: start + period,
            period,
        }
    }

    /// The tick due at or before `now` was taken at `now`.
    fn taken(&mut self, now: Instant) {
        self.next = if now > self.next + LATE_TICK {
            now + self.period
        } else {
            self.next + self.period
        };
    }
}

/// The service's timers and the next wake. Owned by the service task.
#[derive(Debug)]
pub(super) struct Schedule {
    intervals: Intervals,
    /// `None` when no queue is ever locked.
    renew: Option<Ticks>,
    persist: Ticks,
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
    /// The membership checks, every `membership_check` from the end of the last round (`None`
    /// before the first round, or without checks).
    check: Option<Ticks>,
    /// The first round ran alone (the directory listed nobody else at the start) and nobody
    /// has arrived since.
    took_alone: bool,
    /// Somebody arrived within the start's burst after the first round took every queue alone:
    /// the next round gives every queue back at once (see
    /// [`membership_changed`](Self::membership_changed)).
    give_back: bool,
    /// The queues were given back: until its next round the member waits for the group to
    /// settle as a starting member does.
    restarting: bool,
    /// When the locks at risk (see `Service::lock_losses`) are asked for again.
    at_risk_retry_at: Option<Instant>,
}

impl Schedule {
    /// The schedule of a consumer starting at `now`; `renewing`: whether it locks queues.
    pub(super) fn new(intervals: Intervals, renewing: bool, now: Instant) -> Self {
        let every = |period| Ticks::starting(now, period);
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
            check: None,
            took_alone: false,
            give_back: false,
            restarting: false,
            at_risk_retry_at: None,
        }
    }

    /// When the next membership check is due, if one is worth making with `pending`
    /// wake-ups: only while the group is steady (the last round balanced, nothing pending,
    /// not settling, no lock retry) and before the next round, which lists the members anyway.
    fn check_at(&self, pending: WakeReasons) -> Option<Instant> {
        let check = self.check?;
        let steady = self.last_balanced
            && pending.is_empty()
            && self.membership_quiet_at.is_none()
            && self.lock_retry_at.is_none();
        (steady && check.next < self.next_due).then_some(check.next)
    }

    /// The directory said the group's membership changed: while the group settles (a fixed
    /// window, or an adaptive one that finds the group changing), the round waits until it has
    /// been quiet long enough. `now`: when the change was notified.
    ///
    /// A member whose first round took every queue alone (nobody else was listed at its start)
    /// and that sees somebody arrive within the start's burst (less than `AdaptiveSettle::max`
    /// after its start) was the first of a group starting slowly, not alone: the newcomers
    /// plan from the pace of their arrivals and would take their shares while it still holds
    /// them (its next round may wait `rebalance_min`). So it gives every queue back at once
    /// (the next round releases everything, whatever `rebalance_min` says) and then waits for
    /// the group to settle like a starting member.
    pub(super) fn membership_changed(&mut self, now: Instant) {
        let mut starting = self.last_round_start.is_none() || self.restarting;
        if std::mem::take(&mut self.took_alone) && self.settle.continues_burst(now) {
            tracing::info!(
                "a member arrived right after this one started alone: giving every queue back at once, then waiting for the group to settle"
            );
            self.give_back = true;
            self.restarting = true;
            starting = true;
        }
        if let Some(window) = self.settle.change(now, starting) {
            self.membership_quiet_at = Some(now + window);
            self.settle_started.get_or_insert(now);
        }
    }

    /// Whether the next round gives every queue back (see
    /// [`membership_changed`](Self::membership_changed)).
    pub(super) fn giving_back(&self) -> bool {
        self.give_back
    }

    /// Whether the member's first round may run sooner if it is alone in the group (the
    /// adaptive settle window, nothing seen since the start, no round yet): then the service
    /// asks the directory once ([`started_alone`](Self::started_alone)).
    pub(super) fn may_start_alone(&self) -> bool {
        self.last_round_start.is_none() && self.settle.may_start_alone()
    }

    /// The directory lists nobody but this member, which has not run a round yet: its first
    /// round waits only [`AdaptiveSettle::min`](crate::config::AdaptiveSettle::min) from its
    /// start (nobody else holds a queue it would take; members starting with it make their
    /// pace known by then), unless a change was seen meanwhile.
    pub(super) fn started_alone(&mut self) {
        if self.last_round_start.is_some() {
            return;
        }
        if let (Some(window), Some(started)) = (self.settle.alone(), self.settle_started) {
            self.membership_quiet_at = Some(started + window);
        }
    }

    /// When the next round may run, at `now` with `pending` wake-ups: as soon as allowed if there
    /// are any, else when the timer says; never sooner than `rebalance_min` after the previous
    /// round started, except for the retry of a refused lock, which runs `lock_retry` (500 ms)
    /// after the round that asked for it, as the Java client's `rebalanceLater(500)` does.
    ///
    /// While the group settles (a settle window applies, and only membership changes, or this
    /// member's start, are pending), nothing runs until the group has been unchanged for the
    /// window, or `rebalance_wait` after the change that began the burst: not the timers, not
    /// lock retries, which would plan from a group still changing.
    pub(super) fn next_round_at(&self, now: Instant, pending: WakeReasons) -> Instant {
        if self.give_back {
            return now;
        }
        let intervals = &self.intervals;
        let earliest = self
            .last_round_start
            .map_or(now, |s| s + intervals.rebalance_min);
        let settling = WakeReasons::START | WakeReasons::MEMBERSHIP_CHANGED;
        if let (Some(quiet), Some(started)) = (self.membership_quiet_at, self.settle_started) {
            let only_changes =
                self.last_round_start.is_none() || self.restarting || settling.contains(pending);
            if !pending.is_empty() && only_changes {
                return quiet.min(started + intervals.rebalance_wait).max(earliest);
            }
        }
        let due = if pending.is_empty() {
            self.next_due
        } else {
            now
        };
        let due = due.max(earliest);
        match self.lock_retry_at {
            Some(retry) => due.min(retry),
            None => due,
        }
    }

    /// When something is next due, at `now` with `pending` wake-ups and a `queues_added` retry
    /// due at `added_retry`: the earliest of the lock renewal, the persistence, the retry and
    /// the round ([`next_round_at`](Self::next_round_at)). May be `now` or earlier: then
    /// something is due at once.
    pub(super) fn next_at(
        &self,
        now: Instant,
        pending: WakeReasons,
        added_retry: Option<Instant>,
    ) -> Instant {
        [
            self.renew.map(|t| t.next),
            self.at_risk_retry_at,
            Some(self.persist.next),
            added_retry,
            self.check_at(pending),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_round_at(now, pending), Instant::min)
    }

    /// What is due at `now`, with `pending` wake-ups and a `queues_added` retry due at
    /// `added_retry`, taken (a renewal, persistence or check tick counts as done, and its next
    /// one is scheduled); `None` when nothing is. When several are due, renewal, persistence and
    /// the retry come before the round: they are short, and rounds that run back to back (each
    /// longer than `rebalance_min`, with a wake-up during each) must not starve them. A
    /// membership check comes last: a round due at the same time lists the members anyway.
    pub(super) fn take_due(
        &mut self,
        now: Instant,
        pending: WakeReasons,
        added_retry: Option<Instant>,
    ) -> Option<Due> {
        if let Some(renew) = self.renew.as_mut().filter(|t| t.next <= now) {
            renew.taken(now);
            return Some(Due::Renewal);
        }
        if self.at_risk_retry_at.is_some_and(|at| at <= now) {
            self.at_risk_retry_at = None;
            return Some(Due::AtRisk);
        }
        if self.persist.next <= now {
            self.persist.taken(now);
            return Some(Due::Persistence);
        }
        if added_retry.is_some_and(|at| at <= now) {
            return Some(Due::AddedRetry);
        }
        if self.next_round_at(now, pending) <= now {
            return Some(Due::Round);
        }
        if self.check_at(pending).is_some_and(|at| at <= now) {
            if let Some(check) = self.check.as_mut() {
                check.taken(now);
            }
            return Some(Due::MembershipCheck);
        }
        None
    }

    /// Takes the lock renewal if it is due at `now` (a round asks between its steps).
    pub(super) fn take_renewal(&mut self, now: Instant) -> bool {
        match self.renew.as_mut().filter(|t| t.next <= now) {
            Some(renew) => {
                renew.taken(now);
                true
            }
            None => false,
        }
    }

    /// A round starts at `now`, woken for `woken` (the wake-ups taken): returns why it runs,
    /// which adds the lock retry when it is due, and the timer when nothing woke it.
    pub(super) fn start_round(&mut self, now: Instant, woken: WakeReasons) -> WakeReasons {
        if std::mem::take(&mut self.give_back) {
            // The group is still settling: the round that takes the shares comes later.
            self.last_round_start = Some(now);
            return woken | WakeReasons::MEMBERSHIP_CHANGED;
        }
        self.took_alone = self.last_round_start.is_none() && self.settle.alone_so_far();
        self.restarting = false;
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

    /// The locks at risk are asked for again at `at` (`None`: none is at risk any more).
    pub(super) fn retry_at_risk(&mut self, at: Option<Instant>) {
        self.at_risk_retry_at = at;
    }

    /// The round ended at `now`: the next one is due `rebalance_wait` later if it was `balanced`,
    /// else `rebalance_min`; with `retry_locks` (some lock was refused or not answered), the
    /// locks are tried again `lock_retry` from then. A lock refused early in a long round (a
    /// broker that times out, then other topics) is retried `lock_retry` after the round, not
    /// at once: the retry would otherwise be due before the round ends, and every round would
    /// run straight after the previous one.
    pub(super) fn end_round(&mut self, now: Instant, balanced: bool, retry_locks: bool) {
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
        self.check = self
            .intervals
            .membership_check
            .map(|period| Ticks::starting(now, period));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Without settling or membership checks, as the Java client.
    fn intervals() -> Intervals {
        Intervals {
            membership_settle: Duration::ZERO,
            adaptive_settle: None,
            membership_check: None,
            ..Intervals::default()
        }
    }

    /// A schedule on a clock that moves only when the test says: any instant will do as the
    /// start, and nothing needs a runtime.
    struct Clock {
        s: Schedule,
        now: Instant,
    }

    impl Clock {
        fn new(intervals: Intervals, renewing: bool) -> Self {
            let now = Instant::from_std(std::time::Instant::now());
            Self {
                s: Schedule::new(intervals, renewing, now),
                now,
            }
        }

        fn advance(&mut self, by: Duration) {
            self.now += by;
        }

        /// Sleeps until something is due, as `Service::run` does, and takes it; returns it
        /// with the time slept.
        fn next_with(
            &mut self,
            pending: WakeReasons,
            added_retry: Option<Instant>,
        ) -> (Due, Duration) {
            let at = self.s.next_at(self.now, pending, added_retry).max(self.now);
            let slept = at - self.now;
            self.now = at;
            let due = self.s.take_due(self.now, pending, added_retry);
            (due.expect("something is due when the schedule said"), slept)
        }

        fn next(&mut self, pending: WakeReasons) -> (Due, Duration) {
            self.next_with(pending, None)
        }

        /// Runs a round now woken for `woken`, ending it at once; returns why it ran.
        fn round(&mut self, woken: WakeReasons, balanced: bool, retry_locks: bool) -> WakeReasons {
            let reasons = self.s.start_round(self.now, woken);
            self.s.end_round(self.now, balanced, retry_locks);
            reasons
        }

        fn next_round_at(&self, pending: WakeReasons) -> Instant {
            self.s.next_round_at(self.now, pending)
        }
    }

    #[test]
    fn the_first_round_runs_at_once_without_settling() {
        let mut c = Clock::new(intervals(), false);
        assert_eq!(c.next(WakeReasons::START), (Due::Round, Duration::ZERO));
        assert_eq!(c.round(WakeReasons::START, true, false), WakeReasons::START);
    }

    #[test]
    fn nothing_is_due_before_its_time() {
        let i = intervals();
        let mut c = Clock::new(i, true);
        c.round(WakeReasons::START, true, false);
        let at = c.s.next_at(c.now, WakeReasons::NONE, None);
        assert_eq!(at, c.now + i.persist_offsets);
        assert_eq!(c.s.take_due(at - MS, WakeReasons::NONE, None), None);
        assert_eq!(
            c.s.take_due(at, WakeReasons::NONE, None),
            Some(Due::Persistence)
        );
        // Taken: the next persistence is a period later.
        assert_eq!(c.s.take_due(at, WakeReasons::NONE, None), None);
        assert_eq!(
            c.s.next_at(at, WakeReasons::NONE, None),
            c.now + i.persist_offsets * 2
        );
    }

    #[test]
    fn balanced_rounds_wait_rebalance_wait_and_unbalanced_ones_rebalance_min() {
        let i = intervals();
        let mut c = Clock::new(i, false);
        c.round(WakeReasons::START, true, false);
        // Persistence (5 s) ticks on the way to the 20 s round.
        let mut waited = Duration::ZERO;
        loop {
            let (due, took) = c.next(WakeReasons::NONE);
            waited += took;
            if due == Due::Round {
                break;
            }
            assert_eq!(due, Due::Persistence);
        }
        assert_eq!(waited, i.rebalance_wait);
        assert_eq!(
            c.round(WakeReasons::NONE, false, false),
            WakeReasons::INTERVAL
        );
        assert_eq!(c.next(WakeReasons::NONE), (Due::Round, i.rebalance_min));
        assert_eq!(c.round(WakeReasons::NONE, true, false), WakeReasons::RETRY);
    }

    #[test]
    fn a_wake_up_runs_a_round_at_once_but_never_within_rebalance_min() {
        let i = intervals();
        let mut c = Clock::new(i, false);
        c.round(WakeReasons::START, true, false);
        c.advance(300 * MS);
        assert_eq!(
            c.next(WakeReasons::MANUAL),
            (Due::Round, i.rebalance_min - 300 * MS)
        );
        assert_eq!(
            c.round(WakeReasons::MANUAL, true, false),
            WakeReasons::MANUAL
        );
        c.advance(2 * i.rebalance_min);
        assert_eq!(c.next_round_at(WakeReasons::ROUTE_CHANGED), c.now);
        assert_eq!(
            c.next_round_at(WakeReasons::NONE),
            c.now + 18 * i.rebalance_min
        );
    }

    #[test]
    fn a_lock_retry_runs_lock_retry_after_the_round_sooner_than_rebalance_min() {
        let i = intervals();
        assert!(i.lock_retry < i.rebalance_min);
        let mut c = Clock::new(i, false);
        c.s.start_round(c.now, WakeReasons::START);
        // A long round: the retry counts from its end.
        c.advance(2 * i.rebalance_min);
        c.s.end_round(c.now, false, true);
        assert_eq!(c.next(WakeReasons::NONE), (Due::Round, i.lock_retry));
        assert_eq!(
            c.round(WakeReasons::NONE, false, false),
            WakeReasons::LOCK_RETRY
        );
        // Not asked again: the next round is the ordinary retry of an unbalanced round.
        assert_eq!(c.next(WakeReasons::NONE), (Due::Round, i.rebalance_min));
        assert_eq!(c.round(WakeReasons::NONE, true, false), WakeReasons::RETRY);
    }

    #[test]
    fn a_settling_group_pushes_rounds_back_but_no_longer_than_rebalance_wait() {
        let settle = Duration::from_secs(3);
        let i = Intervals {
            membership_settle: settle,
            ..Intervals::default()
        };
        let mut c = Clock::new(i, false);
        // The start settles too, whatever else asked for the round.
        assert_eq!(c.next_round_at(WakeReasons::MANUAL), c.now + settle);
        assert_eq!(c.next(WakeReasons::START), (Due::Round, settle));
        c.round(WakeReasons::START, true, false);
        let burst = c.now;
        // A change every 2 s: each pushes the round back, until rebalance_wait after the first.
        let mut ran_at = None;
        for _ in 0..20 {
            c.s.membership_changed(c.now);
            let at = c.next_round_at(WakeReasons::MEMBERSHIP_CHANGED);
            if at <= c.now + 2 * Duration::from_secs(1) {
                ran_at = Some(at);
                break;
            }
            c.advance(Duration::from_secs(2));
        }
        assert_eq!(ran_at, Some(burst + i.rebalance_wait));
        // Another reason runs at once (after rebalance_min) despite the settling.
        assert_eq!(
            c.next_round_at(WakeReasons::MEMBERSHIP_CHANGED | WakeReasons::MANUAL),
            c.now
        );
        c.round(WakeReasons::MEMBERSHIP_CHANGED, true, false);
        // Settled: the next change waits `settle` from now.
        c.s.membership_changed(c.now);
        assert_eq!(
            c.next_round_at(WakeReasons::MEMBERSHIP_CHANGED),
            c.now + settle
        );
    }

    #[test]
    fn renewal_and_persistence_tick_at_their_periods_and_come_before_a_round() {
        let i = Intervals {
            lock_renew: Duration::from_secs(4),
            persist_offsets: Duration::from_secs(6),
            ..intervals()
        };
        let mut c = Clock::new(i, true);
        c.round(WakeReasons::START, true, false);
        let start = c.now;
        let mut seen = Vec::new();
        // A wake-up is pending all along: the round is due at once every time, yet the timers
        // still fire when they are due.
        while c.now - start <= Duration::from_secs(12) {
            let (due, _) = c.next(WakeReasons::MANUAL);
            if due == Due::Round {
                // A round that takes a whole second.
                c.s.start_round(c.now, WakeReasons::MANUAL);
                c.advance(Duration::from_secs(1));
                c.s.end_round(c.now, true, false);
            } else {
                seen.push((due, (c.now - start).as_secs()));
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

    #[test]
    fn a_tick_taken_late_moves_the_next_one_a_period_after_it_and_never_bursts() {
        let i = Intervals {
            persist_offsets: Duration::from_secs(5),
            // No round in the way.
            rebalance_wait: Duration::from_secs(60),
            ..intervals()
        };
        let mut c = Clock::new(i, false);
        c.round(WakeReasons::START, true, false);
        let start = c.now;
        // Busy until 12 s: the tick due at 5 s (and the one of 10 s) is taken once, then 5 s
        // after that.
        c.advance(Duration::from_secs(12));
        assert_eq!(
            c.s.take_due(c.now, WakeReasons::NONE, None),
            Some(Due::Persistence)
        );
        assert_eq!(c.s.take_due(c.now, WakeReasons::NONE, None), None);
        assert_eq!(
            c.s.next_at(c.now, WakeReasons::NONE, None),
            start + Duration::from_secs(17)
        );
        // Taken a little late (within tokio's 5 ms): the period holds.
        c.now = start + Duration::from_secs(17) + 4 * MS;
        assert_eq!(
            c.s.take_due(c.now, WakeReasons::NONE, None),
            Some(Due::Persistence)
        );
        assert_eq!(
            c.s.next_at(c.now, WakeReasons::NONE, None),
            start + Duration::from_secs(22)
        );
    }

    #[test]
    fn an_added_retry_is_due_at_its_time_before_a_round() {
        let i = intervals();
        let mut c = Clock::new(i, false);
        c.round(WakeReasons::START, true, false);
        let at = c.now + 3 * MS;
        assert_eq!(
            c.next_with(WakeReasons::NONE, Some(at)),
            (Due::AddedRetry, 3 * MS)
        );
        // Due at the same time as a round: the retry first.
        c.advance(i.rebalance_min);
        let now = c.now;
        assert_eq!(
            c.next_with(WakeReasons::MANUAL, Some(now)),
            (Due::AddedRetry, Duration::ZERO)
        );
        assert_eq!(
            c.next_with(WakeReasons::MANUAL, None),
            (Due::Round, Duration::ZERO)
        );
    }

    #[test]
    fn a_start_alone_runs_its_first_round_after_min_instead_of_max() {
        let i = Intervals::default();
        let config = i.adaptive_settle.expect("adaptive by default");
        let mut c = Clock::new(i, false);
        assert_eq!(c.next_round_at(WakeReasons::START), c.now + config.max);
        assert!(c.s.may_start_alone());
        c.s.started_alone();
        assert!(!c.s.may_start_alone());
        assert_eq!(c.next(WakeReasons::START), (Due::Round, config.min));
        c.round(WakeReasons::START, true, false);
        // Only before the first round.
        assert!(!c.s.may_start_alone());
        let before = c.next_round_at(WakeReasons::NONE);
        c.s.started_alone();
        assert_eq!(c.next_round_at(WakeReasons::NONE), before);
    }

    #[test]
    fn an_arrival_right_after_a_lone_first_round_gives_everything_back_then_settles() {
        let i = Intervals::default();
        let config = i.adaptive_settle.expect("adaptive by default");
        let mut c = Clock::new(i, false);
        c.s.started_alone();
        c.next(WakeReasons::START);
        c.round(WakeReasons::START, true, false);
        assert!(!c.s.giving_back());
        // Somebody arrives 30 ms after the start: the give-back round is due at once, though
        // `rebalance_min` has not passed.
        c.advance(10 * MS);
        c.s.membership_changed(c.now);
        assert!(c.s.giving_back());
        assert_eq!(
            c.next(WakeReasons::MEMBERSHIP_CHANGED),
            (Due::Round, Duration::ZERO)
        );
        assert_eq!(
            c.round(WakeReasons::MEMBERSHIP_CHANGED, true, false),
            WakeReasons::MEMBERSHIP_CHANGED
        );
        assert!(!c.s.giving_back());
        // Then it waits like a starting member: for the pace (10 x 30 ms), and at least
        // `rebalance_min` after the give-back; another reason does not cut the wait short.
        let due = c.next_round_at(WakeReasons::MEMBERSHIP_CHANGED | WakeReasons::MANUAL);
        assert_eq!(due, c.now + i.rebalance_min);
        assert!(c.now + 300 * MS <= due);
        c.now = due;
        c.round(WakeReasons::MEMBERSHIP_CHANGED, true, false);
        // A running member from then on: a later arrival is acted upon at once, no giving back.
        c.advance(2 * config.max);
        c.s.membership_changed(c.now);
        assert!(!c.s.giving_back());
        assert_eq!(c.next_round_at(WakeReasons::MEMBERSHIP_CHANGED), c.now);
    }

    #[test]
    fn an_arrival_long_after_a_lone_first_round_is_an_ordinary_change() {
        let i = Intervals::default();
        let config = i.adaptive_settle.expect("adaptive by default");
        let mut c = Clock::new(i, false);
        c.s.started_alone();
        c.next(WakeReasons::START);
        c.round(WakeReasons::START, true, false);
        c.advance(config.max + MS);
        c.s.membership_changed(c.now);
        assert!(!c.s.giving_back());
    }

    #[test]
    fn membership_checks_run_every_period_between_balanced_rounds_only() {
        let check = Duration::from_secs(1);
        let i = Intervals {
            membership_check: Some(check),
            persist_offsets: Duration::from_secs(60),
            rebalance_wait: Duration::from_secs(5),
            ..intervals()
        };
        let mut c = Clock::new(i, false);
        assert_eq!(c.next(WakeReasons::START), (Due::Round, Duration::ZERO));
        c.round(WakeReasons::START, true, false);
        // A check every second until the round, which lists the members itself.
        let mut seen = Vec::new();
        loop {
            let (due, slept) = c.next(WakeReasons::NONE);
            seen.push((due, slept));
            if due == Due::Round {
                break;
            }
        }
        let mut expected = vec![(Due::MembershipCheck, check); 4];
        expected.push((Due::Round, check));
        assert_eq!(seen, expected);
        // After an unbalanced round the next round comes first (`rebalance_min`).
        c.round(WakeReasons::NONE, false, false);
        assert_eq!(c.next(WakeReasons::NONE), (Due::Round, i.rebalance_min));
        c.round(WakeReasons::NONE, true, false);
        // A pending wake-up: the round, not a check.
        c.advance(check);
        assert_eq!(
            c.s.take_due(c.now, WakeReasons::MANUAL, None),
            Some(Due::Round)
        );
        // Without checks, the round only.
        let mut off = Clock::new(
            Intervals {
                membership_check: None,
                ..i
            },
            false,
        );
        off.round(WakeReasons::START, true, false);
        assert_eq!(off.next(WakeReasons::NONE), (Due::Round, i.rebalance_wait));
    }

    #[test]
    fn no_check_while_the_group_settles_or_a_lock_is_retried() {
        let i = Intervals {
            membership_check: Some(Duration::from_millis(100)),
            ..Intervals::default()
        };
        let mut c = Clock::new(i, false);
        c.s.started_alone();
        let (due, _) = c.next(WakeReasons::START);
        assert_eq!(due, Due::Round);
        c.round(WakeReasons::START, true, true);
        // A lock retry is due in 500 ms: no check before it.
        assert_eq!(c.next(WakeReasons::NONE), (Due::Round, i.lock_retry));
        c.round(WakeReasons::NONE, true, false);
        // Changes keep coming: the group settles, and no check runs meanwhile.
        for _ in 0..3 {
            c.s.membership_changed(c.now);
            c.advance(Duration::from_millis(10));
        }
        let (due, _) = c.next(WakeReasons::MEMBERSHIP_CHANGED);
        assert_eq!(due, Due::Round);
    }

    #[test]
    fn nothing_renews_without_locks() {
        let mut c = Clock::new(intervals(), false);
        c.round(WakeReasons::START, true, false);
        let mut rounds = 0;
        while rounds < 3 {
            match c.next(WakeReasons::NONE).0 {
                Due::Renewal | Due::AddedRetry | Due::MembershipCheck | Due::AtRisk => {
                    panic!("nothing to renew, retry or check")
                }
                Due::Persistence => {}
                Due::Round => {
                    c.round(WakeReasons::NONE, true, false);
                    rounds += 1;
                }
            }
        }
    }
}
