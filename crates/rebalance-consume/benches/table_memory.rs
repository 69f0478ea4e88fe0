//! Memory a consumer holds per queue, measured with a counting allocator:
//!
//! - per owned queue with the rebalance alone (table entry, lease state, assignment snapshot,
//!   and the round report listing the queues added): a consumer holding every queue of the
//!   topic, less one subscribed to the same topic holding none (which has the same route and
//!   fixed costs), per queue; right after the round that added them, and after a steady round;
//! - what the consume layer adds per idle queue (a pull loop parked in a long poll, an empty
//!   buffer): a push consumer holding every queue, none with a message, less the first;
//! - what a consumer holding none holds per queue of its topic (its copy of the route);
//! - and the figure this bench first printed: a lone consumer's whole holding divided by its
//!   queues, route included.
//!
//! `cargo bench -p rebalance-consume --bench table_memory`

// The runtime's bench setup: one consumer on the in-memory cluster (what this bench needs of
// it, not all).
#[allow(dead_code)]
#[path = "../../rebalance-runtime/benches/common.rs"]
mod common;
mod counting;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use counting::Counting;
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer, PushConsumerHandle,
};
use rebalance_core::strategy::{AllocateError, AllocateStrategy};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::{Consumer, ConsumerHandle};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Consumes nothing (no message ever arrives).
struct Idle;

#[async_trait]
impl ConcurrentListener for Idle {
    async fn consume(&self, _: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        ConsumeResult::Success
    }
}

/// Gives this client nothing. (A `ByConfig` of no queue says so and is refused at start, as
/// a strategy that allocates nothing to anybody; this one is for measuring.)
#[derive(Debug)]
struct NoQueue;

impl AllocateStrategy for NoQueue {
    fn name(&self) -> &str {
        "no_queue"
    }

    fn allocate(
        &self,
        _: &str,
        _: &ClientId,
        _: &[MessageQueue],
        _: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        Ok(Vec::new())
    }
}

/// A consumer of group `group` that holds none of `T`'s queues, but has its route.
async fn holding_none(cluster: &InMemoryCluster, group: &str) -> ConsumerHandle {
    let id = format!("10.0.1.1@{group}");
    let handle = Consumer::builder(group)
        .client_id(id.as_str())
        .subscribe("T")
        .cluster(cluster.client(id.as_str()))
        .listener(Arc::new(common::Quiet))
        .strategy(Arc::new(NoQueue))
        .start()
        .await
        .expect("consumer starts");
    handle
        .rounds()
        .wait_for(|r| r.round >= 1)
        .await
        .expect("first round");
    handle
}

/// A push consumer of group `group`, alone, with every queue of `T` (`queues`), once its pull
/// loops are parked.
async fn pushing(cluster: &InMemoryCluster, group: &str, queues: usize) -> PushConsumerHandle {
    let client = cluster.client(format!("10.0.2.1@{group}").as_str());
    let handle = PushConsumer::builder(group)
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()).consume_retry_topic(false))
        .source(Arc::new(client.clone()))
        .concurrently(Arc::new(Idle))
        .start()
        .await
        .expect("push consumer starts");
    handle
        .consumer()
        .watch()
        .wait_for(|a| a.len() == queues)
        .await
        .expect("every queue");
    // Each loop reads its start offset, then parks in a long poll: parked once what is
    // allocated stops changing (at 100,000 queues a fixed wait caught some loops still
    // starting), read every 100 ms, for at most 10 s (long polls are held 15 s).
    let mut last = counting::live();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = counting::live();
        if now == last {
            break;
        }
        last = now;
    }
    handle
}

/// Bytes allocated and not freed while `f` runs and what it returns is alive.
async fn held<T>(f: impl AsyncFnOnce() -> T) -> (isize, T) {
    let before = counting::live();
    let value = f().await;
    tokio::task::yield_now().await;
    (counting::live() - before, value)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for (brokers, per_broker) in [(10, 100), (100, 100), (100, 1000)] {
        let queues = brokers * per_broker as usize;
        let cluster = common::cluster(brokers, per_broker);
        runtime.block_on(async {
            // What the cluster itself allocates for a consumer (its logs, offsets, groups) is
            // allocated here once, outside the measurements.
            let warm = common::start(&cluster, 9).await;
            warm.shutdown().await;
            drop(warm);
            let warm = pushing(&cluster, "W", queues).await;
            warm.shutdown().await;
            drop(warm);

            let (none, handle) = held(async || holding_none(&cluster, "E").await).await;
            handle.shutdown().await;
            drop(handle);

            let (all, a) = held(async || common::start(&cluster, 0).await).await;
            assert_eq!(a.assignment().len(), queues);
            let steady = {
                let before = counting::live();
                let mut rounds = a.rounds();
                let round = rounds.borrow_and_update().round;
                // A round may run once `rebalance_min` (1 s) has passed since the last one.
                tokio::time::sleep(Duration::from_millis(1100)).await;
                a.rebalance_now();
                rounds
                    .wait_for(|r| r.round > round)
                    .await
                    .expect("steady round");
                tokio::task::yield_now().await;
                all + (counting::live() - before)
            };
            a.shutdown().await;
            drop(a);

            let (push, p) = held(async || pushing(&cluster, "P", queues).await).await;
            p.shutdown().await;
            drop(p);

            let per = |bytes: isize| bytes as f64 / queues as f64;
            println!(
                "{queues:>7} queues: rebalance alone {:.0} bytes per owned queue ({:.0} after a steady round); \
                 consume layer +{:.0} per idle queue ({:.0} in all); \
                 a consumer holding none {:.0} per queue of the topic; \
                 a lone consumer's whole holding {:.0} per queue",
                per(all - none),
                per(steady - none),
                per(push - all),
                per(push - none),
                per(none),
                per(all),
            );
        });
    }
}
