//! What `start()` refuses: no subscription, a strategy that would allocate nothing, invalid
//! intervals, a missing locker for an exclusive hand-off, and broadcasting on the group's
//! shared offset store; and broadcasting with per-client stores.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rebalance_runtime::config::IntervalsError;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::subscription::retry_topic;
use rebalance_runtime::{
    ConsumerBuilder, ConsumerError, LocalOffsetStore,
    config::{ConsumeOrder, Intervals, MessageModel},
};

/// Member 0's builder wired to `cluster` for everything but the locker.
fn without_locker(cluster: &InMemoryCluster) -> ConsumerBuilder {
    let id = client_id(0);
    let client = Arc::new(cluster.client(id.clone()));
    rebalance_runtime::Consumer::builder(GROUP)
        .client_id(id)
        .subscribe("T")
        .name_server(client.clone())
        .directory(client.clone())
        .offset_store(client)
        .listener(Recorder::new())
}

#[tokio::test(start_paused = true)]
async fn a_zero_interval_is_refused_by_name() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let result = builder(&cluster, 0, &["T"], Recorder::new())
        .intervals(Intervals {
            rebalance_min: Duration::ZERO,
            ..Intervals::default()
        })
        .start()
        .await;
    match result {
        Err(ConsumerError::Intervals(IntervalsError::Zero(field))) => {
            assert_eq!(field, "rebalance_min")
        }
        other => panic!("expected a zero-interval error, got {other:?}"),
    }
    assert!(cluster.members(GROUP).is_empty(), "nothing was started");

    let result = builder(&cluster, 0, &["T"], Recorder::new())
        .intervals(Intervals {
            heartbeat: Duration::MAX,
            ..Intervals::default()
        })
        .start()
        .await;
    assert!(
        matches!(
            result,
            Err(ConsumerError::Intervals(IntervalsError::TooLong {
                field: "heartbeat",
                ..
            }))
        ),
        "{result:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_exclusive_hand_off_needs_a_locker() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let result = without_locker(&cluster)
        .exclusive_hand_off(true)
        .start()
        .await;
    match result {
        Err(ConsumerError::Missing(what)) => assert!(what.contains("exclusive hand-off"), "{what}"),
        other => panic!("expected Missing, got {other:?}"),
    }
    let result = without_locker(&cluster)
        .consume_order(ConsumeOrder::Orderly)
        .start()
        .await;
    match result {
        Err(ConsumerError::Missing(what)) => assert!(what.contains("orderly"), "{what}"),
        other => panic!("expected Missing, got {other:?}"),
    }
    assert!(cluster.members(GROUP).is_empty());

    // Without the hand-off (or when broadcasting, which never locks) no locker is needed.
    let plain = without_locker(&cluster).start().await.unwrap();
    plain.shutdown().await;
    let broadcasting = without_locker(&cluster)
        .exclusive_hand_off(true)
        .message_model(MessageModel::Broadcasting)
        .offset_store(Arc::new(LocalOffsetStore::new()))
        .start()
        .await
        .unwrap();
    broadcasting.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn broadcasting_refuses_the_groups_shared_offset_store() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let result = builder(&cluster, 0, &["T"], Recorder::new())
        .message_model(MessageModel::Broadcasting)
        .start()
        .await;
    assert!(
        matches!(result, Err(ConsumerError::SharedOffsetStore)),
        "{result:?}"
    );
    assert!(cluster.members(GROUP).is_empty());
}

#[tokio::test(start_paused = true)]
async fn broadcasting_clients_keep_their_own_offsets() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let all = all_queues(&cluster, &["T"]);
    let stores = [
        Arc::new(LocalOffsetStore::new()),
        Arc::new(LocalOffsetStore::new()),
    ];
    let mut members = Vec::new();
    for (i, store) in stores.iter().enumerate() {
        let store = store.clone();
        members.push(
            start_with(&cluster, i, &["T"], |b| {
                b.message_model(MessageModel::Broadcasting)
                    .offset_store(store)
            })
            .await,
        );
    }
    settle(Duration::from_secs(2)).await;
    for (i, m) in members.iter().enumerate() {
        assert_eq!(m.recorder.held(), all, "{}", m.id);
        for lease in m.recorder.leases.lock().unwrap().values() {
            lease.commit(100 + i as i64);
        }
    }
    // The periodic persistence, then the final one at shutdown.
    settle(Duration::from_secs(6)).await;
    for m in &members {
        m.handle.shutdown().await;
    }
    for q in &all {
        assert_eq!(
            cluster.offset(GROUP, q),
            None,
            "the shared offset is untouched"
        );
        assert_eq!(stores[0].offset(GROUP, q), Some(100));
        assert_eq!(stores[1].offset(GROUP, q), Some(101));
    }
}

#[tokio::test(start_paused = true)]
async fn the_client_id_comes_from_the_cluster_client_and_must_agree_with_it() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let wired = |id: Option<&str>| {
        let builder = rebalance_runtime::Consumer::builder(GROUP)
            .subscribe("T")
            .cluster(cluster.client("10.0.0.9@cluster"))
            .listener(Recorder::new());
        match id {
            Some(id) => builder.client_id(id),
            None => builder,
        }
    };
    match wired(Some("10.0.0.9@other")).start().await {
        Err(ConsumerError::ClientIdMismatch { configured, bound }) => {
            assert_eq!(configured.as_str(), "10.0.0.9@other");
            assert_eq!(bound.as_str(), "10.0.0.9@cluster");
        }
        other => panic!("started with two ids: {other:?}"),
    }
    assert!(cluster.members(GROUP).is_empty(), "nothing registered");
    let handle = wired(None).start().await.unwrap();
    assert_eq!(handle.client_id().as_str(), "10.0.0.9@cluster");
    assert_eq!(cluster.members(GROUP), vec![handle.client_id().clone()]);
    handle.shutdown().await;
    let same = wired(Some("10.0.0.9@cluster")).start().await.unwrap();
    same.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_consumer_without_a_subscription_is_refused_even_with_its_retry_topic() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    // The retry topic exists, so a consumer subscribed to it alone would start and hold queues.
    cluster.create_topic(&retry_topic(GROUP), 1, 1);
    for model in [MessageModel::Clustering, MessageModel::Broadcasting] {
        let result = builder(&cluster, 0, &[], Recorder::new())
            .message_model(model)
            .offset_store(Arc::new(LocalOffsetStore::new()))
            .start()
            .await;
        match result {
            Err(e @ ConsumerError::NoSubscription) => {
                let message = e.to_string();
                assert!(message.contains("subscribes to no topic"), "{message}");
                assert!(message.contains("subscribe(topic)"), "{message}");
            }
            other => panic!("{model:?}: expected NoSubscription, got {other:?}"),
        }
        assert!(
            cluster.members(GROUP).is_empty(),
            "{model:?}: nothing registered"
        );
    }
    // The retry topic subscribed by the application itself is a subscription like another.
    let handle = builder(&cluster, 0, &[&retry_topic(GROUP)], Recorder::new())
        .start()
        .await
        .expect("a subscription the application asked for");
    handle.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn contradictory_intervals_are_refused_naming_both_values() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let result = builder(&cluster, 0, &["T"], Recorder::new())
        .consume_order(ConsumeOrder::Orderly)
        .intervals(Intervals {
            lock_renew: Duration::from_secs(60),
            lock_lifetime: Duration::from_secs(1),
            ..Intervals::default()
        })
        .start()
        .await;
    match result {
        Err(
            e @ ConsumerError::Intervals(IntervalsError::Conflict {
                field: "lock_renew",
                other: "lock_lifetime",
                ..
            }),
        ) => {
            let message = e.to_string();
            assert!(
                message.contains("`lock_renew` (60s)") && message.contains("`lock_lifetime` (1s)"),
                "{message}"
            );
        }
        other => panic!("expected a conflict of lock_renew and lock_lifetime, got {other:?}"),
    }
    assert!(cluster.members(GROUP).is_empty(), "nothing was started");
}

/// A strategy given as a value that would allocate nothing to anybody is refused at start with
/// the error the same strategy named gets from `strategy_named`, wrappers included; nothing is
/// registered.
#[tokio::test(start_paused = true)]
async fn a_strategy_value_that_would_allocate_nothing_is_refused_at_start() {
    use rebalance_core::strategy::{
        AllocateStrategy, ByConfig, ConsistentHash, Designated, MachineRoomNearby, Params,
        StrategyConfigError,
    };

    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let empty_ring: Arc<dyn AllocateStrategy> = Arc::new(ConsistentHash::new(0).unwrap());
    let result = builder(&cluster, 0, &["T"], Recorder::new())
        .strategy(empty_ring.clone())
        .start()
        .await;
    let message = match result {
        Err(e @ ConsumerError::Strategy(StrategyConfigError::AllocatesNothing { .. })) => {
            e.to_string()
        }
        other => panic!("expected AllocatesNothing, got {other:?}"),
    };
    assert_eq!(
        message,
        "strategy `consistent_hash` would allocate nothing to anybody: `virtual_node_count` is 0, \
         so the hash ring has no points (give it 1 or more; the default is 10)"
    );
    // The same error as the strategy named.
    let mut zero = Params::new();
    zero.insert("virtual_node_count".into(), 0.into());
    let named = rebalance_runtime::Consumer::builder(GROUP)
        .strategy_named("consistent_hash", &zero)
        .unwrap_err();
    assert_eq!(named.to_string(), message);
    assert!(cluster.members(GROUP).is_empty(), "nothing was started");

    // Through a wrapper, and with an assignment given as an `Allocation`.
    let wrapped: Arc<dyn AllocateStrategy> = Arc::new(Designated::new(
        Arc::new(MachineRoomNearby::new(Arc::new(ByConfig::new(Vec::new())))),
        ["10.0.0.1"],
    ));
    let result = builder(&cluster, 0, &["T"], Recorder::new())
        .allocation(rebalance_runtime::allocation::Allocation::Strategy(wrapped))
        .start()
        .await;
    match result {
        Err(e @ ConsumerError::Strategy(StrategyConfigError::AllocatesNothing { .. })) => {
            let message = e.to_string();
            assert!(message.starts_with("strategy `designated` would allocate nothing"));
            assert!(
                message.contains("`message_queue_list` is empty"),
                "{message}"
            );
        }
        other => panic!("expected AllocatesNothing, got {other:?}"),
    }
    assert!(cluster.members(GROUP).is_empty(), "nothing was started");

    // A ring with points starts and takes every queue.
    let handle = builder(&cluster, 0, &["T"], Recorder::new())
        .strategy(Arc::new(ConsistentHash::new(1).unwrap()))
        .start()
        .await
        .expect("one virtual node is enough");
    handle.ready(Duration::from_secs(10)).await.unwrap();
    assert_eq!(handle.assignment().len(), 4);
    handle.shutdown().await;
}
