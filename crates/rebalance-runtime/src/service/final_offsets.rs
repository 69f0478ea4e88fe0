//! The final offsets of released queues that the offset store refused. A locked queue's is
//! kept, retried and reused only while this client's broker lock keeps every other client off
//! the queue. An unlocked queue's (a consumer without locks) is never retried while running
//! (another member may hold the queue and be further: a retry could move its offset back); it
//! is kept for [`UNLOCKED_KEPT_FOR`] as a floor for the queue's start if it comes back to this
//! client (from the larger of it and the stored offset: every message below it was consumed
//! here), and the shutdown writes it where the store holds less.

use std::collections::HashMap;
use std::time::Duration;

use rebalance_core::MessageQueue;
use tokio::time::Instant;

/// How long the refused final offset of a queue without a lock is kept for a take-back. A
/// queue usually leaves with its final offset refused because its broker left the route (the
/// persist cannot reach it); the route sync polls such a topic every second, then every few
/// seconds, for `FAST_REPOLL_FOR` (2 minutes), and the periodic poll (30 s) sees a later
/// return: 3 minutes cover a broker restarted within the fast re-polls and one periodic poll
/// after them. The value never moves a start back (it is a floor under the stored offset), so
/// a longer window costs only memory and the chance that an operator's reset this client did
/// not hear of is overridden; `lock_lifetime` (30 s), the locked queues' window, is shorter
/// than a broker's restart.
pub(super) const UNLOCKED_KEPT_FOR: Duration = Duration::from_secs(180);

/// A released queue's final offset that the store refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    offset: i64,
    /// Locked: when the lock may have passed to someone else (`last_locked + lock_lifetime`):
    /// from then on the value is neither retried nor reused. Unlocked: when the value stops
    /// being kept for a take-back (`released + UNLOCKED_KEPT_FOR`).
    until: Instant,
    /// Whether this client's lock keeps the queue (and the queue is kept locked until the
    /// value is settled).
    locked: bool,
}

impl Pending {
    /// The value of a queue without (or no longer under) this client's lock, kept for a
    /// take-back from `now` for [`UNLOCKED_KEPT_FOR`], never retried.
    fn unlocked(offset: i64, now: Instant) -> Self {
        Self {
            offset,
            until: now + UNLOCKED_KEPT_FOR,
            locked: false,
        }
    }
}

/// What to do with a pending final offset now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Persist it again; the lock lasts until `until`.
    Persist { offset: i64, until: Instant },
    /// Its window closed: drop it (it is already forgotten) and unlock the queue.
    GiveUp { offset: i64 },
    /// An unlocked queue's value, never retried, whose window closed: it is forgotten.
    Lapsed { offset: i64 },
}

/// Whether a queue taken back resumes from its refused final offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TakeBack {
    /// No final offset pending: read the store.
    Nothing,
    /// Resume from this offset (still pending until the queue is inserted).
    Resume(i64),
    /// An unlocked queue: read the store and resume from the larger of this offset and the
    /// stored one (still pending until the queue is inserted).
    AtLeast(i64),
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
        let pending = Pending {
            offset,
            until,
            locked: true,
        };
        self.pending.insert(queue, pending);
    }

    /// Keeps the refused final `offset` of `queue`, released at `now` without a lock, for a
    /// take-back until `now + UNLOCKED_KEPT_FOR` (never retried).
    pub(super) fn keep_unlocked(&mut self, queue: MessageQueue, offset: i64, now: Instant) {
        self.pending.insert(queue, Pending::unlocked(offset, now));
    }

    /// Whether `queue`'s locked final offset is still pending (its lock must then be kept).
    pub(super) fn contains(&self, queue: &MessageQueue) -> bool {
        self.pending.get(queue).is_some_and(|p| p.locked)
    }

    /// Forgets `queue`'s kept unlocked final offset (an operator's reset names the queue: the
    /// reset, not this client's old progress, is where it resumes); returns it.
    pub(super) fn forget_unlocked(&mut self, queue: &MessageQueue) -> Option<i64> {
        match self.pending.get(queue) {
            Some(p) if !p.locked => self.pending.remove(queue).map(|p| p.offset),
            _ => None,
        }
    }

    /// Takes the unlocked final offsets still kept at `now`, by queue (sorted), for the
    /// shutdown to settle; those whose window closed are dropped.
    pub(super) fn take_unlocked(&mut self, now: Instant) -> Vec<(MessageQueue, i64)> {
        let mut taken = Vec::new();
        self.pending.retain(|q, p| {
            if p.locked {
                return true;
            }
            if now < p.until {
                taken.push((q.clone(), p.offset));
            }
            false
        });
        taken.sort();
        taken
    }

    /// Keeps the locked final offsets of queues at `brokers`, whose locks those brokers may
    /// have lost (a connection to them was lost: restarted, they may grant the lock to the
    /// queue's next owner), as an unlocked queue's from `now` on: never retried while running
    /// (the next owner may store further progress, which a retry would move back), a floor
    /// for a take-back, written at shutdown where the store holds less. Returns them, sorted,
    /// for their locks to be given up.
    pub(super) fn lock_lost_at(
        &mut self,
        brokers: &[String],
        now: Instant,
    ) -> Vec<(MessageQueue, i64)> {
        let mut lost = Vec::new();
        for (queue, pending) in &mut self.pending {
            if pending.locked && brokers.iter().any(|b| **b == *queue.broker_name) {
                *pending = Pending::unlocked(pending.offset, now);
                lost.push((queue.clone(), pending.offset));
            }
        }
        lost.sort();
        lost
    }

    /// Whether none is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Replaces `queue`'s pending locked offset, if it has one, with `offset` (an operator's
    /// reset), retried until the same time; returns whether it had one.
    pub(super) fn reset(&mut self, queue: &MessageQueue, offset: i64) -> bool {
        match self.pending.get_mut(queue) {
            Some(pending) if pending.locked => {
                pending.offset = offset;
                true
            }
            _ => false,
        }
    }

    /// Forgets `queue`'s pending offset (settled, or its lock belongs to someone else now);
    /// returns it.
    pub(super) fn forget(&mut self, queue: &MessageQueue) -> Option<i64> {
        self.pending.remove(queue).map(|p| p.offset)
    }

    /// Whether `queue`, taken back at `now`, resumes from its pending final offset: a locked
    /// one only while the lock window lasts (nobody else can have held the queue meanwhile, so
    /// the value is still its latest progress); an unlocked one, while it is kept, as a floor
    /// under the stored offset (someone else may have held the queue and gone further). An
    /// expired value is dropped.
    pub(super) fn take_back(&mut self, queue: &MessageQueue, now: Instant) -> TakeBack {
        match self.pending.get(queue) {
            None => TakeBack::Nothing,
            Some(p) if now < p.until && p.locked => TakeBack::Resume(p.offset),
            Some(p) if now < p.until => TakeBack::AtLeast(p.offset),
            Some(p) => {
                let offset = p.offset;
                self.pending.remove(queue);
                TakeBack::Expired(offset)
            }
        }
    }

    /// What to do with each pending offset at `now`, by queue (sorted); those given up or
    /// lapsed are forgotten. An unlocked value is never retried: it is listed only once lapsed.
    pub(super) fn due(&mut self, now: Instant) -> Vec<(MessageQueue, Retry)> {
        let mut due: Vec<(MessageQueue, Retry)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.locked || now >= p.until)
            .map(|(q, p)| {
                let retry = if !p.locked {
                    Retry::Lapsed { offset: p.offset }
                } else if now >= p.until {
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
            if matches!(retry, Retry::GiveUp { .. } | Retry::Lapsed { .. }) {
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
    async fn an_unlocked_offset_is_a_floor_kept_for_its_window_and_never_retried() {
        let mut offsets = FinalOffsets::default();
        let now = Instant::now();
        offsets.keep_unlocked(q(0), 50, now);
        offsets.keep_unlocked(q(1), 60, now);
        offsets.keep_unlocked(q(2), 70, now);
        // Not retried, and it keeps no lock.
        assert_eq!(offsets.due(now), []);
        assert!(!offsets.contains(&q(0)));
        assert_eq!(offsets.take_back(&q(0), now), TakeBack::AtLeast(50));
        // An operator's reset drops it; a locked one's reset does not apply to it.
        assert!(!offsets.reset(&q(1), 5));
        assert_eq!(offsets.forget_unlocked(&q(1)), Some(60));
        assert_eq!(offsets.take_back(&q(1), now), TakeBack::Nothing);
        tokio::time::advance(UNLOCKED_KEPT_FOR).await;
        assert_eq!(
            offsets.take_back(&q(0), Instant::now()),
            TakeBack::Expired(50)
        );
        assert_eq!(
            offsets.due(Instant::now()),
            [(q(2), Retry::Lapsed { offset: 70 })]
        );
        assert!(offsets.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_shutdown_takes_the_unlocked_offsets_still_kept() {
        let mut offsets = FinalOffsets::default();
        offsets.keep_unlocked(q(2), 5, Instant::now());
        tokio::time::advance(UNLOCKED_KEPT_FOR).await;
        let now = Instant::now();
        offsets.keep(q(0), 3, now + SEC);
        offsets.keep_unlocked(q(1), 4, now);
        assert_eq!(offsets.take_unlocked(now), [(q(1), 4)]);
        assert_eq!(offsets.forget_unlocked(&q(0)), None);
        assert_eq!(offsets.drain(), [(q(0), 3)]);
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
