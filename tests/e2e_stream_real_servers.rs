//! End to end on the real servers, through the stream consumer: three consumer processes (the
//! `rocketmq_consumer` example with `--consume --api stream --json`, which prints the same lines
//! as `--api push`) in one group on a topic of 8 queues over two brokers, while the test
//! produces; one is killed with SIGKILL, another leaves cleanly, and every message sent must be
//! consumed (duplicates are allowed, counted and printed). The ordered stream (`--orderly`)
//! must also keep each queue's first deliveries in offset order.
//!
//! `cargo build --example rocketmq_consumer && cargo test --test e2e_stream_real_servers -- --nocapture`.

mod e2e;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::{ConsumerProcess, Log, Producer, Queue, queue_set};

/// How long consumers may take to share the queues once started.
const PARTITION_WITHIN: Duration = Duration::from_secs(30);
/// How long every message sent may take to be consumed once the producer stopped.
const CONSUMED_WITHIN: Duration = Duration::from_secs(90);

/// Three members with `extra` arguments: the third is killed with SIGKILL 4 s into the stream
/// of messages, the second leaves with SIGTERM once the survivors share the queues; returns the
/// log once every message sent was consumed.
async fn kill_and_leave(topic: &str, extra: &[&str]) -> Log {
    let _one = e2e::exclusive().await;
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let labels: Vec<String> = (1..=3).map(|i| format!("{topic}-c{i}")).collect();
    let members: Vec<&str> = labels.iter().map(String::as_str).collect();
    let mut consumers: Vec<ConsumerProcess> = labels
        .iter()
        .map(|l| ConsumerProcess::spawn(&cluster, &log, l, topic, topic, extra))
        .collect();
    let all = queue_set(topic);
    log.wait_for_partition(topic, &members, &all, PARTITION_WITHIN)
        .await;
    let started = Instant::now();
    let stream = Producer::new(&cluster, topic).stream(topic, 10);
    tokio::time::sleep(Duration::from_secs(4)).await;

    consumers[2].sigkill();
    let took = log
        .wait_for_partition(topic, &members[..2], &all, Duration::from_secs(60))
        .await;
    eprintln!(
        "e2e stream {extra:?}: the survivors share the queues {took:?} after the SIGKILL of {}",
        members[2]
    );
    consumers[1].sigterm(Duration::from_secs(20)).await;
    log.wait_for_partition(topic, &members[..1], &all, PARTITION_WITHIN)
        .await;
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(started.elapsed())).await;
    let sent = stream.stop().await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    eprintln!(
        "e2e stream {extra:?}: {} sent, none lost, {} consumptions beyond the first ({} messages \
         consumed twice or more); distinct messages per consumer: {:?}",
        sent.len(),
        delivery.extra,
        delivery.duplicated().len(),
        delivery.unique_per_client
    );
    for member in &members {
        assert!(
            delivery
                .unique_per_client
                .get(*member)
                .copied()
                .unwrap_or(0)
                > 0,
            "{member} consumed nothing: {:?}",
            delivery.unique_per_client
        );
    }
    consumers[0].assert_running();
    log.assert_no_garbage();
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stream_members_lose_nothing_across_a_sigkill_and_a_clean_leave() {
    kill_and_leave("E2eStream", &["--api", "stream"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_ordered_stream_members_lose_nothing_and_keep_each_queues_order() {
    let topic = "E2eStreamOrderly";
    let log = kill_and_leave(topic, &["--api", "stream", "--orderly"]).await;
    // Each queue's first deliveries, by whoever consumed them, in offset order.
    let mut seen = std::collections::BTreeSet::new();
    let mut last: BTreeMap<Queue, i64> = BTreeMap::new();
    for (client, _, message) in log.messages(topic) {
        if !seen.insert(message.body.clone()) {
            continue;
        }
        if let Some(previous) = last.insert(message.queue.clone(), message.offset) {
            assert!(
                previous < message.offset,
                "{}: {client} consumed offset {} first after {previous}",
                message.queue,
                message.offset
            );
        }
    }
}
