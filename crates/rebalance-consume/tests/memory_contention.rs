//! The in-memory cluster under contention from real threads: sends and held pulls of one queue
//! at once, on a multi-threaded runtime. A held pull once kept the arrivals watch's read guard
//! while it took the store's lock, and a send takes the store's lock, then the watch's: a send
//! and two held pulls deadlocked, which hung a CI run. The paused-time tests run on one thread
//! and cannot interleave those locks; this one can, and it bounds its wait so that a deadlock
//! fails it instead of hanging the suite.

use std::time::Duration;

use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{MessageSource, PullRequest, PullResult};
use rebalance_core::MessageQueue;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::subscription::TagExpression;

const MESSAGES: i64 = 4_000;
const SENDERS: i64 = 2;
const PULLERS: usize = 4;

#[test]
fn sends_and_held_pulls_of_one_queue_on_many_threads_never_deadlock() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let queue = MessageQueue::new("T", "broker-0", 0);
    let run = async move {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..PULLERS {
            let client = cluster.client("10.0.0.1@1");
            let queue = queue.clone();
            // Each puller reads the whole queue, one held pull at a time, as a pull loop does.
            tasks.spawn(async move {
                let mut offset = 0;
                while offset < MESSAGES {
                    let request =
                        PullRequest::new("G", queue.clone(), offset, TagExpression::all())
                            .with_limits(8, u32::MAX)
                            .with_suspend(Duration::from_secs(1));
                    match client.pull(&request).await {
                        Ok(
                            PullResult::Found { next_offset, .. }
                            | PullResult::NoNewMessage { next_offset },
                        ) => offset = next_offset,
                        other => panic!("a pull at {offset}: {other:?}"),
                    }
                }
            });
        }
        for _ in 0..SENDERS {
            let cluster = cluster.clone();
            let queue = queue.clone();
            tasks.spawn(async move {
                for _ in 0..MESSAGES / SENDERS {
                    cluster
                        .send_to(&queue, OutgoingMessage::new(&b"x"[..]))
                        .unwrap();
                    tokio::task::yield_now().await;
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    };
    // A deadlock blocks the runtime's threads themselves: the bound is measured outside it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        runtime.block_on(run);
        let _ = tx.send(());
        // The runtime is dropped here: with threads deadlocked it would never return.
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(60)).is_ok(),
        "sends and held pulls of one queue did not finish within 60 s: deadlocked"
    );
}
