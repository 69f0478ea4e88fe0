//! Lock requests a broker does not answer: neither the slow answers nor the lost ones may cost
//! the queues of the other brokers their renewals and offsets, or hold a queue's next owner off
//! until the broker's lock expires.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::memory::{ClusterClient, InMemoryCluster};
use rebalance_runtime::{
    ConsumerBuilder, LockOutcome, QueueLocker, RemoteError, config::ConsumeOrder,
};

/// What the in-memory locker does to one broker's part of each lock request.
#[derive(Clone, Copy)]
enum Trouble {
    /// Nothing is locked there; the part comes back unanswered after the transport's request
    /// timeout (3 s), as `BrokerClient` reports a broker that does not answer.
    TimesOut,
    /// The broker locks the queues, but its answer is lost: they come back unanswered at once.
    LosesAnswers,
}

struct TroubledBroker {
    inner: ClusterClient,
    broker: &'static str,
    trouble: Trouble,
}

impl TroubledBroker {
    fn new(cluster: &InMemoryCluster, broker: &'static str, trouble: Trouble) -> Arc<Self> {
        Arc::new(Self {
            inner: cluster.client(client_id(0)),
            broker,
            trouble,
        })
    }
}

#[async_trait]
impl QueueLocker for TroubledBroker {
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<LockOutcome, RemoteError> {
        let (troubled, fine): (Vec<MessageQueue>, Vec<MessageQueue>) = queues
            .iter()
            .cloned()
            .partition(|q| &*q.broker_name == self.broker);
        let mut outcome = self.inner.lock(group, client, &fine).await?;
        if !troubled.is_empty() {
            match self.trouble {
                Trouble::TimesOut => tokio::time::sleep(Duration::from_secs(3)).await,
                Trouble::LosesAnswers => {
                    self.inner.lock(group, client, &troubled).await?;
                }
            }
            outcome.merge(LockOutcome::unanswered(&troubled));
        }
        Ok(outcome)
    }

    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError> {
        self.inner.unlock(group, client, queues).await
    }
}

/// Ordered consumption, without the group's retry topic (these tests count the topics).
fn orderly(b: ConsumerBuilder) -> ConsumerBuilder {
    b.consume_order(ConsumeOrder::Orderly)
        .consume_retry_topic(false)
}

fn q(topic: &str, broker: usize, id: i32) -> MessageQueue {
    MessageQueue::new(topic, format!("broker-{broker}"), id)
}

#[tokio::test(start_paused = true)]
async fn a_broker_that_times_out_lock_requests_does_not_starve_renewal_or_persistence() {
    // Two topics: each round waits 3 s for broker-1 twice, so the retry that the first topic's
    // unanswered locks ask for (500 ms) is due before the round ends. Rounds ran back to back
    // then, and the renewal and persistence timers never got their turn.
    let cluster = InMemoryCluster::new();
    cluster.create_topic("A", 2, 2);
    cluster.create_topic("B", 2, 2);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(7);
    let locker = TroubledBroker::new(&cluster, "broker-1", Trouble::TimesOut);
    let member = start_recording(&cluster, 0, &["A", "B"], recorder, |b| {
        orderly(b).locker(locker)
    })
    .await;
    settle(Duration::from_secs(10)).await;
    let healthy = q("A", 0, 0);
    assert!(member.recorder.held().contains(&healthy));
    assert!(!member.recorder.held().contains(&q("A", 1, 0)));
    assert_eq!(
        cluster.offset(GROUP, &healthy),
        Some(7),
        "offsets are persisted every 5 s"
    );
    // Locks are renewed every 20 s and trusted for 30 s after the last renewal.
    settle(Duration::from_secs(30)).await;
    let lease = member.recorder.leases.lock().unwrap()[&healthy].clone();
    assert!(
        lease.consume_guard().await.is_some(),
        "the lock of a queue on the healthy broker is renewed"
    );
    member.handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lock_granted_but_unanswered_is_unlocked_by_a_clean_shutdown() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let locker = TroubledBroker::new(&cluster, "broker-1", Trouble::LosesAnswers);
    let member = start_with(&cluster, 0, &["T"], |b| orderly(b).locker(locker)).await;
    settle(Duration::from_secs(2)).await;
    let held = member.recorder.held();
    assert!(held.contains(&q("T", 0, 0)) && !held.contains(&q("T", 1, 0)));
    assert_eq!(cluster.lock_owner(GROUP, &q("T", 1, 0)), Some(client_id(0)));
    member.handle.shutdown().await;
    for id in 0..2 {
        assert_eq!(
            cluster.lock_owner(GROUP, &q("T", 1, id)),
            None,
            "a lock this client may hold is released at shutdown, not left to expire"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_granted_but_unanswered_is_unlocked_when_its_queue_leaves_the_share() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let locker = TroubledBroker::new(&cluster, "broker-1", Trouble::LosesAnswers);
    let a = start_with(&cluster, 0, &["T"], |b| orderly(b).locker(locker)).await;
    settle(Duration::from_secs(2)).await;
    assert_eq!(cluster.lock_owner(GROUP, &q("T", 1, 1)), Some(client_id(0)));
    // b's share is broker-1's queues (averagely: a, first in order, gets broker-0's).
    let b = start_with(&cluster, 1, &["T"], orderly).await;
    settle(Duration::from_secs(3)).await;
    let expected: std::collections::BTreeSet<_> = [q("T", 1, 0), q("T", 1, 1)].into();
    assert_eq!(
        b.recorder.held(),
        expected,
        "b is not held off until a's unknown locks expire (60 s)"
    );
    b.handle.shutdown().await;
    a.handle.shutdown().await;
}

/// Grants the first lock request after `delay`; every later request goes unanswered.
struct SlowFirstThenSilent {
    inner: ClusterClient,
    delay: Duration,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl QueueLocker for SlowFirstThenSilent {
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<LockOutcome, RemoteError> {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0 {
            return Ok(LockOutcome::unanswered(queues));
        }
        let outcome = self.inner.lock(group, client, queues).await?;
        tokio::time::sleep(self.delay).await;
        Ok(outcome)
    }

    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError> {
        self.inner.unlock(group, client, queues).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_is_trusted_from_its_request_not_from_a_late_answer() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let locker = Arc::new(SlowFirstThenSilent {
        inner: cluster.client(client_id(0)),
        delay: Duration::from_secs(3),
        calls: Default::default(),
    });
    let started = tokio::time::Instant::now();
    let member = start_with(&cluster, 0, &["T"], |b| orderly(b).locker(locker)).await;
    settle(Duration::from_millis(3100)).await;
    let queue = q("T", 0, 0);
    let lease = member.recorder.leases.lock().unwrap()[&queue].clone();
    // The broker locked the queue when the request came (t = 0) and answered at 3 s; renewals
    // go unanswered from then on, so the lock is trusted until it is `lock_lifetime` (30 s) old.
    tokio::time::sleep_until(started + Duration::from_millis(29_900)).await;
    assert!(lease.consume_guard().await.is_some());
    tokio::time::sleep_until(started + Duration::from_millis(30_500)).await;
    assert!(
        lease.consume_guard().await.is_none(),
        "trusted past 30 s after the request: the broker's lock may have passed on by then"
    );
    member.handle.shutdown().await;
}

/// Locks every queue asked for, but loses the answers for the queues of `topic`.
struct LosesAnswersOf {
    inner: ClusterClient,
    topic: &'static str,
}

#[async_trait]
impl QueueLocker for LosesAnswersOf {
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<LockOutcome, RemoteError> {
        let (lost, fine): (Vec<MessageQueue>, Vec<MessageQueue>) = queues
            .iter()
            .cloned()
            .partition(|q| &*q.topic == self.topic);
        let mut outcome = self.inner.lock(group, client, &fine).await?;
        if !lost.is_empty() {
            self.inner.lock(group, client, &lost).await?;
            outcome.merge(LockOutcome::unanswered(&lost));
        }
        Ok(outcome)
    }

    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError> {
        self.inner.unlock(group, client, queues).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_granted_but_unanswered_is_unlocked_when_its_topic_is_unsubscribed() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    cluster.create_topic("U", 1, 2);
    let locker = Arc::new(LosesAnswersOf {
        inner: cluster.client(client_id(0)),
        topic: "U",
    });
    let member = start_with(&cluster, 0, &["T", "U"], |b| orderly(b).locker(locker)).await;
    settle(Duration::from_secs(2)).await;
    assert_eq!(member.recorder.held(), [q("T", 0, 0)].into());
    assert_eq!(cluster.lock_owner(GROUP, &q("U", 0, 0)), Some(client_id(0)));
    member.handle.unsubscribe("U").unwrap();
    settle(Duration::from_secs(3)).await;
    for id in 0..2 {
        assert_eq!(
            cluster.lock_owner(GROUP, &q("U", 0, id)),
            None,
            "a lock this client may hold on a topic it left is released, not left to expire"
        );
    }
    member.handle.shutdown().await;
}
