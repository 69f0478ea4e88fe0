//! The stream consumer in POP mode on the in-memory cluster, on paused time: two members pop
//! every queue; each message is yielded, acknowledged at the brokers (never popped again once
//! its invisible time is over), a message handed back comes again through the retry topic,
//! one dropped unacknowledged comes again; assign mode and an ordered stream refuse POP.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{MessageStream, PopMode, PopOptions, StreamConsumer, StreamConsumerError};
use rebalance_core::MessageQueue;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::InMemoryCluster;
use tokio::task::JoinHandle;
use tokio::time::sleep;

const GROUP: &str = "G";

/// Every delivery: body, reconsume count, member.
type Seen = Arc<Mutex<Vec<(String, i32, String)>>>;

fn options(mode: PopMode) -> PopOptions {
    let mut pop = PopOptions::default();
    pop.mode = mode;
    pop.invisible_time = Duration::from_secs(20);
    pop
}

async fn member(cluster: &InMemoryCluster, id: &str, mode: PopMode) -> MessageStream {
    let client = cluster.client(id);
    StreamConsumer::builder(GROUP)
        .cluster(client.clone())
        .configure(|c| {
            c.intervals(Intervals {
                adaptive_settle: None,
                ..Intervals::default()
            })
        })
        .subscribe("T")
        .pop(client, options(mode))
        .start()
        .await
        .expect("a popping stream starts")
}

/// Drives `stream`: hands back the first delivery of `m3`, drops the first of `m5`
/// unacknowledged, acknowledges everything else.
fn drive(mut stream: MessageStream, id: &'static str, seen: Seen) -> JoinHandle<MessageStream> {
    tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let body = String::from_utf8_lossy(message.body()).into_owned();
            let times = message.reconsume_times();
            let first = {
                let mut seen = seen.lock().unwrap();
                let first = !seen.iter().any(|(b, _, _)| *b == body);
                seen.push((body.clone(), times, id.to_string()));
                first
            };
            match body.as_str() {
                "m3" if first => message.nack().await,
                "m5" if first => drop(message),
                _ => message.ack(),
            }
        }
        stream
    })
}

#[tokio::test(start_paused = true)]
async fn popped_messages_are_yielded_acknowledged_handed_back_and_never_lost() {
    for mode in [PopMode::Ordinary, PopMode::Orderly] {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 4);
        let seen = Seen::default();
        let a = drive(member(&cluster, "a@1", mode).await, "a", seen.clone());
        let b = drive(member(&cluster, "b@1", mode).await, "b", seen.clone());
        sleep(Duration::from_secs(2)).await;
        for i in 0..20 {
            cluster
                .send("T", OutgoingMessage::new(format!("m{i}")))
                .unwrap();
        }
        // The handed back one comes through the retry topic (10 s), the dropped one within
        // the local retry (5 s) or the invisible time (20 s).
        sleep(Duration::from_secs(40)).await;
        let by_body = |seen: &Seen| {
            let mut counts: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for (body, times, _) in seen.lock().unwrap().iter() {
                counts.entry(body.clone()).or_default().push(*times);
            }
            counts
        };
        let counts = by_body(&seen);
        assert_eq!(counts.len(), 20, "{mode:?}: every message: {counts:?}");
        assert_eq!(counts["m3"].len(), 2, "{mode:?}: handed back, then again");
        assert_eq!(counts["m3"][1], 1, "{mode:?}: through the retry topic");
        assert_eq!(counts["m5"].len(), 2, "{mode:?}: dropped, then again");
        for (body, times) in &counts {
            if body != "m3" && body != "m5" {
                assert_eq!(times.len(), 1, "{mode:?}: {body} once: {counts:?}");
            }
        }
        // Acknowledged at the brokers: nothing comes again once every invisible time is over.
        let before = seen.lock().unwrap().len();
        sleep(Duration::from_secs(90)).await;
        assert_eq!(
            seen.lock().unwrap().len(),
            before,
            "{mode:?}: acknowledged messages came again: {:?}",
            by_body(&seen)
        );
        for task in [a, b] {
            task.abort();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn assign_mode_and_an_ordered_stream_refuse_pop() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let client = cluster.client("a@1");
    let assigned = StreamConsumer::builder(GROUP)
        .cluster(client.clone())
        .assign([MessageQueue::new("T", "broker-0", 0)])
        .pop(client.clone(), PopOptions::default())
        .start()
        .await;
    assert!(matches!(assigned, Err(StreamConsumerError::AssignPop)));
    let ordered = StreamConsumer::builder(GROUP)
        .cluster(client.clone())
        .subscribe("T")
        .pop(client, PopOptions::default())
        .start_ordered()
        .await;
    assert!(matches!(ordered, Err(StreamConsumerError::OrderedPop)));
}
