//! [`PopSource`] for the in-memory cluster's [`ClusterClient`]: POP as a Java broker serves it,
//! on tokio's clock.
//!
//! - **Offsets**: a pop reads from the group's offset of each queue (the offset table pulls
//!   commit to) and moves it past what it took; a group without an offset starts at the
//!   queue's oldest message when asked ([`PopStart::Earliest`]), else at 0 for a queue never
//!   truncated (Java's `initPopOffsetByCheckMsgInMem`: a young queue is delivered whole) or at
//!   its last message. Messages of other tags are skipped.
//! - **Ordinary POP**: each queue's messages of a pop are a checkpoint, invisible until the
//!   invisible time passes; an acknowledgement takes a message out of it; at the end of the
//!   invisible time the messages left are revived: copied, their reconsume count raised, into
//!   the group's POP retry topic `%RETRY%{group}_{topic}` (queue 0 of the broker), which a pop
//!   of the topic reads first and returns under the topic. A change of invisible time moves
//!   the message to a checkpoint of its own (a new handle; the old one is dead).
//! - **Orderly POP**: a queue's batch blocks the queue for every other attempt until each of
//!   its messages is acknowledged or visible again; the group's offset stays at the batch's
//!   first unacknowledged message, so once the time passes the next pop takes the batch again
//!   from there, each message counted once more (its reconsume count). A pop with the batch's
//!   attempt id gets the batch again. Acknowledgements may come in any order (the Rust broker
//!   1.0 moves the group past an unacknowledged message when a later one is acknowledged: a
//!   deviation the broker contract records). Orderly pops never read the POP retry topic.
//! - **Long polling**: a pop that finds nothing is held up to its poll time, answered when a
//!   message arrives in one of its queues (or their retry queue), when an orderly batch is
//!   acknowledged or one of its messages becomes visible again.
//! - A queue id of `-1` is every readable queue of the topic on the broker, taken in turn
//!   (each pop starts one queue further).
//!
//! Kinder than a broker: a revive happens exactly at the end of the invisible time (a broker
//! scans its revive log every second or so), a pop reads the POP retry topic first (a Java
//! broker does so one time in five, else only when the batch is not full), and the POP retry
//! topic has a route from the first checkpoint written for it (a broker creates it at the
//! first revive).
//!
//! Receipt handles are this module's own: `mem ck {checkpoint} {topic} {broker} {queue} {offset}`
//! or `mem ord {pop time} {topic} {broker} {queue} {offset}`; a handle it cannot read is
//! refused (code 29).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::memory::{ClusterCall, ClusterClient, InMemoryCluster};
use tokio::sync::watch;
use tokio::time::Instant;

use super::store::{MessageStore, Messages};
use crate::pop::NO_MESSAGE;
use crate::{Message, PopRequest, PopResult, PopSource, PopStart, PullError, PullResult, property};

/// The property holding the time of a message's first pop (ms since the Unix epoch).
const FIRST_POP_TIME: &str = "1ST_POP_TIME";

/// The group's POP retry topic of `topic` (RocketMQ's v1 name; the runtime's
/// [`pop_retry_topic`](rebalance_runtime::subscription::pop_retry_topic)).
pub fn pop_retry_topic(group: &str, topic: &str) -> String {
    rebalance_runtime::subscription::pop_retry_topic(group, topic)
}

/// One ordinary pop's messages of one queue, not acknowledged yet.
#[derive(Debug)]
struct Checkpoint {
    group: String,
    /// The topic popped.
    topic: String,
    /// Where the messages are stored (the queue, or the POP retry queue).
    queue: MessageQueue,
    pending: BTreeSet<i64>,
}

/// An orderly batch of one queue.
#[derive(Debug)]
struct Block {
    pop_time: i64,
    attempt: Option<String>,
    /// Each message of the batch: when it is visible again, and whether it is acknowledged.
    offsets: BTreeMap<i64, (Instant, bool)>,
}

impl Block {
    /// Whether the queue is held for attempts other than the batch's.
    fn holds(&self, now: Instant) -> bool {
        self.offsets.values().any(|(at, acked)| !acked && *at > now)
    }

    /// When the batch stops holding the queue, if it does.
    fn until(&self) -> Option<Instant> {
        self.offsets
            .values()
            .filter(|(_, acked)| !acked)
            .map(|(at, _)| *at)
            .max()
    }
}

/// The cluster's POP state, kept in the cluster (see the module documentation).
#[derive(Debug)]
pub(super) struct PopState {
    inner: Mutex<PopInner>,
    /// Bumped when an orderly batch is acknowledged or made visible: wakes held pops.
    changes: watch::Sender<u64>,
}

impl Default for PopState {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }
}

#[derive(Debug, Default)]
struct PopInner {
    checkpoints: HashMap<u64, Checkpoint>,
    next_checkpoint: u64,
    /// Orderly batches by (group, queue).
    blocks: HashMap<(String, MessageQueue), Block>,
    /// How many times each (group, queue, offset) was popped orderly and not acknowledged.
    counts: HashMap<(String, MessageQueue, i64), i32>,
    /// The turn of each (group, topic, broker)'s pops of queue -1.
    turns: HashMap<(String, String, String), usize>,
}

impl PopState {
    fn of(cluster: &InMemoryCluster) -> Arc<Self> {
        cluster.extension::<Self>()
    }

    fn lock(&self) -> MutexGuard<'_, PopInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A handle, read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Handle {
    orderly: bool,
    /// The checkpoint (ordinary) or the pop time (orderly).
    key: i64,
    queue: MessageQueue,
    offset: i64,
}

impl Handle {
    fn render(&self) -> String {
        format!(
            "mem {} {} {} {} {} {}",
            if self.orderly { "ord" } else { "ck" },
            self.key,
            self.queue.topic,
            self.queue.broker_name,
            self.queue.queue_id,
            self.offset
        )
    }

    fn parse(text: &str) -> Result<Self, RemoteError> {
        let bad = || RemoteError::Refused {
            code: 29,
            remark: format!("the in-memory cluster cannot read the receipt handle `{text}`"),
        };
        let parts: Vec<&str> = text.split(' ').collect();
        let [mem, kind, key, topic, broker, queue, offset] = parts[..] else {
            return Err(bad());
        };
        let orderly = match (mem, kind) {
            ("mem", "ck") => false,
            ("mem", "ord") => true,
            _ => return Err(bad()),
        };
        Ok(Self {
            orderly,
            key: key.parse().map_err(|_| bad())?,
            queue: MessageQueue::new(topic, broker, queue.parse().map_err(|_| bad())?),
            offset: offset.parse().map_err(|_| bad())?,
        })
    }
}

/// Where a handle's message is not in its queue any more (its messages were deleted up to
/// past it): what a broker says with [`NO_MESSAGE`] to a change of invisible time. The Rust
/// broker 1.0 refuses `offset < min || offset > max`; a Java broker refuses `offset == max`
/// too, which no handle of a stored message can have.
fn out_of_range(cluster: &InMemoryCluster, handle: &Handle) -> Option<String> {
    let store = MessageStore::of(cluster);
    let messages = store.lock();
    let (min, max) = messages
        .log(&handle.queue)
        .map_or((0, 0), |log| (log.min_offset(), log.max_offset()));
    (handle.offset < min || handle.offset > max).then(|| {
        format!(
            "offset {} is out of the queue's range [{min}, {max}]",
            handle.offset
        )
    })
}

/// What one pass of a pop found, and what to wait on when it found nothing.
struct Pass {
    messages: Vec<Message>,
    arrivals: Vec<watch::Receiver<i64>>,
    /// The earliest time an orderly batch that holds a queue of the pop lets it go.
    unblocks_at: Option<Instant>,
}

/// The queues a pop of `queue` reads: every readable queue of the broker for id -1.
fn targets(cluster: &InMemoryCluster, queue: &MessageQueue) -> Option<Vec<MessageQueue>> {
    let route = cluster.route(&queue.topic)?;
    let readable: Vec<MessageQueue> = route
        .subscribable_queues(&queue.topic)
        .into_iter()
        .filter(|q| q.broker_name == queue.broker_name)
        .collect();
    if queue.queue_id == -1 {
        return (!readable.is_empty()).then_some(readable);
    }
    readable.contains(queue).then(|| vec![queue.clone()])
}

/// Where `group` starts in a queue without offset.
fn initial_offset(
    messages: &mut Messages,
    queue: &MessageQueue,
    start: PopStart,
    retry: bool,
) -> i64 {
    let log = messages.logs.entry(queue.clone()).or_default();
    match start {
        _ if retry => log.min_offset(),
        PopStart::Earliest => log.min_offset(),
        PopStart::Latest if log.min_offset() <= 0 => 0,
        PopStart::Latest => (log.max_offset() - 1).max(log.min_offset()),
    }
}

/// Reads up to `max` messages of `queue` for `group` from its offset, moving the offset past
/// them (unless `keep_offset`, for an orderly batch, whose offset moves with the
/// acknowledgements); returns them and the queue's arrivals.
#[allow(clippy::too_many_arguments)]
fn take(
    cluster: &InMemoryCluster,
    messages: &mut Messages,
    group: &str,
    queue: &MessageQueue,
    request: &PopRequest,
    max: u32,
    retry: bool,
    keep_offset: bool,
) -> (Vec<Message>, watch::Receiver<i64>) {
    let mut offset = match cluster.offset(group, queue) {
        Some(offset) => offset,
        None => {
            let offset = initial_offset(messages, queue, request.start, retry);
            cluster.set_offset(group, queue, offset);
            offset
        }
    };
    let log = messages.logs.entry(queue.clone()).or_default();
    let arrivals = log.arrivals();
    let mut result = log.read(offset, &request.expression, max, u32::MAX);
    if let PullResult::OffsetMoved { next_offset } = result {
        offset = next_offset;
        cluster.set_offset(group, queue, offset);
        result = log.read(offset, &request.expression, max, u32::MAX);
    }
    let (found, next) = match result {
        PullResult::Found {
            messages,
            next_offset,
            ..
        } => (messages, next_offset),
        PullResult::NoNewMessage { next_offset } | PullResult::OffsetMoved { next_offset } => {
            (Vec::new(), next_offset)
        }
    };
    // Skipped messages of other tags are passed in any case; an orderly batch's own offset
    // stays at its first message.
    if !keep_offset || found.is_empty() {
        cluster.set_offset(group, queue, next);
    }
    (found, arrivals)
}

/// The message as a pop returns it: under the topic popped, with its handle and first pop time.
fn popped(message: &Message, topic: &str, handle: &Handle, now_ms: i64, reconsume: i32) -> Message {
    let queue = MessageQueue::new(
        topic,
        message.queue().broker_name.clone(),
        message.queue().queue_id,
    );
    let mut properties = message.properties().clone();
    properties.insert(property::POP_CK.to_string(), handle.render());
    properties
        .entry(FIRST_POP_TIME.to_string())
        .or_insert_with(|| now_ms.to_string());
    Message::new(queue, message.queue_offset(), message.body().clone())
        .with_msg_id(message.msg_id())
        .with_commit_log_offset(message.commit_log_offset())
        .with_properties(properties)
        .with_timestamps(message.born_timestamp(), message.store_timestamp())
        .with_reconsume_times(reconsume)
}

/// One pass of an ordinary pop.
fn pass_ordinary(client: &ClusterClient, request: &PopRequest, queues: &[MessageQueue]) -> Pass {
    let cluster = client.cluster();
    let store = MessageStore::of(&cluster);
    let pops = PopState::of(&cluster);
    let group = &*request.group;
    let topic = &*request.queue.topic;
    let retry_queue = MessageQueue::new(
        pop_retry_topic(group, topic).as_str(),
        request.queue.broker_name.clone(),
        0,
    );
    let now_ms = cluster.now_ms();
    let mut found = Vec::new();
    let mut arrivals = Vec::new();
    let mut checkpoints = Vec::new();
    {
        let mut messages = store.lock();
        let mut state = pops.lock();
        let turn = state
            .turns
            .entry((
                group.to_string(),
                topic.to_string(),
                request.queue.broker_name.to_string(),
            ))
            .or_default();
        let start = *turn % queues.len().max(1);
        *turn = turn.wrapping_add(1);
        let order = std::iter::once((retry_queue.clone(), true)).chain(
            queues
                .iter()
                .cycle()
                .skip(start)
                .take(queues.len())
                .map(|q| (q.clone(), false)),
        );
        for (queue, retry) in order {
            let room = request.max_messages.saturating_sub(found.len() as u32);
            if room == 0 {
                break;
            }
            let (taken, arrival) = take(
                &cluster,
                &mut messages,
                group,
                &queue,
                request,
                room,
                retry,
                false,
            );
            arrivals.push(arrival);
            if taken.is_empty() {
                continue;
            }
            let id = state.next_checkpoint;
            state.next_checkpoint += 1;
            state.checkpoints.insert(
                id,
                Checkpoint {
                    group: group.to_string(),
                    topic: topic.to_string(),
                    queue: queue.clone(),
                    pending: taken.iter().map(Message::queue_offset).collect(),
                },
            );
            checkpoints.push(id);
            for message in &taken {
                let handle = Handle {
                    orderly: false,
                    key: id as i64,
                    queue: queue.clone(),
                    offset: message.queue_offset(),
                };
                found.push(popped(
                    message,
                    topic,
                    &handle,
                    now_ms,
                    message.reconsume_times(),
                ));
            }
        }
    }
    for id in checkpoints {
        schedule_revive(&cluster, id, request.invisible_time);
    }
    Pass {
        messages: found,
        arrivals,
        unblocks_at: None,
    }
}

/// One pass of an orderly pop.
fn pass_orderly(client: &ClusterClient, request: &PopRequest, queues: &[MessageQueue]) -> Pass {
    let cluster = client.cluster();
    let store = MessageStore::of(&cluster);
    let pops = PopState::of(&cluster);
    let group = &*request.group;
    let topic = &*request.queue.topic;
    let now = Instant::now();
    let now_ms = cluster.now_ms();
    let mut found = Vec::new();
    let mut arrivals = Vec::new();
    let mut unblocks_at: Option<Instant> = None;
    let mut messages = store.lock();
    let mut state = pops.lock();
    let turn = state
        .turns
        .entry((
            group.to_string(),
            topic.to_string(),
            request.queue.broker_name.to_string(),
        ))
        .or_default();
    let start = *turn % queues.len().max(1);
    *turn = turn.wrapping_add(1);
    for queue in queues.iter().cycle().skip(start).take(queues.len()) {
        let room = request.max_messages.saturating_sub(found.len() as u32);
        if room == 0 {
            break;
        }
        let key = (group.to_string(), queue.clone());
        // The same attempt asking again (its answer lost): its batch again, counted as the
        // same delivery (Java's `mergeOffsetConsumedCount` keeps the counts of the same
        // attempt: found by review, each lost answer brought the dead letters one nearer).
        let mut repeat = false;
        if let Some(block) = state.blocks.get(&key) {
            let same_attempt = block.attempt.is_some() && block.attempt == request.attempt_id;
            if !same_attempt && block.holds(now) {
                unblocks_at = [unblocks_at, block.until()].into_iter().flatten().min();
                continue;
            }
            repeat = same_attempt && block.holds(now);
        }
        // Free (or the same attempt again): the batch from the group's offset, the first
        // message not acknowledged.
        state.blocks.remove(&key);
        let (taken, arrival) = take(
            &cluster,
            &mut messages,
            group,
            queue,
            request,
            room,
            false,
            true,
        );
        arrivals.push(arrival);
        if taken.is_empty() {
            continue;
        }
        let visible_again = now + request.invisible_time;
        let mut block = Block {
            pop_time: now_ms,
            attempt: request.attempt_id.clone(),
            offsets: BTreeMap::new(),
        };
        for message in &taken {
            let offset = message.queue_offset();
            block.offsets.insert(offset, (visible_again, false));
            let count = state
                .counts
                .entry((group.to_string(), queue.clone(), offset))
                .or_insert(0);
            let reconsume = if repeat && *count > 0 {
                *count - 1
            } else {
                *count += 1;
                *count - 1
            };
            let handle = Handle {
                orderly: true,
                key: now_ms,
                queue: queue.clone(),
                offset,
            };
            found.push(popped(message, topic, &handle, now_ms, reconsume));
        }
        state.blocks.insert(key, block);
    }
    Pass {
        messages: found,
        arrivals,
        unblocks_at,
    }
}

/// Revives what is left of checkpoint `id` after `after` (on tokio's clock), in a task that
/// holds the cluster only weakly.
fn schedule_revive(cluster: &InMemoryCluster, id: u64, after: Duration) {
    // The POP retry topic gets its route now, so that a consumer pulling it finds it (a broker
    // creates it at the first revive).
    let retry = PopState::of(cluster).lock().checkpoints.get(&id).map(|c| {
        (
            pop_retry_topic(&c.group, &c.topic),
            c.queue.broker_name.clone(),
        )
    });
    if let Some((topic, broker)) = retry {
        cluster.ensure_queue(&topic, &broker);
    }
    let pops: Weak<PopState> = Arc::downgrade(&PopState::of(cluster));
    let store: Weak<MessageStore> = Arc::downgrade(&MessageStore::of(cluster));
    let now_ms = cluster.now_ms();
    let due = Instant::now() + after;
    tokio::spawn(async move {
        tokio::time::sleep_until(due).await;
        let (Some(pops), Some(store)) = (pops.upgrade(), store.upgrade()) else {
            return;
        };
        let Some(checkpoint) = pops.lock().checkpoints.remove(&id) else {
            return;
        };
        if checkpoint.pending.is_empty() {
            return;
        }
        let store_ms = now_ms.saturating_add(i64::try_from(after.as_millis()).unwrap_or(i64::MAX));
        let retry_queue = MessageQueue::new(
            pop_retry_topic(&checkpoint.group, &checkpoint.topic).as_str(),
            checkpoint.queue.broker_name.clone(),
            0,
        );
        let mut messages = store.lock();
        for offset in &checkpoint.pending {
            let Some(message) = messages
                .log(&checkpoint.queue)
                .and_then(|l| l.at(*offset))
                .cloned()
            else {
                continue;
            };
            let receipt = messages.append(
                &retry_queue,
                message.body().clone(),
                message.properties().clone(),
                Some(message.msg_id()),
                Some(message.born_timestamp()),
                message.reconsume_times().saturating_add(1),
                store_ms,
            );
            tracing::debug!(group = %checkpoint.group, from = ?checkpoint.queue, offset, to = ?receipt.queue, "in-memory cluster revived a popped message");
        }
    });
}

/// Waits until one of `arrivals` moves, `changes` moves, or `until`.
async fn wait_any(
    mut arrivals: Vec<watch::Receiver<i64>>,
    mut changes: watch::Receiver<u64>,
    until: Instant,
) {
    let mut waits: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = Vec::new();
    for rx in &mut arrivals {
        waits.push(Box::pin(async move {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }));
    }
    waits.push(Box::pin(async move {
        if changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }));
    tokio::select! {
        _ = futures_util::future::select_all(waits) => {}
        _ = tokio::time::sleep_until(until) => {}
    }
}

/// Serves a pop: one pass, and when it found nothing, held until something may have changed
/// (or the poll time is up), then one pass more.
async fn serve_pop(
    client: &ClusterClient,
    request: &PopRequest,
    queues: &[MessageQueue],
) -> PopResult {
    let cluster = client.cluster();
    let pops = PopState::of(&cluster);
    let deadline = Instant::now() + request.poll_time;
    loop {
        let changes = pops.changes.subscribe();
        let pass = if request.orderly {
            pass_orderly(client, request, queues)
        } else {
            pass_ordinary(client, request, queues)
        };
        if !pass.messages.is_empty() {
            // The broker filtered by the tag's hash code; the client re-filters by the tag,
            // and the messages of a colliding tag are the filtered ones it acknowledges.
            let (messages, filtered) = pass
                .messages
                .into_iter()
                .partition(|m| request.expression.matches(m.tags()));
            return PopResult::Found { messages, filtered };
        }
        let now = Instant::now();
        if now >= deadline {
            return PopResult::NoMessage;
        }
        let until = pass.unblocks_at.map_or(deadline, |at| at.min(deadline));
        wait_any(pass.arrivals, changes, until).await;
    }
}

#[async_trait]
impl PopSource for ClusterClient {
    /// Pops as described in this module's documentation. A queue that is not a readable
    /// queue of its topic (or a topic without route) is refused with code 17, a batch outside
    /// 1 to 32 with 29. Faults: [`ClusterCall::Pop`] (a lost reply leaves the messages
    /// popped, invisible until their time passes).
    async fn pop(&self, request: &PopRequest) -> Result<PopResult, PullError> {
        let admission = self.admit(ClusterCall::Pop)?;
        if !(1..=crate::MAX_POP_BATCH).contains(&request.max_messages) {
            return Err(PullError::Remote(RemoteError::Refused {
                code: 29,
                remark: format!("maxMsgNums {} is outside 1 to 32", request.max_messages),
            }));
        }
        let Some(queues) = targets(&self.cluster(), &request.queue) else {
            return Err(PullError::Remote(RemoteError::Refused {
                code: 17,
                remark: format!(
                    "{:?} is not a readable queue of the in-memory cluster",
                    request.queue
                ),
            }));
        };
        let result = serve_pop(self, request, &queues).await;
        Ok(admission.answer(result).await?)
    }

    /// Acknowledges, in the order given. An ordinary message: out of its checkpoint (a handle
    /// whose checkpoint was revived already changes nothing). An orderly one: marked in its
    /// batch (a handle of another pop changes nothing; an offset not in the batch is refused,
    /// 13), the group's offset moved to the batch's first message not acknowledged.
    /// Faults: [`ClusterCall::Ack`] (a lost reply still acknowledges).
    async fn ack(&self, group: &str, _topic: &str, handles: &[&str]) -> Result<(), RemoteError> {
        let admission = self.admit(ClusterCall::Ack)?;
        let cluster = self.cluster();
        let pops = PopState::of(&cluster);
        let mut woke = false;
        for text in handles {
            let handle = Handle::parse(text)?;
            let mut state = pops.lock();
            if !handle.orderly {
                let id = u64::try_from(handle.key).unwrap_or(u64::MAX);
                if let Some(checkpoint) = state.checkpoints.get_mut(&id) {
                    checkpoint.pending.remove(&handle.offset);
                    if checkpoint.pending.is_empty() {
                        state.checkpoints.remove(&id);
                    }
                }
                continue;
            }
            let key = (group.to_string(), handle.queue.clone());
            let Some(block) = state.blocks.get_mut(&key) else {
                continue;
            };
            if block.pop_time != handle.key {
                continue;
            }
            let Some(slot) = block.offsets.get_mut(&handle.offset) else {
                return Err(RemoteError::Refused {
                    code: 13,
                    remark: format!("offset {} is not in the orderly batch", handle.offset),
                });
            };
            slot.1 = true;
            let next = block
                .offsets
                .iter()
                .find(|(_, (_, acked))| !acked)
                .map(|(&o, _)| o);
            let end = block.offsets.keys().next_back().map_or(0, |&o| o + 1);
            cluster.set_offset(group, &handle.queue, next.unwrap_or(end));
            state
                .counts
                .remove(&(group.to_string(), handle.queue.clone(), handle.offset));
            if next.is_none() {
                state.blocks.remove(&key);
            }
            woke = true;
        }
        if woke {
            pops.changed();
        }
        admission.answer(()).await
    }

    /// Changes the invisible time: an ordinary message moves to a checkpoint of its own, due
    /// `invisible_time` from now (a new handle); an orderly one is visible again then (its
    /// handle stays). A message its queue no longer has (deleted by
    /// [`truncate`](crate::memory::ClusterMessages::truncate)) is refused with code 208, as a
    /// broker does. Faults: [`ClusterCall::ChangeInvisibleTime`].
    async fn change_invisible_time(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        invisible_time: Duration,
    ) -> Result<String, RemoteError> {
        let admission = self.admit(ClusterCall::ChangeInvisibleTime)?;
        let cluster = self.cluster();
        let pops = PopState::of(&cluster);
        let handle = Handle::parse(handle)?;
        if let Some(range) = out_of_range(&cluster, &handle) {
            return Err(RemoteError::Refused {
                code: NO_MESSAGE,
                remark: range,
            });
        }
        if handle.orderly {
            {
                let mut state = pops.lock();
                let key = (group.to_string(), handle.queue.clone());
                if let Some(slot) = state
                    .blocks
                    .get_mut(&key)
                    .filter(|b| b.pop_time == handle.key)
                    .and_then(|b| b.offsets.get_mut(&handle.offset))
                {
                    slot.0 = Instant::now() + invisible_time;
                }
            }
            pops.changed();
            return admission.answer(handle.render()).await;
        }
        let renewed = {
            let mut state = pops.lock();
            let old = u64::try_from(handle.key).unwrap_or(u64::MAX);
            if let Some(checkpoint) = state.checkpoints.get_mut(&old) {
                checkpoint.pending.remove(&handle.offset);
            }
            let id = state.next_checkpoint;
            state.next_checkpoint += 1;
            state.checkpoints.insert(
                id,
                Checkpoint {
                    group: group.to_string(),
                    topic: topic.to_string(),
                    queue: handle.queue.clone(),
                    pending: BTreeSet::from([handle.offset]),
                },
            );
            Handle {
                key: id as i64,
                ..handle
            }
        };
        schedule_revive(&cluster, renewed.key as u64, invisible_time);
        admission.answer(renewed.render()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_read_back_and_garbage_is_refused() {
        let handle = Handle {
            orderly: true,
            key: 1_767_225_600_000,
            queue: MessageQueue::new("%RETRY%G_T", "broker-0", 0),
            offset: 42,
        };
        assert_eq!(Handle::parse(&handle.render()).unwrap(), handle);
        for garbage in [
            "",
            "mem ck",
            "mem xx 1 T b 0 1",
            "mem ck one T b 0 1",
            "pop 1 2 3 4 5 6",
        ] {
            assert!(
                matches!(
                    Handle::parse(garbage),
                    Err(RemoteError::Refused { code: 29, .. })
                ),
                "{garbage:?}"
            );
        }
    }
}
