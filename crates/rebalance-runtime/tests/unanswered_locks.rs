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

    fn lock_losses(&self) -> Option<tokio::sync::watch::Receiver<rebalance_runtime::LockLosses>> {
        self.inner.lock_losses()
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

    fn lock_losses(&self) -> Option<tokio::sync::watch::Receiver<rebalance_runtime::LockLosses>> {
        self.inner.lock_losses()
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

    fn lock_losses(&self) -> Option<tokio::sync::watch::Receiver<rebalance_runtime::LockLosses>> {
        self.inner.lock_losses()
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

/// A member of 12 topics whose rounds each wait 3 s for broker-1 topic after topic (36 s a
/// round, run back to back for the unanswered locks' retries), with `intervals`.
async fn member_with_long_rounds(
    cluster: &InMemoryCluster,
    intervals: rebalance_runtime::config::Intervals,
) -> (
    Member,
    Vec<MessageQueue>,
    Vec<rebalance_runtime::QueueLease>,
) {
    let topics: Vec<String> = (0..12).map(|i| format!("T{i:02}")).collect();
    for topic in &topics {
        cluster.create_topic(topic, 2, 1);
    }
    let locker = TroubledBroker::new(cluster, "broker-1", Trouble::TimesOut);
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let member = start_with(cluster, 0, &names, |b| {
        orderly(b).locker(locker).intervals(intervals)
    })
    .await;
    settle(Duration::from_secs(40)).await;
    let healthy: Vec<MessageQueue> = topics.iter().map(|t| q(t, 0, 0)).collect();
    let leases = {
        let leases = member.recorder.leases.lock().unwrap();
        healthy.iter().map(|q| leases[q].clone()).collect()
    };
    (member, healthy, leases)
}

async fn consumable(lease: &rebalance_runtime::QueueLease) -> bool {
    tokio::time::timeout(Duration::from_millis(1), lease.consume_guard())
        .await
        .ok()
        .flatten()
        .is_some()
}

/// Long rounds do not let the locks of broker-0's queues lapse: they are renewed between the
/// round's topics when due, not after it (found by review: their 30 s of trust ran out, and
/// every ordered queue stopped, on the healthy broker too).
#[tokio::test(start_paused = true)]
async fn long_rounds_do_not_starve_the_lock_renewal() {
    let cluster = InMemoryCluster::new();
    let (member, healthy, leases) = member_with_long_rounds(&cluster, Default::default()).await;
    for second in 0..120 {
        for (queue, lease) in healthy.iter().zip(&leases) {
            assert!(
                consumable(lease).await,
                "{queue:?} not consumable at {second} s"
            );
        }
        settle(Duration::from_secs(1)).await;
    }
    member.handle.shutdown().await;
}

/// A broker restarted in the middle of a long round, which grants another client one of the
/// member's queues: the member stops trusting it within one of the round's steps, not at the
/// round's end (found by review). Renewals are rare here (every 50 s), so that none cuts it.
#[tokio::test(start_paused = true)]
async fn a_lock_loss_during_a_long_round_is_acted_upon_before_the_round_ends() {
    let cluster = InMemoryCluster::new();
    let intervals = rebalance_runtime::config::Intervals {
        lock_renew: Duration::from_secs(50),
        lock_lifetime: Duration::from_secs(60),
        ..Default::default()
    };
    let (member, healthy, leases) = member_with_long_rounds(&cluster, intervals).await;
    // 5 s into a round (they run back to back, each over 20 s).
    let mut rounds = member.handle.rounds();
    rounds.borrow_and_update();
    rounds.changed().await.unwrap();
    settle(Duration::from_secs(5)).await;
    cluster.restart_broker("broker-0");
    let restarted = tokio::time::Instant::now();
    let (taken, lease) = (&healthy[6], &leases[6]);
    let intruder = cluster.client(client_id(1));
    let granted = intruder
        .lock(GROUP, intruder.client_id(), std::slice::from_ref(taken))
        .await
        .unwrap()
        .granted;
    assert_eq!(granted, std::slice::from_ref(taken));
    while consumable(lease).await {
        assert!(
            restarted.elapsed() <= Duration::from_millis(3500),
            "{taken:?} still trusted {:?} after its broker restarted",
            restarted.elapsed()
        );
        settle(Duration::from_millis(100)).await;
    }
    member.handle.shutdown().await;
}
