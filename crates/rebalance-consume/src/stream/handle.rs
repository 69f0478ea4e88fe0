//! [`StreamConsumerHandle`]: what steers a stream consumer besides the stream: queue control
//! (seek, pause, resume, committed offsets), commits, the queues held, shutdown.

use std::sync::Arc;
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_runtime::assignment::Assignment;
use rebalance_runtime::{ConsumerError, ConsumerHandle, RemoteError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::builder::StreamConsumerError;
use super::stale::StaleLeases;
use crate::PushConsumerHandle;
use crate::calls;

/// How long a seek waits for each offset lookup at the source.
pub const SEEK_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`StreamConsumerHandle::commit`] waits for the queues' loops to take the
/// acknowledgements made before it (they take them at their next wake, within microseconds
/// unless the runtime is starved).
pub const COMMIT_WAIT: Duration = Duration::from_secs(1);

/// Where [`StreamConsumerHandle::seek`] moves a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    /// This offset: the next message consumed is the one stored there. It must be between the
    /// queue's smallest offset and its largest (one past its last message) included.
    Offset(i64),
    /// The queue's oldest message still stored (its smallest offset).
    Beginning,
    /// The queue's end (its largest offset): only messages stored from now on.
    End,
    /// The first message stored at or after this time (milliseconds since the Unix epoch).
    Timestamp(i64),
}

/// Why a seek did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeekError {
    /// The consumer does not hold the queue (not assigned to it, or taken away meanwhile).
    #[error("this consumer does not hold {0}; seek one of the queues it holds (`assignment()`)")]
    NotHeld(MessageQueue),
    /// The offset is outside what the queue stores.
    #[error("offset {offset} of {queue} is outside the queue's offsets {min} to {max}")]
    OutOfRange {
        /// The queue.
        queue: MessageQueue,
        /// The offset asked for.
        offset: i64,
        /// The queue's smallest offset.
        min: i64,
        /// Its largest (one past its last message).
        max: i64,
    },
    /// The source could not tell the queue's offsets.
    #[error("could not find the offsets of {queue}: {source}")]
    Lookup {
        /// The queue.
        queue: MessageQueue,
        /// The source's answer.
        source: RemoteError,
    },
    /// The consumer refused the reset (it is shutting down, or too many wait).
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
}

/// A running stream consumer, besides its stream ([`MessageStream`](super::MessageStream) or
/// [`OrderedStream`](super::OrderedStream)): cheap to clone, to steer the consumer from any task.
/// The consumer runs while the stream or a handle lives; [`shutdown`](Self::shutdown) stops it.
#[derive(Clone)]
pub struct StreamConsumerHandle {
    push: PushConsumerHandle,
    stale: Arc<StaleLeases>,
    /// Cancelled when the consumer stops, or is aborted: the stream's end.
    ended: CancellationToken,
    /// Assign mode: the topics of the queues named, the only ones it may subscribe to (again,
    /// after an unsubscribe); `None` in subscribe mode.
    assigned: Option<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for StreamConsumerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamConsumerHandle")
            .field("consumer", self.consumer())
            .finish_non_exhaustive()
    }
}

impl StreamConsumerHandle {
    pub(super) fn new(
        push: PushConsumerHandle,
        assigned: Option<std::collections::BTreeSet<String>>,
    ) -> Self {
        let ended = push.stopped().child_token();
        Self {
            push,
            stale: Arc::default(),
            ended,
            assigned,
        }
    }

    /// Cancelled when the stream ends.
    pub(super) fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    pub(super) fn push(&self) -> &PushConsumerHandle {
        &self.push
    }

    pub(super) fn stale(&self) -> &Arc<StaleLeases> {
        &self.stale
    }

    /// The consumer group member underneath: its assignment, watches, round reports, running
    /// info.
    pub fn consumer(&self) -> &ConsumerHandle {
        self.push.consumer()
    }

    /// Waits until every subscribed topic had a balanced round, for at most `timeout` (see
    /// [`ConsumerHandle::ready`]).
    pub async fn ready(&self, timeout: Duration) -> Result<(), ConsumerError> {
        self.push.ready(timeout).await
    }

    /// The queues this consumer holds now (as of the last round that changed them).
    pub fn assignment(&self) -> Arc<Assignment> {
        self.consumer().assignment()
    }

    /// A watch of the queues held: a new value at each change (the queue-change listener of the
    /// Java lite pull consumer). Never hold its borrow across an `.await` (see
    /// [`ConsumerHandle::watch`]).
    pub fn watch(&self) -> watch::Receiver<Arc<Assignment>> {
        self.consumer().watch()
    }

    /// Subscribes every tag of a topic at run time (see [`ConsumerHandle::subscribe`]).
    ///
    /// An assign-mode consumer refuses a topic of none of its assigned queues with
    /// [`StreamConsumerError::SubscribeAndAssign`], as its builder does (found by review: the
    /// topic was accepted and never consumed, since the consumer takes only the queues named);
    /// it takes one of them back after an [`unsubscribe`](Self::unsubscribe).
    pub fn subscribe(&self, topic: impl Into<String>) -> Result<bool, StreamConsumerError> {
        let topic = topic.into();
        if self
            .assigned
            .as_ref()
            .is_some_and(|topics| !topics.contains(&topic))
        {
            return Err(StreamConsumerError::SubscribeAndAssign);
        }
        Ok(self.push.subscribe(topic)?)
    }

    /// Unsubscribes a topic (its queues are handed off).
    pub fn unsubscribe(&self, topic: impl Into<String>) -> Result<bool, ConsumerError> {
        self.push.unsubscribe(topic)
    }

    /// Moves a queue this consumer holds to `to`, and returns the offset it moved to.
    ///
    /// From its return on (the offset lookups before it may take a moment, during which the
    /// buffered messages are still yielded, as with the Java client), the stream yields none
    /// of the queue's messages pulled before it; the
    /// queue then restarts from the offset (the runtime's offset reset: the queue is released
    /// with the offset as its final one, persisted at once, and taken again from it). Messages
    /// of the queue yielded before and not acknowledged yet are waited for as at a hand-off
    /// (bounded by `await_in_flight`); acknowledging them no longer moves the queue's offset.
    /// The offsets are looked up at the source: [`SeekTo::Offset`] must be within the queue's
    /// (as the Java client checks). Between a seek's release of the queue and its take-back
    /// the queue is still this consumer's: a further seek then applies to the take-back (the
    /// later one wins).
    pub async fn seek(&self, queue: &MessageQueue, to: SeekTo) -> Result<i64, SeekError> {
        let not_held = || SeekError::NotHeld(queue.clone());
        if !self.holds(queue) {
            return Err(not_held());
        }
        let source = self.push.shared().source.clone();
        let lookup = |kind: &'static str, call| async move {
            match tokio::time::timeout(SEEK_LOOKUP_TIMEOUT, calls::lookup(kind, call)).await {
                Ok(answer) => answer,
                Err(_) => Err(RemoteError::Timeout {
                    service: format!("the message source ({kind})"),
                    after: SEEK_LOOKUP_TIMEOUT,
                }),
            }
        };
        let looked_up = match to {
            SeekTo::Offset(offset) => {
                let min = lookup("min offset", source.min_offset(queue)).await;
                let max = lookup("max offset", source.max_offset(queue)).await;
                match (min, max) {
                    (Ok(min), Ok(max)) if (min..=max).contains(&offset) => Ok(offset),
                    (Ok(min), Ok(max)) => {
                        return Err(SeekError::OutOfRange {
                            queue: queue.clone(),
                            offset,
                            min,
                            max,
                        });
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            SeekTo::Beginning => lookup("min offset", source.min_offset(queue)).await,
            SeekTo::End => lookup("max offset", source.max_offset(queue)).await,
            SeekTo::Timestamp(at) => lookup("offset at time", source.offset_at(queue, at)).await,
        };
        let offset = looked_up
            .map_err(|source| SeekError::Lookup {
                queue: queue.clone(),
                source,
            })?
            .max(0);
        // The lease held now, not the one before the lookups: another seek (or a rebalance
        // taking the queue away and back) may have replaced it meanwhile, and the reset applies
        // to the one held when the runtime takes it. None while an earlier seek's release
        // awaits its take-back: this reset then applies to the take-back instead (the later
        // seek wins), and the old lease is stale already.
        let lease = self.push.leases().lease_of(queue);
        if lease.is_none() && !self.consumer().awaits_take_back(queue) {
            return Err(not_held());
        }
        // Nothing more of the old lease from now on, even before the runtime releases it.
        if let Some(lease) = &lease {
            self.stale.mark(lease);
        }
        if let Err(e) = self.consumer().reset_offsets([(queue.clone(), offset)]) {
            if let Some(lease) = &lease {
                self.stale.unmark(lease);
            }
            return Err(e.into());
        }
        tracing::info!(queue = ?queue, ?to, offset, "seek: the queue restarts from the offset");
        Ok(offset)
    }

    /// Stops pulling `queue` (a queue this consumer holds) until [`resume`](Self::resume):
    /// what its buffer holds already is still yielded (as the Java lite pull consumer). A
    /// queue taken away is forgotten paused; a [`seek`](Self::seek) keeps it paused (the
    /// seek releases the queue and takes it again: a queue that goes to another member
    /// meanwhile is forgotten paused too, and [`paused`](Self::paused) does not list it
    /// between the release and the take-back; a pause made then holds from the take-back on).
    /// Returns false when the queue is not held (nor awaiting a seek's take-back) or was
    /// paused already.
    pub fn pause(&self, queue: &MessageQueue) -> bool {
        let leases = self.push.leases();
        if leases.lease_of(queue).is_none() {
            // Between a seek's release and its take-back (found by review: refused, and the
            // pause lost): carried to the take-back, as a pause made before the seek is.
            let paused = &self.push.shared().paused;
            if !self.consumer().awaits_take_back(queue) || !paused.pause_carried(queue) {
                return false;
            }
            // Taken back meanwhile (its lease announced after its carried pause was applied):
            // applied here instead.
            if leases.lease_of(queue).is_some() {
                paused.added(queue, true);
            }
            return true;
        }
        if !self.push.shared().paused.pause(queue) {
            return false;
        }
        // Taken away between the two (its removal resumed it before it was paused): a pause
        // must not outlive the queue's lease and hold its next one.
        if leases.lease_of(queue).is_none() {
            self.push.shared().paused.resume(queue);
            return false;
        }
        true
    }

    /// Whether this consumer holds `queue`, or will again once an earlier seek's release is
    /// taken back.
    fn holds(&self, queue: &MessageQueue) -> bool {
        self.push.leases().lease_of(queue).is_some() || self.consumer().awaits_take_back(queue)
    }

    /// Pulls `queue` again (within 100 ms); false when it was not paused.
    pub fn resume(&self, queue: &MessageQueue) -> bool {
        self.push.shared().paused.resume(queue)
    }

    /// The paused queues, sorted.
    pub fn paused(&self) -> Vec<MessageQueue> {
        self.push.shared().paused.list()
    }

    /// The committed offset of a queue this consumer holds: the smallest offset not
    /// acknowledged (every message before it is), which the runtime persists every
    /// `persist_offsets` (5 s), at [`commit`](Self::commit), and when the queue is handed off;
    /// `None` when the queue is not held, or its start is not resolved yet. An acknowledgement
    /// reaches it once the queue's pull loop has taken it (at its next wake, soon after
    /// `ack` returns, not before): read right after `ack`, it may still be the earlier offset.
    pub fn committed(&self, queue: &MessageQueue) -> Option<i64> {
        self.push.leases().lease_of(queue)?.committed()
    }

    /// Persists the committed offsets of the held queues now, and returns once the offset store
    /// has them (see [`ConsumerHandle::persist_offsets`]). Without it they are persisted every
    /// `persist_offsets` (5 s) and at each hand-off: acknowledged messages are never consumed
    /// again by this group unless a crash comes before that.
    ///
    /// It covers every [`ack`](super::StreamMessage::ack) (and every ordered batch's
    /// [`commit`](super::OrderedBatch::commit)) that returned before it was called, on any
    /// thread: it first waits for the queues' pull loops to take them (see
    /// [`committed`](Self::committed)), which they do at their next wake, at most
    /// [`COMMIT_WAIT`] (a loop that has not by then is counted in a warning, and its
    /// acknowledgements are persisted at the next commit or persistence).
    pub async fn commit(&self) -> Result<(), ConsumerError> {
        let links = self.push.leases().links();
        let behind = self.push.shared().commits.wait(links, COMMIT_WAIT).await;
        if behind > 0 {
            tracing::warn!(queues = behind, wait = ?COMMIT_WAIT, "commit: some queues' loops did not take their acknowledgements in time; those are persisted at the next commit or persistence");
        }
        self.consumer().persist_offsets().await
    }

    /// Hands every queue off (messages yielded and not acknowledged are waited for, bounded by
    /// `await_in_flight`), persists offsets, unregisters, and returns when all of that is done.
    /// The stream ends (`None`) as soon as the shutdown begins.
    ///
    /// Acknowledge or drop the messages you hold before awaiting it from the task that polls
    /// the stream: without `await_in_flight`, the hand-off waits for them.
    pub async fn shutdown(&self) {
        self.push.shutdown().await;
    }

    /// Waits until the consumer has stopped (see [`ConsumerHandle::join`]).
    pub async fn join(&self) -> Result<(), ConsumerError> {
        self.push.join().await
    }

    /// Stops everything at once, handing nothing off and without unregistering, as if the
    /// process had died (for tests and simulations).
    pub fn abort(&self) {
        self.push.abort();
        self.ended.cancel();
    }
}
