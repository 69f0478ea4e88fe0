//! [`MessageSource`] for the in-memory cluster's [`ClusterClient`]: pulls with long polling, and
//! send-backs decided as a broker decides them, with the message the cluster stored.

use std::sync::Arc;

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::memory::{ClusterCall, ClusterClient};
use rebalance_runtime::subscription::{TagExpression, retry_topic};

use super::log::QueueLog;
use super::store::{MessageStore, Messages, Redelivery};
use super::{delay_of_level, dlq_topic};
use crate::{MessageSource, PullError, PullRequest, PullResult, SendBack, property};

/// What a client does when the broker cannot find the message it sends back: it sends its
/// own copy to `%RETRY%{group}` as a new message (the Java client's
/// `sendMessageBackAsNormalMessage`, which the RocketMQ transport does too), carrying the
/// copy's reconsume count plus one, delivered after level 3 + the copy's count. A Java
/// broker dead-letters such a message on arrival when that count is above the maximum
/// (`reconsumeTimes > maxReconsumeTimes`: the client counted the delivery already; the
/// transport sends at least the maximum when the send-back asked for the dead letters), or
/// when the group holds an unexpired queue lock (it takes the group for an orderly one:
/// `SendMessageProcessor.handleRetryAndDLQ`). The Rust broker 1.0 compares the count alike,
/// and inverts the last test: it dead-letters when the group holds no lock (a deviation the
/// contract suite records).
fn fall_back(client: &ClusterClient, request: &SendBack<'_>, broker: &Arc<str>) {
    let cluster = client.cluster();
    let asked = request.message;
    let mut count = asked.reconsume_times().saturating_add(1);
    if request.delay_level < 0 {
        // As the transport's fallback: a count above the maximum, which a broker dead-letters.
        count = count.max(request.max_reconsume_times.saturating_add(1));
    }
    let ordered = cluster.holds_locks(request.group);
    let dead = count > request.max_reconsume_times || ordered;
    let topic = if dead {
        dlq_topic(request.group)
    } else {
        retry_topic(request.group)
    };
    cluster.ensure_queue(&topic, broker);
    let mut properties = asked.properties().clone();
    for own in [
        property::MIN_OFFSET,
        property::MAX_OFFSET,
        property::CONSUME_START_TIME,
    ] {
        properties.remove(own);
    }
    properties
        .entry(property::ORIGIN_MESSAGE_ID.to_string())
        .or_insert_with(|| asked.msg_id().to_string());
    properties.insert(property::RETRY_TOPIC.to_string(), asked.topic().to_string());
    let copy = Redelivery {
        queue: MessageQueue::new(topic.as_str(), broker.clone(), 0),
        body: asked.body().clone(),
        properties,
        msg_id: asked.msg_id().to_string(),
        born_ms: asked.born_timestamp(),
        reconsume_times: count,
    };
    let store = MessageStore::of(&cluster);
    let now_ms = cluster.now_ms();
    if dead {
        copy.store(&mut store.lock(), now_ms);
    } else {
        let level = asked.reconsume_times().saturating_add(3);
        copy.schedule(&store, request.group, delay_of_level(level), now_ms);
    }
}

/// Serves a pull: reads, and holds the pull up to its suspend time when the queue has no
/// message at the offset yet, answering once one arrives.
async fn serve_pull(client: &ClusterClient, request: &PullRequest) -> PullResult {
    let store = MessageStore::of(&client.cluster());
    let read = |messages: &mut Messages| {
        let log = messages.logs.entry(request.queue.clone()).or_default();
        let result = log.read(
            request.offset,
            &request.expression,
            request.max_messages,
            request.max_bytes,
        );
        (result, log.arrivals())
    };
    let (result, mut arrivals) = read(&mut store.lock());
    let at_the_end =
        matches!(result, PullResult::NoNewMessage { next_offset } if next_offset == request.offset);
    if !at_the_end || request.suspend.is_zero() {
        return result;
    }
    let offset = request.offset;
    // `wait_for` answers with a read guard of the watch: dropped here, in this statement, as
    // an append takes the store's lock and then the watch's, and the read below takes the
    // store's (held across it, the guard deadlocked a send and two held pulls).
    let arrived = matches!(
        tokio::time::timeout(request.suspend, arrivals.wait_for(|max| *max > offset)).await,
        Ok(Ok(_))
    );
    tracing::trace!(queue = ?request.queue, offset, arrived, "held pull resumed");
    // Resumed on arrival or at the end of the hold: read once more without holding, as a
    // broker re-runs a held pull.
    read(&mut store.lock()).0
}

/// The client's re-filter of what a broker found (`PullAPIWrapper.processPullResult`): the
/// broker filters by the tag's hash code, the client by the tag, which may leave none.
fn refilter(result: PullResult, expression: &TagExpression) -> PullResult {
    match result {
        PullResult::Found {
            mut messages,
            next_offset,
            min_offset,
            max_offset,
        } => {
            messages.retain(|m| expression.matches(m.tags()));
            PullResult::Found {
                messages,
                next_offset,
                min_offset,
                max_offset,
            }
        }
        other => other,
    }
}

#[async_trait]
impl MessageSource for ClusterClient {
    /// Pulls from the queue's log; held (long polling) up to the request's `suspend` when the
    /// queue has nothing at the offset. Filtered by tag as a broker filters (by the tag's hash
    /// code), then as the client re-filters (by the tag): a tag of the same hash as a subscribed
    /// one makes a found answer with fewer messages, or none. A queue that is not a readable queue of its topic's
    /// route is refused (code 17, as a broker answers for a topic it does not have).
    /// Faults: [`ClusterCall::Pull`].
    ///
    /// As a broker does, a pull that carries a commit offset ([`PullRequest::commit_offset`],
    /// which a clustering consumer sends and a broadcasting one must not) stores it as the
    /// group's offset of the queue when the pull arrives, overwriting what was there (a broker
    /// stores the commit of a pull it holds once, not again when it resumes it). As the Java
    /// client, only a positive offset is sent as a commit.
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError> {
        let admission = self.admit(ClusterCall::Pull)?;
        let cluster = self.cluster();
        if !cluster.is_readable(&request.queue) {
            return Err(PullError::Remote(RemoteError::Refused {
                code: 17,
                remark: format!(
                    "{:?} is not a readable queue of the in-memory cluster",
                    request.queue
                ),
            }));
        }
        if let Some(commit) = request.commit_offset.filter(|&o| o > 0) {
            cluster.set_offset(&request.group, &request.queue, commit);
        }
        let result = refilter(serve_pull(self, request).await, &request.expression);
        Ok(admission.answer(result).await?)
    }

    /// Sends the message back as a broker does, deciding with the message *it stored*, which
    /// it finds by the request's commit-log offset (the client's copy of the message is not
    /// trusted: its reconsume count may be the client's own). For a message the cluster does not
    /// hold (never stored, or truncated since), which a broker refuses ("look message by
    /// offset failed"), it does what the client transport then does: it sends the client's copy
    /// to the retry topic as a new message (`fall_back`). With the stored
    /// reconsume count: at
    /// `max_reconsume_times` or more, or with a negative delay level, the message goes to
    /// `%DLQ%{group}` at once; else to `%RETRY%{group}` after its delay level's delay (level
    /// 0: 3 + the stored count). Either copy counts one more delivery than the stored message. Both
    /// topics get a queue on the message's broker on demand, with a route, so that a
    /// rebalance sees them. The copy keeps the message's id and body, and carries
    /// [`RETRY_TOPIC`](property::RETRY_TOPIC) (the topic it came from) and
    /// [`ORIGIN_MESSAGE_ID`](property::ORIGIN_MESSAGE_ID).
    /// Faults: [`ClusterCall::SendBack`] (a lost reply still sends the message back).
    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RemoteError::Unreachable(
                "the in-memory cluster schedules redeliveries on tokio's clock: call send_back inside a tokio runtime".into(),
            ));
        }
        let asked = request.message;
        let broker = asked.queue().broker_name.clone();
        let admission = self.admit(ClusterCall::SendBack)?;
        let cluster = self.cluster();
        let store = MessageStore::of(&cluster);
        let stored = store.lock().stored(
            asked.queue(),
            asked.queue_offset(),
            asked.commit_log_offset(),
        );
        let Some(message) = stored else {
            // The broker refuses ("look message by offset failed"); the client then sends its
            // copy to the retry topic as a new message, as the RocketMQ transport does.
            tracing::debug!(
                group = request.group,
                msg_id = asked.msg_id(),
                commit_log_offset = asked.commit_log_offset(),
                "in-memory cluster: no such stored message; the client falls back to a send"
            );
            fall_back(self, &request, &broker);
            return admission.answer(()).await;
        };
        let dead =
            message.reconsume_times() >= request.max_reconsume_times || request.delay_level < 0;
        let topic = if dead {
            dlq_topic(request.group)
        } else {
            retry_topic(request.group)
        };
        cluster.ensure_queue(&topic, &broker);
        let queue = MessageQueue::new(topic.as_str(), broker, 0);
        let mut properties = message.properties().clone();
        properties
            .entry(property::RETRY_TOPIC.to_string())
            .or_insert_with(|| message.topic().to_string());
        properties
            .entry(property::ORIGIN_MESSAGE_ID.to_string())
            .or_insert_with(|| message.msg_id().to_string());
        let copy = Redelivery {
            queue,
            body: message.body().clone(),
            properties,
            msg_id: message.msg_id().to_string(),
            born_ms: message.born_timestamp(),
            reconsume_times: message.reconsume_times().saturating_add(1),
        };
        if dead {
            tracing::info!(
                group = request.group,
                msg_id = message.msg_id(),
                reconsume_times = message.reconsume_times(),
                delay_level = request.delay_level,
                "in-memory cluster dead-lettered a message"
            );
            copy.store(&mut store.lock(), cluster.now_ms());
        } else {
            let level = match request.delay_level {
                0 => message.reconsume_times().saturating_add(3),
                level => level,
            };
            let delay = delay_of_level(level);
            tracing::debug!(
                group = request.group,
                msg_id = message.msg_id(),
                level,
                ?delay,
                "in-memory cluster scheduled a redelivery"
            );
            copy.schedule(&store, request.group, delay, cluster.now_ms());
        }
        admission.answer(()).await
    }

    /// The queue's smallest offset. Faults: [`ClusterCall::QueryOffset`].
    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        let admission = self.admit(ClusterCall::QueryOffset)?;
        let offset = MessageStore::of(&self.cluster())
            .lock()
            .log(queue)
            .map_or(0, QueueLog::min_offset);
        admission.answer(offset).await
    }

    /// The queue's largest offset. Faults: [`ClusterCall::QueryOffset`].
    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        let admission = self.admit(ClusterCall::QueryOffset)?;
        let offset = MessageStore::of(&self.cluster())
            .lock()
            .log(queue)
            .map_or(0, QueueLog::max_offset);
        admission.answer(offset).await
    }

    /// The offset at a timestamp. Faults: [`ClusterCall::QueryOffset`].
    async fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64, RemoteError> {
        let admission = self.admit(ClusterCall::QueryOffset)?;
        let offset = MessageStore::of(&self.cluster())
            .lock()
            .log(queue)
            .map_or(0, |log| log.offset_at(timestamp_ms));
        admission.answer(offset).await
    }
}
