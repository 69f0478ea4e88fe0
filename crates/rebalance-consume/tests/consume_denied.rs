//! A push consumer whose pulls are denied (the source refuses its credentials or permissions):
//! no retry storm, one ERROR per resource, and consumption once the denial is lifted. Alone in
//! its test binary: a scoped subscriber set on one test thread would miss events whose call
//! sites other test threads registered first.

mod capture;

use capture::Capture;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, MessageSource, PullError,
    PullRequest, PullResult, PushConsumer, SendBack,
};
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::{ClusterCall, ClusterClient, InMemoryCluster};
use tokio::time::sleep;

/// The cluster's client as the message source, counting the pulls of each queue.
struct Counting {
    inner: ClusterClient,
    pulls: Mutex<HashMap<MessageQueue, usize>>,
}

impl Counting {
    fn pulls(&self) -> HashMap<MessageQueue, usize> {
        self.pulls.lock().unwrap().clone()
    }
}

#[async_trait]
impl MessageSource for Counting {
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError> {
        *self
            .pulls
            .lock()
            .unwrap()
            .entry(request.queue.clone())
            .or_default() += 1;
        self.inner.pull(request).await
    }

    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        self.inner.send_back(request).await
    }

    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        self.inner.min_offset(queue).await
    }

    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        self.inner.max_offset(queue).await
    }

    async fn offset_at(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64, RemoteError> {
        self.inner.offset_at(queue, timestamp_ms).await
    }
}

#[derive(Default)]
struct Bodies(Mutex<Vec<String>>);

#[async_trait]
impl ConcurrentListener for Bodies {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let mut bodies = self.0.lock().unwrap();
        bodies.extend(
            messages
                .iter()
                .map(|m| String::from_utf8_lossy(m.body()).into_owned()),
        );
        ConsumeResult::Success
    }
}

/// Over 10 minutes of denied pulls, each of a consumer's 8 queues is pulled at most 15 times
/// (3 s doubling to 60 s; not every 3 s, ~200 times), the denial is logged at ERROR once for
/// the consumer, naming the operation and the resource, and never as a warning per queue; once
/// it is lifted, every queue pulls again within 60 s and the messages are consumed.
#[tokio::test(start_paused = true)]
async fn denied_pulls_back_off_are_logged_once_and_resume_when_lifted() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 4);
    cluster.set_denied(ClusterCall::Pull, true);
    let client = cluster.client("c1@1");
    let source = Arc::new(Counting {
        inner: client.clone(),
        pulls: Mutex::default(),
    });
    let bodies = Arc::new(Bodies::default());
    let intervals = Intervals {
        adaptive_settle: None,
        ..Intervals::default()
    };
    let consumer = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| c.cluster(client).intervals(intervals))
        .source(source.clone())
        .concurrently(bodies.clone())
        .start()
        .await
        .unwrap();
    consumer
        .consumer()
        .ready(Duration::from_secs(10))
        .await
        .unwrap();
    for n in 0..8 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{n}")))
            .unwrap();
    }
    sleep(Duration::from_secs(600)).await;

    let pulls = source.pulls();
    assert_eq!(pulls.len(), 8, "every queue tried: {pulls:?}");
    for (queue, n) in &pulls {
        assert!(*n <= 15, "{queue:?} pulled {n} times in 10 minutes");
    }
    assert!(bodies.0.lock().unwrap().is_empty());
    let log = capture.take();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), 1, "one ERROR for the consumer: {errors:#?}");
    assert!(
        errors[0].contains("operation=\"pull\"") && errors[0].contains("resource=client `c1@1`"),
        "names the operation and the resource: {}",
        errors[0]
    );
    let warnings = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("denied"))
        .count();
    assert_eq!(warnings, 0, "no warning per queue");
    assert!(log.contains("denied again"), "repeats at debug level");

    cluster.set_denied(ClusterCall::Pull, false);
    sleep(Duration::from_secs(61)).await;
    let mut consumed = bodies.0.lock().unwrap().clone();
    consumed.sort();
    let sent: Vec<String> = (0..8).map(|n| format!("m{n}")).collect();
    assert_eq!(consumed, sent, "consumed once the denial is lifted");
    let log = capture.take();
    assert_eq!(
        log.matches("served again after a denial").count(),
        1,
        "said once: {log}"
    );
    consumer.shutdown().await;
}
