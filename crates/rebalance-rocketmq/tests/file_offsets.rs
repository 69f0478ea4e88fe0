//! A broadcasting push consumer keeping its offsets in a [`FileOffsetStore`], on the in-memory
//! cluster and paused time: restarted with the same directory after a clean shutdown it reads
//! exactly the messages sent since; restarted after a crash it resumes at the offsets the file
//! held, re-reading only what was consumed after the last persistence tick and skipping
//! nothing. Each consumer starts a queue without an offset at its first message, so a consumer
//! that lost its offsets would read everything again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer, PushConsumerHandle,
};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::FileOffsetStore;
use rebalance_runtime::config::{ConsumeFrom, Intervals, MessageModel};
use rebalance_runtime::memory::{ClusterClient, InMemoryCluster};
use tokio::time::sleep;

const GROUP: &str = "G";
const QUEUES: i32 = 4;

/// One message consumed: by which run of the consumer, where, and its body.
#[derive(Debug, Clone)]
struct Consumed {
    run: u32,
    queue: MessageQueue,
    offset: i64,
    body: String,
}

#[derive(Default)]
struct Journal(Mutex<Vec<Consumed>>);

impl Journal {
    fn all(&self) -> Vec<Consumed> {
        self.0.lock().unwrap().clone()
    }

    fn of_run(&self, run: u32) -> Vec<Consumed> {
        self.all().into_iter().filter(|c| c.run == run).collect()
    }

    fn bodies(&self) -> BTreeSet<String> {
        self.all().into_iter().map(|c| c.body).collect()
    }
}

struct Recorder {
    run: u32,
    journal: Arc<Journal>,
}

#[async_trait]
impl ConcurrentListener for Recorder {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let mut journal = self.journal.0.lock().unwrap();
        for m in messages {
            journal.push(Consumed {
                run: self.run,
                queue: m.queue().clone(),
                offset: m.queue_offset(),
                body: String::from_utf8_lossy(m.body()).into_owned(),
            });
        }
        ConsumeResult::Success
    }
}

/// A broadcasting member keeping its offsets in `{dir}/G/offsets.json`, from each queue's
/// first message when it has none. Every run uses the same client: a restarted process has
/// the same client id, and the in-memory directory refuses a second client with one id while
/// the first one's registration lasts (a broker forgets a killed client's connection at once).
async fn start(
    client: &ClusterClient,
    dir: &Path,
    run: u32,
    journal: &Arc<Journal>,
) -> PushConsumerHandle {
    let offsets = Arc::new(FileOffsetStore::in_dir(dir, GROUP).expect("the offset file opens"));
    let client = client.clone();
    let handle = PushConsumer::builder(GROUP)
        .subscribe("T")
        .message_model(MessageModel::Broadcasting)
        .configure(|c| {
            c.intervals(Intervals {
                adaptive_settle: None,
                ..Intervals::default()
            })
            .consume_from(ConsumeFrom::FirstOffset)
            .cluster(client.clone())
            .offset_store(offsets)
        })
        .source(Arc::new(client))
        .concurrently(Arc::new(Recorder {
            run,
            journal: journal.clone(),
        }))
        .start()
        .await
        .expect("the consumer starts");
    handle
        .consumer()
        .wait_for_assignment(|a| a.len() == QUEUES as usize, Duration::from_secs(60))
        .await
        .expect("a broadcasting member takes every queue");
    handle
}

/// Sends `count` messages round robin, bodies `{prefix}{i}`.
fn send(cluster: &InMemoryCluster, prefix: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let body = format!("{prefix}{i}");
            cluster
                .send("T", OutgoingMessage::new(body.clone()))
                .expect("the topic exists");
            body
        })
        .collect()
}

async fn wait_for(journal: &Journal, bodies: &[String]) {
    for _ in 0..600 {
        let seen = journal.bodies();
        if bodies.iter().all(|b| seen.contains(b)) {
            return;
        }
        sleep(Duration::from_millis(100)).await;
    }
    let seen = journal.bodies();
    let missing: Vec<_> = bodies.iter().filter(|b| !seen.contains(*b)).collect();
    panic!("never consumed: {missing:?}");
}

#[tokio::test(start_paused = true)]
async fn a_clean_restart_with_the_same_directory_reads_only_what_was_sent_since() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, QUEUES);
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::default());
    let client = cluster.client("10.0.0.1@DEFAULT");

    let first = start(&client, dir.path(), 1, &journal).await;
    let before = send(&cluster, "a", 40);
    wait_for(&journal, &before).await;
    first.shutdown().await;
    // The process ends: its store lets the file go.
    drop(first);

    let since = send(&cluster, "b", 20);
    let second = start(&client, dir.path(), 2, &journal).await;
    wait_for(&journal, &since).await;
    // Long enough for anything older to come again, if it were going to.
    sleep(Duration::from_secs(10)).await;
    second.shutdown().await;
    drop(second);

    let read_again: Vec<String> = journal.of_run(2).into_iter().map(|c| c.body).collect();
    assert_eq!(
        read_again.iter().cloned().collect::<BTreeSet<_>>(),
        since.iter().cloned().collect::<BTreeSet<_>>(),
        "the second run reads exactly the messages sent since the first stopped"
    );
    assert_eq!(read_again.len(), since.len(), "each once: {read_again:?}");
    // The file holds every queue's end.
    let stored = FileOffsetStore::in_dir(dir.path(), GROUP)
        .unwrap()
        .offsets();
    assert_eq!(stored.len(), QUEUES as usize);
    for (queue, offset) in stored {
        assert_eq!(offset, 15, "{queue:?}: 60 messages over 4 queues");
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_crash_a_restart_resumes_at_the_persisted_offsets() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, QUEUES);
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::default());
    let client = cluster.client("10.0.0.1@DEFAULT");

    let first = start(&client, dir.path(), 1, &journal).await;
    // Sent over 12 s: the persistence tick (5 s) records some progress, then the crash loses
    // what was consumed after the last tick.
    let mut sent = Vec::new();
    for round in 0..24 {
        sent.extend(send(&cluster, &format!("a{round}-"), 4));
        sleep(Duration::from_millis(500)).await;
    }
    wait_for(&journal, &sent).await;
    sleep(Duration::from_secs(1)).await;
    sent.extend(send(&cluster, "late-", 8));
    wait_for(&journal, &sent).await;
    first.abort();
    sleep(Duration::from_secs(1)).await;
    // The process died: its store let the file go.
    drop(first);
    let persisted = {
        let store = FileOffsetStore::in_dir(dir.path(), GROUP).unwrap();
        store.offsets()
    };
    assert_eq!(persisted.len(), QUEUES as usize, "{persisted:?}");
    let consumed_first: Vec<Consumed> = journal.of_run(1);
    let ends: BTreeMap<MessageQueue, i64> =
        consumed_first.iter().fold(BTreeMap::new(), |mut ends, c| {
            let end = ends.entry(c.queue.clone()).or_insert(0);
            *end = (*end).max(c.offset + 1);
            ends
        });
    for (queue, offset) in &persisted {
        assert!(
            *offset > 0 && *offset < ends[queue],
            "{queue:?}: the file holds {offset}, the first run consumed up to {}: the test needs \
             progress persisted and some lost",
            ends[queue]
        );
    }

    sent.extend(send(&cluster, "b", 8));
    let second = start(&client, dir.path(), 2, &journal).await;
    wait_for(&journal, &sent).await;
    sleep(Duration::from_secs(10)).await;
    second.shutdown().await;

    // The second run starts each queue exactly at the file's offset: it re-reads what was
    // consumed after the last persist, nothing before it, and skips nothing.
    let consumed_second = journal.of_run(2);
    for (queue, offset) in &persisted {
        let mut offsets: Vec<i64> = consumed_second
            .iter()
            .filter(|c| &c.queue == queue)
            .map(|c| c.offset)
            .collect();
        offsets.sort_unstable();
        let expected: Vec<i64> = (*offset..cluster.max_offset(queue)).collect();
        assert_eq!(offsets, expected, "{queue:?} from {offset}");
    }
    let read_again = consumed_second
        .iter()
        .filter(|c| !c.body.starts_with('b'))
        .count();
    eprintln!(
        "file offsets after the crash: {persisted:?}; the first run consumed {}, the second \
         read {read_again} of them again",
        consumed_first.len()
    );
    assert!(read_again < consumed_first.len());
    let bodies = journal.bodies();
    assert!(
        sent.iter().all(|b| bodies.contains(b)),
        "nothing is skipped"
    );
}
