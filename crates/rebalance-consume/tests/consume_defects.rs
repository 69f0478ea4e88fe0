//! The consume defects found in review, each on the in-memory cluster (which decides send-backs
//! with the message it stored, as a broker does), on paused time: an ordered message past its
//! limit goes straight to the dead letters; with an exclusive hand-off, a hung batch stalls only
//! its own queue; `shutdown()` from inside a listener returns; a broadcasting consumer leaves
//! the group's offsets alone while a clustering one's pulls carry them; a `consume_concurrency`
//! past what can run is an error at `start()`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage, dlq_topic};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeOptionsError, ConsumeResult,
    Message, OrderlyContext, OrderlyListener, OrderlyResult, PushConsumer, PushConsumerError,
    PushConsumerHandle,
};
use rebalance_core::MessageQueue;
use rebalance_runtime::config::{Intervals, MessageModel};
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::subscription::retry_topic;
use tokio::time::{Instant, sleep, timeout};

const GROUP: &str = "G";

fn queue(id: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", id)
}

fn intervals() -> Intervals {
    Intervals {
        // The first round at once.
        adaptive_settle: None,
        ..Intervals::default()
    }
}

/// Suspends every ordered batch; records each delivery's body and reconsume count.
#[derive(Default)]
struct AlwaysSuspend {
    deliveries: Mutex<Vec<(String, i32)>>,
}

#[async_trait]
impl OrderlyListener for AlwaysSuspend {
    async fn consume(&self, messages: &[Message], context: &mut OrderlyContext) -> OrderlyResult {
        context.suspend_time = Some(Duration::from_millis(100));
        let mut deliveries = self.deliveries.lock().unwrap();
        for m in messages {
            deliveries.push((
                String::from_utf8_lossy(m.body()).into_owned(),
                m.reconsume_times(),
            ));
        }
        OrderlyResult::Suspend
    }
}

/// An ordered message past `max_reconsume_times` goes straight to `%DLQ%G`, never through
/// `%RETRY%G`: the cluster decides with the count it stored (0), so a plain send-back would
/// have put it in the retry topic, the queue would have committed past it, and it would have
/// come back after its successors.
#[tokio::test(start_paused = true)]
async fn an_ordered_message_past_its_limit_goes_straight_to_the_dead_letters() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let client = cluster.client("c1@1");
    let listener = Arc::new(AlwaysSuspend::default());
    let mut options = ConsumeOptions::default();
    options.max_reconsume_times = 2;
    let consumer = PushConsumer::builder(GROUP)
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()).intervals(intervals()))
        .options(options)
        .source(Arc::new(client))
        .orderly(listener.clone())
        .start()
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    let sent: Vec<String> = (0..5)
        .map(|i| {
            cluster
                .send("T", OutgoingMessage::new(format!("m{i}")))
                .unwrap()
                .msg_id
        })
        .collect();
    sleep(Duration::from_secs(60)).await;
    let dead: Vec<String> = cluster
        .dead_letters(GROUP)
        .iter()
        .map(|m| m.msg_id().to_string())
        .collect();
    assert_eq!(dead, sent, "every message dead-lettered, in order");
    assert_eq!(cluster.pending_redeliveries(GROUP), 0);
    let retry = MessageQueue::new(retry_topic(GROUP).as_str(), "broker-0", 0);
    assert!(cluster.messages(&retry).is_empty(), "none through %RETRY%G");
    assert!(
        cluster
            .dead_letters(GROUP)
            .iter()
            .all(|m| *m.queue().topic == *dlq_topic(GROUP))
    );
    // Each message: its first delivery and two reconsumptions, in order, then the next.
    let deliveries = listener.deliveries.lock().unwrap().clone();
    let expected: Vec<(String, i32)> = (0..5)
        .flat_map(|i| (0..=2).map(move |n| (format!("m{i}"), n)))
        .collect();
    assert_eq!(deliveries, expected);
    assert_eq!(
        cluster.offset(GROUP, &queue(0)),
        Some(5),
        "committed past all"
    );
    consumer.shutdown().await;
}

/// Hangs forever on the message `hang`; records when each other body was consumed.
struct HangsOnOne {
    t0: Instant,
    consumed: Mutex<Vec<(String, Duration)>>,
}

#[async_trait]
impl ConcurrentListener for HangsOnOne {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        for m in messages {
            if &m.body()[..] == b"hang" {
                sleep(Duration::from_secs(24 * 3600)).await;
            }
            self.consumed.lock().unwrap().push((
                String::from_utf8_lossy(m.body()).into_owned(),
                self.t0.elapsed(),
            ));
        }
        ConsumeResult::Success
    }
}

/// With an exclusive hand-off, concurrent batches hold their queue's consume guard. A batch
/// that hangs must stall only its own queue: no worker waits on a guard while other queues
/// have work (20 workers used to pile onto the hung queue's guard, and nothing else was
/// consumed).
#[tokio::test(start_paused = true)]
async fn with_an_exclusive_hand_off_a_hung_batch_stalls_only_its_own_queue() {
    let t0 = Instant::now();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let client = cluster.client("c1@1");
    let listener = Arc::new(HangsOnOne {
        t0,
        consumed: Mutex::new(Vec::new()),
    });
    let consumer = PushConsumer::builder(GROUP)
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .intervals(intervals())
                .exclusive_hand_off(true)
        })
        .source(Arc::new(client))
        .concurrently(listener.clone())
        .start()
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    cluster
        .send_to(&queue(0), OutgoingMessage::new("hang"))
        .unwrap();
    for i in 0..40 {
        cluster
            .send_to(&queue(0), OutgoingMessage::new(format!("q0-{i}")))
            .unwrap();
    }
    sleep(Duration::from_millis(100)).await;
    let sent_at = t0.elapsed();
    cluster
        .send_to(&queue(1), OutgoingMessage::new("other"))
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    let consumed = listener.consumed.lock().unwrap().clone();
    let other = consumed.iter().find(|(body, _)| body == "other");
    let Some((_, at)) = other else {
        panic!("the other queue's message was not consumed within 2 s: {consumed:?}");
    };
    assert!(*at - sent_at < Duration::from_secs(2));
    assert_eq!(
        consumed
            .iter()
            .filter(|(b, _)| b.starts_with("q0-"))
            .count(),
        40,
        "the hung queue's other messages run beside it"
    );
    consumer.abort();
}

/// Calls `shutdown()` on the consumer from inside its first listener call.
#[derive(Default)]
struct StopsItself {
    handle: OnceLock<PushConsumerHandle>,
    returned: Mutex<bool>,
}

impl StopsItself {
    async fn stop(&self) {
        if let Some(handle) = self.handle.get() {
            handle.shutdown().await;
            *self.returned.lock().unwrap() = true;
        }
    }
}

#[async_trait]
impl ConcurrentListener for StopsItself {
    async fn consume(&self, _: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.stop().await;
        ConsumeResult::Success
    }
}

#[async_trait]
impl OrderlyListener for StopsItself {
    async fn consume(&self, _: &[Message], _: &mut OrderlyContext) -> OrderlyResult {
        self.stop().await;
        OrderlyResult::Success
    }
}

/// A service that stops itself on a fatal error can: `shutdown()` called from inside a
/// listener call returns (it starts the shutdown, which waits for this very call), the call's
/// batch is committed, and the consumer then shuts down for good.
#[tokio::test(start_paused = true)]
async fn shutdown_called_from_inside_a_listener_returns() {
    for orderly in [false, true] {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 1);
        let client = cluster.client("c1@1");
        let listener = Arc::new(StopsItself::default());
        let builder = PushConsumer::builder(GROUP)
            .subscribe("T")
            .configure(|c| c.cluster(client.clone()).intervals(intervals()))
            .source(Arc::new(client));
        let builder = if orderly {
            builder.orderly(listener.clone())
        } else {
            builder.concurrently(listener.clone())
        };
        let consumer = builder.start().await.unwrap();
        listener.handle.set(consumer.clone()).ok();
        sleep(Duration::from_secs(2)).await;
        cluster.send("T", OutgoingMessage::new("fatal")).unwrap();
        sleep(Duration::from_secs(1)).await;
        assert!(
            *listener.returned.lock().unwrap(),
            "orderly {orderly}: shutdown() from the listener returned"
        );
        timeout(Duration::from_secs(60), consumer.join())
            .await
            .expect("the consumer shut down")
            .unwrap();
        assert!(cluster.members(GROUP).is_empty(), "unregistered");
        assert_eq!(
            cluster.offset(GROUP, &queue(0)),
            Some(1),
            "orderly {orderly}: the calling batch is committed"
        );
    }
}

/// Consumes everything.
#[derive(Default)]
struct Counts {
    consumed: Mutex<usize>,
}

#[async_trait]
impl ConcurrentListener for Counts {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        *self.consumed.lock().unwrap() += messages.len();
        ConsumeResult::Success
    }
}

/// The cluster stores the commit offset a pull carries, as a broker does. A clustering
/// consumer's pulls carry it (the group's progress); a broadcasting consumer's carry none, so it
/// never writes over the group's offsets at the broker.
#[tokio::test(start_paused = true)]
async fn a_broadcasting_consumer_leaves_the_groups_offsets_alone() {
    for model in [MessageModel::Clustering, MessageModel::Broadcasting] {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 1);
        let client = cluster.client("c1@1");
        let listener = Arc::new(Counts::default());
        let mut builder = PushConsumer::builder(GROUP)
            .subscribe("T")
            .message_model(model)
            .configure(|c| c.cluster(client.clone()).intervals(intervals()));
        if model == MessageModel::Broadcasting {
            builder = builder.configure(|c| {
                c.offset_store(Arc::new(rebalance_runtime::LocalOffsetStore::new()))
            });
        }
        let consumer = builder
            .source(Arc::new(client))
            .concurrently(listener.clone())
            .start()
            .await
            .unwrap();
        sleep(Duration::from_secs(2)).await;
        for i in 0..3 {
            cluster
                .send("T", OutgoingMessage::new(format!("m{i}")))
                .unwrap();
        }
        sleep(Duration::from_millis(100)).await;
        assert_eq!(*listener.consumed.lock().unwrap(), 3);
        // A fourth message answers the held pull; the next pull carries the commit of 3,
        // long before the first persistence tick (5 s after the start) could write it.
        cluster.send("T", OutgoingMessage::new("m3")).unwrap();
        sleep(Duration::from_millis(10)).await;
        let stored = cluster.offset(GROUP, &queue(0));
        match model {
            MessageModel::Clustering => assert_eq!(stored, Some(3), "carried by the pull"),
            _ => assert_eq!(stored, None, "broadcasting: the group's offset untouched"),
        }
        consumer.shutdown().await;
    }
}

/// A `consume_concurrency` past what can run (found by review): an ordered consumer's
/// `start()` panicked making its permits (a tokio semaphore holds at most `usize::MAX >> 3`),
/// and a concurrent one's spawned a worker each until memory ran out. It is an error at
/// `start()`, as `validate` says.
#[tokio::test(start_paused = true)]
async fn a_consume_concurrency_past_what_can_run_is_an_error_at_start() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let client = cluster.client("c1@1");
    let mut options = ConsumeOptions::default();
    options.consume_concurrency = usize::MAX;
    let started = PushConsumer::builder(GROUP)
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()).intervals(intervals()))
        .source(Arc::new(client))
        .options(options)
        .orderly(Arc::new(AlwaysSuspend::default()))
        .start()
        .await;
    assert!(
        matches!(
            started,
            Err(PushConsumerError::Options(ConsumeOptionsError::TooLarge {
                name: "consume_concurrency",
                ..
            }))
        ),
        "{started:?}"
    );
}
