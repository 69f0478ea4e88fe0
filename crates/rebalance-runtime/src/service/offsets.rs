//! Offset persistence: committed offsets of held queues, and the final offsets of released
//! queues that the store refused.

use rebalance_core::MessageQueue;
use tokio::time::Instant;

use super::Service;
use super::final_offsets::Retry;
use crate::RemoteError;
use crate::table::{ProcessQueue, ProcessQueueTable};

/// The offset store's answers to a call for several queues, taken one per queue, in order.
pub(super) trait NextAnswer<T> {
    /// The next queue's answer; one missing (a store that answered fewer queues than it was
    /// asked) is a [`RemoteError::BadResponse`] for its queue.
    fn next_answer(&mut self) -> Result<T, RemoteError>;
}

impl<T, I: Iterator<Item = Result<T, RemoteError>>> NextAnswer<T> for I {
    fn next_answer(&mut self) -> Result<T, RemoteError> {
        self.next().unwrap_or_else(|| {
            Err(RemoteError::BadResponse(
                "the offset store answered fewer queues than it was asked".into(),
            ))
        })
    }
}

/// Why committed offsets are persisted (for the logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Persisting {
    /// The periodic tick (`persist_offsets`).
    Tick,
    /// A lease asked for it ([`QueueLease::persist_now`](crate::QueueLease::persist_now)).
    AtOnce,
    /// The application asked for it
    /// ([`ConsumerHandle::persist_offsets`](crate::ConsumerHandle::persist_offsets)), and is
    /// told which failed.
    Asked,
}

impl Service {
    /// Persists the offsets the application committed since the last time, and retries final
    /// offsets the store refused earlier.
    pub(super) async fn persist_offsets(&mut self) {
        self.persist_committed(|_| true, Persisting::Tick).await;
        if self.membership_trusted() {
            self.retry_final_offsets().await;
        }
    }

    /// Persists the offsets committed and not stored yet of the held queues that `pick` picks
    /// (asked only of those), and records what the store accepted; returns the queues whose
    /// offset the store refused, with its answer, and those whose lock is no longer trusted
    /// (not written); or, while the membership is not vouched for, every held queue whose
    /// offset is not stored (nothing is written then).
    pub(super) async fn persist_committed(
        &mut self,
        mut pick: impl FnMut(&ProcessQueue) -> bool,
        why: Persisting,
    ) -> Vec<(MessageQueue, RemoteError)> {
        // The other members may hold these queues now, and be further: write nothing.
        if !self.membership_trusted() {
            tracing::debug!(
                ?why,
                "membership not vouched for; not persisting the offsets of held queues"
            );
            return self.offsets_not_vouched_for();
        }
        // A held queue whose lock is no longer trusted (its renewal went unanswered, the one
        // that gives it up has not come yet) may have a new holder further on: its offset is
        // not written over theirs, as its release's is not.
        let now = Instant::now();
        let locks = self.ctx.locks().is_some();
        let mut refused = Vec::new();
        let mut due: Vec<(MessageQueue, i64)> = Vec::new();
        for (q, pq) in self.table.iter() {
            if !pq.is_held() || !pick(pq) {
                continue;
            }
            let Some(offset) = pq.unpersisted_offset() else {
                continue;
            };
            if locks && pq.lease_state().lock_expired(now) {
                tracing::debug!(queue = ?q, offset, ?why, "not persisting the offset: the queue's lock is no longer trusted");
                refused.push((
                    q.clone(),
                    RemoteError::Unreachable(
                        "not written: the queue's broker lock is no longer trusted (not renewed within lock_lifetime), so another client may hold the queue now".to_string(),
                    ),
                ));
                continue;
            }
            due.push((q.clone(), offset));
        }
        if due.is_empty() {
            return refused;
        }
        let mut answers = self
            .ctx
            .offsets
            .persist_many(&self.ctx.group, &due)
            .await
            .into_iter();
        for (queue, offset) in due {
            // A queue the store did not answer for is not stored (as at a release).
            let answer = answers.next_answer();
            match answer {
                Ok(()) => {
                    if why == Persisting::AtOnce {
                        tracing::info!(queue = ?queue, offset, "persisted an offset at once, as its consumer asked");
                    }
                    if let Some(pq) = self.table.get(&queue) {
                        pq.set_persisted(offset);
                    }
                }
                Err(e) => {
                    match why {
                        Persisting::Tick => {
                            tracing::warn!(queue = ?queue, offset, error = %e, "offset persistence failed; will retry")
                        }
                        Persisting::AtOnce => {
                            tracing::warn!(queue = ?queue, offset, error = %e, "could not persist the offset at once; the persistence tick retries")
                        }
                        Persisting::Asked => {
                            tracing::debug!(queue = ?queue, offset, error = %e, "could not persist the offset the application asked for; the persistence tick retries")
                        }
                    }
                    refused.push((queue, e));
                }
            }
        }
        refused
    }

    /// Retries the final offsets of released queues that the store refused. A value is retried
    /// only while this client's broker lock (not released while the offset is pending) still
    /// keeps every other client off the queue, that is until `lock_lifetime` after the lock was
    /// last granted; once stored, the queue is unlocked so that its next owner gets it at once.
    /// When that window ends the value is dropped and the queue unlocked: the next owner
    /// resumes from the last stored offset (some messages may be consumed twice), and no late
    /// write can move its offset backwards.
    async fn retry_final_offsets(&mut self) {
        if self.final_offsets.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut to_unlock = Vec::new();
        for (queue, retry) in self.final_offsets.due(now) {
            let (offset, until) = match retry {
                Retry::GiveUp { offset } => {
                    tracing::error!(queue = ?queue, offset, "giving up a released queue's final offset: the store kept refusing it and the queue's lock may pass to another client now; the next owner resumes from the last stored offset");
                    to_unlock.push(queue);
                    continue;
                }
                Retry::Lapsed { offset } => {
                    tracing::info!(queue = ?queue, offset, "forgetting a released queue's final offset the store refused: kept without a lock for a take-back, and the queue did not come back in time");
                    continue;
                }
                Retry::Persist { offset, until } => (offset, until),
            };
            match self
                .ctx
                .offsets
                .persist(&self.ctx.group, &queue, offset)
                .await
            {
                Ok(()) => {
                    tracing::info!(queue = ?queue, offset, "persisted a released queue's final offset; unlocking the queue");
                    self.final_offsets.forget(&queue);
                    to_unlock.push(queue);
                }
                Err(e) => {
                    tracing::warn!(queue = ?queue, offset, error = %e, retry_for = ?until.duration_since(now), "final offset still not persisted; will retry while the lock lasts")
                }
            }
        }
        self.unlock_released(to_unlock).await;
    }

    /// At shutdown, writes the refused final offsets of queues released without a lock that
    /// are still kept, where the store holds less (or nothing): this client's progress is not
    /// lost with it, and a further stored offset (another member's) is not gone back over.
    /// Nothing is written while the membership is not vouched for, nor for a queue whose
    /// stored offset cannot be read. Between the read and the write, the next owner may store
    /// more: its own next write then moves it forward again.
    pub(super) async fn settle_unlocked_finals(&mut self) {
        let kept = self.final_offsets.take_unlocked(Instant::now());
        if kept.is_empty() {
            return;
        }
        if !self.membership_trusted() {
            tracing::warn!(offsets = ?kept, "shutting down with final offsets the store refused, not written: this client's membership is not vouched for; their next owners resume from the last stored offsets");
            return;
        }
        let group = self.ctx.group.clone();
        let queues: Vec<MessageQueue> = kept.iter().map(|(q, _)| q.clone()).collect();
        let mut stored = self
            .ctx
            .offsets
            .read_many(&group, &queues)
            .await
            .into_iter();
        let mut due = Vec::new();
        for (queue, offset) in kept {
            let answer = stored.next_answer();
            match answer {
                Ok(Some(stored)) if stored >= offset => {
                    tracing::info!(queue = ?queue, offset, stored, "not writing a released queue's refused final offset: the store holds further progress");
                }
                Ok(_) => due.push((queue, offset)),
                Err(e) => {
                    tracing::warn!(queue = ?queue, offset, error = %e, "not writing a released queue's refused final offset: its stored offset could not be read, and may be further; the next owner resumes from it");
                }
            }
        }
        if due.is_empty() {
            return;
        }
        let mut answers = self
            .ctx
            .offsets
            .persist_many(&group, &due)
            .await
            .into_iter();
        for (queue, offset) in due {
            let answer = answers.next_answer();
            match answer {
                Ok(()) => {
                    tracing::info!(queue = ?queue, offset, "persisted a released queue's final offset at shutdown")
                }
                Err(e) => {
                    tracing::error!(queue = ?queue, offset, error = %e, "giving up a released queue's final offset at shutdown: the store refused it again; the next owner resumes from the last stored offset")
                }
            }
        }
    }

    /// Unlocks the queues whose lock request went unanswered (the broker may have granted
    /// it) that `leaving` selects and that are not held, except those whose refused final
    /// offset is still pending (their own path unlocks them once it is settled).
    pub(super) async fn unlock_unanswered(
        &mut self,
        leaving: impl Fn(&MessageQueue, &ProcessQueueTable) -> bool,
    ) {
        let pending = &self.final_offsets;
        let table = &self.table;
        let queues = self
            .locks
            .take_unanswered(|q| leaving(q, table), |q| pending.contains(q));
        if queues.is_empty() {
            return;
        }
        tracing::debug!(queues = ?queues, "unlocking queues whose lock request went unanswered");
        self.unlock_released(queues).await;
    }

    /// Unlocks released queues whose final offset is settled (stored or given up), unless this
    /// client holds them again.
    pub(super) async fn unlock_released(&mut self, mut queues: Vec<MessageQueue>) {
        queues.retain(|q| self.table.get(q).is_none());
        let Some(locker) = self.ctx.locks().cloned() else {
            return;
        };
        if queues.is_empty() {
            return;
        }
        match locker
            .unlock(&self.ctx.group, &self.ctx.client_id, &queues)
            .await
        {
            Ok(()) => tracing::debug!(queues = ?queues, "unlocked released queues"),
            Err(e) => {
                tracing::warn!(queues = ?queues, error = %e, "unlock failed; the broker lock will expire")
            }
        }
    }
}
