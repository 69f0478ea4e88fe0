//! The push consumer's defaults as a user meets them, end to end on the in-memory cluster:
//! batches of one message and at most 20 batches in the listener at once; and a concurrent
//! listener's context (`ack_index`, `delay_level`) deciding what is consumed and when the rest
//! comes back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message, PushConsumer,
};
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::memory::InMemoryCluster;
use tokio::time::{Instant, sleep};

/// Takes a second per batch, counting the batches in the listener at once.
#[derive(Default)]
struct Slow {
    in_listener: AtomicUsize,
    most_at_once: AtomicUsize,
    batch_sizes: Mutex<Vec<usize>>,
    consumed: AtomicUsize,
}

#[async_trait]
impl ConcurrentListener for Slow {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let now = self.in_listener.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        self.batch_sizes.lock().unwrap().push(messages.len());
        sleep(Duration::from_secs(1)).await;
        self.in_listener.fetch_sub(1, Ordering::SeqCst);
        self.consumed.fetch_add(messages.len(), Ordering::SeqCst);
        ConsumeResult::Success
    }
}

#[tokio::test(start_paused = true)]
async fn by_default_batches_are_one_message_and_at_most_20_run_at_once() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 8);
    for i in 0..200 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{i}")))
            .unwrap();
    }
    let listener = Arc::new(Slow::default());
    let client = cluster.client("c1@1");
    let handle = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_from(ConsumeFrom::FirstOffset)
        })
        .source(Arc::new(client))
        .concurrently(listener.clone())
        .start()
        .await
        .unwrap();
    let defaults = ConsumeOptions::default();
    assert_eq!(
        (defaults.consume_concurrency, defaults.consume_batch_size),
        (20, 1)
    );
    let t0 = Instant::now();
    while listener.consumed.load(Ordering::SeqCst) < 200 {
        assert!(t0.elapsed() < Duration::from_secs(60), "not all consumed");
        sleep(Duration::from_millis(100)).await;
    }
    handle.shutdown().await;
    assert_eq!(listener.most_at_once.load(Ordering::SeqCst), 20);
    let sizes = listener.batch_sizes.lock().unwrap();
    assert_eq!(sizes.len(), 200);
    assert!(sizes.iter().all(|&n| n == 1), "{sizes:?}");
    // 200 one-second batches, 20 at a time: ten seconds, not one (unbounded) nor 200 (serial).
    assert!(
        t0.elapsed() >= Duration::from_secs(10) && t0.elapsed() < Duration::from_secs(13),
        "{:?}",
        t0.elapsed()
    );
}

/// Each delivery of a message: its reconsume count, the topic of the queue it was pulled
/// from, and when.
type Delivery = (i32, String, Duration);

/// On a first delivery, acknowledges the first two messages of each batch and asks for the
/// rest back after delay level 1 (1 s); takes every redelivery.
#[derive(Default)]
struct AcksTwo {
    /// body -> (reconsume_times, the queue's topic, when) of each delivery.
    deliveries: Mutex<BTreeMap<String, Vec<Delivery>>>,
    t0: Mutex<Option<Instant>>,
}

#[async_trait]
impl ConcurrentListener for AcksTwo {
    async fn consume(
        &self,
        messages: &[Message],
        context: &mut ConcurrentContext,
    ) -> ConsumeResult {
        let t0 = *self.t0.lock().unwrap().get_or_insert_with(Instant::now);
        let mut deliveries = self.deliveries.lock().unwrap();
        for m in messages {
            deliveries
                .entry(String::from_utf8_lossy(m.body()).into_owned())
                .or_default()
                .push((
                    m.reconsume_times(),
                    m.queue().topic.to_string(),
                    t0.elapsed(),
                ));
        }
        if messages.iter().all(|m| m.reconsume_times() == 0) {
            context.ack_index = Some(1);
            context.delay_level = 1;
        }
        ConsumeResult::Success
    }
}

#[tokio::test(start_paused = true)]
async fn the_context_acknowledges_a_prefix_and_sends_the_rest_back_at_its_delay_level() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    // The retry topic exists from the start (a broker makes it with the group's first
    // heartbeat), so its queue is pulled before anything is sent back: a redelivery's time is
    // the delay level's, not the next route poll's.
    cluster.create_topic("%RETRY%G", 1, 1);
    for i in 0..8 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{i}")))
            .unwrap();
    }
    let listener = Arc::new(AcksTwo::default());
    let client = cluster.client("c1@1");
    let mut options = ConsumeOptions::default();
    options.consume_batch_size = 4;
    let handle = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_from(ConsumeFrom::FirstOffset)
        })
        .options(options)
        .source(Arc::new(client))
        .concurrently(listener.clone())
        .start()
        .await
        .unwrap();
    let t0 = Instant::now();
    loop {
        let done = listener
            .deliveries
            .lock()
            .unwrap()
            .values()
            .map(Vec::len)
            .sum::<usize>()
            == 12;
        if done {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{:?}",
            listener.deliveries.lock().unwrap()
        );
        sleep(Duration::from_millis(100)).await;
    }
    // A little longer: nothing else comes.
    sleep(Duration::from_secs(30)).await;
    handle.shutdown().await;
    let deliveries = listener.deliveries.lock().unwrap().clone();
    assert_eq!(deliveries.len(), 8, "{deliveries:?}");
    for (body, seen) in &deliveries {
        let i: usize = body[1..].parse().unwrap();
        if i % 4 < 2 {
            assert_eq!(
                seen.len(),
                1,
                "{body} acknowledged, delivered once: {seen:?}"
            );
        } else {
            assert_eq!(seen.len(), 2, "{body} sent back, delivered again: {seen:?}");
            let (first, again) = (&seen[0], &seen[1]);
            assert_eq!((again.0, again.1.as_str()), (1, "%RETRY%G"), "{seen:?}");
            // Delay level 1 is 1 s; the source's default for a first redelivery is 10 s.
            let delay = again.2 - first.2;
            assert!(
                delay >= Duration::from_secs(1) && delay < Duration::from_secs(5),
                "{body} came back after {delay:?}"
            );
        }
    }
}
