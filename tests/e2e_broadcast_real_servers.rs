//! End to end on the real servers, a broadcasting consumer's offsets in a local file: a
//! `rocketmq_consumer --broadcast --offsets-dir DIR` process consumes, is killed with SIGKILL
//! while messages stream in, and is started again with the same directory. It resumes at the
//! offsets the file held when it died: nothing it had persisted is consumed again (it does not
//! start over, although a queue without an offset starts at its first message), and nothing
//! sent is missing. The topic has 8 queues over two brokers.
//!
//! `cargo build --example rocketmq_consumer && cargo test --test e2e_broadcast_real_servers -- --nocapture`

mod e2e;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::{ConsumerProcess, Log, Producer, Queue, queue_set};
use rebalance_rocketmq::FileOffsetStore;

const HELD_WITHIN: Duration = Duration::from_secs(30);
const CONSUMED_WITHIN: Duration = Duration::from_secs(60);
/// The persistence tick is 5 s: the file catches up within two.
const PERSISTED_WITHIN: Duration = Duration::from_secs(15);

/// The offsets in the consumer's file, by the log's queue names (empty before the first write).
fn file_offsets(dir: &Path, group: &str) -> BTreeMap<Queue, i64> {
    // Read without taking the file: the consumer may have it open.
    FileOffsetStore::peek(dir.join(group).join("offsets.json"))
        .unwrap_or_else(|e| panic!("the consumer's offset file: {e}"))
        .iter()
        .map(|(q, o)| (Queue::of(q), *o))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcasting_consumer_killed_and_restarted_resumes_from_its_offset_file() {
    let _one = e2e::exclusive().await;
    let topic = "E2eBroadcast";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let label = format!("{topic}-c1");
    let offsets_dir = cluster.dir().join("offsets");
    let dir_arg = offsets_dir.display().to_string();
    let extra = ["--broadcast", "--offsets-dir", dir_arg.as_str()];
    let all = queue_set(topic);

    let mut consumer = ConsumerProcess::spawn(&cluster, &log, &label, topic, topic, &extra);
    log.wait_for_partition(topic, &[&label], &all, HELD_WITHIN)
        .await;
    let producer = Producer::new(&cluster, topic);
    // 10 per queue, all consumed, and persisted: the file holds each queue's end.
    let mut sent = producer.send("first", 80).await;
    log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    let ends: BTreeMap<Queue, i64> = all.iter().map(|q| (q.clone(), 10)).collect();
    e2e::eventually(
        "the offset file holds every queue's end",
        PERSISTED_WITHIN,
        || (file_offsets(&offsets_dir, topic) == ends).then_some(()),
    )
    .await;

    // Killed while messages stream in, 7 s after they began: the persistence tick (5 s) put
    // some of them in the file, and what was consumed after the last tick is not there.
    let stream = producer.stream("stream", 40);
    tokio::time::sleep(Duration::from_secs(7)).await;
    consumer.sigkill();
    let persisted = file_offsets(&offsets_dir, topic);
    tokio::time::sleep(Duration::from_secs(1)).await;
    sent.extend(stream.stop().await);
    assert_eq!(
        persisted.keys().cloned().collect::<BTreeSet<_>>(),
        all,
        "the file holds every queue"
    );

    let restarted_at = Instant::now();
    let mut consumer = ConsumerProcess::spawn(&cluster, &log, &label, topic, topic, &extra);
    sent.extend(producer.send("after", 16).await);
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;

    // Each queue of the second run: exactly the offsets from the file's to the queue's end.
    let messages = log.messages(topic);
    let mut queue_ends: BTreeMap<Queue, i64> = BTreeMap::new();
    let mut second: BTreeMap<Queue, BTreeSet<i64>> = BTreeMap::new();
    let mut first_run = 0;
    for (_, at, m) in &messages {
        let end = queue_ends.entry(m.queue.clone()).or_insert(0);
        *end = (*end).max(m.offset + 1);
        if *at >= restarted_at {
            second.entry(m.queue.clone()).or_default().insert(m.offset);
        } else {
            first_run += 1;
        }
    }
    let mut read_again = 0;
    for queue in &all {
        let from = persisted[queue];
        let expected: BTreeSet<i64> = (from..queue_ends[queue]).collect();
        let got = second.get(queue).cloned().unwrap_or_default();
        assert_eq!(
            got, expected,
            "{queue}: the restart resumes at the file's offset {from}"
        );
        read_again += messages
            .iter()
            .filter(|(_, at, m)| *at < restarted_at && &m.queue == queue && m.offset >= from)
            .count();
    }
    let second_total: usize = second.values().map(BTreeSet::len).sum();
    eprintln!(
        "e2e broadcast: {} sent, none lost; the first run consumed {first_run} before SIGKILL, the \
         file held {persisted:?}; the restart consumed {second_total}, {read_again} of them \
         consumed before the kill but not persisted",
        sent.len()
    );
    assert!(
        second_total < delivery.by_body.len(),
        "the restart did not start over"
    );
    consumer.assert_running();
    consumer.sigterm(Duration::from_secs(30)).await;
    // The clean leave persisted every queue's end, keeping the table before as the backup.
    let final_offsets = file_offsets(&offsets_dir, topic);
    assert_eq!(final_offsets, queue_ends, "the offsets after a clean leave");
    assert!(
        offsets_dir.join(topic).join("offsets.json.bak").exists(),
        "a write keeps the previous table as offsets.json.bak"
    );
    log.assert_no_garbage();
}
