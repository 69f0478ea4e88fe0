//! [`CommitWaits`]: an explicit commit waits until the queues' loops have taken the
//! acknowledgements made before it. An acknowledgement reaches its lease's committed offset
//! only when its queue's loop takes it, at the loop's next wake, which may come after the
//! acknowledging task's next step (another runtime thread, or later in the same one's queue):
//! without the wait, `ack()` then `commit().await` persisted the offset before the message.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use crate::link::LeaseLink;

/// The commits waiting for the loops, and their wake-up.
#[derive(Debug, Default)]
pub(crate) struct CommitWaits {
    /// How many commits wait: the loops notify only then.
    waiting: AtomicUsize,
    applied: Notify,
}

/// Counts a commit waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        // SeqCst, as the loops' stores of what they applied: of the two, the loop sees this
        // commit waiting or the commit sees what the loop applied.
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CommitWaits {
    /// A loop committed every report it took (`AckReceiver::applied`), its hand-off began (its
    /// lease may be cancelled), or its hand-off committed (`AckReceiver::handed_off`), or the
    /// loops were aborted: wakes the commits waiting, if any, to look again.
    pub(crate) fn changed(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.applied.notify_waiters();
        }
    }

    /// Waits until the loop of each of `links` has committed the reports made before now, its
    /// loop is gone, or its lease is cancelled (its hand-off commits, and the lease's release
    /// persists, itself); at most `bound`. A loop retiring (its lease lives on) is waited for
    /// until its hand-off committed: nothing persists that commit but the next persistence.
    /// Returns how many were still behind then.
    pub(crate) fn wait(
        &self,
        links: Vec<Arc<LeaseLink>>,
        bound: Duration,
    ) -> impl Future<Output = usize> + Send + '_ {
        let mut behind: Vec<(Arc<LeaseLink>, u64)> = links
            .into_iter()
            .filter_map(|link| link.reports_made().map(|made| (link, made)))
            .collect();
        async move {
            let _waiting = Waiting::new(&self.waiting);
            let deadline = Instant::now().checked_add(bound);
            loop {
                let notified = self.applied.notified();
                tokio::pin!(notified);
                // Enabled before the check: a loop's notification after it is not lost.
                notified.as_mut().enable();
                behind.retain(|(link, made)| {
                    !link.has_applied(*made)
                        && !link.lease().is_cancelled()
                        && link.reports_made().is_some()
                });
                if behind.is_empty() {
                    return 0;
                }
                tokio::select! {
                    _ = &mut notified => {}
                    _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                        return behind.len();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rebalance_core::MessageQueue;

    use super::*;
    use crate::link::{Ack, AckReceiver, Tally};
    use crate::metrics::TopicMetrics;
    use crate::work::Span;

    fn link() -> Arc<LeaseLink> {
        Arc::new(LeaseLink::detached(
            MessageQueue::new("T", "b", 0),
            Arc::new(TopicMetrics::new("G", "T")),
        ))
    }

    fn ack(offset: i64) -> Ack {
        Ack {
            epoch: 0,
            first: offset,
            last: offset,
            retry: Vec::new(),
            finished: 1,
            guard: None,
            tally: Tally::default(),
            span: Span::ALONE,
        }
    }

    const BOUND: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_commit_waits_for_the_reports_made_before_it_and_no_longer() {
        let waits = Arc::new(CommitWaits::default());
        let (taken, idle) = (link(), link());
        let mut acks = AckReceiver::new(&taken);
        let _idle_acks = AckReceiver::new(&idle);
        taken.report(ack(0));
        let started = Instant::now();
        let wait = tokio::spawn({
            let (waits, links) = (waits.clone(), vec![taken.clone(), idle.clone()]);
            async move { waits.wait(links, BOUND).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!wait.is_finished(), "the report is not taken yet");
        // A report made after the commit began is not waited for.
        taken.report(ack(1));
        assert_eq!(acks.try_recv().map(|a| a.first), Some(0));
        assert!(!acks.applied(&waits), "a report taken and not received");
        assert_eq!(acks.try_recv().map(|a| a.first), Some(1));
        assert!(acks.applied(&waits));
        assert_eq!(wait.await.unwrap(), 0);
        assert_eq!(Instant::now() - started, Duration::from_millis(5));
    }

    /// A loop retiring (it stopped pulling; its lease lives on, and a new loop follows) may not
    /// have taken every report when its hand-off begins: the commit waits until the hand-off
    /// committed them (it ended at the hand-off's beginning, and persisted the offset before
    /// them; nothing else persists them until the next persistence).
    #[tokio::test(start_paused = true)]
    async fn a_retiring_loop_is_waited_for_until_its_hand_off_committed() {
        let waits = Arc::new(CommitWaits::default());
        let retiring = link();
        let mut acks = AckReceiver::new(&retiring);
        retiring.report(ack(0));
        let wait = tokio::spawn({
            let (waits, links) = (waits.clone(), vec![retiring.clone()]);
            async move { waits.wait(links, BOUND).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        retiring.drop_lease();
        waits.changed();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(
            !wait.is_finished(),
            "the hand-off has not taken the report yet"
        );
        assert_eq!(acks.try_recv().map(|a| a.first), Some(0));
        assert!(acks.try_recv().is_none());
        acks.handed_off(&waits);
        assert_eq!(wait.await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_hands_off_or_never_takes_its_reports_ends_the_wait() {
        let waits = Arc::new(CommitWaits::default());
        let (lease, detached) = crate::testing::lease(
            &MessageQueue::new("T", "b", 0),
            rebalance_runtime::StartPosition::Offset(0),
        );
        let handing_off = Arc::new(LeaseLink::new(lease, Arc::new(TopicMetrics::new("G", "T"))));
        let _acks = AckReceiver::new(&handing_off);
        handing_off.report(ack(0));
        let started = Instant::now();
        let wait = tokio::spawn({
            let (waits, links) = (waits.clone(), vec![handing_off.clone()]);
            async move { waits.wait(links, BOUND).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        detached.cancel();
        handing_off.drop_lease();
        waits.changed();
        assert_eq!(
            wait.await.unwrap(),
            0,
            "its hand-off commits it, its release persists it"
        );
        assert_eq!(Instant::now() - started, Duration::from_millis(5));
        // A loop that takes nothing: the wait ends at its bound, counting it.
        let stuck = link();
        let _acks = AckReceiver::new(&stuck);
        stuck.report(ack(0));
        let started = Instant::now();
        assert_eq!(waits.wait(vec![stuck], BOUND).await, 1);
        assert_eq!(Instant::now() - started, BOUND);
        // A loop gone (its receiver dropped) has nothing to commit any more.
        let gone = link();
        let acks = AckReceiver::new(&gone);
        gone.report(ack(0));
        drop(acks);
        let started = Instant::now();
        assert_eq!(waits.wait(vec![gone], BOUND).await, 0);
        assert_eq!(Instant::now(), started);
    }

    /// A loop whose task ends without a hand-off (it panicked, or was aborted) while a commit
    /// waits for it: the commit goes on at once, not at its bound.
    #[tokio::test(start_paused = true)]
    async fn a_loop_gone_while_a_commit_waits_ends_the_wait_at_once() {
        let waits = Arc::new(CommitWaits::default());
        let dying = link();
        let acks = AckReceiver::new(&dying).waking(&waits);
        dying.report(ack(0));
        let wait = tokio::spawn({
            let (waits, links) = (waits.clone(), vec![dying.clone()]);
            async move { waits.wait(links, BOUND).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!wait.is_finished(), "the report is not taken yet");
        let gone = Instant::now();
        drop(acks);
        assert_eq!(wait.await.unwrap(), 0);
        assert_eq!(Instant::now(), gone, "not {BOUND:?} later");
    }
}
