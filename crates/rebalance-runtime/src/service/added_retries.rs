//! The `queues_added` calls that failed and are made again with backoff
//! ([`AddedFailurePolicy::RetryWithBackoff`](crate::config::AddedFailurePolicy)).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::QueueLease;

/// The wait before the first retry.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two retries.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// How long to wait after the `attempt`-th failed call (from 1): 1 s, doubling, at most 60 s.
pub(super) fn backoff(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// One topic's queues waiting for `queues_added` to be called again.
#[derive(Debug)]
pub(super) struct Retry {
    pub(super) topic: String,
    pub(super) leases: Vec<QueueLease>,
    /// How many calls for them failed so far.
    pub(super) failures: u32,
}

#[derive(Debug)]
struct Waiting {
    leases: Vec<QueueLease>,
    failures: u32,
    at: Instant,
}

/// The retries, by topic. Owned by the service task.
#[derive(Debug, Default)]
pub(super) struct AddedRetries {
    waiting: BTreeMap<String, Waiting>,
}

impl AddedRetries {
    /// A call for `leases` of `topic` failed at `now`, the `failures`-th time for them; returns
    /// when it is made again. Leases of a topic already waiting join that retry (and its count).
    pub(super) fn failed(
        &mut self,
        topic: &str,
        leases: Vec<QueueLease>,
        failures: u32,
        now: Instant,
    ) -> Instant {
        let waiting = self
            .waiting
            .entry(topic.to_string())
            .or_insert_with(|| Waiting {
                leases: Vec::new(),
                failures,
                at: now + backoff(failures),
            });
        waiting.leases.extend(leases);
        waiting.at
    }

    /// When the next retry is due.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.waiting.values().map(|w| w.at).min()
    }

    /// Takes the retries due at `now`, by topic, without the leases already cancelled (their
    /// queues were released meanwhile); a retry left with no lease is dropped.
    pub(super) fn due(&mut self, now: Instant) -> Vec<Retry> {
        let topics: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.at <= now)
            .map(|(t, _)| t.clone())
            .collect();
        topics
            .into_iter()
            .filter_map(|topic| {
                let waiting = self.waiting.remove(&topic)?;
                let leases: Vec<QueueLease> = waiting
                    .leases
                    .into_iter()
                    .filter(|l| !l.is_cancelled())
                    .collect();
                (!leases.is_empty()).then_some(Retry {
                    topic,
                    leases,
                    failures: waiting.failures,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use rebalance_core::MessageQueue;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::lease_terms::StartPosition;
    use crate::table::ProcessQueueTable;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_backoff_doubles_from_one_second_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_RETRY);
        assert_eq!(backoff(0), FIRST_RETRY);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_due_after_their_backoff_without_released_queues() {
        let mut table = ProcessQueueTable::default();
        let root = std::sync::Arc::new(CancellationToken::new());
        let mut lease = |t: &str, i| {
            let q = MessageQueue::new(t, "b", i);
            table.insert(q, StartPosition::Latest, &root, None, false)
        };
        let (a0, a1, b0) = (lease("A", 0), lease("A", 1), lease("B", 0));
        let mut retries = AddedRetries::default();
        let now = Instant::now();
        assert_eq!(retries.failed("A", vec![a0.clone()], 1, now), now + SEC);
        assert_eq!(retries.failed("B", vec![b0.clone()], 3, now), now + 4 * SEC);
        // More of A's queues failed meanwhile: they join A's retry.
        assert_eq!(retries.failed("A", vec![a1.clone()], 1, now), now + SEC);
        assert_eq!(retries.next_at(), Some(now + SEC));
        assert!(retries.due(now).is_empty());

        tokio::time::advance(SEC).await;
        let due = retries.due(Instant::now());
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].topic, "A");
        assert_eq!(due[0].failures, 1);
        let queues: Vec<i32> = due[0].leases.iter().map(|l| l.queue().queue_id).collect();
        assert_eq!(queues, [0, 1]);
        assert_eq!(retries.next_at(), Some(now + 4 * SEC));

        // B's queue is released before its retry: nothing left to call it for.
        let b = MessageQueue::new("B", "b", 0);
        assert!(table.start_release(&b, Instant::now(), crate::RemovalReason::Reassigned));
        tokio::time::advance(3 * SEC).await;
        assert!(retries.due(Instant::now()).is_empty());
        assert_eq!(retries.next_at(), None);
    }
}
