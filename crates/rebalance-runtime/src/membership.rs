//! [`Membership`]: until when this client can be sure that the group still counts it as a
//! member, so that no other member has been given its queues.
//!
//! A RocketMQ broker drops a client it has not heard from for its `channelExpiredTimeout`
//! (120 s by default), and the other members then split that client's queues among themselves.
//! A client cannot see that happen while it is frozen (a GC pause, a stopped VM) or cut off
//! from the brokers; when it is back, the queues it holds may already be someone else's. So
//! each heartbeat a broker accepted vouches for the client until it was *sent* plus
//! [`Intervals::member_expiry`](crate::config::Intervals::member_expiry) (the broker received it
//! after it was sent, so it keeps the client at least that long), and a lease is trusted only
//! until then ([`QueueLease::is_trusted`](crate::QueueLease::is_trusted)). The consume layer
//! checks it before each pull and each batch: a frozen client that wakes past that instant
//! consumes nothing more from the queues it held before it knows where it stands.
//!
//! Trust is continuous or not at all: a heartbeat accepted after the trust ran out (its answer
//! read at or after the last instant vouched for) does not extend it, since the broker may have
//! dropped the client in between and the others may hold its queues. It is kept aside
//! ([`regained`](Membership::regained)) for the service, which releases every queue held before
//! the gap (their progress is not written: the next owner's may be further) and only then trusts
//! the new heartbeat ([`restore`](Membership::restore)); its next round takes its share again,
//! from the offsets stored.
//!
//! Lock-free: the heartbeat task confirms, the service restores, the leases read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Trusted for good: broadcasting consumers (no queue of theirs is anyone else's).
const FOREVER: u64 = u64::MAX;

/// Until when this client's membership is vouched for (see the [module documentation](self)).
#[derive(Debug)]
pub(crate) struct Membership {
    /// Instants are kept as nanoseconds since this one.
    base: Instant,
    /// The last instant vouched for, in nanoseconds since `base`; 0: none (never confirmed, or
    /// the trust ran out and the service has not restored it yet).
    trusted_until: AtomicU64,
    /// A confirmation that came after the trust ran out, waiting for the service: when its
    /// heartbeat was sent, in nanoseconds since `base`, plus one; 0: none.
    after_gap: AtomicU64,
    /// How long a broker keeps a client it no longer hears from.
    expiry: Duration,
    /// Wakes the service when a confirmation came after a gap.
    pub(crate) regained: Notify,
}

impl Membership {
    /// A membership not confirmed yet, vouched for `expiry` by each accepted heartbeat.
    pub(crate) fn new(expiry: Duration) -> Self {
        Self {
            base: Instant::now(),
            trusted_until: AtomicU64::new(0),
            after_gap: AtomicU64::new(0),
            expiry,
            regained: Notify::new(),
        }
    }

    /// A membership that is always trusted (broadcasting).
    pub(crate) fn unconditional() -> Self {
        let membership = Self::new(Duration::ZERO);
        membership.trusted_until.store(FOREVER, Ordering::Release);
        membership
    }

    fn nanos(&self, at: Instant) -> u64 {
        // Saturating both ways: an instant before the base is 0, one after ~584 years the max.
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(FOREVER - 1)
    }

    /// Whether the membership is vouched for at `now`.
    pub(crate) fn is_trusted(&self, now: Instant) -> bool {
        self.nanos(now) < self.trusted_until.load(Ordering::Acquire)
    }

    /// Until when the membership is vouched for; `None` when it is not (never confirmed, or
    /// not restored since it ran out). An instant in the past means it ran out.
    pub(crate) fn trusted_until(&self) -> Option<Instant> {
        match self.trusted_until.load(Ordering::Acquire) {
            0 => None,
            FOREVER => Some(self.base + Duration::from_secs(100 * 365 * 24 * 3600)),
            nanos => Some(self.base + Duration::from_nanos(nanos)),
        }
    }

    /// A heartbeat sent at `sent` was accepted; its answer was read at `answered`. Extends the
    /// trust when it had not run out at `answered`; otherwise keeps the confirmation for the
    /// service and wakes it. Returns whether the trust was extended.
    pub(crate) fn confirmed(&self, sent: Instant, answered: Instant) -> bool {
        let answered = self.nanos(answered);
        let vouched = self.nanos(sent + self.expiry);
        let extended = self
            .trusted_until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |until| {
                (until != 0 && until != FOREVER && answered < until).then_some(until.max(vouched))
            })
            .is_ok();
        if extended || self.trusted_until.load(Ordering::Acquire) == FOREVER {
            return true;
        }
        // Kept for the service; a later confirmation replaces an earlier one.
        let sent = self.nanos(sent).saturating_add(1);
        self.after_gap.fetch_max(sent, Ordering::AcqRel);
        self.regained.notify_one();
        false
    }

    /// The confirmation that came after the trust ran out, if any (taken: the service
    /// releases what it held before, then calls [`restore`](Self::restore) with it).
    pub(crate) fn take_regained(&self) -> Option<Instant> {
        match self.after_gap.swap(0, Ordering::AcqRel) {
            0 => None,
            plus_one => Some(self.base + Duration::from_nanos(plus_one - 1)),
        }
    }

    /// Trusts the membership again from the heartbeat sent at `sent`, accepted after a gap,
    /// once nothing held before the gap is consumed any more.
    pub(crate) fn restore(&self, sent: Instant) {
        let vouched = self.nanos(sent + self.expiry);
        let _ = self
            .trusted_until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |until| {
                (until != FOREVER).then_some(until.max(vouched))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPIRY: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn trust_runs_from_each_heartbeat_sent_and_never_across_a_gap() {
        let membership = Membership::new(EXPIRY);
        let t0 = Instant::now();
        assert!(!membership.is_trusted(t0), "not confirmed yet");
        // The first confirmation comes after "nothing": the service restores it.
        assert!(!membership.confirmed(t0, t0));
        assert_eq!(membership.take_regained(), Some(t0));
        assert_eq!(membership.take_regained(), None, "taken once");
        membership.restore(t0);
        assert!(membership.is_trusted(t0 + EXPIRY - Duration::from_millis(1)));
        assert!(!membership.is_trusted(t0 + EXPIRY));
        // A heartbeat answered in time extends it from when it was sent.
        let sent = t0 + Duration::from_secs(3);
        assert!(membership.confirmed(sent, sent + Duration::from_secs(1)));
        assert_eq!(membership.trusted_until(), Some(sent + EXPIRY));
        // An older heartbeat answered late never shortens it.
        assert!(membership.confirmed(t0 + Duration::from_secs(1), sent + Duration::from_secs(2)));
        assert_eq!(membership.trusted_until(), Some(sent + EXPIRY));
        // One answered after the trust ran out (a frozen client, a healed partition) does not
        // extend it: the broker may have dropped the client in between.
        let late = sent + EXPIRY + Duration::from_secs(50);
        assert!(!membership.confirmed(late, late));
        assert!(!membership.is_trusted(late));
        assert_eq!(membership.take_regained(), Some(late));
        membership.restore(late);
        assert!(membership.is_trusted(late + EXPIRY - Duration::from_millis(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_sent_before_the_gap_and_answered_after_it_counts_as_after() {
        let membership = Membership::new(EXPIRY);
        let t0 = Instant::now();
        membership.confirmed(t0, t0);
        membership.restore(membership.take_regained().unwrap());
        // Sent while trusted, answered once the trust ran out: the broker may have received it
        // after dropping the client.
        let sent = t0 + Duration::from_secs(9);
        assert!(!membership.confirmed(sent, t0 + EXPIRY + Duration::from_secs(1)));
        assert!(!membership.is_trusted(t0 + EXPIRY + Duration::from_secs(1)));
        assert_eq!(membership.take_regained(), Some(sent));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unconditional_membership_is_always_trusted() {
        let membership = Membership::unconditional();
        let now = Instant::now();
        assert!(membership.is_trusted(now + Duration::from_secs(1_000_000)));
        assert!(membership.confirmed(now, now + Duration::from_secs(1_000_000)));
        assert_eq!(membership.take_regained(), None);
        membership.restore(now);
        assert!(membership.is_trusted(now + Duration::from_secs(1_000_000)));
    }
}
