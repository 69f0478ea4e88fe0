//! Leases without a consumer, for testing what is built on the lease seam (feature
//! `test-util`): a consume layer's pull loops and workers get a [`QueueLease`] the test
//! cancels, locks and inspects itself, as the runtime would.
//!
//! ```
//! use rebalance_core::MessageQueue;
//! use rebalance_runtime::StartPosition;
//! use rebalance_runtime::testing::DetachedLease;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let detached = DetachedLease::new(MessageQueue::new("T", "b", 0), StartPosition::Offset(0));
//! let lease = detached.lease();
//! let guard = lease.consume_guard().await;
//! assert!(guard.is_some() && detached.guard_held());
//! drop(guard);
//! detached.cancel();
//! assert!(lease.is_cancelled());
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use rebalance_core::MessageQueue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::{LeaseState, QueueLease};
use crate::lease_terms::StartPosition;
use crate::membership::Membership;
use crate::running::ConsumerActivity;

/// A lease that no consumer manages: the test plays the runtime's part (cancels it, grants and
/// expires its broker lock, looks at its consume guard).
#[derive(Debug)]
pub struct DetachedLease {
    lease: QueueLease,
    token: CancellationToken,
    state: Arc<LeaseState>,
}

impl DetachedLease {
    /// A lease of `queue` starting at `start`, of a consumer that locks no queue.
    pub fn new(queue: MessageQueue, start: StartPosition) -> Self {
        Self::build(queue, start, None, None, Membership::unconditional())
    }

    /// A lease of `queue` starting at `start` whose consumer's membership was vouched for by a
    /// heartbeat sent now, and lapses `member_expiry` later
    /// ([`QueueLease::is_trusted`] turns false) unless
    /// [`confirm_membership`](Self::confirm_membership) extends it: a frozen or cut-off client.
    pub fn with_member_expiry(
        queue: MessageQueue,
        start: StartPosition,
        member_expiry: Duration,
    ) -> Self {
        let membership = Membership::new(member_expiry);
        let now = Instant::now();
        membership.confirmed(now, now);
        if let Some(sent) = membership.take_regained() {
            membership.restore(sent);
        }
        Self::build(queue, start, None, None, membership)
    }

    /// A heartbeat sent and accepted now: extends the membership's trust (not across a gap:
    /// a lapsed membership stays lapsed, as the runtime's does until its service restores it).
    pub fn confirm_membership(&self) {
        let now = Instant::now();
        self.state.activity.membership.confirmed(now, now);
    }

    /// A lease of `queue` whose broker lock is trusted until `lock_valid_until`, of a consumer
    /// whose releases wait `force_unlock_after` for the consume guards (ordered consumption or
    /// an exclusive hand-off).
    pub fn locked(
        queue: MessageQueue,
        start: StartPosition,
        lock_valid_until: Instant,
        force_unlock_after: Duration,
    ) -> Self {
        Self::build(
            queue,
            start,
            Some(lock_valid_until),
            Some(force_unlock_after),
            Membership::unconditional(),
        )
    }

    fn build(
        queue: MessageQueue,
        start: StartPosition,
        lock_valid_until: Option<Instant>,
        guarded_release: Option<Duration>,
        membership: Membership,
    ) -> Self {
        let token = CancellationToken::new();
        let activity =
            Arc::new(ConsumerActivity::new(membership).guarding_releases(guarded_release));
        let state = Arc::new(LeaseState::with_activity(lock_valid_until, activity));
        let lease = QueueLease::new(queue, start, Arc::new(token.clone()), state.clone());
        Self {
            lease,
            token,
            state,
        }
    }

    /// The lease (clones of it are the same lease).
    pub fn lease(&self) -> QueueLease {
        self.lease.clone()
    }

    /// Takes the queue away, as a release does (the lease is cancelled).
    pub fn cancel(&self) {
        self.state.drop_lease();
        self.token.cancel();
    }

    /// Trusts the queue's broker lock until `until` (a renewal), or stops trusting it.
    pub fn set_lock_valid_until(&self, until: Instant) {
        self.state.set_lock_valid_until(until);
    }

    /// Whether a batch holds a consume guard of the queue now.
    pub fn guard_held(&self) -> bool {
        !self.state.consume_lock_is_free()
    }
}
