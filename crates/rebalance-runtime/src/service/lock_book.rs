//! What this client knows of its broker locks beyond the queues it holds: the locks that a
//! request may have taken without an answer, whether a round must try its refused locks
//! again, and what a renewal's answer means for each held queue.

use std::collections::HashSet;

use rebalance_core::MessageQueue;
use tokio::time::Instant;

use crate::locker::LockOutcome;

/// The lock book. Owned by the service task.
#[derive(Debug, Default)]
pub(super) struct LockBook {
    /// Queues not held whose lock request went unanswered: the broker may have granted it.
    /// They are unlocked when they leave the share and at shutdown, so that a lost answer does
    /// not hold the next owner off until the broker's lock expires.
    unanswered: HashSet<MessageQueue>,
    /// Whether the running round could not get some lock.
    retry: bool,
}

impl LockBook {
    /// Records the answer to a round's request for the locks of `asked`: a granted or refused
    /// queue is known again, an unanswered one may be locked, and some lock not granted (a
    /// queue the answer does not mention included) asks for a retry after the round. Returns
    /// the granted queues of `asked`, in its order.
    pub(super) fn record_request(
        &mut self,
        asked: Vec<MessageQueue>,
        outcome: &LockOutcome,
    ) -> Vec<MessageQueue> {
        for q in outcome.granted.iter().chain(&outcome.refused) {
            self.unanswered.remove(q);
        }
        self.unanswered.extend(outcome.unanswered.iter().cloned());
        let granted: HashSet<&MessageQueue> = outcome.granted.iter().collect();
        let before = asked.len();
        let mut asked = asked;
        asked.retain(|q| granted.contains(q));
        if asked.len() < before {
            self.retry = true;
        }
        asked
    }

    /// Whether a lock was not granted since the last call (the round then asks for a retry).
    pub(super) fn take_retry(&mut self) -> bool {
        std::mem::take(&mut self.retry)
    }

    /// Takes (sorted) the queues with an unanswered lock request that `leaving` selects, except
    /// those `kept` (a refused final offset still pending keeps its lock until settled): the
    /// caller unlocks them.
    pub(super) fn take_unanswered(
        &mut self,
        leaving: impl Fn(&MessageQueue) -> bool,
        kept: impl Fn(&MessageQueue) -> bool,
    ) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> = self
            .unanswered
            .iter()
            .filter(|q| leaving(q) && !kept(q))
            .cloned()
            .collect();
        queues.sort();
        for q in &queues {
            self.unanswered.remove(q);
        }
        queues
    }
}

/// What a renewal's answer means for the held locked queues.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Renewal {
    /// Granted: trusted for another `lock_lifetime` from the request.
    pub(super) renewed: Vec<MessageQueue>,
    /// Refused (or not mentioned by the locker): someone else holds the lock now.
    pub(super) refused: Vec<MessageQueue>,
    /// No answer, but the last granted lock is not `lock_lifetime` old yet: kept.
    pub(super) trusted: Vec<MessageQueue>,
    /// No answer, and the last granted lock is `lock_lifetime` old: no longer trusted.
    pub(super) expired: Vec<MessageQueue>,
}

impl Renewal {
    /// Sorts the renewal of `held` by `outcome` at `now`; `valid_until` says until when a
    /// queue's last granted lock is trusted. No answer says nothing about a lock: it may still
    /// be ours, so the queue is kept until its last granted lock is `lock_lifetime` old, as when
    /// every broker fails.
    pub(super) fn sort(
        held: Vec<MessageQueue>,
        outcome: &LockOutcome,
        now: Instant,
        valid_until: impl Fn(&MessageQueue) -> Option<Instant>,
    ) -> Self {
        let granted: HashSet<&MessageQueue> = outcome.granted.iter().collect();
        let unanswered: HashSet<&MessageQueue> = outcome.unanswered.iter().collect();
        let mut renewal = Renewal::default();
        for q in held {
            if granted.contains(&q) {
                renewal.renewed.push(q);
            } else if !unanswered.contains(&q) {
                renewal.refused.push(q);
            } else if valid_until(&q).is_some_and(|until| now < until) {
                renewal.trusted.push(q);
            } else {
                renewal.expired.push(q);
            }
        }
        renewal
    }

    /// The queues lost with their lock (refused or expired), sorted.
    pub(super) fn lost(&self) -> Vec<MessageQueue> {
        let mut lost: Vec<MessageQueue> =
            self.refused.iter().chain(&self.expired).cloned().collect();
        lost.sort();
        lost
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn q(i: i32) -> MessageQueue {
        MessageQueue::new("T", "b", i)
    }

    fn outcome(granted: &[i32], refused: &[i32], unanswered: &[i32]) -> LockOutcome {
        let qs = |is: &[i32]| is.iter().map(|&i| q(i)).collect();
        LockOutcome {
            granted: qs(granted),
            refused: qs(refused),
            unanswered: qs(unanswered),
        }
    }

    fn qs(is: &[i32]) -> Vec<MessageQueue> {
        is.iter().map(|&i| q(i)).collect()
    }

    #[test]
    fn unanswered_requests_are_remembered_until_answered() {
        let mut book = LockBook::default();
        let answer = outcome(&[0], &[1], &[2, 3, 4]);
        assert_eq!(book.record_request(qs(&[4, 3, 2, 1, 0]), &answer), [q(0)]);
        assert!(book.take_retry());
        assert!(!book.take_retry(), "taken once");
        // 3 is answered later (granted), 4 refused: only 2 is still in doubt.
        let answer = outcome(&[3], &[4], &[]);
        assert_eq!(book.record_request(qs(&[3, 4]), &answer), [q(3)]);
        assert!(book.take_retry());
        assert_eq!(book.take_unanswered(|_| true, |_| false), [q(2)]);
        assert_eq!(book.take_unanswered(|_| true, |_| false), []);
    }

    #[test]
    fn granted_queues_keep_the_order_asked_and_only_a_full_grant_needs_no_retry() {
        let mut book = LockBook::default();
        let granted = book.record_request(qs(&[2, 0, 1]), &outcome(&[0, 1, 2], &[], &[]));
        assert_eq!(granted, qs(&[2, 0, 1]));
        assert!(!book.take_retry());
        // A queue the answer forgets is not granted either.
        let granted = book.record_request(qs(&[0, 1]), &outcome(&[0], &[], &[]));
        assert_eq!(granted, [q(0)]);
        assert!(book.take_retry());
    }

    #[test]
    fn only_the_selected_and_not_kept_unanswered_locks_are_taken() {
        let mut book = LockBook::default();
        book.record_request(qs(&[3, 1, 2, 0]), &outcome(&[], &[], &[3, 1, 2, 0]));
        let taken = book.take_unanswered(|q| q.queue_id != 0, |q| q.queue_id == 2);
        assert_eq!(taken, [q(1), q(3)]);
        // The others stay in the book.
        assert_eq!(book.take_unanswered(|_| true, |_| false), [q(0), q(2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_tells_renewed_refused_trusted_and_expired_apart() {
        let now = Instant::now();
        let fresh = now + Duration::from_secs(5);
        let held: Vec<MessageQueue> = (0..6).map(q).collect();
        // 0 granted; 1 refused; 5 not mentioned (refused too); 2, 3, 4 unanswered with a
        // lock still trusted (2), just expired (3) and never granted (4).
        let answer = outcome(&[0], &[1], &[2, 3, 4]);
        let renewal = Renewal::sort(held, &answer, now, |q| match q.queue_id {
            0..=2 => Some(fresh),
            3 => Some(now),
            _ => None,
        });
        assert_eq!(
            renewal,
            Renewal {
                renewed: vec![q(0)],
                refused: vec![q(1), q(5)],
                trusted: vec![q(2)],
                expired: vec![q(3), q(4)],
            }
        );
        assert_eq!(renewal.lost(), [q(1), q(3), q(4), q(5)]);
    }
}
