//! The final offsets of released queues that the offset store refused: kept, retried and
//! reused only while this client's broker lock keeps every other client off the queue.

use std::collections::HashMap;

use rebalance_core::MessageQueue;
use tokio::time::Instant;

/// A released queue's final offset that the store refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    offset: i64,
    /// When the lock may have passed to someone else (`last_locked + lock_lifetime`): from
    /// then on the value is neither retried nor reused.
    until: Instant,
}

/// What to do with a pending final offset now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Persist it again; the lock lasts until `until`.
    Persist { offset: i64, until: Instant },
    /// Its window closed: drop it (it is already forgotten) and unlock the queue.
    GiveUp { offset: i64 },
}

/// Whether a queue taken back resumes from its refused final offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TakeBack {
    /// No final offset pending: read the store.
    Nothing,
    /// Resume from this offset (still pending until the queue is inserted).
    Resume(i64),
    /// The offset's window closed: it was dropped (read the store).
    Expired(i64),
}

/// The pending final offsets. Owned by the service task.
#[derive(Debug, Default)]
pub(super) struct FinalOffsets {
    pending: HashMap<MessageQueue, Pending>,
}

impl FinalOffsets {
    /// Keeps `queue`'s refused final `offset` for retries until `until`.
    pub(super) fn keep(&mut self, queue: MessageQueue, offset: i64, until: Instant) {
        self.pending.insert(queue, Pending { offset, until });
    }

    /// Whether `queue`'s final offset is still pending (its lock must then be kept).
    pub(super) fn contains(&self, queue: &MessageQueue) -> bool {
        self.pending.contains_key(queue)
    }

    /// Whether none is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Replaces `queue`'s pending offset, if it has one, with `offset` (an operator's reset),
    /// retried until the same time; returns whether it had one.
    pub(super) fn reset(&mut self, queue: &MessageQueue, offset: i64) -> bool {
        match self.pending.get_mut(queue) {
            Some(pending) => {
                pending.offset = offset;
                true
            }
            None => false,
        }
    }

    /// Forgets `queue`'s pending offset (settled, or its lock belongs to someone else now);
    /// returns it.
    pub(super) fn forget(&mut self, queue: &MessageQueue) -> Option<i64> {
        self.pending.remove(queue).map(|p| p.offset)
    }

    /// Whether `queue`, taken back at `now`, resumes from its pending final offset: only while
    /// the lock window lasts (nobody else can have held the queue meanwhile, so the value is
    /// still its latest progress). An expired value is dropped.
    pub(super) fn take_back(&mut self, queue: &MessageQueue, now: Instant) -> TakeBack {
        match self.pending.get(queue) {
            None => TakeBack::Nothing,
            Some(p) if now < p.until => TakeBack::Resume(p.offset),
            Some(p) => {
                let offset = p.offset;
                self.pending.remove(queue);
                TakeBack::Expired(offset)
            }
        }
    }

    /// What to do with each pending offset at `now`, by queue (sorted); those given up are
    /// forgotten.
    pub(super) fn due(&mut self, now: Instant) -> Vec<(MessageQueue, Retry)> {
        let mut due: Vec<(MessageQueue, Retry)> = self
            .pending
            .iter()
            .map(|(q, p)| {
                let retry = if now >= p.until {
                    Retry::GiveUp { offset: p.offset }
                } else {
                    Retry::Persist {
                        offset: p.offset,
                        until: p.until,
                    }
                };
                (q.clone(), retry)
            })
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0));
        for (q, retry) in &due {
            if matches!(retry, Retry::GiveUp { .. }) {
                self.pending.remove(q);
            }
        }
        due
    }

    /// Takes every pending offset, by queue (sorted): the shutdown gives them up.
    pub(super) fn drain(&mut self) -> Vec<(MessageQueue, i64)> {
        let mut all: Vec<(MessageQueue, i64)> =
            self.pending.drain().map(|(q, p)| (q, p.offset)).collect();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn q(i: i32) -> MessageQueue {
        MessageQueue::new("T", "b", i)
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_offset_is_retried_until_its_window_closes() {
        let mut offsets = FinalOffsets::default();
        let until = Instant::now() + 2 * SEC;
        offsets.keep(q(1), 42, until);
        offsets.keep(q(0), 7, until + SEC);
        assert_eq!(
            offsets.due(Instant::now()),
            [
                (
                    q(0),
                    Retry::Persist {
                        offset: 7,
                        until: until + SEC
                    }
                ),
                (q(1), Retry::Persist { offset: 42, until }),
            ]
        );
        tokio::time::advance(2 * SEC).await;
        // q(1)'s lock may be someone else's now: given up (and forgotten), q(0) still retried.
        assert_eq!(
            offsets.due(Instant::now()),
            [
                (
                    q(0),
                    Retry::Persist {
                        offset: 7,
                        until: until + SEC
                    }
                ),
                (q(1), Retry::GiveUp { offset: 42 }),
            ]
        );
        assert!(!offsets.contains(&q(1)));
        assert_eq!(offsets.forget(&q(0)), Some(7));
        assert!(offsets.is_empty());
        assert_eq!(offsets.due(Instant::now()), []);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_taken_back_in_time_resumes_from_its_pending_offset() {
        let mut offsets = FinalOffsets::default();
        let now = Instant::now();
        offsets.keep(q(0), 42, now + SEC);
        offsets.keep(q(1), 9, now);
        assert_eq!(offsets.take_back(&q(0), now), TakeBack::Resume(42));
        // Still pending until inserted: a shutdown now must still settle it.
        assert!(offsets.contains(&q(0)));
        assert_eq!(offsets.take_back(&q(1), now), TakeBack::Expired(9));
        assert!(!offsets.contains(&q(1)));
        assert_eq!(offsets.take_back(&q(2), now), TakeBack::Nothing);
    }

    #[tokio::test(start_paused = true)]
    async fn the_shutdown_drains_every_pending_offset_sorted() {
        let mut offsets = FinalOffsets::default();
        let later = Instant::now() + SEC;
        offsets.keep(q(2), 5, later);
        offsets.keep(q(0), 3, later);
        offsets.keep(q(2), 6, later);
        assert_eq!(offsets.drain(), [(q(0), 3), (q(2), 6)]);
        assert!(offsets.is_empty());
    }
}
