//! The runtime against a real RocketMQ name server and broker: runtime consumers, each with its
//! own connections like separate processes, joining, leaving and crashing in one group.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::{
    Consumer, ConsumerHandle, ListenerError, QueueLease, QueueListener, QueueLocker, RemovedQueue,
    StartPosition,
    config::{ConsumeOrder, Intervals},
    wake::WakeReasons,
};

const GROUP_PREFIX: &str = "runtime-it";
const WAIT: Duration = Duration::from_secs(3);

/// Keeps every lease, commits an offset per queue when asked.
#[derive(Default)]
struct Leases {
    held: Mutex<Vec<QueueLease>>,
    added: Mutex<Vec<(MessageQueue, StartPosition)>>,
}

#[async_trait]
impl QueueListener for Leases {
    async fn queues_added(&self, _topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        let mut added = self.added.lock().unwrap();
        for lease in queues {
            added.push((lease.queue().clone(), lease.start_position()));
        }
        self.held.lock().unwrap().extend(queues.iter().cloned());
        Ok(())
    }

    async fn queues_removed(
        &self,
        _topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        let gone: BTreeSet<&MessageQueue> = queues.iter().map(|r| &r.queue).collect();
        self.held
            .lock()
            .unwrap()
            .retain(|l| !gone.contains(l.queue()));
        Ok(())
    }
}

struct Member {
    id: ClientId,
    handle: ConsumerHandle,
    leases: Arc<Leases>,
}

fn intervals() -> Intervals {
    Intervals {
        rebalance_wait: WAIT,
        ..Intervals::default()
    }
}

async fn join(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
    label: &str,
    order: ConsumeOrder,
) -> Member {
    let name_server = NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap();
    let brokers = BrokerClient::new(name_server.clone());
    let id = common::client_id(label);
    let leases = Arc::new(Leases::default());
    let handle = Consumer::builder(group)
        .client_id(id.clone())
        .subscribe(topic)
        .consume_order(order)
        .intervals(intervals())
        .name_server(Arc::new(name_server))
        .directory(Arc::new(brokers.clone()))
        .offset_store(Arc::new(brokers.clone()))
        .locker(Arc::new(brokers))
        .listener(leases.clone())
        .start()
        .await
        .unwrap();
    Member { id, handle, leases }
}

/// The queues of `all`'s topics that `member` holds (not those of the group's retry topic,
/// which the members share as well).
fn held_of(member: &Member, all: &BTreeSet<MessageQueue>) -> Vec<MessageQueue> {
    let topics: BTreeSet<&str> = all.iter().map(|q| &*q.topic).collect();
    member
        .handle
        .assignment()
        .iter()
        .filter(|q| topics.contains(&*q.topic))
        .cloned()
        .collect()
}

/// Whether the members' assignments of `all`'s topics are disjoint, cover `all`, and are
/// balanced (averagely: every member holds the floor or the ceiling of the mean).
fn partition(members: &[&Member], all: &BTreeSet<MessageQueue>) -> bool {
    let mut seen = BTreeSet::new();
    let fair = all.len() / members.len();
    for m in members {
        let held = held_of(m, all);
        if held.len() < fair
            || held.len() > fair + usize::from(!all.len().is_multiple_of(members.len()))
        {
            return false;
        }
        for q in held {
            if !seen.insert(q) {
                return false;
            }
        }
    }
    seen == *all
}

async fn converge(
    what: &str,
    members: &[&Member],
    all: &BTreeSet<MessageQueue>,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    common::eventually(what, within, || async {
        partition(members, all).then_some(())
    })
    .await;
    start.elapsed()
}

/// The queues of `topic` `member` was given, with their start positions (those of the group's
/// retry topic left out).
fn added_of(member: &Member, topic: &str) -> Vec<(MessageQueue, StartPosition)> {
    let added = member.leases.added.lock().unwrap();
    added
        .iter()
        .filter(|(q, _)| *q.topic == *topic)
        .cloned()
        .collect()
}

fn queues(route: &rebalance_core::TopicRoute, topic: &str) -> BTreeSet<MessageQueue> {
    route.subscribable_queues(topic).into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_eight_queues_and_survivors_take_over() {
    common::init_tracing();
    let cluster = TestCluster::start_with(ClusterOptions {
        channel_expired_timeout: Duration::from_secs(6),
        ..Default::default()
    })
    .unwrap();
    let topic = "RuntimeShare";
    let group = format!("{GROUP_PREFIX}-share");
    let all = queues(&cluster.create_topic(topic, 8).await.unwrap(), topic);
    assert_eq!(all.len(), 8);

    let a = join(&cluster, &group, topic, "a", ConsumeOrder::Concurrent).await;
    converge("a alone holds all 8", &[&a], &all, Duration::from_secs(10)).await;
    // Every round of a from now on is seen (rounds are at least a second apart), so a round
    // woken by the push is not missed when a timer round follows it.
    let mut a_rounds = a.handle.rounds();
    a_rounds.borrow_and_update();
    let pushed = tokio::spawn(async move {
        while a_rounds.changed().await.is_ok() {
            let reasons = a_rounds.borrow_and_update().reasons;
            if reasons.contains(WakeReasons::MEMBERSHIP_CHANGED) {
                return Some(reasons);
            }
        }
        None
    });
    let b = join(&cluster, &group, topic, "b", ConsumeOrder::Concurrent).await;
    let c = join(&cluster, &group, topic, "c", ConsumeOrder::Concurrent).await;
    converge(
        "three members share 8 queues",
        &[&a, &b, &c],
        &all,
        Duration::from_secs(15),
    )
    .await;
    // a learned about the joins from the broker's NOTIFY_CONSUMER_IDS_CHANGED, not its timer.
    // Bounded: without the push this fails instead of waiting for ever.
    let woken = tokio::time::timeout(Duration::from_secs(10), pushed)
        .await
        .expect("no round of a was woken by NOTIFY_CONSUMER_IDS_CHANGED within 10 s")
        .unwrap();
    assert!(woken.is_some(), "a's rounds ended without a push");

    // A clean leave: the broker does not push departures; the periodic rounds catch it.
    b.handle.shutdown().await;
    let took = converge(
        "a and c take over after b leaves",
        &[&a, &c],
        &all,
        2 * WAIT + Duration::from_secs(2),
    )
    .await;
    eprintln!(
        "clean leave: survivors own all 8 queues {took:?} after the member left (rebalance interval {WAIT:?})"
    );

    // A crash: no unregister, the broker expires the silent client (6 s, scanned every 10 s).
    c.handle.abort();
    let took = converge(
        "a takes over after c expires",
        &[&a],
        &all,
        Duration::from_secs(40),
    )
    .await;
    eprintln!("crash: the survivor owns all 8 queues {took:?} after the member crashed");
    a.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_persisted_at_release_are_read_by_the_next_owner() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "RuntimeOffsets";
    let group = format!("{GROUP_PREFIX}-offsets");
    let all = queues(&cluster.create_topic(topic, 4).await.unwrap(), topic);
    let a = join(&cluster, &group, topic, "a", ConsumeOrder::Concurrent).await;
    converge("a holds all", &[&a], &all, Duration::from_secs(10)).await;
    for lease in a.leases.held.lock().unwrap().iter() {
        if *lease.queue().topic == *topic {
            lease.commit(100 + i64::from(lease.queue().queue_id));
        }
    }
    let b = join(&cluster, &group, topic, "b", ConsumeOrder::Concurrent).await;
    converge("a and b share", &[&a, &b], &all, Duration::from_secs(15)).await;
    // b may have read an offset before a persisted it (concurrent hand-off): wait for b's view to
    // settle, then check that every queue b got started from a's committed offset, or that a
    // released it after b's read (then b's later read sees it on the next hand-off).
    let added = added_of(&b, topic);
    assert!(!added.is_empty());
    for (q, start) in &added {
        let expected = 100 + i64::from(q.queue_id);
        let stored = {
            let brokers = BrokerClient::new(
                NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap(),
            );
            rebalance_runtime::OffsetStore::read(&brokers, &group, q)
                .await
                .unwrap()
        };
        assert_eq!(
            stored,
            Some(expected),
            "{q:?}: a persisted its final offset at release"
        );
        assert!(
            *start == StartPosition::Offset(expected) || *start == StartPosition::Latest,
            "{q:?} started at {start:?}"
        );
    }
    a.handle.shutdown().await;
    b.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_hand_off_reads_the_previous_owners_offset() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "RuntimeHandOff";
    let group = format!("{GROUP_PREFIX}-handoff");
    let all = queues(&cluster.create_topic(topic, 4).await.unwrap(), topic);
    // Orderly consumption locks like exclusive hand-off does.
    let a = join(&cluster, &group, topic, "a", ConsumeOrder::Orderly).await;
    converge("a holds all", &[&a], &all, Duration::from_secs(10)).await;
    for lease in a.leases.held.lock().unwrap().iter() {
        if *lease.queue().topic == *topic {
            lease.commit(200 + i64::from(lease.queue().queue_id));
        }
    }
    let b = join(&cluster, &group, topic, "b", ConsumeOrder::Orderly).await;
    converge("a and b share", &[&a, &b], &all, Duration::from_secs(20)).await;
    let added = added_of(&b, topic);
    assert_eq!(added.len(), 2);
    for (q, start) in added {
        assert_eq!(
            start,
            StartPosition::Offset(200 + i64::from(q.queue_id)),
            "{q:?}"
        );
    }
    a.handle.shutdown().await;
    b.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_queue_is_locked_by_one_client_at_a_time() {
    common::init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "RuntimeOrderly";
    let group = format!("{GROUP_PREFIX}-orderly");
    let all = queues(&cluster.create_topic(topic, 8).await.unwrap(), topic);
    let all_list: Vec<MessageQueue> = all.iter().cloned().collect();
    let a = join(&cluster, &group, topic, "a", ConsumeOrder::Orderly).await;
    let b = join(&cluster, &group, topic, "b", ConsumeOrder::Orderly).await;
    converge("a and b share", &[&a, &b], &all, Duration::from_secs(20)).await;

    let intruder_id = common::client_id("intruder");
    let intruder =
        BrokerClient::new(NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap());
    let granted = intruder
        .lock(&group, &intruder_id, &all_list)
        .await
        .unwrap()
        .granted;
    assert!(granted.is_empty(), "locked by the members: {granted:?}");
    // Each member holds exactly the locks of its share: the other cannot take them.
    let a_queues = held_of(&a, &all);
    let stolen = QueueLocker::lock(
        &BrokerClient::new(NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap()),
        &group,
        &b.id,
        &a_queues,
    )
    .await
    .unwrap()
    .granted;
    assert!(stolen.is_empty(), "b could lock a's queues: {stolen:?}");

    a.handle.shutdown().await;
    converge(
        "b takes a's queues after a unlocked them",
        &[&b],
        &all,
        2 * WAIT + Duration::from_secs(4),
    )
    .await;
    let granted = intruder
        .lock(&group, &intruder_id, &all_list)
        .await
        .unwrap()
        .granted;
    assert!(granted.is_empty(), "b holds every lock now: {granted:?}");
    b.handle.shutdown().await;
    let granted = intruder
        .lock(&group, &intruder_id, &all_list)
        .await
        .unwrap()
        .granted;
    assert_eq!(granted.len(), 8, "shutdown released every lock");
}
