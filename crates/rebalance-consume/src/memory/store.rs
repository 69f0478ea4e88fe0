//! The cluster's messages: a log per queue, the commit-log positions a send-back finds a
//! message by, the producer's round robin of [`ClusterMessages::send`](super::ClusterMessages),
//! and the redeliveries waiting for their delay. Kept in the cluster as an extension
//! ([`InMemoryCluster::extension`]): every client and clone of the cluster sees the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::producer::RoundRobin;
use tokio::time::Instant;

use super::SendReceipt;
use super::log::QueueLog;
use crate::Message;

/// The messages of one cluster (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct MessageStore {
    messages: Mutex<Messages>,
}

impl MessageStore {
    /// The store of `cluster`.
    pub(super) fn of(cluster: &InMemoryCluster) -> Arc<Self> {
        cluster.extension::<Self>()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Messages> {
        // A panic while holding this lock can only come from a bug in this module; keep serving.
        self.messages
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the store holds.
#[derive(Debug, Default)]
pub(super) struct Messages {
    pub(super) logs: HashMap<MessageQueue, QueueLog>,
    /// The position of the next message in the cluster's log (one per message: the
    /// commit-log offset a broker looks a sent-back message up by).
    commit_log: i64,
    /// The round robin of `send`, per topic.
    pub(super) turns: HashMap<String, RoundRobin>,
    /// Messages sent back and waiting for their delay, per group.
    pub(super) scheduled: HashMap<String, usize>,
}

impl Messages {
    pub(super) fn log(&self, queue: &MessageQueue) -> Option<&QueueLog> {
        self.logs.get(queue)
    }

    /// The message stored at `offset` of `queue` with the commit-log position
    /// `commit_log_offset` (how a broker finds a message sent back), if it is still retained.
    pub(super) fn stored(
        &self,
        queue: &MessageQueue,
        offset: i64,
        commit_log_offset: i64,
    ) -> Option<Message> {
        self.log(queue)?
            .at(offset)
            .filter(|m| m.commit_log_offset() == commit_log_offset)
            .cloned()
    }

    /// Stores a message at the end of `queue` at `now_ms` (the cluster's clock) and wakes the
    /// pulls held on it; `msg_id` is the id it keeps (a redelivery keeps the original's), or a
    /// new one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn append(
        &mut self,
        queue: &MessageQueue,
        body: Bytes,
        properties: HashMap<String, String>,
        msg_id: Option<&str>,
        born_ms: Option<i64>,
        reconsume_times: i32,
        now_ms: i64,
    ) -> SendReceipt {
        let commit_log = self.commit_log;
        self.commit_log += 1;
        let log = self.logs.entry(queue.clone()).or_default();
        let offset = log.next_offset();
        // The shape of RocketMQ's offset message id: the storing broker's address and the
        // commit-log offset, in hex.
        let msg_id = msg_id.map_or_else(
            || format!("7F00000100002A9F{commit_log:016X}"),
            String::from,
        );
        let message = Message::new(log.shared_queue(queue), offset, body)
            .with_msg_id(msg_id.as_str())
            .with_commit_log_offset(commit_log)
            .with_properties(properties)
            .with_timestamps(born_ms.unwrap_or(now_ms), now_ms)
            .with_reconsume_times(reconsume_times);
        log.append(message);
        tracing::trace!(?queue, offset, %msg_id, "in-memory cluster stored a message");
        SendReceipt {
            queue: queue.clone(),
            offset,
            msg_id,
        }
    }
}

/// A message sent back, to store in the retry or dead-letter topic.
pub(super) struct Redelivery {
    pub(super) queue: MessageQueue,
    pub(super) body: Bytes,
    pub(super) properties: HashMap<String, String>,
    pub(super) msg_id: String,
    pub(super) born_ms: i64,
    pub(super) reconsume_times: i32,
}

impl Redelivery {
    /// Stores the copy now (`now_ms` on the cluster's clock).
    pub(super) fn store(self, messages: &mut Messages, now_ms: i64) -> SendReceipt {
        messages.append(
            &self.queue,
            self.body,
            self.properties,
            Some(&self.msg_id),
            Some(self.born_ms),
            self.reconsume_times,
            now_ms,
        )
    }

    /// Stores the copy after `delay` on tokio's clock (`now_ms` is the cluster's clock now), in
    /// a task of its own that holds the store only weakly (a cluster dropped meanwhile drops
    /// the message).
    pub(super) fn schedule(
        self,
        store: &Arc<MessageStore>,
        group: &str,
        delay: Duration,
        now_ms: i64,
    ) {
        *store.lock().scheduled.entry(group.to_string()).or_default() += 1;
        let weak: Weak<MessageStore> = Arc::downgrade(store);
        let group = group.to_string();
        let due = Instant::now() + delay;
        let store_ms = now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            if let Some(store) = weak.upgrade() {
                let mut messages = store.lock();
                let receipt = self.store(&mut messages, store_ms);
                if let Some(n) = messages.scheduled.get_mut(&group) {
                    *n = n.saturating_sub(1);
                }
                tracing::trace!(queue = ?receipt.queue, offset = receipt.offset, "in-memory cluster redelivered a message");
            }
        });
    }
}
