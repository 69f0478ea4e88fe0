//! The work queue of concurrent consumption: pulled batches waiting for one of the consumer's
//! `consume_concurrency` workers, in the order they were pulled. A worker takes up to
//! `consume_batch_size` messages of the first batch at a time, so the messages of one pull are
//! consumed in parallel, and a waiting message costs no more than its share of its pull's
//! entry.

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
    messages: std::vec::IntoIter<Message>,
}

/// A batch a worker took: its lease, the buffer epoch it belongs to.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) link: Arc<LeaseLink>,
    pub(crate) epoch: u64,
}

/// Batches waiting for a worker (many producers, many consumers).
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    queue: Mutex<VecDeque<Pending>>,
    ready: Notify,
}

impl WorkQueue {
    /// Adds the messages of a lease (in offset order) and wakes a worker.
    pub(crate) fn push(&self, link: Arc<LeaseLink>, epoch: u64, messages: Vec<Message>) {
        if messages.is_empty() {
            return;
        }
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Pending {
                link,
                epoch,
                messages: messages.into_iter(),
            });
        self.ready.notify_one();
    }

    /// Moves up to `max` messages of the first waiting batch into `into`.
    fn take(&self, max: usize, into: &mut Vec<Message>) -> Option<Taken> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let front = queue.front_mut()?;
        into.extend(front.messages.by_ref().take(max));
        let taken = Taken {
            link: front.link.clone(),
            epoch: front.epoch,
        };
        if front.messages.len() == 0 {
            queue.pop_front();
        }
        let more = !queue.is_empty();
        drop(queue);
        if more {
            // Pass the wake-up on: another worker can take the next messages.
            self.ready.notify_one();
        }
        Some(taken)
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
        let link = Arc::new(LeaseLink::new(
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
            batches.push((taken.epoch, offsets));
        }
        assert_eq!(batches, vec![(0, vec![0, 1]), (0, vec![2]), (1, vec![3])]);
        stop.cancel();
        assert!(work.next(2, &mut Vec::new(), &stop).await.is_none());
    }
}
