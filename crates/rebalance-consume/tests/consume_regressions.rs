//! Regression tests of the push consumer found in review: the exclusive hand-off of a long
//! batch, shutdown with a hung listener, the stalled-loop restart of a running orderly batch,
//! a partly expired batch, and flow control's early resume.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message, PushConsumer,
    PushConsumerHandle,
};
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::InMemoryCluster;
use tokio::time::{Instant, sleep};

#[derive(Default)]
struct Journal {
    /// (client, body, reconsume_times, started at)
    starts: Mutex<Vec<(String, String, i32, Duration)>>,
}

impl Journal {
    fn record(&self, client: &str, messages: &[Message], t0: Instant) {
        let mut starts = self.starts.lock().unwrap();
        for m in messages {
            starts.push((
                client.to_owned(),
                String::from_utf8_lossy(m.body()).into_owned(),
                m.reconsume_times(),
                t0.elapsed(),
            ));
        }
    }

    fn of(&self, body: &str) -> Vec<(String, String, i32, Duration)> {
        let starts = self.starts.lock().unwrap();
        starts.iter().filter(|s| s.1 == body).cloned().collect()
    }
}

struct Slow {
    client: String,
    journal: Arc<Journal>,
    work: Duration,
    t0: Instant,
}

#[async_trait]
impl ConcurrentListener for Slow {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.journal.record(&self.client, messages, self.t0);
        sleep(self.work).await;
        ConsumeResult::Success
    }
}

/// A member with an exclusive hand-off, one worker, and a listener that takes `work`.
async fn member(
    cluster: &InMemoryCluster,
    id: &str,
    journal: &Arc<Journal>,
    work: Duration,
    t0: Instant,
) -> PushConsumerHandle {
    let client = cluster.client(id);
    let mut options = ConsumeOptions::default();
    options.consume_concurrency = 1;
    let intervals = Intervals {
        force_unlock_after: Duration::from_secs(60),
        // The first round at once, as these tests' timings assume.
        adaptive_settle: None,
        ..Intervals::default()
    };
    PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .exclusive_hand_off(true)
                .intervals(intervals)
        })
        .options(options)
        .source(Arc::new(client))
        .concurrently(Arc::new(Slow {
            client: id.to_string(),
            journal: journal.clone(),
            work,
            t0,
        }))
        .start()
        .await
        .unwrap()
}

/// c1 is consuming m0 when a member that takes its only queue joins; returns who processed m0.
async fn hand_off_with_work(work: Duration) -> Vec<(String, String, i32, Duration)> {
    let t0 = Instant::now();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let journal = Arc::new(Journal::default());
    let c1 = member(&cluster, "c1@1", &journal, work, t0).await;
    sleep(Duration::from_secs(1)).await;
    cluster.send("T", OutgoingMessage::new("m0")).unwrap();
    sleep(Duration::from_secs(2)).await;
    // "a@1" sorts first: it takes the only queue from c1 (a clean reassignment).
    let a = member(&cluster, "a@1", &journal, Duration::from_millis(1), t0).await;
    sleep(Duration::from_secs(120)).await;
    a.shutdown().await;
    c1.shutdown().await;
    journal.of("m0")
}

/// A batch in the listener for longer than `callback_timeout` (10 s), within
/// `force_unlock_after`, at a clean hand-off: the concurrent worker holds the lease's consume
/// guard, so the runtime unlocks the queue only after the batch is committed, and no message
/// is processed by two members.
#[tokio::test(start_paused = true)]
async fn exclusive_hand_off_waits_for_a_concurrent_batch_longer_than_the_callback_timeout() {
    let m0 = hand_off_with_work(Duration::from_secs(30)).await;
    assert_eq!(m0.len(), 1, "m0 processed by two members: {m0:?}");
    assert_eq!(m0[0].0, "c1@1");
}

/// The same hand-off with a batch shorter than `callback_timeout`.
#[tokio::test(start_paused = true)]
async fn exclusive_hand_off_of_a_concurrent_batch_shorter_than_the_callback_timeout() {
    let m0 = hand_off_with_work(Duration::from_secs(8)).await;
    assert_eq!(m0.len(), 1, "m0 processed by two members: {m0:?}");
}

struct Stuck;

#[async_trait]
impl ConcurrentListener for Stuck {
    async fn consume(&self, _: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        std::future::pending::<()>().await;
        ConsumeResult::Success
    }
}

/// A consumer (`orderly`, or concurrent with an `exclusive` hand-off or not) of topic T's one
/// queue on `cluster`, with `await_in_flight` 1 s, whose listener ([`Stuck`]) never returns from
/// `m0`, which it got 2 s ago.
async fn stuck_on_m0(
    cluster: &InMemoryCluster,
    orderly: bool,
    exclusive: bool,
) -> PushConsumerHandle {
    cluster.create_topic("T", 1, 1);
    let client = cluster.client("c1@1");
    let mut options = ConsumeOptions::default();
    options.await_in_flight = Some(Duration::from_secs(1));
    let builder = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()).exclusive_hand_off(exclusive))
        .options(options)
        .source(Arc::new(client));
    let handle = if orderly {
        builder.orderly(Arc::new(Stuck)).start().await.unwrap()
    } else {
        builder.concurrently(Arc::new(Stuck)).start().await.unwrap()
    };
    sleep(Duration::from_secs(1)).await;
    cluster.send("T", OutgoingMessage::new("m0")).unwrap();
    sleep(Duration::from_secs(2)).await;
    handle
}

/// `await_in_flight` bounds the hand-off's wait for batches in the listener and the shutdown's
/// wait for the workers: a listener call that never ends is abandoned.
#[tokio::test(start_paused = true)]
async fn shutdown_abandons_a_hung_listener_call_once_await_in_flight_is_up() {
    let cluster = InMemoryCluster::new();
    let handle = stuck_on_m0(&cluster, false, false).await;
    let started = Instant::now();
    let done = tokio::time::timeout(Duration::from_secs(3600), handle.shutdown()).await;
    assert!(
        done.is_ok(),
        "shutdown still waiting after an hour (consumer underneath stopped: {})",
        handle.consumer().is_stopped()
    );
    assert!(handle.consumer().is_stopped());
    assert!(
        started.elapsed() <= Duration::from_millis(1_100),
        "shutdown took {:?}",
        started.elapsed()
    );
}

#[async_trait]
impl rebalance_consume::OrderlyListener for Stuck {
    async fn consume(
        &self,
        _: &[Message],
        _: &mut rebalance_consume::OrderlyContext,
    ) -> rebalance_consume::OrderlyResult {
        std::future::pending::<()>().await;
        rebalance_consume::OrderlyResult::Success
    }
}

/// The same with the batch holding the queue's consume guard (an ordered queue, or a
/// concurrent one with an exclusive hand-off): the shutdown still ends at `await_in_flight`
/// (found by review: the runtime's release waited for the guard until `force_unlock_after`,
/// 20 s, before the batch was abandoned), also when the consumer is stopped through its token
/// and joined.
#[tokio::test(start_paused = true)]
async fn shutdown_abandons_a_hung_guarded_batch_once_await_in_flight_is_up() {
    for (orderly, by_token) in [(true, false), (false, false), (true, true), (false, true)] {
        let cluster = InMemoryCluster::new();
        let handle = stuck_on_m0(&cluster, orderly, !orderly).await;
        let started = Instant::now();
        if by_token {
            // Stopped another way (the consumer's token), then joined.
            handle.consumer().token().cancel();
            handle.join().await.unwrap();
        } else {
            handle.shutdown().await;
        }
        assert!(handle.consumer().is_stopped());
        assert!(
            started.elapsed() <= Duration::from_millis(1_100),
            "orderly {orderly}, by token {by_token}: shutdown took {:?}",
            started.elapsed()
        );
    }
}

/// Every handle dropped while an ordered batch hangs in the listener: the batch is abandoned
/// `await_in_flight` after the stop began all the same, which frees its queue's lock for the
/// release (found by review: the task that abandons it reached the consumer through its
/// handles, and did nothing once they were gone; the lock was held until force_unlock_after).
#[tokio::test(start_paused = true)]
async fn a_hung_ordered_batch_is_abandoned_at_await_in_flight_when_every_handle_is_dropped() {
    let cluster = InMemoryCluster::new();
    let handle = stuck_on_m0(&cluster, true, false).await;
    let q0 = rebalance_core::MessageQueue::new("T", "broker-0", 0);
    assert!(cluster.lock_owner("G", &q0).is_some());
    drop(handle);
    sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        cluster.lock_owner("G", &q0),
        None,
        "unlocked once the batch was abandoned"
    );
}

#[derive(Default)]
struct Calls {
    started: Mutex<Vec<(String, Duration)>>,
    ended: Mutex<Vec<(String, Duration)>>,
}

struct SlowOrderly {
    calls: Arc<Calls>,
    t0: Instant,
}

#[async_trait]
impl rebalance_consume::OrderlyListener for SlowOrderly {
    async fn consume(
        &self,
        messages: &[Message],
        _: &mut rebalance_consume::OrderlyContext,
    ) -> rebalance_consume::OrderlyResult {
        let body = String::from_utf8_lossy(messages[0].body()).into_owned();
        self.calls
            .started
            .lock()
            .unwrap()
            .push((body.clone(), self.t0.elapsed()));
        sleep(Duration::from_secs(200)).await;
        self.calls
            .ended
            .lock()
            .unwrap()
            .push((body, self.t0.elapsed()));
        rebalance_consume::OrderlyResult::Success
    }
}

/// Orderly: the loop's next pull hangs while a 200 s batch is in the listener: m0's call ends,
/// once, and nothing delivers it again. What this does not reach (so it is named for what it
/// shows, found by a test audit): the watcher's restart of a
/// stalled loop. A hung pull is cut at its suspension + 15 s, so the loop stays active and is
/// never idle for 120 s here, and a loop whose batch runs counts as active anyway (both are
/// unit-tested: `activity.rs`, `leases.rs` `a_loop_that_stopped_pulling_is_restarted`); with
/// the busy flag removed this still passes, since a retired loop lets its batches finish.
#[tokio::test(start_paused = true)]
async fn a_hung_pull_never_cancels_a_running_orderly_batch() {
    let t0 = Instant::now();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let client = cluster.client("c1@1");
    let calls = Arc::new(Calls::default());
    let handle = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()))
        .source(Arc::new(client))
        .orderly(Arc::new(SlowOrderly {
            calls: calls.clone(),
            t0,
        }))
        .start()
        .await
        .unwrap();
    sleep(Duration::from_secs(5)).await;
    // The pull after the one now held is delayed by 300 s (a pull that hangs).
    cluster.delay_next(
        rebalance_runtime::memory::ClusterCall::Pull,
        1,
        Duration::from_secs(300),
    );
    cluster.send("T", OutgoingMessage::new("m0")).unwrap();
    sleep(Duration::from_secs(260)).await;
    let started = calls.started.lock().unwrap().clone();
    let ended = calls.ended.lock().unwrap().clone();
    handle.abort();
    assert!(
        ended.iter().any(|(b, _)| b == "m0"),
        "m0's first call never ended: started {started:?}, ended {ended:?}"
    );
    assert_eq!(started.len(), 1, "m0 delivered again: {started:?}");
}

/// Fails the first delivery of every message after 120 s (past a 60 s consume_timeout);
/// redeliveries succeed at once.
struct ExpiresThenFails {
    journal: Arc<Journal>,
    t0: Instant,
}

#[async_trait]
impl ConcurrentListener for ExpiresThenFails {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.journal.record("", messages, self.t0);
        if messages.iter().all(|m| m.reconsume_times() == 0) {
            sleep(Duration::from_secs(120)).await;
            return ConsumeResult::ReconsumeLater;
        }
        ConsumeResult::Success
    }
}

/// A batch of two times out; m0's send-back fails, m1's succeeds; the listener then returns
/// ReconsumeLater: m1, no longer buffered, is not sent back a second time (Java skips messages
/// no longer in the ProcessQueue), so it is redelivered once.
#[tokio::test(start_paused = true)]
async fn a_partly_expired_batch_is_not_sent_back_twice() {
    let t0 = Instant::now();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let journal = Arc::new(Journal::default());
    let client = cluster.client("c1@1");
    let mut options = ConsumeOptions::default();
    options.consume_batch_size = 2;
    options.consume_concurrency = 2;
    options.consume_timeout = Duration::from_secs(60);
    let handle = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_from(rebalance_runtime::config::ConsumeFrom::FirstOffset)
        })
        .options(options)
        .source(Arc::new(client))
        .concurrently(Arc::new(ExpiresThenFails {
            journal: journal.clone(),
            t0,
        }))
        .start()
        .await
        .unwrap();
    // Both messages are in the log before the first pull: one batch [m0, m1].
    cluster.send("T", OutgoingMessage::new("m0")).unwrap();
    cluster.send("T", OutgoingMessage::new("m1")).unwrap();
    sleep(Duration::from_secs(30)).await;
    cluster.fail_next(rebalance_runtime::memory::ClusterCall::SendBack, 1);
    sleep(Duration::from_secs(300)).await;
    handle.shutdown().await;
    let m1 = journal.of("m1");
    assert_eq!(m1.len(), 2, "m1: first delivery and one redelivery: {m1:?}");
    // Consumed again here (its send-back failed) and not lost: a commit past it would leave
    // it with its first delivery only.
    let m0 = journal.of("m0");
    assert!(
        m0.len() == 2 && m0[1].2 >= 1,
        "m0 is consumed again, once, after its failed send-back: {m0:?}"
    );
    assert_eq!(
        cluster.offset("G", &rebalance_core::MessageQueue::new("T", "broker-0", 0)),
        Some(2),
        "both consumed, and committed only then"
    );
}

struct Fast {
    journal: Arc<Journal>,
    t0: Instant,
}

#[async_trait]
impl ConcurrentListener for Fast {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.journal.record("", messages, self.t0);
        ConsumeResult::Success
    }
}

/// A loop held by flow control pulls again as soon as its buffer drains, not after the full
/// 50 ms: 200 messages through a buffer of one with an instant listener take well under 1 s
/// (10 s at 50 ms each).
#[tokio::test(start_paused = true)]
async fn flow_control_resumes_as_soon_as_the_buffer_drains() {
    let t0 = Instant::now();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    for i in 0..200 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{i}")))
            .unwrap();
    }
    let journal = Arc::new(Journal::default());
    let client = cluster.client("c1@1");
    let mut options = ConsumeOptions::default();
    options.queue_max_messages = 1;
    options.pull_batch_size = 1;
    let handle = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_from(rebalance_runtime::config::ConsumeFrom::FirstOffset)
        })
        .options(options)
        .source(Arc::new(client))
        .concurrently(Arc::new(Fast {
            journal: journal.clone(),
            t0,
        }))
        .start()
        .await
        .unwrap();
    sleep(Duration::from_secs(60)).await;
    let starts = journal.starts.lock().unwrap().clone();
    handle.shutdown().await;
    assert_eq!(starts.len(), 200);
    let took = starts[199].3 - starts[0].3;
    assert!(
        took < Duration::from_secs(1),
        "200 messages took {took:?} with an instant listener"
    );
}

/// Ordered batches take 10 s; the hand-off waits 5 s for them (`await_in_flight`).
struct TenSeconds {
    calls: Arc<Calls>,
    t0: Instant,
}

#[async_trait]
impl rebalance_consume::OrderlyListener for TenSeconds {
    async fn consume(
        &self,
        messages: &[Message],
        _: &mut rebalance_consume::OrderlyContext,
    ) -> rebalance_consume::OrderlyResult {
        let body = String::from_utf8_lossy(messages[0].body()).into_owned();
        self.calls
            .started
            .lock()
            .unwrap()
            .push((body.clone(), self.t0.elapsed()));
        sleep(Duration::from_secs(10)).await;
        self.calls
            .ended
            .lock()
            .unwrap()
            .push((body, self.t0.elapsed()));
        rebalance_consume::OrderlyResult::Success
    }
}

/// `await_in_flight` ends the hand-off's wait, not the ordered batch: as concurrent batches,
/// it runs on (uncommitted) until it ends.
#[tokio::test(start_paused = true)]
async fn await_in_flight_never_cancels_an_ordered_batch() {
    let t0 = Instant::now();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let client = cluster.client("c1@1");
    let calls = Arc::new(Calls::default());
    let mut options = ConsumeOptions::default();
    options.await_in_flight = Some(Duration::from_secs(5));
    let handle = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()))
        .options(options)
        .source(Arc::new(client))
        .orderly(Arc::new(TenSeconds {
            calls: calls.clone(),
            t0,
        }))
        .start()
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    cluster.send("T", OutgoingMessage::new("m0")).unwrap();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        calls.started.lock().unwrap().len(),
        1,
        "m0 is in the listener"
    );
    handle.unsubscribe("T").unwrap();
    sleep(Duration::from_secs(30)).await;
    let ended = calls.ended.lock().unwrap().clone();
    assert_eq!(handle.consumer().assignment().queues.len(), 0, "handed off");
    handle.shutdown().await;
    assert_eq!(ended.len(), 1, "m0's call was cancelled");
}
