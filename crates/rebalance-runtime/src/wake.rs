//! Coalescing wake-ups that are never lost, with the reasons they were asked for.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::Notify;

/// Why a rebalance round runs; several reasons coalesce into one round.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WakeReasons(u32);

impl WakeReasons {
    /// No reason.
    pub const NONE: Self = Self(0);
    /// The consumer started.
    pub const START: Self = Self(1);
    /// The periodic timer (`rebalance_wait` after a balanced round).
    pub const INTERVAL: Self = Self(1 << 1);
    /// The retry timer (`rebalance_min` after an unbalanced round).
    pub const RETRY: Self = Self(1 << 2);
    /// The directory said the group's membership changed.
    pub const MEMBERSHIP_CHANGED: Self = Self(1 << 3);
    /// A subscribed topic's queue set changed.
    pub const ROUTE_CHANGED: Self = Self(1 << 4);
    /// The application asked (`rebalance_now`).
    pub const MANUAL: Self = Self(1 << 5);
    /// A topic was subscribed or unsubscribed.
    pub const SUBSCRIPTION_CHANGED: Self = Self(1 << 6);
    /// A queue's lock was refused and is tried again.
    pub const LOCK_RETRY: Self = Self(1 << 7);
    /// An ordered queue lost its lock.
    pub const LOCK_LOST: Self = Self(1 << 8);
    /// An operator reset offsets of held queues: they were released and are taken again.
    pub const OFFSET_RESET: Self = Self(1 << 9);
    /// A heartbeat was accepted after this client's membership had lapsed: every queue held
    /// before was released, and the share is taken again.
    pub const MEMBERSHIP_REGAINED: Self = Self(1 << 10);

    pub(crate) const NAMES: [(Self, &'static str); 11] = [
        (Self::START, "start"),
        (Self::INTERVAL, "interval"),
        (Self::RETRY, "retry"),
        (Self::MEMBERSHIP_CHANGED, "membership_changed"),
        (Self::ROUTE_CHANGED, "route_changed"),
        (Self::MANUAL, "manual"),
        (Self::SUBSCRIPTION_CHANGED, "subscription_changed"),
        (Self::LOCK_RETRY, "lock_retry"),
        (Self::LOCK_LOST, "lock_lost"),
        (Self::OFFSET_RESET, "offset_reset"),
        (Self::MEMBERSHIP_REGAINED, "membership_regained"),
    ];

    /// Whether every reason of `other` is present.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// Whether there is no reason.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the reasons present.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .into_iter()
            .filter(move |(r, _)| self.contains(*r))
            .map(|(_, n)| n)
    }
}

impl std::ops::BitOr for WakeReasons {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for WakeReasons {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl fmt::Display for WakeReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.names().collect();
        f.write_str(&names.join("+"))
    }
}

impl fmt::Debug for WakeReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WakeReasons({self})")
    }
}

/// A wake-up signal shared by the tasks of one consumer.
///
/// The pending reasons live in an atomic word: [`wake`](Self::wake) adds reasons and
/// [`take`](Self::take) clears them at the start of a round, so a wake during a round is still
/// pending afterwards and causes another round. The [`Notify`] only interrupts the waiting
/// task; it is never the record of a wake-up, so none can be lost whatever the timing.
#[derive(Debug, Default)]
pub(crate) struct Trigger {
    pending: AtomicU32,
    notify: Notify,
}

impl Trigger {
    /// A trigger with nothing pending.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Asks for a round for `reasons`.
    pub(crate) fn wake(&self, reasons: WakeReasons) {
        self.pending.fetch_or(reasons.0, Ordering::AcqRel);
        self.notify.notify_one();
    }

    /// The reasons pending now, without clearing them.
    pub(crate) fn pending(&self) -> WakeReasons {
        WakeReasons(self.pending.load(Ordering::Acquire))
    }

    /// Takes (and clears) the pending reasons.
    pub(crate) fn take(&self) -> WakeReasons {
        WakeReasons(self.pending.swap(0, Ordering::AcqRel))
    }

    /// Completes after the next [`wake`](Self::wake) (or at once if one happened since the
    /// last time this completed). Check [`pending`](Self::pending) for the truth.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_coalesce_until_taken() {
        let t = Trigger::new();
        t.wake(WakeReasons::ROUTE_CHANGED);
        t.wake(WakeReasons::MANUAL);
        t.wake(WakeReasons::MANUAL);
        let taken = t.take();
        assert!(taken.contains(WakeReasons::ROUTE_CHANGED) && taken.contains(WakeReasons::MANUAL));
        assert_eq!(taken.to_string(), "route_changed+manual");
        assert!(t.take().is_empty());
    }

    #[test]
    fn every_reason_is_its_own_bit_with_its_own_name() {
        // A reason without a bit of its own would vanish from `pending` and from the round
        // report, or be mistaken for another.
        let mut all = WakeReasons::NONE;
        for (reason, name) in WakeReasons::NAMES {
            assert!(!reason.is_empty(), "{name}");
            assert_eq!(reason.0.count_ones(), 1, "{name}");
            assert!(!all.contains(reason), "{name} shares a bit");
            assert_eq!(reason.to_string(), name);
            all |= reason;
        }
        assert_eq!(all.names().count(), WakeReasons::NAMES.len());
    }

    #[test]
    fn or_is_a_union() {
        let manual = WakeReasons::MANUAL;
        assert_eq!(manual | manual, manual);
        let both = manual | WakeReasons::RETRY;
        assert_eq!(both | WakeReasons::RETRY, both);
        assert!(!(both | both).is_empty());
        assert_eq!((both | both).to_string(), "retry+manual");
    }

    #[tokio::test]
    async fn a_wake_before_waiting_is_not_lost() {
        let t = Trigger::new();
        t.wake(WakeReasons::MEMBERSHIP_CHANGED);
        // The stored permit completes the first wait at once.
        tokio::time::timeout(std::time::Duration::from_secs(1), t.notified())
            .await
            .expect("notified");
        assert!(t.pending().contains(WakeReasons::MEMBERSHIP_CHANGED));
    }
}
