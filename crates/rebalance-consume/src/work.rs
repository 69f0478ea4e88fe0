//! The work queue of concurrent consumption: pulled batches waiting for one of the consumer's
//! `consume_concurrency` workers, in the order they were pulled. A worker takes up to
//! `consume_batch_size` messages of the first batch at a time, so the messages of one pull are
//! consumed in parallel, and a waiting message costs no more than its share of its pull's
//! entry.
//!
//! Each take says where it sits in its entry ([`Span`]): when one take follows another in
//! their entry, nothing of the entry lies between them, so their reports may be one (see
//! `LeaseLink::report`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Message;
use super::link::LeaseLink;

/// The messages of one pull (or one local retry) of a lease, not yet taken by a worker.
#[derive(Debug)]
struct Pending {
    link: Arc<LeaseLink>,
    epoch: u64,
    /// This entry's number in its work queue.
    id: u64,
    /// How many of its messages were taken.
    taken: usize,
    messages: std::vec::IntoIter<Message>,
}

/// A batch a worker took: its lease, the buffer epoch it belongs to, where it sits in its
/// entry.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) link: Arc<LeaseLink>,
    pub(crate) epoch: u64,
    pub(crate) span: Span,
}

/// Where a batch sits in the entry (one pull, or one local retry) it was taken from: the
/// entry's number and the positions of its first message and past its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    entry: u64,
    from: usize,
    to: usize,
}

impl Span {
    /// The span of a batch that comes from no work queue: it follows nothing.
    pub(crate) const ALONE: Span = Span {
        entry: u64::MAX,
        from: usize::MAX,
        to: usize::MAX,
    };

    /// Whether this batch starts where `previous` ended, in the same entry: every message of
    /// the entry between the two batches' offsets belongs to one of them (an entry holds its
    /// messages in offset order, and the offsets of two entries of a lease interleave only
    /// where one's messages are already acknowledged: a local retry's gaps).
    pub(crate) fn follows(&self, previous: &Span) -> bool {
        *self != Self::ALONE && self.entry == previous.entry && self.from == previous.to
    }
}

/// Batches waiting for a worker (many producers, many consumers).
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    queue: Mutex<Entries>,
    ready: Notify,
}

/// The waiting entries, and the number the next one gets.
#[derive(Debug, Default)]
struct Entries {
    waiting: VecDeque<Pending>,
    next_id: u64,
}

impl WorkQueue {
    /// Adds the messages of a lease (in offset order) and wakes a worker.
    pub(crate) fn push(&self, link: Arc<LeaseLink>, epoch: u64, messages: Vec<Message>) {
        if messages.is_empty() {
            return;
        }
        {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let id = queue.next_id;
            queue.next_id = id.wrapping_add(1);
            queue.waiting.push_back(Pending {
                link,
                epoch,
                id,
                taken: 0,
                messages: messages.into_iter(),
            });
        }
        self.ready.notify_one();
    }

    /// Moves up to `max` messages of the first waiting batch into `into`; `None` when nothing
    /// waits.
    pub(crate) fn take(&self, max: usize, into: &mut Vec<Message>) -> Option<Taken> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let front = queue.waiting.front_mut()?;
        let before = into.len();
        into.extend(front.messages.by_ref().take(max));
        let from = front.taken;
        front.taken += into.len() - before;
        let taken = Taken {
            link: front.link.clone(),
            epoch: front.epoch,
            span: Span {
                entry: front.id,
                from,
                to: front.taken,
            },
        };
        if front.messages.len() == 0 {
            queue.waiting.pop_front();
        }
        let more = !queue.waiting.is_empty();
        drop(queue);
        if more {
            // Pass the wake-up on: another worker can take the next messages.
            self.ready.notify_one();
        }
        Some(taken)
    }

    /// How many messages of `link` from before its buffer's `epoch` wait for a worker (the
    /// source moved the queue's offset since they were pulled: the loop's buffer, so its flow
    /// control, no longer counts them).
    pub(crate) fn waiting_before(&self, link: &Arc<LeaseLink>, epoch: u64) -> usize {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue
            .waiting
            .iter()
            .filter(|pending| Arc::ptr_eq(&pending.link, link) && pending.epoch < epoch)
            .map(|pending| pending.messages.len())
            .sum()
    }

    /// Takes out every message of `link` still waiting for a worker (its lease ended: none of
    /// them starts now), each entry's with the buffer epoch it was pushed with.
    pub(crate) fn withdraw(&self, link: &Arc<LeaseLink>) -> Vec<(u64, Vec<Message>)> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut withdrawn = Vec::new();
        queue.waiting.retain_mut(|pending| {
            if !Arc::ptr_eq(&pending.link, link) {
                return true;
            }
            withdrawn.push((pending.epoch, pending.messages.by_ref().collect()));
            false
        });
        withdrawn
    }

    /// How many messages wait (for tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.waiting.iter().map(|p| p.messages.len()).sum()
    }

    /// The next batch, moved into `into` (which must be empty); `None` once `stop` is
    /// cancelled.
    pub(crate) async fn next(
        &self,
        max: usize,
        into: &mut Vec<Message>,
        stop: &CancellationToken,
    ) -> Option<Taken> {
        loop {
            if stop.is_cancelled() {
                return None;
            }
            // Most calls find a batch waiting: no wake-up registered for them.
            if let Some(taken) = self.take(max, into) {
                return Some(taken);
            }
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            if let Some(taken) = self.take(max, into) {
                return Some(taken);
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = ready => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rebalance_core::MessageQueue;

    use super::*;
    use crate::metrics::TopicMetrics;

    #[tokio::test]
    async fn workers_take_batches_in_order_from_the_first_pull() {
        let work = WorkQueue::default();
        let q = MessageQueue::new("T", "b", 0);
        let link = Arc::new(LeaseLink::detached(
            q.clone(),
            Arc::new(TopicMetrics::new("G", &q.topic)),
        ));
        let messages = |range: std::ops::Range<i64>| -> Vec<Message> {
            range.map(|o| Message::new(q.clone(), o, "x")).collect()
        };
        work.push(link.clone(), 0, messages(0..3));
        work.push(link.clone(), 1, messages(3..4));
        let stop = CancellationToken::new();
        let mut batches = Vec::new();
        for _ in 0..3 {
            let mut into = Vec::new();
            let taken = work.next(2, &mut into, &stop).await.unwrap();
            let offsets: Vec<i64> = into.iter().map(Message::queue_offset).collect();
            batches.push((taken.epoch, offsets, taken.span));
        }
        let offsets: Vec<(u64, Vec<i64>)> =
            batches.iter().map(|(e, o, _)| (*e, o.clone())).collect();
        assert_eq!(offsets, vec![(0, vec![0, 1]), (0, vec![2]), (1, vec![3])]);
        let spans: Vec<Span> = batches.iter().map(|(_, _, s)| *s).collect();
        assert!(spans[1].follows(&spans[0]), "the rest of the first pull");
        assert!(!spans[2].follows(&spans[1]), "another entry");
        assert!(!spans[0].follows(&spans[1]));
        assert!(!Span::ALONE.follows(&Span::ALONE));
        stop.cancel();
        assert!(work.next(2, &mut Vec::new(), &stop).await.is_none());
    }

    #[test]
    fn a_take_follows_only_the_take_just_before_it_in_its_entry() {
        let work = WorkQueue::default();
        let q = MessageQueue::new("T", "b", 0);
        let link = Arc::new(LeaseLink::detached(
            q.clone(),
            Arc::new(TopicMetrics::new("G", &q.topic)),
        ));
        work.push(
            link,
            0,
            (0..3).map(|o| Message::new(q.clone(), o, "x")).collect(),
        );
        let take = || work.take(1, &mut Vec::new()).unwrap().span;
        // Two workers interleave: the first's second take does not follow its first.
        let (a1, b1, a2) = (take(), take(), take());
        assert!(b1.follows(&a1));
        assert!(a2.follows(&b1));
        assert!(
            !a2.follows(&a1),
            "a message of another batch lies between them"
        );
    }
}
