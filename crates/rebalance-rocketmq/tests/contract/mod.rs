//! The broker contract: scenarios written once, run against the in-memory cluster
//! (`contract_memory.rs`, on paused time) and against the real Rust broker 1.0
//! (`contract_real_servers.rs`), with the same assertions. What a broker decides with its own
//! state (the stored reconsume count, retry and dead-letter routing, offsets, locks and their
//! expiry, pull answers) must be decided the same way by the model, or a green test of the
//! runtime proves nothing.
//!
//! The in-memory cluster follows the Java broker. Where the Rust broker 1.0 differs, the
//! difference is a [`Deviation`] the real backend declares, and the scenario asserts each
//! backend's answer: a difference is a failing test or a recorded deviation, never silence.
#![allow(dead_code)]

mod pop;

pub use pop::{
    orderly_pops_hold_the_queue_and_redeliver_in_order,
    ordinary_pops_hide_and_revive_unacknowledged_messages,
    server_side_assignment_follows_the_read_mode,
};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::PopSource;
use rebalance_consume::{Message, MessageSource, PullRequest, PullResult, SendBack, property};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::config::{ConsumeFrom, ConsumeOrder, MessageModel};
use rebalance_runtime::subscription::Subscription;
use rebalance_runtime::subscription::TagExpression;
use rebalance_runtime::{
    AssignmentSource, GroupDirectory, OffsetStore, QueueLocker, Registration, RemoteError,
};
use tokio::time::Instant;

/// Where the Rust broker 1.0 decides differently from the Java broker (and so from the
/// in-memory cluster). Each was seen on the real broker by these scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deviation {
    /// A message sent to `%RETRY%{group}` as a new message (the client's fallback when
    /// CONSUMER_SEND_MSG_BACK fails) is dead-lettered on arrival when the group holds *no*
    /// queue lock, and retried when it holds one: `handle_retry_and_dlq` tests
    /// `is_lock_all_expired` without the negation of Java's `handleRetryAndDLQ`, which
    /// dead-letters the messages of groups holding locks (orderly ones).
    FallbackLockTestInverted,
    /// An offset commit smaller than the stored offset is ignored (the store only moves
    /// forward); Java's broker stores what it is sent.
    BackwardCommitIgnored,
    /// An ordinary POP's unacknowledged messages never come back, and a change of their
    /// invisible time is refused (1, `WheelTimerMsgIllegal`): the broker writes the pop's
    /// checkpoint to its revive log as a timer message whose delay is the absolute revive
    /// time, which its timer refuses.
    PopNotRevived,
    /// An orderly batch acknowledged in full may still hold its queue until its invisible time
    /// has passed (Java lets it go at the last acknowledgement): the acknowledgement never
    /// reaches the batch's record, since `AckMessageOrderCapability::commit_and_next`
    /// (`rocketmq-broker-1.0.0/src/processor/ack_message_processor.rs:143`) passes the group
    /// and the topic to `ConsumerOrderInfoManager::commit_and_next(topic, group, ..)`
    /// (`offset/manager/consumer_order_info_manager.rs:219`) the other way round; it only sets
    /// the group's offset past the acknowledged message.
    OrderlyBatchHoldsQueue,
    /// Acknowledging a later message of an orderly batch before an earlier one does not leave
    /// the group's offset at the first unacknowledged message, as Java does: the
    /// acknowledgement sets the offset past the message acknowledged (see
    /// [`OrderlyBatchHoldsQueue`](Self::OrderlyBatchHoldsQueue) for why), so the earlier one
    /// may never come again (`tests/pop_real_servers.rs` `orderly_pop`), or the whole batch
    /// comes again. The consume layer acknowledges in order.
    OrderlyAckOutOfOrder,
    /// QUERY_ASSIGNMENT with a strategy the broker does not run answers an empty list, which
    /// reads as "nothing is yours"; Java answers without a list ("cannot allocate").
    UnknownStrategyEmpty,
}

/// One broker to run the contract against.
#[async_trait]
pub trait Backend: Send + Sync {
    /// For failure messages.
    fn name(&self) -> &'static str;
    /// The name of the broker that holds the topics.
    fn broker(&self) -> &str;
    /// Where messages are pulled and sent back (the client transport with the broker).
    fn source(&self) -> Arc<dyn MessageSource>;
    /// The group's offsets at the broker.
    fn offsets(&self) -> Arc<dyn OffsetStore>;
    /// Queue locks at the broker.
    fn locker(&self) -> Arc<dyn QueueLocker>;
    /// The group directory at the broker (heartbeats).
    fn directory(&self) -> Arc<dyn GroupDirectory>;
    /// The group directory as another client process sees it (own connections: a broker
    /// takes one client per connection).
    fn directory_of_another_client(&self) -> Arc<dyn GroupDirectory>;
    /// Where messages are popped, acknowledged and postponed.
    fn pop_source(&self) -> Arc<dyn PopSource>;
    /// Server-side assignment at the broker.
    fn assignments(&self) -> Arc<dyn AssignmentSource>;
    /// How long the broker keeps a lock that is not renewed.
    fn lock_expiry(&self) -> Duration;
    /// Creates `topic` with `queues` queues on the broker.
    async fn create_topic(&self, topic: &str, queues: i32);
    /// Stores a message with `body` at the end of `queue`.
    async fn send(&self, queue: &MessageQueue, body: &str);
    /// The deviations from the Java broker this backend has.
    fn deviations(&self) -> &[Deviation];

    fn deviates(&self, deviation: Deviation) -> bool {
        self.deviations().contains(&deviation)
    }

    fn queue(&self, topic: &str, id: i32) -> MessageQueue {
        MessageQueue::new(topic, self.broker(), id)
    }
}

/// Registers a member of `group` subscribing to `topic` (a heartbeat), as every consumer does
/// before it commits an offset.
async fn register(b: &dyn Backend, group: &str, topic: &str) {
    let registration = Registration {
        client_id: ClientId::from(format!("127.0.0.1@contract-{group}")),
        group: group.to_owned(),
        message_model: MessageModel::Clustering,
        consume_order: ConsumeOrder::Concurrent,
        consume_from: ConsumeFrom::LastOffset,
        subscriptions: vec![Subscription::all(topic)],
    };
    b.directory().register(&registration).await.unwrap();
}

/// Polls `check` every 100 ms until it answers, for at most `within` (on paused time the
/// waits take no time).
async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One pull of `queue` from `offset` for `group`, answered at once (no hold).
async fn pull(b: &dyn Backend, group: &str, queue: &MessageQueue, offset: i64) -> PullResult {
    let request = PullRequest::new(group, queue.clone(), offset, TagExpression::all())
        .with_suspend(Duration::ZERO);
    b.source()
        .pull(&request)
        .await
        .unwrap_or_else(|e| panic!("{}: pull of {queue:?} at {offset}: {e}", b.name()))
}

/// The messages of `queue` from offset 0, as they are now (none when the topic does not
/// exist yet).
async fn read_all(b: &dyn Backend, group: &str, queue: &MessageQueue) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut offset = 0;
    loop {
        let request = PullRequest::new(group, queue.clone(), offset, TagExpression::all())
            .with_suspend(Duration::ZERO);
        match b.source().pull(&request).await {
            Ok(PullResult::Found {
                messages: found,
                next_offset,
                ..
            }) => {
                messages.extend(found);
                offset = next_offset;
            }
            _ => return messages,
        }
    }
}

/// Sends `body` to the first queue of `topic` and pulls it back.
async fn sent_and_pulled(b: &dyn Backend, group: &str, topic: &str, body: &str) -> Message {
    let queue = b.queue(topic, 0);
    b.send(&queue, body).await;
    eventually("the message is pulled", Duration::from_secs(10), || async {
        read_all(b, group, &queue)
            .await
            .into_iter()
            .find(|m| &m.body()[..] == body.as_bytes())
    })
    .await
}

/// Waits until `topic` (a retry or dead-letter topic, one queue) holds the message whose
/// origin is `origin` (its ORIGIN_MESSAGE_ID, or its id).
async fn arrives_in(
    b: &dyn Backend,
    group: &str,
    topic: &str,
    origin: &Message,
    within: Duration,
) -> Message {
    let queue = b.queue(topic, 0);
    let id = origin.msg_id().to_owned();
    eventually(&format!("{} in {topic}", origin.msg_id()), within, || {
        let (queue, id) = (queue.clone(), id.clone());
        async move {
            read_all(b, group, &queue).await.into_iter().find(|m| {
                m.property(property::ORIGIN_MESSAGE_ID) == Some(id.as_str()) || m.msg_id() == id
            })
        }
    })
    .await
}

/// How many messages of `topic` (one queue) come from `origin`.
async fn count_in(b: &dyn Backend, group: &str, topic: &str, origin: &Message) -> usize {
    read_all(b, group, &b.queue(topic, 0))
        .await
        .iter()
        .filter(|m| {
            m.property(property::ORIGIN_MESSAGE_ID) == Some(origin.msg_id())
                || m.msg_id() == origin.msg_id()
        })
        .count()
}

/// The broker decides a send-back with the message *it stored*: a fresh message is retried
/// whatever count the client's copy carries; the retry copy carries the count plus one, its
/// origin topic and id; once the stored count reaches the maximum it is dead-lettered (each
/// copy counting one more delivery than the stored message); a negative delay level
/// dead-letters a fresh message at once.
pub async fn send_back_is_decided_with_the_stored_message(b: &dyn Backend) {
    let group = "ContractBack";
    let topic = "ContractBack";
    let (retry, dlq) = (format!("%RETRY%{group}"), format!("%DLQ%{group}"));
    b.create_topic(topic, 1).await;
    let first = sent_and_pulled(b, group, topic, "first").await;
    assert_eq!(first.reconsume_times(), 0);
    // The client claims 16 redeliveries: the broker's stored count (0) decides.
    let claimed = first.clone().with_reconsume_times(16);
    let sent_back = tokio::time::Instant::now();
    b.source()
        .send_back(
            SendBack::new(group, &claimed)
                .with_delay_level(1)
                .with_max_reconsume_times(16),
        )
        .await
        .unwrap();
    let retried = arrives_in(b, group, &retry, &first, Duration::from_secs(30)).await;
    // Level 1 is 1 s: the retry topic gets the message only once its delay has passed.
    let delayed = sent_back.elapsed();
    assert!(
        delayed >= Duration::from_millis(900),
        "{}: in the retry topic {delayed:?} after the send-back at level 1 (1 s)",
        b.name()
    );
    assert_eq!(retried.reconsume_times(), 1, "{}", b.name());
    assert_eq!(&retried.body()[..], b"first");
    assert_eq!(retried.property(property::RETRY_TOPIC), Some(topic));
    assert_eq!(count_in(b, group, &dlq, &first).await, 0, "{}", b.name());

    // Stored count 1, maximum 1: dead-lettered, the count kept.
    let shown = retried.clone().with_topic(topic);
    b.source()
        .send_back(
            SendBack::new(group, &shown)
                .with_delay_level(1)
                .with_max_reconsume_times(1),
        )
        .await
        .unwrap();
    let dead = arrives_in(b, group, &dlq, &first, Duration::from_secs(30)).await;
    assert_eq!(&dead.body()[..], b"first");
    assert_eq!(
        dead.reconsume_times(),
        2,
        "{}: the stored count and one",
        b.name()
    );

    // A negative level: straight to the dead letters, never through the retry topic.
    let second = sent_and_pulled(b, group, topic, "second").await;
    b.source()
        .send_back(
            SendBack::new(group, &second)
                .with_max_reconsume_times(16)
                .to_dead_letters(),
        )
        .await
        .unwrap();
    let dead = arrives_in(b, group, &dlq, &second, Duration::from_secs(30)).await;
    assert_eq!(dead.reconsume_times(), 1, "{}", b.name());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        count_in(b, group, &retry, &second).await,
        0,
        "{}: not through the retry topic",
        b.name()
    );
}

/// When the broker cannot find the message sent back (here: a commit-log position that does
/// not exist), the client sends its copy to the retry topic as a new message. Where it lands
/// is the broker's rule: Java dead-letters it when its count reaches the maximum or when the
/// group holds a lock (an orderly group), and retries it otherwise, after level 3 + its count.
pub async fn a_send_back_the_broker_cannot_find_falls_back_to_a_new_message(b: &dyn Backend) {
    let group = "ContractFallback";
    let topic = "ContractFallback";
    let (retry, dlq) = (format!("%RETRY%{group}"), format!("%DLQ%{group}"));
    b.create_topic(topic, 1).await;
    // The group's retry topic exists (a consumer's first heartbeat makes it).
    b.create_topic(&retry, 1).await;
    let bogus = |m: &Message| m.clone().with_commit_log_offset(1 << 40);
    let inverted = b.deviates(Deviation::FallbackLockTestInverted);

    // No lock held by the group.
    let unlocked = sent_and_pulled(b, group, topic, "unlocked").await;
    b.source()
        .send_back(SendBack::new(group, &bogus(&unlocked)).with_max_reconsume_times(5))
        .await
        .unwrap();
    let (to, other) = if inverted {
        (&dlq, &retry)
    } else {
        (&retry, &dlq)
    };
    let landed = arrives_in(b, group, to, &unlocked, Duration::from_secs(40)).await;
    assert_eq!(&landed.body()[..], b"unlocked");
    assert_eq!(landed.property(property::RETRY_TOPIC), Some(topic));
    assert_eq!(
        landed.property(property::ORIGIN_MESSAGE_ID),
        Some(unlocked.msg_id())
    );
    assert_eq!(
        count_in(b, group, other, &unlocked).await,
        0,
        "{}",
        b.name()
    );

    // A dead letter asked for: the fallback carries a count at the maximum, dead-lettered.
    let asked = sent_and_pulled(b, group, topic, "asked").await;
    b.source()
        .send_back(
            SendBack::new(group, &bogus(&asked))
                .with_max_reconsume_times(5)
                .to_dead_letters(),
        )
        .await
        .unwrap();
    arrives_in(b, group, &dlq, &asked, Duration::from_secs(20)).await;

    // The group holds a lock.
    let locked = sent_and_pulled(b, group, topic, "locked").await;
    let client = ClientId::from("127.0.0.1@contract-locker");
    let queue = b.queue(topic, 0);
    let granted = b
        .locker()
        .lock(group, &client, std::slice::from_ref(&queue))
        .await
        .unwrap();
    assert_eq!(granted.granted, std::slice::from_ref(&queue));
    b.source()
        .send_back(SendBack::new(group, &bogus(&locked)).with_max_reconsume_times(5))
        .await
        .unwrap();
    let (to, other) = if inverted {
        (&retry, &dlq)
    } else {
        (&dlq, &retry)
    };
    let landed = arrives_in(b, group, to, &locked, Duration::from_secs(40)).await;
    assert_eq!(&landed.body()[..], b"locked");
    assert_eq!(count_in(b, group, other, &locked).await, 0, "{}", b.name());
    b.locker()
        .unlock(group, &client, std::slice::from_ref(&queue))
        .await
        .unwrap();
}

/// Offsets: a group the broker does not know yet (no member ever sent a heartbeat) has its
/// commits refused; then a commit is read back, for each queue apart; a pull carrying a commit
/// offset stores it; a queue never committed has none; a commit back (an operator's reset, an
/// ordered consumer's exact commit) is stored as sent (Java) or ignored.
pub async fn offsets_are_committed_read_and_carried_by_pulls(b: &dyn Backend) {
    let group = "ContractOffsets";
    let topic = "ContractOffsets";
    b.create_topic(topic, 2).await;
    let (q0, q1) = (b.queue(topic, 0), b.queue(topic, 1));
    for i in 0..10 {
        b.send(&q0, &format!("m{i}")).await;
    }
    let offsets = b.offsets();
    let unknown = offsets.persist(group, &q0, 5).await;
    assert!(
        matches!(unknown, Err(RemoteError::Refused { code: 26, .. })),
        "{}: {unknown:?}",
        b.name()
    );
    register(b, group, topic).await;
    assert_eq!(
        offsets.read(group, &q1).await.unwrap(),
        None,
        "{}",
        b.name()
    );
    offsets.persist(group, &q0, 5).await.unwrap();
    eventually(
        "the commit is read back",
        Duration::from_secs(10),
        || async { (offsets.read(group, &q0).await.ok()? == Some(5)).then_some(()) },
    )
    .await;
    assert_eq!(offsets.read(group, &q1).await.unwrap(), None);
    let read = offsets.read_many(group, &[q0.clone(), q1.clone()]).await;
    assert_eq!(read, vec![Ok(Some(5)), Ok(None)]);

    // A pull carrying the consumer's progress stores it, as an UPDATE would.
    let request = PullRequest::new(group, q0.clone(), 7, TagExpression::all())
        .with_suspend(Duration::ZERO)
        .with_commit_offset(Some(7));
    b.source().pull(&request).await.unwrap();
    eventually(
        "the pull's commit is stored",
        Duration::from_secs(10),
        || async { (offsets.read(group, &q0).await.ok()? == Some(7)).then_some(()) },
    )
    .await;

    // Back to 2.
    offsets.persist(group, &q0, 2).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let now = offsets.read(group, &q0).await.unwrap();
    if b.deviates(Deviation::BackwardCommitIgnored) {
        assert_eq!(now, Some(7), "{}: a commit back is ignored", b.name());
    } else {
        assert_eq!(now, Some(2), "{}: a commit back is stored", b.name());
    }
}

/// Locks: the first client gets a queue's lock and the second is refused; the holder renews
/// it; once unlocked, the other gets it.
pub async fn locks_are_exclusive_renewed_and_released(b: &dyn Backend) {
    let group = "ContractLocks";
    let topic = "ContractLocks";
    b.create_topic(topic, 2).await;
    let queues = [b.queue(topic, 0), b.queue(topic, 1)];
    let (a, c) = (
        ClientId::from("127.0.0.1@contract-a"),
        ClientId::from("127.0.0.1@contract-c"),
    );
    let locker = b.locker();
    let sorted = |mut granted: Vec<MessageQueue>| {
        granted.sort();
        granted
    };
    let first = locker.lock(group, &a, &queues).await.unwrap();
    assert_eq!(sorted(first.granted), queues, "{}", b.name());
    let refused = locker.lock(group, &c, &queues).await.unwrap();
    assert!(refused.granted.is_empty(), "{}: {refused:?}", b.name());
    let renewed = locker.lock(group, &a, &queues[..1]).await.unwrap();
    assert_eq!(renewed.granted, queues[..1], "{}", b.name());
    locker.unlock(group, &a, &queues[..1]).await.unwrap();
    let taken = locker.lock(group, &c, &queues).await.unwrap();
    assert_eq!(
        sorted(taken.granted),
        queues[..1],
        "{}: only the freed queue",
        b.name()
    );
}

/// A departed member's locks: `unlock_departed` drops them only where the broker no longer
/// lists that member, and never another client's lock; after it the queue's lock is free.
pub async fn a_departed_members_locks_are_dropped_only_once_it_is_not_listed(b: &dyn Backend) {
    let group = "ContractDeparted";
    let topic = "ContractDeparted";
    b.create_topic(topic, 1).await;
    let queue = [b.queue(topic, 0)];
    let (a, c) = (
        ClientId::from("127.0.0.1@departed-a"),
        ClientId::from("127.0.0.1@departed-c"),
    );
    let registration = Registration {
        client_id: a.clone(),
        group: group.to_owned(),
        message_model: MessageModel::Clustering,
        consume_order: ConsumeOrder::Orderly,
        consume_from: ConsumeFrom::LastOffset,
        subscriptions: vec![Subscription::all(topic)],
    };
    let directory = b.directory();
    directory.register(&registration).await.unwrap();
    let locker = b.locker();
    assert_eq!(locker.lock(group, &a, &queue).await.unwrap().granted, queue);
    // Listed: its locks stay.
    let asked = locker.unlock_departed(group, &a, &queue).await.unwrap();
    assert!(asked.is_empty(), "{}: {asked:?}", b.name());
    let refused = locker.lock(group, &c, &queue).await.unwrap();
    assert!(refused.granted.is_empty(), "{}: {refused:?}", b.name());
    // Gone from the group: dropped, and the lock is free.
    directory.unregister(&registration).await.unwrap();
    let asked = eventually("a is no longer listed", Duration::from_secs(10), || async {
        let asked = locker.unlock_departed(group, &a, &queue).await.ok()?;
        (!asked.is_empty()).then_some(asked)
    })
    .await;
    assert_eq!(asked, queue, "{}", b.name());
    let taken = locker.lock(group, &c, &queue).await.unwrap();
    assert_eq!(taken.granted, queue, "{}", b.name());
    // In a's name, c's lock is not a's: it stays.
    locker.unlock_departed(group, &a, &queue).await.unwrap();
    let d = ClientId::from("127.0.0.1@departed-d");
    let still = locker.lock(group, &d, &queue).await.unwrap();
    assert!(still.granted.is_empty(), "{}: {still:?}", b.name());
}

/// A lock nobody renews expires after the broker's lock lifetime, and another client gets it;
/// before that it is still refused.
pub async fn an_unrenewed_lock_expires(b: &dyn Backend) {
    let group = "ContractExpiry";
    let topic = "ContractExpiry";
    b.create_topic(topic, 1).await;
    let queue = [b.queue(topic, 0)];
    let (a, c) = (
        ClientId::from("127.0.0.1@expiry-a"),
        ClientId::from("127.0.0.1@expiry-c"),
    );
    let locker = b.locker();
    let started = Instant::now();
    assert_eq!(locker.lock(group, &a, &queue).await.unwrap().granted, queue);
    let expiry = b.lock_expiry();
    tokio::time::sleep(expiry - Duration::from_secs(10)).await;
    let early = locker.lock(group, &c, &queue).await.unwrap();
    assert!(
        early.granted.is_empty(),
        "{}: refused before expiry",
        b.name()
    );
    let taken = eventually("the lock expires", Duration::from_secs(30), || async {
        let outcome = locker.lock(group, &c, &queue).await.ok()?;
        (!outcome.granted.is_empty()).then_some(started.elapsed())
    })
    .await;
    assert!(
        taken >= expiry && taken < expiry + Duration::from_secs(15),
        "{}: taken after {taken:?}",
        b.name()
    );
}

/// Pull answers: at the end of a queue, no new message; past its end, the offset moved to the
/// end (Java 5 and the Rust broker; Java 4 moved to 0 when the min offset was 0, #4215); on an
/// empty queue, no new message at 0 and the offset moved back to 0 from anywhere else; a
/// topic the broker does not have is refused.
pub async fn pull_answers_follow_the_brokers_codes(b: &dyn Backend) {
    let group = "ContractPull";
    let topic = "ContractPull";
    b.create_topic(topic, 2).await;
    let (q0, empty) = (b.queue(topic, 0), b.queue(topic, 1));
    for i in 0..3 {
        b.send(&q0, &format!("m{i}")).await;
    }
    eventually(
        "the messages are stored",
        Duration::from_secs(10),
        || async { (read_all(b, group, &q0).await.len() == 3).then_some(()) },
    )
    .await;
    match pull(b, group, &q0, 1).await {
        PullResult::Found {
            messages,
            next_offset,
            min_offset,
            max_offset,
        } => {
            let offsets: Vec<i64> = messages.iter().map(Message::queue_offset).collect();
            assert_eq!(offsets, [1, 2]);
            assert_eq!((next_offset, min_offset, max_offset), (3, 0, 3));
        }
        other => panic!("{}: {other:?}", b.name()),
    }
    assert_eq!(
        pull(b, group, &q0, 3).await,
        PullResult::NoNewMessage { next_offset: 3 },
        "{}: at the end",
        b.name()
    );
    assert_eq!(
        pull(b, group, &q0, 50).await,
        PullResult::OffsetMoved { next_offset: 3 },
        "{}: past the end",
        b.name()
    );
    assert_eq!(
        pull(b, group, &empty, 0).await,
        PullResult::NoNewMessage { next_offset: 0 },
        "{}: an empty queue at 0",
        b.name()
    );
    assert_eq!(
        pull(b, group, &empty, 4).await,
        PullResult::OffsetMoved { next_offset: 0 },
        "{}: an empty queue elsewhere",
        b.name()
    );
    let unknown = PullRequest::new(
        group,
        b.queue("ContractNoSuchTopic", 0),
        0,
        TagExpression::all(),
    )
    .with_suspend(Duration::ZERO);
    let refused = b.source().pull(&unknown).await;
    assert!(refused.is_err(), "{}: {refused:?}", b.name());
}
