//! `ConsumerHandle::running_info`: what a broker's GET_CONSUMER_RUNNING_INFO is answered with,
//! from the rebalance alone (the push consumer's figures: `rebalance-consume`'s
//! `tests/running_info.rs`).

mod common;

use std::time::Duration;

use common::{GROUP, Recorder, settle, start_recording};
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::running::QueueBuffer;

fn queue(id: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-0", id)
}

#[tokio::test(start_paused = true)]
async fn a_rebalance_only_consumer_shows_its_queues_and_commits_with_zero_figures() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let recorder = Recorder::new();
    *recorder.commit_on_add.lock().unwrap() = Some(12);
    let member = start_recording(&cluster, 0, &["T"], recorder, |b| b).await;
    settle(Duration::from_secs(1)).await;
    let info = member.handle.running_info();
    assert_eq!(info.group, GROUP);
    assert_eq!(info.client_id, member.id);
    assert!(!info.consuming, "no consume layer recorded anything");
    let topics: Vec<&str> = info
        .subscriptions
        .iter()
        .map(|s| s.topic.as_str())
        .collect();
    assert_eq!(topics, ["%RETRY%G", "T"]);
    let queues: Vec<(MessageQueue, i64)> = info.committed_offsets(Some("T"));
    assert_eq!(queues, vec![(queue(0), 12), (queue(1), 12)]);
    for q in &info.queues {
        assert_eq!(q.buffer, QueueBuffer::default());
        assert!(!q.locked && q.last_lock.is_none());
        assert!(q.last_pull.is_none() && q.last_consume.is_none());
    }
    assert_eq!(info.status["T"].consume_ok_tps, 0.0);
    assert!(
        info.diagnostics.contains_key("fingerprint:T"),
        "{:?}",
        info.diagnostics
    );
    member.handle.shutdown().await;
    assert!(
        member.handle.running_info().queues.is_empty(),
        "nothing held after shutdown"
    );
}
