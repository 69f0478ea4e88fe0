//! Two consumers with one client id: the in-memory cluster refuses the
//! second registration of a live id by another client, and `start()` says so, instead of both
//! taking the same queues.

mod common;

use std::time::Duration;

use common::*;
use rebalance_runtime::memory::InMemoryCluster;
use rebalance_runtime::subscription::Subscription;
use rebalance_runtime::{ConsumerError, GroupDirectory, Registration, RemoteError};

#[tokio::test(start_paused = true)]
async fn a_second_consumer_with_a_live_id_is_refused_at_start() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let first = start(&cluster, 0, &["T"]).await;
    settle(Duration::from_secs(2)).await;
    assert_eq!(first.handle.assignment().len(), 4);

    let second = builder(&cluster, 0, &["T"], Recorder::new()).start().await;
    match second {
        Err(e @ ConsumerError::ClientIdInUse { .. }) => {
            let text = e.to_string();
            assert!(text.contains(first.id.as_str()), "{text}");
            assert!(text.contains(GROUP), "{text}");
            assert!(text.contains("ConsumerBuilder::client_id"), "{text}");
        }
        other => panic!("expected ClientIdInUse, got {other:?}"),
    }
    settle(Duration::from_secs(30)).await;
    assert_eq!(cluster.members(GROUP), std::slice::from_ref(&first.id));
    assert_eq!(
        first.handle.assignment().len(),
        4,
        "the first keeps its queues"
    );

    // Once the first has left, the id is free again.
    first.handle.shutdown().await;
    let again = start(&cluster, 0, &["T"]).await;
    settle(Duration::from_secs(2)).await;
    assert_eq!(again.handle.assignment().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn the_id_of_a_crashed_consumer_is_free_once_it_expired() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let crashed = start(&cluster, 0, &["T"]).await;
    settle(Duration::from_secs(2)).await;
    crashed.handle.abort();
    let early = builder(&cluster, 0, &["T"], Recorder::new()).start().await;
    assert!(
        matches!(early, Err(ConsumerError::ClientIdInUse { .. })),
        "{early:?}"
    );
    // The directory expires a silent member after 120 s.
    settle(Duration::from_secs(121)).await;
    let late = start(&cluster, 0, &["T"]).await;
    settle(Duration::from_secs(2)).await;
    assert_eq!(late.handle.assignment().len(), 4);
}

fn registration(group: &str, id: &str) -> Registration {
    Registration {
        client_id: id.into(),
        group: group.into(),
        message_model: Default::default(),
        consume_order: Default::default(),
        consume_from: Default::default(),
        subscriptions: vec![Subscription::all("T")],
    }
}

#[tokio::test(start_paused = true)]
async fn only_the_registering_client_holds_the_id_and_only_in_its_group() {
    let cluster = InMemoryCluster::new();
    let first = cluster.client("a@1");
    let same = first.clone();
    let other = cluster.client("a@1");
    first.register(&registration("G", "a@1")).await.unwrap();
    same.register(&registration("G", "a@1"))
        .await
        .expect("a clone is the same client");
    assert_eq!(
        other.register(&registration("G", "a@1")).await,
        Err(RemoteError::ClientIdInUse {
            client_id: "a@1".into(),
            group: "G".into()
        })
    );
    other
        .register(&registration("H", "a@1"))
        .await
        .expect("another group is another registration");
    // The refused client's unregistration does not remove the live one's.
    other.unregister(&registration("G", "a@1")).await.unwrap();
    assert_eq!(cluster.members("G"), ["a@1"]);
    first.unregister(&registration("G", "a@1")).await.unwrap();
    assert!(cluster.members("G").is_empty());
    other.register(&registration("G", "a@1")).await.unwrap();
    assert_eq!(cluster.members("G"), ["a@1"]);
}
