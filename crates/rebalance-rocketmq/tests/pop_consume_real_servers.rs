//! The push consumer in POP mode (server-side assignment, `PushConsumerBuilder::pop`) against a
//! real RocketMQ name server and broker (the Rust broker 1.0): every member is assigned the
//! broker's queues (queue id -1, shared), the messages sent are consumed, a failure comes back
//! through the retry topic, and with orderly POP a member aborted with messages popped has them
//! delivered to the other member once their invisible time has passed. Every wait is bounded.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PopMode, PopOptions,
    PushConsumer, PushConsumerHandle, property,
};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::unique_id;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{NameServerClient, RocketMq};
use rebalance_runtime::config::Intervals;
use tokio::time::Instant;

use common::{eventually, init_tracing};

/// One delivery: client, message id, reconsume count, when it started, whether it finished.
type Seen = Arc<Mutex<Vec<(String, String, i32, Instant, bool)>>>;

struct Recorder {
    client: String,
    seen: Seen,
    work: Duration,
    /// Ids whose first delivery fails.
    fail_first: BTreeSet<String>,
}

#[async_trait]
impl ConcurrentListener for Recorder {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let at = {
            let mut seen = self.seen.lock().unwrap();
            for m in messages {
                seen.push((
                    self.client.clone(),
                    m.msg_id().to_string(),
                    m.reconsume_times(),
                    Instant::now(),
                    false,
                ));
            }
            seen.len() - messages.len()
        };
        tokio::time::sleep(self.work).await;
        if messages
            .iter()
            .any(|m| m.reconsume_times() == 0 && self.fail_first.contains(m.msg_id()))
        {
            return ConsumeResult::ReconsumeLater;
        }
        let mut seen = self.seen.lock().unwrap();
        for entry in &mut seen[at..at + messages.len()] {
            entry.4 = true;
        }
        ConsumeResult::Success
    }
}

#[allow(clippy::too_many_arguments)]
async fn member(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
    label: &str,
    seen: &Seen,
    work: Duration,
    fail_first: BTreeSet<String>,
    pop: PopOptions,
) -> PushConsumerHandle {
    let id = common::client_id(label);
    let recorder = Arc::new(Recorder {
        client: label.to_string(),
        seen: seen.clone(),
        work,
        fail_first,
    });
    let rocketmq = RocketMq::connect(&cluster.namesrv_addr()).unwrap();
    PushConsumer::builder(group)
        .cluster(rocketmq.clone())
        .pop(rocketmq, pop)
        .configure(|b| {
            b.client_id(id).intervals(Intervals {
                rebalance_wait: Duration::from_secs(2),
                heartbeat: Duration::from_secs(3),
                ..Intervals::default()
            })
        })
        .subscribe(topic)
        .concurrently(recorder)
        .start()
        .await
        .unwrap()
}

async fn send(cluster: &TestCluster, topic: &str, queues: i32, count: usize) -> Vec<String> {
    let sender = MessageSender::new(
        NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap(),
        "pop-consume-producer",
    );
    let mut ids = Vec::new();
    for i in 0..count {
        let id = unique_id();
        let message = Outgoing::new(format!("m{i}")).with_property(property::UNIQ_KEY, &id);
        let queue = MessageQueue::new(topic, "broker-a", i as i32 % queues);
        sender.send(&queue, &message).await.unwrap();
        ids.push(id);
    }
    ids
}

fn finished(seen: &Seen) -> BTreeSet<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|d| d.4)
        .map(|d| d.1.clone())
        .collect()
}

/// Two orderly-POP members are each assigned the broker's queues as one shared queue (id -1),
/// consume every message sent between them, and a message whose first delivery fails comes
/// back (through the retry topic) counted once; nothing is consumed twice otherwise. (The
/// invisible time is short: the Rust broker 1.0 gives an orderly-popped queue one batch per
/// invisible time, acknowledged or not.)
#[tokio::test]
async fn pop_members_share_the_queues_and_consume_everything() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "PopConsume";
    cluster.create_topic(topic, 4).await.unwrap();
    let group = "pop-consume";
    let seen = Seen::default();
    // Short: the Rust broker 1.0 gives an orderly-popped queue one batch per invisible time.
    let pop = PopOptions::default()
        .with_invisible_time(Duration::from_secs(3))
        .with_poll_time(Duration::from_secs(1));
    let ids = send(&cluster, topic, 4, 4).await;
    let fail = BTreeSet::from([ids[1].clone()]);
    let a = member(
        &cluster,
        group,
        topic,
        "a",
        &seen,
        Duration::ZERO,
        fail.clone(),
        pop.clone(),
    )
    .await;
    let b = member(
        &cluster,
        group,
        topic,
        "b",
        &seen,
        Duration::ZERO,
        fail,
        pop,
    )
    .await;
    let shared = MessageQueue::new(topic, "broker-a", -1);
    eventually(
        "both members pop the shared queue",
        Duration::from_secs(30),
        || async {
            let both = [&a, &b]
                .iter()
                .all(|m| m.consumer().assignment().shared.contains(&shared));
            both.then_some(())
        },
    )
    .await;
    let mut all = ids.clone();
    all.extend(send(&cluster, topic, 4, 196).await);
    eventually(
        "every message consumed",
        Duration::from_secs(60),
        || async {
            let done = finished(&seen);
            all.iter().all(|id| done.contains(id)).then_some(())
        },
    )
    .await;
    let deliveries = seen.lock().unwrap().clone();
    let failed: Vec<_> = deliveries.iter().filter(|d| d.1 == ids[1]).collect();
    assert!(
        failed.iter().any(|d| !d.4 && d.2 == 0),
        "failed first: {failed:?}"
    );
    assert!(
        failed.iter().any(|d| d.4 && d.2 == 1),
        "then consumed, counted: {failed:?}"
    );
    let mut once = BTreeSet::new();
    let twice: Vec<&String> = deliveries
        .iter()
        .filter(|d| d.4 && !once.insert(d.1.clone()))
        .map(|d| &d.1)
        .collect();
    eprintln!(
        "FACT {} deliveries of {} messages; by a {}, by b {}; consumed twice {}",
        deliveries.len(),
        all.len(),
        deliveries.iter().filter(|d| d.0 == "a").count(),
        deliveries.iter().filter(|d| d.0 == "b").count(),
        twice.len()
    );
    assert!(twice.is_empty(), "consumed twice: {twice:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// A member aborted (as if killed) while consuming orderly-popped messages: the broker gives
/// them to the other member once their invisible time has passed (not before), counted once
/// more, and nothing is lost.
#[tokio::test]
async fn an_aborted_members_messages_come_back_after_the_invisible_time() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    let topic = "PopAbort";
    cluster.create_topic(topic, 2).await.unwrap();
    let group = "pop-abort";
    let seen = Seen::default();
    let invisible = Duration::from_secs(8);
    let pop = PopOptions::default()
        .with_mode(PopMode::Orderly)
        .with_invisible_time(invisible)
        .with_poll_time(Duration::from_secs(2));
    let a = member(
        &cluster,
        group,
        topic,
        "a",
        &seen,
        Duration::from_secs(60),
        BTreeSet::new(),
        pop.clone(),
    )
    .await;
    let shared = MessageQueue::new(topic, "broker-a", -1);
    eventually(
        "a pops the shared queue",
        Duration::from_secs(30),
        || async {
            a.consumer()
                .assignment()
                .shared
                .contains(&shared)
                .then_some(())
        },
    )
    .await;
    let all = send(&cluster, topic, 2, 20).await;
    eventually("a is consuming", Duration::from_secs(20), || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let taken: BTreeSet<String> = seen.lock().unwrap().iter().map(|d| d.1.clone()).collect();
    a.abort();
    let aborted = Instant::now();
    let b = member(
        &cluster,
        group,
        topic,
        "b",
        &seen,
        Duration::ZERO,
        BTreeSet::new(),
        pop,
    )
    .await;
    eventually(
        "every message consumed",
        Duration::from_secs(60),
        || async {
            let done = finished(&seen);
            all.iter().all(|id| done.contains(id)).then_some(())
        },
    )
    .await;
    let deliveries = seen.lock().unwrap().clone();
    let back: Vec<_> = deliveries
        .iter()
        .filter(|d| d.0 == "b" && taken.contains(&d.1))
        .collect();
    assert!(!back.is_empty());
    let first_back = back.iter().map(|d| d.3).min().unwrap();
    eprintln!(
        "FACT {} messages a had taken came back to b {:?} after the abort (invisible time {invisible:?})",
        back.len(),
        first_back - aborted
    );
    assert!(back.iter().all(|d| d.2 >= 1), "counted once more: {back:?}");
    b.shutdown().await;
}
