//! [`QueueLocker`]: exclusive broker locks, for ordered consumption and exclusive hand-off.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};

use crate::RemoteError;

/// Locks queues at their brokers so that only one client consumes an ordered queue.
///
/// Locks expire at the broker when they are not renewed (RocketMQ: 60 s); the runtime renews
/// them every [`Intervals::lock_renew`](crate::config::Intervals::lock_renew).
///
/// Every call must end in bounded time (the RocketMQ transport's requests time out after 3 s):
/// the runtime awaits each answer, and a call that never returns stalls the rounds and the
/// lock renewals.
#[async_trait]
pub trait QueueLocker: Send + Sync + 'static {
    /// Locks (or renews) `queues` for `client` and says, queue by queue, what happened: granted,
    /// refused (the broker answered: another client holds it), or unanswered (the broker serving
    /// it could not be asked or did not answer, so the lock's state is unknown).
    ///
    /// `Err` means that no broker answered at all: the caller treats every queue as unanswered.
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<LockOutcome, RemoteError>;

    /// Releases `client`'s locks on `queues`.
    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError>;

    /// Releases the locks `departed`, a client that left `group`, may still hold on `queues`,
    /// at each broker of those queues that does not list `departed` as a member of `group` any
    /// more (asked just before); returns the queues it asked those brokers to unlock (a lock
    /// held by another client stays). The runtime calls it with every queue of the subscribed
    /// topics, once `departed` has been missing from the member list for `lock_lifetime`:
    /// longer than that client trusts a lock it has not renewed, and it renewed nothing since
    /// it left (see `Service::take_over_departed`). Without it, the queues of a member that
    /// died wait for its locks to expire at the broker (RocketMQ: 60 s after its last renewal).
    ///
    /// The default does nothing (`Ok` with no queue): the locks expire at the broker.
    async fn unlock_departed(
        &self,
        group: &str,
        departed: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<Vec<MessageQueue>, RemoteError> {
        let _ = (group, departed, queues);
        Ok(Vec::new())
    }

    /// How many times each broker may have lost the locks it granted, as this locker counts
    /// them ([`LockLosses`]); the value changes when a count goes up. Each reader compares it
    /// with what it saw last ([`LockLosses::since`]): nothing is taken away, so several
    /// consumers sharing one locker each learn of every loss.
    ///
    /// A broker whose connection was lost may have restarted, and a restarted broker (or a
    /// slave promoted to master) has lost its lock table: the first client to ask may be granted
    /// a lock that this client still trusts for up to `lock_lifetime`. Told of it, the runtime
    /// stops trusting every lock it holds at those brokers at once (no pull, no batch starts)
    /// and asks for them again at once: granted, they are trusted again; refused, the queue is
    /// released; unanswered, asked again every `lock_retry` until the last lock granted before
    /// the loss is `lock_lifetime` old, then released.
    ///
    /// Report a loss as soon as it may have happened (a connection closed by the broker or by
    /// a timeout, a reconnection): a loss reported late leaves the window open that long. A
    /// broker that fails without its connections closing (a host lost, a partition) is seen
    /// only when a request to it fails.
    ///
    /// The default (`None`): no loss is ever reported, and a lock is trusted for
    /// `lock_lifetime` from its last granted request, as before.
    fn lock_losses(&self) -> Option<tokio::sync::watch::Receiver<LockLosses>> {
        None
    }
}

/// How many times each broker (by name) may have lost the locks it granted (see
/// [`QueueLocker::lock_losses`]): one entry per broker ever reported, so its size is bounded by
/// the brokers a client knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockLosses {
    counts: BTreeMap<String, u64>,
}

impl LockLosses {
    /// Counts one more possible loss at `broker`.
    pub fn record(&mut self, broker: impl Into<String>) {
        let count = self.counts.entry(broker.into()).or_default();
        *count = count.wrapping_add(1);
    }

    /// How many possible losses were counted at `broker`.
    pub fn count(&self, broker: &str) -> u64 {
        self.counts.get(broker).copied().unwrap_or(0)
    }

    /// The brokers whose count differs from `seen`'s (a loss counted since), sorted.
    ///
    /// ```
    /// use rebalance_runtime::LockLosses;
    ///
    /// let mut now = LockLosses::default();
    /// now.record("broker-a");
    /// let seen = now.clone();
    /// now.record("broker-b");
    /// assert_eq!(now.since(&seen), vec!["broker-b".to_string()]);
    /// assert!(now.since(&now).is_empty());
    /// ```
    pub fn since(&self, seen: &LockLosses) -> Vec<String> {
        self.counts
            .iter()
            .filter(|(broker, count)| seen.count(broker) != **count)
            .map(|(broker, _)| broker.clone())
            .collect()
    }
}

/// The answer to [`QueueLocker::lock`]: every queue asked for is in exactly one of the lists.
///
/// The difference between refused and unanswered matters when locks are renewed: a refused
/// queue belongs to someone else now and is released at once, while an unanswered one may
/// still be ours, so it keeps being consumed until `lock_lifetime` has passed since its last
/// granted renewal.
///
/// ```
/// use rebalance_core::MessageQueue;
/// use rebalance_runtime::LockOutcome;
///
/// let q = |i| MessageQueue::new("T", "broker-a", i);
/// let outcome = LockOutcome::answered(&[q(0), q(1)], vec![q(1)]);
/// assert_eq!(outcome.granted, vec![q(1)]);
/// assert_eq!(outcome.refused, vec![q(0)]);
/// assert!(outcome.unanswered.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOutcome {
    /// Locked (or renewed) for the client.
    pub granted: Vec<MessageQueue>,
    /// The broker answered and did not grant them (held by another client).
    pub refused: Vec<MessageQueue>,
    /// No answer for them (broker unreachable, no known master, unreadable answer).
    pub unanswered: Vec<MessageQueue>,
}

impl LockOutcome {
    /// The outcome when a broker answered for every queue of `asked`: those of `asked` that
    /// the broker's answer, `granted`, names are granted, the rest refused. Queues in the
    /// answer that were not asked for are ignored, so transports pass the answer as it came.
    pub fn answered(asked: &[MessageQueue], granted: Vec<MessageQueue>) -> Self {
        let granted: HashSet<MessageQueue> = granted.into_iter().collect();
        let (granted, refused) = asked.iter().cloned().partition(|q| granted.contains(q));
        Self {
            granted,
            refused,
            unanswered: Vec::new(),
        }
    }

    /// The outcome when nobody answered: every queue of `asked` is unanswered.
    pub fn unanswered(asked: &[MessageQueue]) -> Self {
        Self {
            granted: Vec::new(),
            refused: Vec::new(),
            unanswered: asked.to_vec(),
        }
    }

    /// Adds `other`'s queues to this outcome (one broker's answer to the whole batch's).
    pub fn merge(&mut self, other: LockOutcome) {
        self.granted.extend(other.granted);
        self.refused.extend(other.refused);
        self.unanswered.extend(other.unanswered);
    }

    /// Sorts every list (the Java order), for stable results and logs.
    pub fn sort(&mut self) {
        self.granted.sort();
        self.refused.sort();
        self.unanswered.sort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(i: i32) -> MessageQueue {
        MessageQueue::new("T", "b", i)
    }

    #[test]
    fn answered_splits_the_batch_and_ignores_queues_not_asked_for() {
        let outcome = LockOutcome::answered(&[q(0), q(1), q(2)], vec![q(2), q(0), q(9), q(0)]);
        assert_eq!(
            outcome.granted,
            vec![q(0), q(2)],
            "in the order asked, once each"
        );
        assert_eq!(outcome.refused, vec![q(1)]);
        assert!(outcome.unanswered.is_empty());
    }

    #[test]
    fn merge_keeps_each_brokers_answer() {
        let mut outcome = LockOutcome::answered(&[q(3), q(1)], vec![q(3)]);
        outcome.merge(LockOutcome::unanswered(&[q(2)]));
        outcome.merge(LockOutcome::answered(&[q(0)], vec![q(0)]));
        outcome.sort();
        assert_eq!(outcome.granted, vec![q(0), q(3)]);
        assert_eq!(outcome.refused, vec![q(1)]);
        assert_eq!(outcome.unanswered, vec![q(2)]);
    }
}
