//! ARCHITECTURE.md's invariants under random churn: after every membership change and a settle time
//! (two rebalance minimums, plus a heartbeat expiry after a crash), the running members' shares
//! are disjoint and cover every queue; shutdown releases everything once.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use rebalance_core::strategy::{Params, build_strategy};
use rebalance_runtime::RemovalReason;
use rebalance_runtime::memory::{ClusterConfig, InMemoryCluster};

#[derive(Debug, Clone)]
enum Step {
    Join,
    Leave(usize),
    Crash(usize),
    NameServerBlip,
    AddBroker,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Join),
        2 => (0usize..8).prop_map(Step::Leave),
        1 => (0usize..8).prop_map(Step::Crash),
        1 => Just(Step::NameServerBlip),
        1 => Just(Step::AddBroker),
    ]
}

const STRATEGIES: [&str; 4] = [
    "averagely",
    "averagely_by_circle",
    "consistent_hash",
    "machine_room_nearby",
];

fn run(
    strategy: &'static str,
    initial: usize,
    queues: i32,
    notify_departures: bool,
    steps: Vec<Step>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let cluster = InMemoryCluster::with_config(ClusterConfig {
            notify_departures,
            ..Default::default()
        });
        let mut brokers = 2;
        cluster.create_topic("T", brokers, queues);
        let strategy_ref = build_strategy(strategy, &Params::new()).unwrap();
        let with_strategy =
            |b: rebalance_runtime::ConsumerBuilder| b.strategy(strategy_ref.clone());
        let mut running = Vec::new();
        let mut next = 0;
        for _ in 0..initial {
            running.push(start_with(&cluster, next, &["T"], with_strategy).await);
            next += 1;
        }
        let settle_time = Duration::from_secs(2) + Duration::from_secs(20);
        settle(settle_time).await;
        let mut stopped = Vec::new();
        for step in steps {
            let mut wait = settle_time;
            match step {
                Step::Join => {
                    running.push(start_with(&cluster, next, &["T"], with_strategy).await);
                    next += 1;
                }
                Step::Leave(i) if running.len() > 1 => {
                    let m = running.remove(i % running.len());
                    m.handle.shutdown().await;
                    stopped.push(m);
                }
                Step::Crash(i) if running.len() > 1 => {
                    let m = running.remove(i % running.len());
                    m.handle.abort();
                    wait += Duration::from_secs(120);
                }
                Step::NameServerBlip => {
                    cluster.set_name_server_down(true);
                    settle(Duration::from_secs(45)).await;
                    cluster.set_name_server_down(false);
                }
                Step::AddBroker => {
                    brokers += 1;
                    cluster.create_topic("T", brokers, queues);
                    wait += Duration::from_secs(30);
                }
                _ => {}
            }
            settle(wait).await;
            let all = all_queues(&cluster, &["T"]);
            assert_partition(&running.iter().collect::<Vec<_>>(), &all);
        }
        for m in running.drain(..) {
            m.handle.shutdown().await;
            stopped.push(m);
        }
        for m in &stopped {
            // Everything added was released exactly once (the recorder flags doubles).
            assert!(
                m.recorder.held().is_empty(),
                "{} still holds queues after shutdown",
                m.id
            );
            assert!(m.recorder.violations.lock().unwrap().is_empty());
            let added = m.recorder.added().len();
            let removed: usize = [
                RemovalReason::Reassigned,
                RemovalReason::Shutdown,
                RemovalReason::Lost,
                RemovalReason::TopicGone,
                RemovalReason::Unsubscribed,
            ]
            .into_iter()
            .map(|r| m.recorder.removed_with(r).len())
            .sum();
            assert_eq!(added, removed, "{}", m.id);
        }
        assert!(
            cluster.members(GROUP).is_empty(),
            "every clean leaver unregistered"
        );
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn shares_stay_a_partition_under_churn(
        strategy in prop::sample::select(STRATEGIES.to_vec()),
        initial in 1usize..5,
        queues in 1i32..9,
        notify_departures in any::<bool>(),
        steps in prop::collection::vec(step(), 1..7),
    ) {
        run(strategy, initial, queues, notify_departures, steps);
    }
}
